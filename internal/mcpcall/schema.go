package mcpcall

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/idemkit-mcp/idemkit/idemkit"
)

// SchemaValidator validates tool arguments against an input schema with the
// semantics of the official Go SDK's schema library
// (github.com/google/jsonschema-go). The flat object schemas most tools
// have (typed properties, required, additionalProperties, numeric bounds,
// string lengths) are checked by a fast path that allocates nothing; any
// other schema goes to the library. A differential test holds the fast
// path to the library's answers.
//
// One deliberate divergence from the library fed encoding/json's float64
// values: "integer" means an integer by the number's exact decimal value,
// as idemkit's key reads numbers (16, 16.0 and 1.6e1 are integers;
// 16.00000000000000000001 and 1e-400 are not, though their nearest
// doubles, 16 and 0, are). Read as a float64, 16.00000000000000000001
// passed as the integer 16 while its key was not 16's: a second 16-cent
// refund. A number whose double is integral but whose exact value is not
// is validated as the next double towards its exact value, on the fast
// path and in the library alike; from 2^52 on, where every double is an
// integer, such a number (9007199254740993.5) is refused as unreadable.
type SchemaValidator struct {
	flat     *flatSchema          // nil: not fast-pathable
	resolved *jsonschema.Resolved // the library's compiled form
}

// NewSchemaValidator compiles an input schema: a *jsonschema.Schema, a raw
// JSON schema, or any value that encodes to one. It returns an error for a
// schema it cannot compile.
func NewSchemaValidator(schema any) (*SchemaValidator, error) {
	var raw []byte
	switch v := schema.(type) {
	case nil:
		return nil, fmt.Errorf("mcpcall: no input schema")
	case json.RawMessage:
		raw = v
	case []byte:
		raw = v
	default:
		b, err := json.Marshal(v)
		if err != nil {
			return nil, err
		}
		raw = b
	}
	s := new(jsonschema.Schema)
	if err := json.Unmarshal(raw, s); err != nil {
		return nil, err
	}
	r, err := s.Resolve(&jsonschema.ResolveOptions{ValidateDefaults: false})
	if err != nil {
		return nil, err
	}
	sv := &SchemaValidator{resolved: r}
	var m map[string]any
	if json.Unmarshal(raw, &m) == nil {
		sv.flat = compileFlat(m)
	}
	return sv, nil
}

// Validate checks raw arguments (absent or null: an empty object). Errors
// wrap idemkit.ErrInvalidArguments.
func (v *SchemaValidator) Validate(args json.RawMessage) error {
	var instance any = map[string]any{}
	if t := bytes.TrimSpace(args); len(t) > 0 && string(t) != "null" {
		var err error
		if instance, err = decodeExact(t); err != nil {
			return fmt.Errorf("%w: %v", idemkit.ErrInvalidArguments, err)
		}
	}
	return v.ValidateValue(instance)
}

// ValidateDecoded checks arguments an SDK decoded already (decoded, as
// encoding/json decodes into an any) from the raw arguments raw: decoded
// itself, unless raw holds a number its float64 misreads as an integer
// (see SchemaValidator), in which case raw is decoded exactly.
func (v *SchemaValidator) ValidateDecoded(decoded any, raw []byte) error {
	if hasInexactInteger(raw) {
		return v.Validate(raw)
	}
	return v.ValidateValue(decoded)
}

// decodeExact decodes JSON arguments as encoding/json does into an any,
// except that a number whose float64 is integral while its exact decimal
// value is not becomes the next double towards its exact value.
func decodeExact(doc []byte) (any, error) {
	var instance any
	if !hasInexactInteger(doc) {
		err := json.Unmarshal(doc, &instance)
		return instance, err
	}
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	if err := dec.Decode(&instance); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("invalid character after the top-level value")
	}
	return exactNumbers(instance)
}

