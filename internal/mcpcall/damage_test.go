package mcpcall

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/idemkit-mcp/idemkit/idemkit"
	"github.com/idemkit-mcp/idemkit/idemkit/sqlitestore"
	sc "github.com/idemkit-mcp/idemkit/spancontract"
)

// A duplicate whose stored record was damaged (an overwritten body, a body
// stored apart that was deleted) is refused as result_unreadable: the call
// already ran, its answer cannot be read. Never the wrong bytes, never
// "nothing was done" (store_unavailable), never a second run.
func TestCallTool_DamagedRecordIsRefusedAsAlreadyRun(t *testing.T) {
	large := `{"content":[{"type":"text","text":"` + strings.Repeat("refunded ", 10<<10) + `"}]}`
	for _, tc := range []struct {
		name, result, damage string
	}{
		{"InlineBodyOverwritten", refundResult, `UPDATE idemkit_claims SET response = CAST('{"content":[{"type":"text","text":"Refunded o-2"}]}' AS BLOB)`},
		{"ExternalBodyDeleted", large, `DELETE FROM idemkit_responses`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store, err := sqlitestore.Open(context.Background(), ":memory:", nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { store.Close() })
			var guardLog bytes.Buffer
			r := newRig(t, rigConfig{store: store, guard: &idemkit.Config{Logger: slog.New(slog.NewTextHandler(&syncWriter{w: &guardLog}, nil))},
				cfg: withSubject(subjectAlice)})
			tool := r.tool("refund", ToolInfo{}, tc.result)
			if res := result(t, r.call("refund", `{"order_id":"o-1"}`, nil)); isError(res) {
				t.Fatalf("first call: %v", res)
			}
			if _, err := store.DB().Exec(tc.damage); err != nil {
				t.Fatal(err)
			}
			for i := range 2 {
				res := result(t, r.call("refund", `{"order_id":"o-1"}`, nil))
				reason := metaOf(res, sc.RefusalMetaKey)["reason"]
				if !isError(res) || reason != sc.RefusalResultUnreadable {
					b, _ := json.Marshal(res)
					t.Fatalf("duplicate %d of a damaged record: %.300s; want an isError answer, reason result_unreadable", i, b)
				}
				if txt := text(res); !strings.Contains(txt, "already ran") || strings.Contains(strings.ToLower(txt), "nothing was done") {
					t.Fatalf("refusal text %q: want that the call already ran, never that nothing was done", txt)
				}
			}
			if n := tool.count(); n != 1 {
				t.Fatalf("the tool ran %d times, want 1", n)
			}
			a := r.last()
			if a[sc.RefusalReason] != sc.RefusalResultUnreadable || a[sc.Outcome] != sc.OutcomeReplayed {
				t.Errorf("span: refusal %v outcome %v, want result_unreadable and replayed (suppressed, not leaked)", a[sc.RefusalReason], a[sc.Outcome])
			}
			spans := r.spans("tools/call refund")
			if ev := eventText(spans[len(spans)-1]); !strings.Contains(ev, "damaged") {
				t.Errorf("the refused call's span events %q do not say the record is damaged", ev)
			}
			if !strings.Contains(guardLog.String(), "damaged") || !strings.Contains(guardLog.String(), "idemkit.key.hash=") {
				t.Errorf("the Guard logged %q, want a line per damaged record with its key hash", guardLog.String())
			}
		})
	}
}
