package adaptertest

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/idemkit-mcp/idemkit/idemkit"
	"github.com/idemkit-mcp/idemkit/instrument"
	sc "github.com/idemkit-mcp/idemkit/spancontract"
)

// Per-tool policies: a tool that requires an explicit key refuses a call
// without one (missing_key) and runs nothing; a tool version in the key
// keeps a changed tool from replaying the old version's answer; a poison
// call stops being retried after MaxAttempts failed attempts.
func testPolicies(t *testing.T, h Harness) {
	var transfers, refunds, flaky counter
	transfer := Tool{Name: "transfer", Run: func(ctx context.Context, args map[string]any) (Result, error) {
		return Result{Text: []string{fmt.Sprintf("transferred (run %d)", transfers.inc())}}, nil
	}}
	refund := Tool{Name: "refund", Run: func(ctx context.Context, args map[string]any) (Result, error) {
		return Result{Text: []string{fmt.Sprintf("refunded (run %d)", refunds.inc())}}, nil
	}}
	broken := Tool{Name: "import", Run: func(ctx context.Context, args map[string]any) (Result, error) {
		flaky.inc()
		return Result{}, errors.New("out of memory")
	}}
	store := &idemkit.MemoryStore{}
	guardCfg := &idemkit.Config{Tools: map[string]idemkit.ToolConfig{"import": {MaxAttempts: 2}}}
	r := start(t, h, setup{transport: HTTP, bearer: true, store: store, guardCfg: guardCfg, tools: []Tool{transfer, refund, broken},
		opts: []instrument.Option{instrument.WithRequireKey("transfer"), instrument.WithToolVersion("refund", "v1")}})
	c := r.connect(ClientConfig{Token: "token-alice", Protocol: LegacyProtocol})

	args := map[string]any{"to": "bob", "cents": 100}
	refused := call(t, c, "transfer", args, nil)
	if m := marker(refused, sc.RefusalMetaKey); !isError(refused) || m["reason"] != sc.RefusalMissingKey || transfers.get() != 0 {
		t.Fatalf("a call without the required key: %v, %d runs; want the missing_key refusal and nothing run", refused, transfers.get())
	}
	withKey := func(k string) map[string]any {
		return map[string]any{"to": "bob", "cents": 100, "idempotency_key": k}
	}
	if res := call(t, c, "transfer", withKey("req-1"), nil); text(res) != "transferred (run 1)" {
		t.Fatalf("with a key: %v", res)
	}
	if rep := call(t, c, "transfer", withKey("req-1"), nil); marker(rep, sc.ReplayMetaKey) == nil || transfers.get() != 1 {
		t.Fatalf("the same key again: %v, want the replay", rep)
	}
	if res := call(t, c, "transfer", withKey("req-2"), nil); text(res) != "transferred (run 2)" {
		t.Fatalf("the user's second, deliberate transfer with a new key: %v, want it run", res)
	}

	// The tool changes (v2), on a server sharing the store: the same call
	// runs again instead of replaying what v1 stored.
	if res := call(t, c, "refund", map[string]any{"order_id": "o-1"}, nil); text(res) != "refunded (run 1)" {
		t.Fatalf("v1: %v", res)
	}
	r2 := start(t, h, setup{transport: HTTP, bearer: true, store: store, guardCfg: guardCfg, tools: []Tool{refund},
		opts: []instrument.Option{instrument.WithToolVersion("refund", "v2")}})
	c2 := r2.connect(ClientConfig{Token: "token-alice", Protocol: LegacyProtocol})
	if res := call(t, c2, "refund", map[string]any{"order_id": "o-1"}, nil); text(res) != "refunded (run 2)" || marker(res, sc.ReplayMetaKey) != nil {
		t.Fatalf("v2, the same call: %v; want it run, not v1's answer replayed", res)
	}
	if rep := call(t, c, "refund", map[string]any{"order_id": "o-1"}, nil); text(rep) != "refunded (run 1)" || marker(rep, sc.ReplayMetaKey) == nil {
		t.Fatalf("v1 again: %v, want v1's own replay", rep)
	}

	// A poison call: two failed attempts, then no more runs.
	for i := range 2 {
		if _, err := c.CallTool(context.Background(), "import", map[string]any{"file": "huge.csv"}, nil); err == nil {
			t.Fatalf("failing attempt %d succeeded", i+1)
		}
	}
	stopped := call(t, c, "import", map[string]any{"file": "huge.csv"}, nil)
	if m := marker(stopped, sc.RefusalMetaKey); !isError(stopped) || m["reason"] != sc.RefusalAttemptsExhausted || flaky.get() != 2 {
		t.Fatalf("the third call of a call that failed twice: %v, %d runs; want attempts_exhausted and nothing run", stopped, flaky.get())
	}
	if d := hasAttrs(last(r.waitSpans("tools/call import", 3)), map[string]any{sc.RefusalReason: sc.RefusalAttemptsExhausted, sc.Outcome: absent}); d != "" {
		t.Errorf("the refused call's span: %s", d)
	}
}