// exactNumbers replaces the json.Numbers in v by float64s, as decodeExact
// says.
func exactNumbers(v any) (any, error) {
	switch x := v.(type) {
	case json.Number:
		return numberValue(string(x))
	case map[string]any:
		for k, e := range x {
			n, err := exactNumbers(e)
			if err != nil {
				return nil, err
			}
			x[k] = n
		}
	case []any:
		for i, e := range x {
			n, err := exactNumbers(e)
			if err != nil {
				return nil, err
			}
			x[i] = n
		}
	}
	return v, nil
}

// numberValue returns the float64 of the JSON number text: encoding/json's,
// or, when that is integral and text's exact value is not an integer, the
// next double towards the exact value.
func numberValue(text string) (float64, error) {
	f, err := strconv.ParseFloat(text, 64)
	if err != nil {
		return 0, fmt.Errorf("cannot read number %s as a float64", text)
	}
	if f != math.Trunc(f) || exactInteger(text) {
		return f, nil
	}
	neg := strings.HasPrefix(text, "-")
	next := math.Nextafter(f, math.Inf(-1))
	if decimalAbove(text, f) != neg {
		next = math.Nextafter(f, math.Inf(1))
	}
	if next == math.Trunc(next) {
		// From 2^52 on, every double is an integer: none stands for the
		// fraction.
		return 0, fmt.Errorf("the number %s has a fraction beyond a double's precision (it would be read as the integer %s); send an integer or fewer digits",
			text, strconv.FormatFloat(f, 'f', -1, 64))
	}
	return next, nil
}

// numberParts splits a valid JSON number into its integer and fraction
// digits and its exponent (clamped far beyond any double's).
func numberParts(text string) (intDigits, frac string, exp int64) {
	text = strings.TrimPrefix(text, "-")
	mant := text
	if i := strings.IndexAny(text, "eE"); i >= 0 {
		mant = text[:i]
		e := text[i+1:]
		neg := strings.HasPrefix(e, "-")
		e = strings.TrimLeft(e, "+-")
		for _, c := range []byte(e) {
			if exp < 1<<40 {
				exp = exp*10 + int64(c-'0')
			}
		}
		if neg {
			exp = -exp
		}
	}
	intDigits, frac, _ = strings.Cut(mant, ".")
	return intDigits, frac, exp
}

// exactInteger reports whether the valid JSON number text is an integer by
// its exact decimal value: 16, 16.0, 1.6e1 and 1600e-2 are; 16.5 and
// 16.00000000000000000001 are not.
func exactInteger(text string) bool {
	intDigits, frac, exp := numberParts(text)
	digits := strings.TrimRight(intDigits+frac, "0")
	if strings.Trim(digits, "0") == "" {
		return true // zero
	}
	// value = digits × 10^scale, digits without trailing zeros.
	scale := exp - int64(len(frac)) + int64(len(intDigits)+len(frac)-len(digits))
	return scale >= 0
}

// decimalAbove reports whether the magnitude of the valid JSON number text,
// which is not an integer, is above |f|, an integral double.
func decimalAbove(text string, f float64) bool {
	intDigits, frac, exp := numberParts(text)
	digits, point := intDigits+frac, int64(len(intDigits))+exp
	// The integer part of |text|: the digits before the decimal point.
	var whole string
	switch {
	case point <= 0:
		whole = "0"
	case point >= int64(len(digits)):
		whole = digits + strings.Repeat("0", int(point-int64(len(digits))))
	default:
		whole = digits[:point]
	}
	whole = strings.TrimLeft(whole, "0")
	fi := strconv.FormatFloat(math.Abs(f), 'f', 0, 64) // exact: f is integral
	if fi == "0" {
		fi = ""
	}
	// |text| has a fraction: it is above |f| when its integer part is at
	// least |f|, below otherwise.
	if len(whole) != len(fi) {
		return len(whole) > len(fi)
	}
	return whole >= fi
}

