package mcpcall

import (
	"encoding/json"
	"strings"
	"testing"

	sc "github.com/idemkit-mcp/idemkit/spancontract"
)

// StripKeyArgument keeps every other member as the caller wrote it, and
// leaves an ambiguous key argument in place for NewKey to refuse: it must
// never settle which of two spellings counts (a map decode would have kept
// the last one and hidden the other).
func TestStripKeyArgument_ByteForByteAndAmbiguity(t *testing.T) {
	for in, want := range map[string]string{
		`{"a":1,"idempotency_key":"k"}`:                           `{"a":1}`,
		`{"idempotency_key":"k","a":1}`:                           `{"a":1}`,
		`{ "b": 1.50, "idempotency_key" : "k", "a": {"x" : 1} }`:  `{"b": 1.50,"a": {"x" : 1}}`,
		`{"idempotency\u005fkey":"k","n":12345678901234567890}`:   `{"n":12345678901234567890}`,
		`{"idempotency_key":"k","z":{"idempotency_key":"inner"}}`: `{"z":{"idempotency_key":"inner"}}`,
		`{"idempotency_key":"k"}`:                                 `{}`,
		`{"amount":20,"AMOUNT":70,"idempotency_key":"k"}`:         `{"amount":20,"AMOUNT":70}`,
		"{\"idempotency_key\":\"k\",\"s\":\"\u00e9\\n\\u0041\"}":  "{\"s\":\"\u00e9\\n\\u0041\"}",
	} {
		got, key := StripKeyArgument(json.RawMessage(in))
		if string(got) != want || string(key) == "" {
			t.Errorf("StripKeyArgument(%s) = %s, %s; want %s and the key", in, got, key, want)
		}
	}
	for _, in := range []string{
		`{"idempotency_key":"a","idempotency_key":"b"}`,
		`{"idempotency_key":"a","idempotency\u005fkey":"b"}`,
		`{"idempotency_key":"a","Idempotency_Key":"b"}`,
		`{"IDEMPOTENCY_KEY":"b","idempotency_key":"a"}`,
		"{\"idempotency_key\":\"a\",\"idempotency_\u212aey\":\"b\"}", // KELVIN SIGN folds to k
		`{"a":1}`, `[{"idempotency_key":"a"}]`, `{"idempotency_key":"a"} x`, `{"idempotency_key":`, `"idempotency_key"`,
	} {
		if got, key := StripKeyArgument(json.RawMessage(in)); string(got) != in || key != nil {
			t.Errorf("StripKeyArgument(%s) = %s, %s; want it unchanged, no key", in, got, key)
		}
	}
}

// A protected call whose arguments hold two member names equal under case
// folding is refused as invalid_arguments before anything is claimed or
// run: a Go handler reads them as one member, the last, so the schema check
// and the key would describe another call than the one that runs
// ({"order_id":"ord_1012","Order_Id":"ord_1013"} was validated for ord_1012
// and refunded ord_1013). So whether the variant is of an argument, of a
// nested member, or of the key argument itself, with or without an
// explicit key.
func TestCallTool_CaseVariantNamesAreRefusedBeforeAnythingRuns(t *testing.T) {
	r := newRig(t, rigConfig{cfg: withSubject(subjectAlice)})
	tool := r.tool("refund", ToolInfo{}, refundResult)
	tool.schema = json.RawMessage(`{"type":"object","properties":{"order_id":{"type":"string"},"amount_cents":{"type":"integer","maximum":50}}}`)
	for _, tc := range []struct {
		args string
		meta map[string]any
	}{
		{`{"order_id":"ord_1012","Order_Id":"ord_1013","amount_cents":25}`, nil},
		{`{"Order_Id":"ord_1013","amount_cents":25,"order_id":"ord_1012"}`, nil}, // compact and sorted: the key's fast path
		{`{"amount_cents":20,"AMOUNT_CENTS":70}`, nil},
		{`{"order_id":"o-1","amount_cents":20,"lines":[{"sku":"a","SKU":"b"}]}`, nil},
		{`{"order_id":"o-1","amount_cents":20,"AMOUNT_CENTS":70,"idempotency_key":"k-1"}`, nil},
		{`{"order_id":"o-1","amount_cents":20,"AMOUNT_CENTS":70}`, map[string]any{KeyMetaKey: "k-2"}},
		{`{"order_id":"o-1","amount_cents":20,"idempotency_key":"k-3","Idempotency_Key":"k-4"}`, nil},
	} {
		res := result(t, r.call("refund", tc.args, tc.meta))
		m := metaOf(res, RefusalMetaKey)
		if !isError(res) || m["reason"] != sc.RefusalInvalidArguments {
			t.Errorf("%s: %v, want an invalid_arguments refusal", tc.args, res)
			continue
		}
		if txt := text(res); !strings.Contains(txt, "nothing was done") || !strings.Contains(txt, "differ only in letter case") ||
			!strings.Contains(txt, "spelled exactly as the tool's input schema") {
			t.Errorf("%s: text %q does not say what to fix", tc.args, txt)
		}
	}
	if n := tool.count(); n != 0 {
		t.Fatalf("the tool ran %d times on ambiguous arguments", n)
	}
	if _, ok := r.metrics()[MetricClaimDuration]; ok {
		t.Error("an ambiguous call was claimed")
	}
	// The same names in two objects are two members, and a correct call runs.
	if res := result(t, r.call("refund", `{"order_id":"o-1","amount_cents":20,"a":{"x":1},"b":{"X":2}}`, nil)); isError(res) || tool.count() != 1 {
		t.Errorf("%v, runs %d", res, tool.count())
	}
}
