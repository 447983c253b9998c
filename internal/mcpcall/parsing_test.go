package mcpcall

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"math/big"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idemkit-mcp/idemkit/idemkit"
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
		{`{"order_id":"o-1","amount_cents":20,"AMOUNT_CENTS":70}`, map[string]any{sc.KeyMetaKey: "k-2"}},
		{`{"order_id":"o-1","amount_cents":20,"idempotency_key":"k-3","Idempotency_Key":"k-4"}`, nil},
	} {
		res := result(t, r.call("refund", tc.args, tc.meta))
		m := metaOf(res, sc.RefusalMetaKey)
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
	if _, ok := r.metrics()[sc.MetricClaimDuration]; ok {
		t.Error("an ambiguous call was claimed")
	}
	// The same names in two objects are two members, and a correct call runs.
	if res := result(t, r.call("refund", `{"order_id":"o-1","amount_cents":20,"a":{"x":1},"b":{"X":2}}`, nil)); isError(res) || tool.count() != 1 {
		t.Errorf("%v, runs %d", res, tool.count())
	}
}

// The schema's integer check reads a number by its exact decimal value, as
// the key does: 16, 16.0, 1.6e1 and 1600e-2 are integers,
// 16.00000000000000000001 is not (its float64 is 16: it passed as the
// integer 16 while its key was not 16's, so a second 16-cent refund ran).
// Bounds are checked towards the exact value too. On the fast path and in
// the library alike.
func TestSchemaValidator_IntegersByExactDecimalValue(t *testing.T) {
	flat := `{"type":"object","properties":{"n":{"type":"integer"},"x":{"type":"number","maximum":16,"exclusiveMinimum":-16}}}`
	nested := `{"type":"object","properties":{"o":{"type":"object","properties":{"n":{"type":"integer"},"x":{"type":"number","maximum":16,"exclusiveMinimum":-16}}}}}`
	for _, c := range []struct {
		schema string
		wrap   func(string) string
	}{
		{flat, func(m string) string { return "{" + m + "}" }},
		{nested, func(m string) string { return `{"o":{` + m + `}}` }},
	} {
		v, err := NewSchemaValidator(json.RawMessage(c.schema))
		if err != nil {
			t.Fatal(err)
		}
		if (c.schema == flat) != (v.flat != nil) {
			t.Fatalf("%s: fast path %v", c.schema, v.flat != nil)
		}
		for _, ok := range []string{`"n":16`, `"n":16.0`, `"n":1.6e1`, `"n":1600e-2`, `"n":-0.0`, `"n":0e-400`, `"n":9007199254740993`,
			`"n":9007199254740993.000`, `"n":1e21`, `"x":16`, `"x":15.99999999999999999999`, `"x":-15.9999999999999999999`, `"x":1e-400`} {
			if err := v.Validate(json.RawMessage(c.wrap(ok))); err != nil {
				t.Errorf("%s: %s refused: %v", c.schema, ok, err)
			}
		}
		for _, bad := range []string{`"n":16.00000000000000000001`, `"n":-16.00000000000000000001`, `"n":15.99999999999999999999`,
			`"n":1e-400`, `"n":-1e-400`, `"n":9007199254740993.5`, `"n":16.5`, `"n":1e400`,
			`"x":16.00000000000000000001`, `"x":-16.00000000000000000001`, `"x":-16`} {
			if err := v.Validate(json.RawMessage(c.wrap(bad))); !errors.Is(err, idemkit.ErrInvalidArguments) {
				t.Errorf("%s: %s accepted (%v)", c.schema, bad, err)
			}
		}
	}
	// The deliberate divergence: the library fed encoding/json's float64s
	// takes 16.00000000000000000001 for the integer 16.
	v, _ := NewSchemaValidator(json.RawMessage(flat))
	var floats any
	_ = json.Unmarshal([]byte(`{"n":16.00000000000000000001}`), &floats)
	if err := (&SchemaValidator{resolved: v.resolved}).ValidateValue(floats); err != nil {
		t.Errorf("the library now refuses the float64 16 as an integer (%v): the divergence documented on SchemaValidator is gone", err)
	}
	// An SDK's decoded arguments are checked as decoded, unless the raw
	// arguments hold such a number.
	if err := v.ValidateDecoded(floats, []byte(`{"n":16.00000000000000000001}`)); err == nil {
		t.Error("ValidateDecoded accepted the decoded float64 of an inexact integer")
	}
	if err := v.ValidateDecoded(map[string]any{"n": 16.0}, []byte(`{"n":16.0}`)); err != nil {
		t.Error(err)
	}
}

