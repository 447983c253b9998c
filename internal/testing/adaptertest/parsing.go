package adaptertest

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/idemkit-mcp/idemkit/idemkit"
	"github.com/idemkit-mcp/idemkit/instrument"
	sc "github.com/idemkit-mcp/idemkit/spancontract"
)

// rawCall sends a tools/call of tool with raw JSON arguments (member order,
// spelling and number text exactly as given) on c's session and returns
// its result.
func rawCall(t *testing.T, r *rig, c Client, token, tool, args string) map[string]any {
	t.Helper()
	rc := &rpcClient{t: t, url: r.srv.URL(), sid: c.SessionID(), token: token}
	return resultOf(t, rc.rpc("tools/call", json.RawMessage(`{"name":"`+tool+`","arguments":`+args+`}`)))
}

// testCaseVariantNames: a protected call whose arguments hold two member
// names equal under case folding, at any depth, is refused as
// invalid_arguments and runs nothing. Go's encoding/json (which both SDKs
// decode handler arguments with) matches names case-insensitively, the
// last one winning: {"order_id":"ord_1012","Order_Id":"ord_1013"} was
// validated for ord_1012 and refunded ord_1013, and the same members in
// the other order were answered with that stored result.
func testCaseVariantNames(t *testing.T, h Harness) {
	var runs counter
	r := start(t, h, setup{transport: HTTP, bearer: true, tools: []Tool{refundTool(&runs)}})
	c := r.connect(ClientConfig{Token: "token-alice", Protocol: LegacyProtocol})
	for _, args := range []string{
		`{"order_id":"ord_1012","Order_Id":"ord_1013","amount_cents":250}`,
		`{"Order_Id":"ord_1013","order_id":"ord_1012","amount_cents":250}`,
		`{"amount_cents":20,"AMOUNT_CENTS":70,"order_id":"o-1"}`,
		`{"order_id":"o-1","amount_cents":20,"meta":{"note":"a","NOTE":"b"}}`,
		`{"order_id":"o-1","amount_cents":20,"idempotency_key":"k-1","Idempotency_Key":"k-2"}`,
		"{\"order_id\":\"o-1\",\"amount_cents\":20,\"s\":1,\"\u017f\":2}", // LONG S folds to s
	} {
		res := rawCall(t, r, c, "token-alice", "refund", args)
		m := marker(res, sc.RefusalMetaKey)
		if !isError(res) || m["reason"] != sc.RefusalInvalidArguments || !strings.Contains(text(res), "nothing was done") ||
			!strings.Contains(text(res), "differ only in letter case") {
			t.Errorf("%s: %v (%q), want an invalid_arguments refusal saying what to fix", args, m, text(res))
		}
	}
	if n := runs.get(); n != 0 {
		t.Fatalf("the tool ran %d times on ambiguous arguments", n)
	}
	if _, ok := r.metrics()[sc.MetricClaimDuration]; ok {
		t.Error("an ambiguous call was claimed")
	}
	// Names that differ beyond letter case are different members.
	if res := rawCall(t, r, c, "token-alice", "refund", `{"order_id":"o-1","orderId":"x","amount_cents":20}`); isError(res) || runs.get() != 1 {
		t.Errorf("%v, runs %d", res, runs.get())
	}
}

// testInexactIntegers: an integer argument is an integer by its exact
// decimal value, as the key reads it. 16.00000000000000000001 passed the
// schema's integer check as the float64 16 and got a key of its own: a
// second 16-cent refund. It is refused, and runs nothing; 16, 16.0 and
// 1.6e1 are one call.
func testInexactIntegers(t *testing.T, h Harness) {
	var runs counter
	r := start(t, h, setup{transport: HTTP, bearer: true, tools: []Tool{refundTool(&runs)}})
	c := r.connect(ClientConfig{Token: "token-alice", Protocol: LegacyProtocol})
	for _, amount := range []string{"16.00000000000000000001", "15.99999999999999999999", "1e-400"} {
		res := rawCall(t, r, c, "token-alice", "refund", `{"order_id":"o-1","amount_cents":`+amount+`}`)
		if m := marker(res, sc.RefusalMetaKey); !isError(res) || m["reason"] != sc.RefusalInvalidArguments {
			t.Errorf("amount_cents %s: %v (%q), want an invalid_arguments refusal", amount, m, text(res))
		}
	}
	if n := runs.get(); n != 0 {
		t.Fatalf("the tool ran %d times on non-integers", n)
	}
	for i, amount := range []string{"16", "16.0", "1.6e1"} {
		res := rawCall(t, r, c, "token-alice", "refund", `{"order_id":"o-1","amount_cents":`+amount+`}`)
		if isError(res) || (i > 0) != (marker(res, sc.ReplayMetaKey) != nil) {
			t.Errorf("amount_cents %s: %v", amount, res)
		}
	}
	if n := runs.get(); n != 1 {
		t.Fatalf("the tool ran %d times, want once for 16 however spelled", n)
	}
}