// hasInexactInteger reports whether the JSON document doc holds a number
// whose float64 is integral while its exact decimal value is not an
// integer (16.00000000000000000001, 1e-400). It reads numbers only: strings
// are skipped.
func hasInexactInteger(doc []byte) bool {
	for i := 0; i < len(doc); i++ {
		switch c := doc[i]; {
		case c == '"':
			for i++; i < len(doc) && doc[i] != '"'; i++ {
				if doc[i] == '\\' {
					i++
				}
			}
		case c == '-' || (c >= '0' && c <= '9'):
			start, fractional := i, false
			for i < len(doc) {
				b := doc[i]
				if b == '.' || b == 'e' || b == 'E' {
					fractional = true
				} else if !(b >= '0' && b <= '9' || b == '-' || b == '+') {
					break
				}
				i++
			}
			if fractional {
				text := string(doc[start:i])
				if f, err := strconv.ParseFloat(text, 64); err == nil && f == math.Trunc(f) && !exactInteger(text) {
					return true
				}
			}
			i--
		}
	}
	return false
}

// ValidateValue checks decoded arguments (as encoding/json decodes them
// into an any: numbers as float64). Errors wrap idemkit.ErrInvalidArguments.
func (v *SchemaValidator) ValidateValue(instance any) error {
	if instance == nil {
		instance = map[string]any{}
	}
	var err error
	if v.flat != nil {
		err = v.flat.validate(instance)
	} else {
		err = v.resolved.Validate(instance)
	}
	if err != nil {
		return fmt.Errorf("%w: validating \"arguments\": %v", idemkit.ErrInvalidArguments, err)
	}
	return nil
}

// JSON types, as a bit set.
const (
	typeNull uint8 = 1 << iota
	typeBoolean
	typeInteger
	typeNumber
	typeString
	typeArray
	typeObject
)

var typeBits = map[string]uint8{
	"null": typeNull, "boolean": typeBoolean, "integer": typeInteger, "number": typeNumber,
	"string": typeString, "array": typeArray, "object": typeObject,
}

// flatSchema is an object schema whose properties have only simple
// keywords.
type flatSchema struct {
	props    map[string]*flatProp
	required []string
	noExtra  bool // additionalProperties: false
}

type flatProp struct {
	types                                  uint8 // 0: any type
	min, max, exclMin, exclMax             float64
	hasMin, hasMax, hasExclMin, hasExclMax bool
	minLen, maxLen                         int // -1: none
}

// annotation keywords: no effect on validation.
var annotations = map[string]bool{"description": true, "title": true, "$comment": true, "default": true, "examples": true,
	"deprecated": true, "readOnly": true, "writeOnly": true}

// compileFlat returns the fast form of a schema, or nil when the schema
// uses anything the fast path does not implement.
func compileFlat(m map[string]any) *flatSchema {
	f := &flatSchema{props: map[string]*flatProp{}}
	for k, v := range m {
		switch k {
		case "type":
			if v != "object" {
				return nil
			}
		case "$schema":
			s, _ := v.(string)
			if s != "https://json-schema.org/draft/2020-12/schema" && s != "http://json-schema.org/draft-07/schema#" {
				return nil
			}
		case "properties":
			props, ok := v.(map[string]any)
			if !ok {
				return nil
			}
			for name, ps := range props {
				pm, ok := ps.(map[string]any)
				if !ok {
					return nil
				}
				p := compileProp(pm)
				if p == nil {
					return nil
				}
				f.props[name] = p
			}
		case "required":
			if v == nil {
				continue
			}
			list, ok := v.([]any)
			if !ok {
				return nil
			}
			for _, r := range list {
				s, ok := r.(string)
				if !ok {
					return nil
				}
				f.required = append(f.required, s)
			}
		case "additionalProperties":
			b, ok := v.(bool)
			if !ok {
				return nil
			}
			f.noExtra = !b
		default:
			if !annotations[k] {
				return nil
			}
		}
	}
	if _, typed := m["type"]; !typed {
		return nil // an untyped root accepts non-objects: leave it to the library
	}
	return f
}