// numberValue moves a number whose double is integral, while its exact
// value is not, to the next double towards the exact value, and leaves
// every other number as encoding/json reads it; checked against big.Rat.
func TestNumberValue_TowardsTheExactValue(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	digits := func(n int) string {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte('0' + rng.IntN(10))
		}
		return string(b)
	}
	moved := 0
	for range 20000 {
		var text string
		switch rng.IntN(4) {
		case 0: // an integer with a tiny fraction
			text = strconv.Itoa(rng.IntN(1<<20)) + "." + strings.Repeat("0", 15+rng.IntN(10)) + digits(1+rng.IntN(3))
		case 1: // a large integer with a fraction
			text = "9007199254740" + digits(3) + "." + digits(1+rng.IntN(3))
		case 2: // exponents
			text = digits(1+rng.IntN(25)) + "e" + strconv.Itoa(rng.IntN(40)-30)
		default:
			text = strconv.Itoa(rng.IntN(1000)) + "." + digits(rng.IntN(5)+1)
		}
		if rng.IntN(2) == 0 {
			text = "-" + text
		}
		want, _ := strconv.ParseFloat(text, 64)
		got, err := numberValue(text)
		exact, _ := new(big.Rat).SetString(text)
		if err != nil {
			if exact.IsInt() || math.Abs(want) < 1<<52 {
				t.Fatalf("%s: %v", text, err)
			}
			continue // a fraction no double can stand for
		}
		isInt := exact.IsInt()
		if exactInteger(text) != isInt {
			t.Fatalf("exactInteger(%s) = %v, big.Rat says %v", text, !isInt, isInt)
		}
		if isInt || want != math.Trunc(want) {
			if got != want {
				t.Fatalf("%s: %v, want encoding/json's %v", text, got, want)
			}
			continue
		}
		moved++
		fw := new(big.Rat).SetFloat64(want)
		fg := new(big.Rat).SetFloat64(got)
		if got != math.Nextafter(want, got) || got == want || exact.Cmp(fw) != fg.Cmp(fw) {
			t.Fatalf("%s: %v -> %v, not the next double towards the exact value", text, want, got)
		}
	}
	if moved < 1000 {
		t.Fatalf("only %d numbers moved: the generator misses the case", moved)
	}
}

// A protected call whose integer argument is not an integer by its exact
// value is refused before anything runs; 16 and 16.0 are one call.
func TestCallTool_InexactIntegersAreRefused(t *testing.T) {
	r := newRig(t, rigConfig{cfg: withSubject(subjectAlice)})
	tool := r.tool("refund", ToolInfo{}, refundResult)
	tool.schema = json.RawMessage(`{"type":"object","properties":{"order_id":{"type":"string"},"amount_cents":{"type":"integer"}}}`)
	for _, amount := range []string{"16.00000000000000000001", "15.99999999999999999999", "1.600000000000000000001e1", "1e-400"} {
		res := result(t, r.call("refund", `{"order_id":"o-1","amount_cents":`+amount+`}`, nil))
		if m := metaOf(res, sc.RefusalMetaKey); !isError(res) || m["reason"] != sc.RefusalInvalidArguments || !strings.Contains(text(res), "amount_cents") {
			t.Errorf("amount %s: %v", amount, res)
		}
	}
	if tool.count() != 0 {
		t.Fatalf("the tool ran %d times", tool.count())
	}
	for _, amount := range []string{"16", "16.0", "1.6e1", "1600e-2"} {
		res := result(t, r.call("refund", `{"order_id":"o-1","amount_cents":`+amount+`}`, nil))
		if isError(res) || (amount != "16") != (metaOf(res, sc.ReplayMetaKey) != nil) {
			t.Errorf("amount %s: %v", amount, res)
		}
	}
	if tool.count() != 1 {
		t.Fatalf("the tool ran %d times, want once for 16 however spelled", tool.count())
	}
}