// keyCandidates are explicit keys on both sides of every bound
// idemkit.ValidateExplicitKey enforces.
var keyCandidates = []string{
	"", "a", " ", "~", "k-1", "3f2a9c1e-0000-4000-8000-000000000000", strings.Repeat("k", idemkit.MaxExplicitKeyLen),
	strings.Repeat("k", idemkit.MaxExplicitKeyLen+1), strings.Repeat("é", 100), "clé", "a\nb", "a\tb", "\x7f", "\x00", "😀",
}

// checkKeySchema reports how the JSON Schema prop (an advertised
// idempotency_key property) disagrees with idemkit.ValidateExplicitKey:
// compiled with the go-sdk's schema library, it must accept exactly the
// keys the server accepts.
func checkKeySchema(t *testing.T, where string, prop any) {
	t.Helper()
	b, err := json.Marshal(prop)
	if err != nil {
		t.Fatal(err)
	}
	var s jsonschema.Schema
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatalf("%s: %s: %v", where, b, err)
	}
	res, err := s.Resolve(nil)
	if err != nil {
		t.Fatalf("%s: %s: %v", where, b, err)
	}
	for _, k := range keyCandidates {
		client, server := res.Validate(k) == nil, idemkit.ValidateExplicitKey(k) == nil
		if client != server {
			t.Errorf("%s: %s: the key %q: the advertised schema accepts it %v, the server %v", where, b, k, client, server)
		}
	}
}

