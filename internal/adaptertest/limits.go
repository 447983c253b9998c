package adaptertest

import (
	"strings"
	"testing"

	"github.com/idemkit-mcp/idemkit/idemkit"
	"github.com/idemkit-mcp/idemkit/instrument"
	sc "github.com/idemkit-mcp/idemkit/spancontract"
)

// The limits every front end enforces, and the refusals a client reads
// beyond them.

// testStoreFull: a memory store at its record limit, none expired, refuses
// a new call with store_full (nothing runs, a later retry may pass) and
// still replays the calls it holds.
func testStoreFull(t *testing.T, h Harness) {
	var runs counter
	r := start(t, h, setup{transport: InProcess, store: &idemkit.MemoryStore{MaxRecords: 2}, tools: []Tool{refundTool(&runs)}})
	c := r.connect(ClientConfig{Protocol: LegacyProtocol})
	for _, o := range []string{"o-1", "o-2"} {
		if res := call(t, c, "refund", map[string]any{"order_id": o}, nil); isError(res) {
			t.Fatalf("%s: %v", o, res)
		}
	}
	res := call(t, c, "refund", map[string]any{"order_id": "o-3"}, nil)
	m := marker(res, instrument.RefusalMetaKey)
	if !isError(res) || m["reason"] != sc.RefusalStoreFull || runs.get() != 2 {
		t.Fatalf("a third order on a store of 2 records: %v (runs %d), want a store_full refusal and no run", res, runs.get())
	}
	if ms, _ := m["retry_after_ms"].(float64); ms <= 0 {
		t.Errorf("the refusal's marker %v has no retry_after_ms", m)
	}
	if txt := text(res); !strings.Contains(txt, "Nothing was done") || !strings.Contains(txt, "at capacity") || !strings.Contains(txt, "later") {
		t.Errorf("refusal text %q: want it to say nothing was done, the server is at capacity, retry later", txt)
	}
	if again := call(t, c, "refund", map[string]any{"order_id": "o-1"}, nil); isError(again) || marker(again, instrument.ReplayMetaKey) == nil {
		t.Errorf("a duplicate of a stored call on a full store: %v, want its replay", again)
	}
	spans := r.waitSpans("tools/call refund", 4)
	if a := attrs(spans[2]); a[sc.RefusalReason] != sc.RefusalStoreFull || a[sc.Outcome] != nil {
		t.Errorf("the refused call's span: %v", a)
	}
}