func compileProp(m map[string]any) *flatProp {
	p := &flatProp{minLen: -1, maxLen: -1}
	num := func(v any) (float64, bool) { f, ok := v.(float64); return f, ok }
	length := func(v any) (int, bool) {
		f, ok := v.(float64)
		if !ok || f < 0 || f != math.Trunc(f) || f > math.MaxInt32 {
			return 0, false
		}
		return int(f), true
	}
	for k, v := range m {
		ok := true
		switch k {
		case "type":
			switch t := v.(type) {
			case string:
				p.types, ok = typeBits[t]
			case []any:
				if len(t) == 0 {
					return nil
				}
				for _, e := range t {
					s, _ := e.(string)
					b, known := typeBits[s]
					if !known {
						return nil
					}
					p.types |= b
				}
			default:
				return nil
			}
		case "minimum":
			p.min, ok = num(v)
			p.hasMin = true
		case "maximum":
			p.max, ok = num(v)
			p.hasMax = true
		case "exclusiveMinimum":
			p.exclMin, ok = num(v)
			p.hasExclMin = true
		case "exclusiveMaximum":
			p.exclMax, ok = num(v)
			p.hasExclMax = true
		case "minLength":
			p.minLen, ok = length(v)
		case "maxLength":
			p.maxLen, ok = length(v)
		default:
			ok = annotations[k]
		}
		if !ok {
			return nil
		}
	}
	return p
}

// jsonTypeOf is the library's jsonType for decoded JSON values.
func jsonTypeOf(v any) (uint8, bool) {
	switch x := v.(type) {
	case nil:
		return typeNull, true
	case bool:
		return typeBoolean, true
	case float64:
		if _, frac := math.Modf(x); frac == 0 {
			return typeInteger, true
		}
		return typeNumber, true
	case string:
		return typeString, true
	case []any:
		return typeArray, true
	case map[string]any:
		return typeObject, true
	}
	return 0, false
}

func (f *flatSchema) validate(instance any) error {
	obj, ok := instance.(map[string]any)
	if !ok {
		return fmt.Errorf("type: %v is not an object", instance)
	}
	for _, r := range f.required {
		if _, ok := obj[r]; !ok {
			return fmt.Errorf("required: missing property %q", r)
		}
	}
	for k, v := range obj {
		p := f.props[k]
		if p == nil {
			if f.noExtra {
				return fmt.Errorf("unexpected additional property %q", k)
			}
			continue
		}
		if err := p.validate(k, v); err != nil {
			return err
		}
	}
	return nil
}

func (p *flatProp) validate(name string, v any) error {
	t, ok := jsonTypeOf(v)
	if !ok {
		return fmt.Errorf("property %q: %v of type %[2]T is not a valid JSON value", name, v)
	}
	if p.types != 0 && p.types&t == 0 && !(t == typeInteger && p.types&typeNumber != 0) {
		return fmt.Errorf("property %q: %v has type %s, want %s", name, v, typeNames(t), typeNames(p.types))
	}
	if x, isNum := v.(float64); isNum {
		switch {
		case p.hasMin && x < p.min:
			return fmt.Errorf("property %q: minimum: %v is less than %v", name, x, p.min)
		case p.hasMax && x > p.max:
			return fmt.Errorf("property %q: maximum: %v is greater than %v", name, x, p.max)
		case p.hasExclMin && x <= p.exclMin:
			return fmt.Errorf("property %q: exclusiveMinimum: %v is less than or equal to %v", name, x, p.exclMin)
		case p.hasExclMax && x >= p.exclMax:
			return fmt.Errorf("property %q: exclusiveMaximum: %v is greater than or equal to %v", name, x, p.exclMax)
		}
	}
	if s, isStr := v.(string); isStr && (p.minLen >= 0 || p.maxLen >= 0) {
		n := utf8.RuneCountInString(s)
		if p.minLen >= 0 && n < p.minLen {
			return fmt.Errorf("property %q: minLength: %d code points, fewer than %d", name, n, p.minLen)
		}
		if p.maxLen >= 0 && n > p.maxLen {
			return fmt.Errorf("property %q: maxLength: %d code points, more than %d", name, n, p.maxLen)
		}
	}
	return nil
}

func typeNames(bits uint8) string {
	var names []string
	for name, b := range typeBits {
		if bits&b != 0 {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	if len(names) == 1 {
		return names[0]
	}
	return fmt.Sprint(names)
}
