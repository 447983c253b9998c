package adaptertest

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit-mcp/idemkit/idemkit"
	"github.com/idemkit-mcp/idemkit/instrument"
	sc "github.com/idemkit-mcp/idemkit/spancontract"
)

// Key fields: a nested field excluded by JSON Pointer (and every array
// element's, with "*") and a timestamp rounded to a minute make retries
// that differ only there replays, while a change to a sibling, or a
// timestamp in the next minute, is a new request; a timestamp that is not
// RFC 3339 is refused with nothing run; and an invalid pointer is logged
// when the server is built and refuses the tool's calls (misconfigured).
func testKeyFields(t *testing.T, h Harness) {
	var runs counter
	var (
		mu   sync.Mutex
		seen []string // sent_at as the handler saw it; mu protects it
	)
	refund := Tool{Name: "refund", Run: func(ctx context.Context, args map[string]any) (Result, error) {
		n := runs.inc()
		mu.Lock()
		seen = append(seen, fmt.Sprint(args["sent_at"]))
		mu.Unlock()
		return Result{Text: []string{fmt.Sprintf("refunded (run %d)", n)}}, nil
	}}
	var cancels counter
	cancel := Tool{Name: "cancel", Run: func(ctx context.Context, args map[string]any) (Result, error) {
		cancels.inc()
		return Result{Text: []string{"cancelled"}}, nil
	}}
	r := start(t, h, setup{transport: HTTP, bearer: true, store: &idemkit.MemoryStore{}, tools: []Tool{refund, cancel},
		opts: []instrument.Option{
			instrument.WithExclude("refund", "/order/requested_at", "/items/*/nonce"),
			instrument.WithRound("refund", "/sent_at", time.Minute),
			instrument.WithExclude("cancel", "/order/~2"),
		}})
	c := r.connect(ClientConfig{Token: "token-alice", Protocol: LegacyProtocol})

	args := func(order, requestedAt, nonce string, sentAt any) map[string]any {
		return map[string]any{
			"order":   map[string]any{"id": order, "requested_at": requestedAt},
			"items":   []any{map[string]any{"sku": "a", "nonce": nonce}, map[string]any{"sku": "b", "nonce": nonce + "'"}},
			"sent_at": sentAt,
		}
	}
	if res := call(t, c, "refund", args("o-1", "2026-12-02T10:00:01Z", "n1", "2026-12-02T10:00:05Z"), nil); text(res) != "refunded (run 1)" {
		t.Fatalf("the first call: %v", res)
	}
	// A retry: another requested_at and nonces, sent_at in the same UTC
	// minute written with an offset.
	rep := call(t, c, "refund", args("o-1", "2026-12-02T10:04:00Z", "n2", "2026-12-02T11:00:59.9+01:00"), nil)
	if text(rep) != "refunded (run 1)" || marker(rep, sc.ReplayMetaKey) == nil || runs.get() != 1 {
		t.Fatalf("a retry differing only in excluded and rounded fields: %v, %d runs; want the first answer replayed", rep, runs.get())
	}
	// A sibling of the excluded field differs: another refund.
	if res := call(t, c, "refund", args("o-2", "2026-12-02T10:00:01Z", "n1", "2026-12-02T10:00:05Z"), nil); text(res) != "refunded (run 2)" {
		t.Fatalf("another order: %v, want it run", res)
	}
	// The next minute: a new request (truncation has boundaries).
	if res := call(t, c, "refund", args("o-1", "2026-12-02T10:00:01Z", "n1", "2026-12-02T10:01:00Z"), nil); text(res) != "refunded (run 3)" {
		t.Fatalf("sent_at in the next minute: %v, want it run", res)
	}
	// Not a timestamp: refused, nothing run.
	bad := call(t, c, "refund", args("o-1", "2026-12-02T10:00:01Z", "n1", 1764669605), nil)
	if m := marker(bad, sc.RefusalMetaKey); !isError(bad) || m["reason"] != sc.RefusalInvalidArguments ||
		!strings.Contains(text(bad), "/sent_at") || !strings.Contains(text(bad), "RFC 3339") || runs.get() != 3 {
		t.Fatalf("an epoch number in a rounded field: %v, %d runs; want invalid_arguments naming /sent_at and nothing run", bad, runs.get())
	}
	if d := hasAttrs(last(r.waitSpans("tools/call refund", 5)), map[string]any{sc.RefusalReason: sc.RefusalInvalidArguments, sc.Outcome: absent}); d != "" {
		t.Errorf("the refused call's span: %s", d)
	}
	// The handler saw sent_at as sent, not rounded.
	mu.Lock()
	got := strings.Join(seen, ",")
	mu.Unlock()
	if got != "2026-12-02T10:00:05Z,2026-12-02T10:00:05Z,2026-12-02T10:01:00Z" {
		t.Errorf("the handler saw sent_at %s", got)
	}

	// An invalid pointer: logged at setup, the tool's calls refused.
	if log := r.log.String(); !strings.Contains(log, "key policy") || !strings.Contains(log, "cancel") {
		t.Errorf("the invalid pointer was not logged when the server was built:\n%s", log)
	}
	res := call(t, c, "cancel", map[string]any{"order": map[string]any{"id": "o-1"}}, nil)
	if m := marker(res, sc.RefusalMetaKey); !isError(res) || m["reason"] != sc.RefusalMisconfigured || cancels.get() != 0 {
		t.Fatalf("a call of a tool whose key policy is invalid: %v, %d runs; want misconfigured and nothing run", res, cancels.get())
	}
}