// The retry hint is how long the first call is expected to take still:
// the tool's running estimate (an EWMA of its successful calls) minus what
// the first call has run, at least MinRetryAfter, at most the lease left;
// DefaultRetryAfter without history.
func TestDurationEstimate_RetryAfter(t *testing.T) {
	now := time.Date(2026, 1, 5, 9, 0, 0, 0, time.UTC)
	lease := 119500 * time.Millisecond
	ip := func(ran time.Duration) *idemkit.InProgressError {
		return &idemkit.InProgressError{Tool: "refund", Attempt: 1, Started: now.Add(-ran), RetryAfter: lease}
	}
	var d durationEstimate
	if got := d.retryAfter(ip(500*time.Millisecond), now); got != DefaultRetryAfter {
		t.Errorf("no history: %v, want %v", got, DefaultRetryAfter)
	}
	if got := d.retryAfter(&idemkit.InProgressError{RetryAfter: time.Second}, now); got != time.Second {
		t.Errorf("no history, 1s of lease left: %v", got)
	}
	d.observe(3 * time.Second)
	for _, c := range []struct {
		ran, want time.Duration
	}{
		{500 * time.Millisecond, 2500 * time.Millisecond},
		{0, 3 * time.Second},
		{2900 * time.Millisecond, MinRetryAfter},
		{time.Minute, MinRetryAfter},
	} {
		if got := d.retryAfter(ip(c.ran), now); got != c.want {
			t.Errorf("a 3s tool that ran %v: %v, want %v", c.ran, got, c.want)
		}
	}
	d.observe(time.Second) // 3s + (1s-3s)/4
	if est, _ := d.estimate(); est != 2500*time.Millisecond {
		t.Errorf("estimate %v", est)
	}
	if got := d.retryAfter(&idemkit.InProgressError{RetryAfter: 800 * time.Millisecond}, now); got != 800*time.Millisecond {
		t.Errorf("bounded by the lease: %v", got)
	}
	if got := d.retryAfter(&idemkit.InProgressError{RetryAfter: lease}, now); got != 2500*time.Millisecond {
		t.Errorf("no start time: %v", got)
	}
}

// The in-progress answer's retry_after_ms is the hint, not the lease
// (119,500 ms for a call that takes 3 s).
func TestCallTool_InProgressRetryHintIsTheExpectedRemainingTime(t *testing.T) {
	r := newRig(t, rigConfig{local: true}) // the default 2-minute lease
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	tool := r.tool("export", ToolInfo{}, "")
	block := false
	tool.run = func(context.Context, json.RawMessage) (json.RawMessage, error) {
		if block {
			started <- struct{}{}
			<-release
		}
		return json.RawMessage(`{"content":[]}`), nil
	}
	hint := func(args string) float64 {
		t.Helper()
		block = true
		done := make(chan map[string]any, 1)
		go func() { done <- r.call("export", args, nil) }()
		<-started
		res := result(t, r.call("export", args, nil))
		release <- struct{}{}
		if first := result(t, <-done); isError(first) {
			t.Fatalf("first call %v", first)
		}
		m := metaOf(res, sc.RefusalMetaKey)
		if m["reason"] != "in_progress" {
			t.Fatalf("duplicate %v", res)
		}
		ms, _ := m["retry_after_ms"].(float64)
		return ms
	}
	// No successful call of the tool yet: the default.
	if got := hint(`{"n":1}`); got != float64(DefaultRetryAfter.Milliseconds()) {
		t.Errorf("without history retry_after_ms = %v, want %d", got, DefaultRetryAfter.Milliseconds())
	}
	// The call above took as long as the test held it; a quick one pulls
	// the estimate down. The hint then is the estimate minus what the
	// running call has run, far below the lease.
	block = false
	for i := range 20 {
		r.call("export", `{"quick":`+strconv.Itoa(i)+`}`, nil)
	}
	if got := hint(`{"n":2}`); got < float64(MinRetryAfter.Milliseconds()) || got >= 60000 {
		t.Errorf("with history retry_after_ms = %v, want the estimate left (at least %d), not the lease", got, MinRetryAfter.Milliseconds())
	}
}

