package adaptertest

import (
	"encoding/json"
	"strings"
	"testing"

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
		m := marker(res, instrument.RefusalMetaKey)
		if !isError(res) || m["reason"] != sc.RefusalInvalidArguments || !strings.Contains(text(res), "nothing was done") ||
			!strings.Contains(text(res), "differ only in letter case") {
			t.Errorf("%s: %v (%q), want an invalid_arguments refusal saying what to fix", args, m, text(res))
		}
	}
	if n := runs.get(); n != 0 {
		t.Fatalf("the tool ran %d times on ambiguous arguments", n)
	}
	if _, ok := r.metrics()[instrument.MetricClaimDuration]; ok {
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
		if m := marker(res, instrument.RefusalMetaKey); !isError(res) || m["reason"] != sc.RefusalInvalidArguments {
			t.Errorf("amount_cents %s: %v (%q), want an invalid_arguments refusal", amount, m, text(res))
		}
	}
	if n := runs.get(); n != 0 {
		t.Fatalf("the tool ran %d times on non-integers", n)
	}
	for i, amount := range []string{"16", "16.0", "1.6e1"} {
		res := rawCall(t, r, c, "token-alice", "refund", `{"order_id":"o-1","amount_cents":`+amount+`}`)
		if isError(res) || (i > 0) != (marker(res, instrument.ReplayMetaKey) != nil) {
			t.Errorf("amount_cents %s: %v", amount, res)
		}
	}
	if n := runs.get(); n != 1 {
		t.Fatalf("the tool ran %d times, want once for 16 however spelled", n)
	}
}
