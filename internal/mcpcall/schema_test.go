package mcpcall

import (
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"
)

// TestSchemaValidator_FastPathAgreesWithTheLibrary generates flat object
// schemas and argument objects at random and checks that the fast path
// accepts exactly what github.com/google/jsonschema-go accepts: for decoded
// values, and for raw arguments whose numbers are spelled so that their
// float64 and their exact value disagree on being integers (both sides
// then see the same exact-decimal reading; see SchemaValidator).
func TestSchemaValidator_FastPathAgreesWithTheLibrary(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	types := []string{"string", "integer", "number", "boolean", "null", "array", "object"}
	values := []any{nil, true, false, 0.0, 1.0, -1.0, 2.5, 1e21, 12.0000001, "", "a", "héllo", "12", []any{}, []any{1.0}, map[string]any{}, map[string]any{"x": 1.0}}
	names := []string{"a", "b", "c", "idempotency_key"}
	rawNumbers := []string{"16", "16.0", "1.6e1", "16.00000000000000000001", "-16.00000000000000000001", "15.99999999999999999999",
		"1e-400", "-0.0", "1.5", "0.99999999999999999999", "1.00000000000000000001", "2.0000000000000000001e0", `"16"`}
	checked, fast := 0, 0
	for range 1500 {
		schema := map[string]any{"type": "object"}
		props := map[string]any{}
		for _, n := range names[:1+rng.IntN(len(names))] {
			p := map[string]any{}
			switch rng.IntN(3) {
			case 0:
				p["type"] = types[rng.IntN(len(types))]
			case 1:
				p["type"] = []any{types[rng.IntN(len(types))], types[rng.IntN(len(types))]}
			}
			if rng.IntN(3) == 0 {
				p["minimum"] = float64(rng.IntN(5) - 2)
			}
			if rng.IntN(3) == 0 {
				p["maximum"] = float64(rng.IntN(5))
			}
			if rng.IntN(4) == 0 {
				p["exclusiveMinimum"] = float64(rng.IntN(3) - 1)
			}
			if rng.IntN(4) == 0 {
				p["exclusiveMaximum"] = 1.5
			}
			if rng.IntN(3) == 0 {
				p["minLength"] = float64(rng.IntN(3))
			}
			if rng.IntN(3) == 0 {
				p["maxLength"] = float64(rng.IntN(6))
			}
			if rng.IntN(3) == 0 {
				p["description"] = "d"
			}
			props[n] = p
		}
		schema["properties"] = props
		if rng.IntN(2) == 0 {
			var req []any
			for _, n := range names {
				if rng.IntN(3) == 0 {
					req = append(req, n)
				}
			}
			schema["required"] = req
		}
		if rng.IntN(2) == 0 {
			schema["additionalProperties"] = rng.IntN(2) == 0
		}
		raw, _ := json.Marshal(schema)
		v, err := NewSchemaValidator(json.RawMessage(raw))
		if err != nil {
			t.Fatalf("%s: %v", raw, err)
		}
		if v.flat == nil {
			t.Fatalf("no fast path for %s", raw)
		}
		lib := &SchemaValidator{resolved: v.resolved}
		for range 10 {
			inst := map[string]any{}
			for _, n := range append(names, "zzz") {
				if rng.IntN(2) == 0 {
					inst[n] = values[rng.IntN(len(values))]
				}
			}
			fe, le := v.ValidateValue(inst), lib.ValidateValue(inst)
			checked++
			if (fe == nil) != (le == nil) {
				ib, _ := json.Marshal(inst)
				t.Fatalf("schema %s, arguments %s: fast path %v, library %v", raw, ib, fe, le)
			}
			if fe == nil {
				fast++
			}
			var members []string
			for _, n := range append(names, "zzz") {
				if rng.IntN(2) == 0 {
					members = append(members, `"`+n+`":`+rawNumbers[rng.IntN(len(rawNumbers))])
				}
			}
			args := json.RawMessage("{" + strings.Join(members, ",") + "}")
			fe, le = v.Validate(args), lib.Validate(args)
			checked++
			if (fe == nil) != (le == nil) {
				t.Fatalf("schema %s, arguments %s: fast path %v, library %v", raw, args, fe, le)
			}
			if fe == nil {
				fast++
			}
		}
	}
	if fast == 0 || fast == checked {
		t.Errorf("%d of %d accepted: the generator is not exercising both answers", fast, checked)
	}
}

func TestSchemaValidator_OtherSchemasGoToTheLibrary(t *testing.T) {
	for _, s := range []string{
		`{"type":"object","properties":{"a":{"enum":[1,2]}}}`,
		`{"type":"object","properties":{"a":{"type":"string","pattern":"^x"}}}`,
		`{"type":"object","properties":{"a":{"type":"object","properties":{"b":{"type":"string"}}}}}`,
		`{"properties":{"a":{"type":"string"}}}`,
		`{"type":"object","$defs":{}}`,
		`{"type":"object","additionalProperties":{"type":"string"}}`,
	} {
		v, err := NewSchemaValidator(json.RawMessage(s))
		if err != nil {
			t.Fatalf("%s: %v", s, err)
		}
		if v.flat != nil {
			t.Errorf("%s took the fast path", s)
		}
	}
	v, _ := NewSchemaValidator(json.RawMessage(`{"type":"object","properties":{"a":{"type":"string","pattern":"^x"}}}`))
	if v.Validate(json.RawMessage(`{"a":"xy"}`)) != nil || v.Validate(json.RawMessage(`{"a":"yy"}`)) == nil {
		t.Error("the library path does not validate")
	}
}

func BenchmarkSchemaValidator(b *testing.B) {
	schema := json.RawMessage(`{"type":"object","properties":{"order_id":{"type":"string","description":"x"},"amount_cents":{"type":"integer","minimum":1}},"required":["order_id","amount_cents"]}`)
	v, _ := NewSchemaValidator(schema)
	lib := &SchemaValidator{resolved: v.resolved}
	args := map[string]any{"order_id": "o-1", "amount_cents": 1250.0}
	b.Run("fast", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := v.ValidateValue(args); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("library", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := lib.ValidateValue(args); err != nil {
				b.Fatal(err)
			}
		}
	})
}