// nanCodec is RawCodec for results that hold the placeholder NaN (which
// JSON cannot carry): encoding them fails, as an SDK's does for a NaN in
// structuredContent.
type nanCodec struct{ RawCodec }

func (c nanCodec) Marshal(r json.RawMessage) ([]byte, error) {
	if strings.Contains(string(r), `"NaN"`) {
		return nil, errors.New("json: unsupported value: NaN")
	}
	return c.RawCodec.Marshal(r)
}

// A result that cannot be encoded after the work ran is recorded as done:
// the first caller gets a readable isError answer, every retry
// response_not_kept, and the work runs once. A tool error that cannot be
// encoded is released, as tool errors are: its answer says it was not
// recorded.
func TestCallTool_AnUnencodableResultIsRecordedAndNeverRerun(t *testing.T) {
	r := newRig(t, rigConfig{cfg: withSubject(subjectAlice)})
	runs := 0
	result := `{"content":[{"type":"text","text":"refunded"}],"structuredContent":{"ratio":"NaN"}}`
	call := func(args string) json.RawMessage {
		t.Helper()
		_, op := r.srv.in.Start(context.Background(), &Request{Method: "tools/call", Target: "refund", ID: "1", HasID: true, Transport: r.srv.transport})
		defer op.End(Response{})
		out, err := CallTool(op, &ToolCall{Tool: "refund", Arguments: []byte(args)}, nanCodec{}, func(ctx context.Context) (json.RawMessage, error) {
			runs++
			RecordWrite(ctx, "re_1")
			return json.RawMessage(result), nil
		})
		if err != nil {
			t.Fatalf("the caller got an error, not an answer: %v", err)
		}
		return out
	}
	decode := func(b json.RawMessage) map[string]any {
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	first := decode(call(`{"order_id":"o-1"}`))
	if !isError(first) || metaOf(first, sc.RefusalMetaKey)["reason"] != sc.RefusalResponseNotKept || !strings.Contains(text(first), "its work is done") ||
		!strings.Contains(text(first), "unsupported value: NaN") {
		t.Errorf("first answer %v", first)
	}
	for range 2 {
		res := decode(call(`{"order_id":"o-1"}`))
		if !isError(res) || metaOf(res, sc.RefusalMetaKey)["reason"] != sc.RefusalResponseNotKept {
			t.Errorf("retry %v", res)
		}
	}
	if runs != 1 {
		t.Fatalf("the work ran %d times", runs)
	}
	spans := r.spans("tools/call refund")
	if a := attrMap(spans[0]); a[sc.Outcome] != "executed" || a[sc.FinishError] != sc.FinishUnencodable || a[sc.WriteID] != "re_1" || a[sc.RefusalReason] != nil {
		t.Errorf("first span %v", dump(a))
	}
	if a := attrMap(spans[1]); a[sc.Outcome] != "replayed" || a[sc.RefusalReason] != sc.RefusalResponseNotKept {
		t.Errorf("retry span %v", dump(a))
	}

	result = `{"content":[{"type":"text","text":"declined"}],"isError":true,"structuredContent":{"ratio":"NaN"}}`
	for range 2 {
		res := decode(call(`{"order_id":"o-2"}`))
		if !isError(res) || metaOf(res, sc.RefusalMetaKey) != nil || !strings.Contains(text(res), "it was not recorded") {
			t.Errorf("unencodable tool error %v", res)
		}
	}
	if runs != 3 {
		t.Fatalf("runs %d, want the released tool error to run again", runs)
	}
}