// testKeyAdvertisedBounds: the idempotency_key property advertised in
// tools/list declares the bounds the server enforces (before, an empty key
// passed a client's validator and was refused by the server).
func testKeyAdvertisedBounds(t *testing.T, h Harness) {
	var runs counter
	r := start(t, h, setup{transport: InProcess, tools: []Tool{refundTool(&runs),
		{Name: "typed", Schema: map[string]any{"type": "object", "properties": map[string]any{"a": map[string]any{"type": "string"}}},
			Run: func(context.Context, map[string]any) (Result, error) { return Result{Text: []string{"ok"}}, nil }}}})
	c := r.connect(ClientConfig{Protocol: LegacyProtocol})
	tools, err := c.ListTools(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, tl := range tools {
		schema, _ := tl["inputSchema"].(map[string]any)
		props, _ := schema["properties"].(map[string]any)
		prop, ok := props[sc.KeyArgument]
		if !ok {
			t.Errorf("%v does not advertise the key", tl["name"])
			continue
		}
		seen++
		checkKeySchema(t, fmt.Sprint(tl["name"]), prop)
	}
	if seen != 2 {
		t.Fatalf("%d tools advertise the key, want 2", seen)
	}
}

// testRetryHint: the in-progress answer's retry_after_ms says how long the
// first call is expected to take still (the tool's recent successful
// calls, minus what the first call has run), not the lease it holds
// (119,500 ms for a call that takes 3 s, so an obedient agent waited two
// minutes). Without history it is the documented default.
func testRetryHint(t *testing.T, h Harness) {
	var (
		mu      sync.Mutex
		hold    bool
		started = make(chan struct{}, 1)
		release = make(chan struct{})
	)
	tool := Tool{Name: "export", Run: func(ctx context.Context, args map[string]any) (Result, error) {
		mu.Lock()
		held := hold
		mu.Unlock()
		if held {
			started <- struct{}{}
			<-release
		}
		return Result{Text: []string{"exported"}}, nil
	}}
	r := start(t, h, setup{transport: HTTP, bearer: true, tools: []Tool{tool}}) // the default 2-minute lease
	c := r.connect(ClientConfig{Token: "token-alice", Protocol: LegacyProtocol})
	hint := func(n int) float64 {
		t.Helper()
		mu.Lock()
		hold = true
		mu.Unlock()
		first := make(chan map[string]any, 1)
		go func() { first <- call(t, c, "export", map[string]any{"n": n}, nil) }()
		<-started
		dup := call(t, c, "export", map[string]any{"n": n}, nil)
		mu.Lock()
		hold = false
		mu.Unlock()
		release <- struct{}{}
		if res := <-first; isError(res) {
			t.Fatalf("first %v", res)
		}
		m := marker(dup, sc.RefusalMetaKey)
		if m["reason"] != "in_progress" {
			t.Fatalf("duplicate %v", dup)
		}
		ms, _ := m["retry_after_ms"].(float64)
		return ms
	}
	if got := hint(1); got != 2000 {
		t.Errorf("no successful call yet: retry_after_ms = %v, want the default 2000", got)
	}
	for i := range 10 {
		call(t, c, "export", map[string]any{"quick": i}, nil)
	}
	if got := hint(2); got < 250 || got >= 60000 {
		t.Errorf("after quick calls: retry_after_ms = %v, want their duration left (at least 250), not the lease", got)
	}
}

// testUnencodableResult: a tool whose result cannot be encoded (a NaN in
// structuredContent) after its side effect ran is recorded as done, like a
// result too large to keep. Before, the claim was released
// (idemkit.finish.error=unencodable), the caller got a transport error, and
// an immediate retry refunded again. Now the first caller gets a readable
// isError answer and every retry is answered response_not_kept; the side
// effect runs once.
func testUnencodableResult(t *testing.T, h Harness) {
	var runs counter
	tool := Tool{Name: "refund", Run: func(ctx context.Context, args map[string]any) (Result, error) {
		n := runs.inc()
		instrument.RecordWrite(ctx, fmt.Sprintf("re_%d", n))
		return Result{Text: []string{"refunded"}, Structured: map[string]any{"ratio": math.NaN()}}, nil
	}}
	r := start(t, h, setup{transport: HTTP, bearer: true, tools: []Tool{tool}})
	c := r.connect(ClientConfig{Token: "token-alice", Protocol: LegacyProtocol})
	args := map[string]any{"order_id": "o-1", "amount_cents": 100}
	// Without an answer the go-sdk's client would wait forever.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := c.CallTool(ctx, "refund", args, nil)
	if err != nil {
		t.Fatalf("the first caller got no answer: %v", err)
	}
	if m := marker(res, sc.RefusalMetaKey); !isError(res) || m["reason"] != sc.RefusalResponseNotKept ||
		!strings.Contains(text(res), "its work is done") || !strings.Contains(text(res), "could not be encoded") {
		t.Errorf("first answer %v (%q)", m, text(res))
	}
	for range 3 {
		res := call(t, c, "refund", args, nil)
		if m := marker(res, sc.RefusalMetaKey); !isError(res) || m["reason"] != sc.RefusalResponseNotKept ||
			!strings.Contains(text(res), "Do not call it again") {
			t.Errorf("retry %v (%q)", m, text(res))
		}
	}
	if n := runs.get(); n != 1 {
		t.Fatalf("the refund ran %d times, want once", n)
	}
	spans := r.waitSpans("tools/call refund", 4)
	if d := hasAttrs(spans[0], map[string]any{sc.Outcome: "executed", sc.FinishError: sc.FinishUnencodable, sc.WriteID: "re_1", sc.RefusalReason: absent}); d != "" {
		t.Errorf("first span: %s", d)
	}
	if d := hasAttrs(spans[1], map[string]any{sc.Outcome: "replayed", sc.RefusalReason: sc.RefusalResponseNotKept}); d != "" {
		t.Errorf("retry span: %s", d)
	}
}
