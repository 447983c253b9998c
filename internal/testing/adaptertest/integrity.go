package adaptertest

import (
	"context"
	"github.com/idemkit-mcp/idemkit/internal/hashkey"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemkit-mcp/idemkit/idemkit"
	"github.com/idemkit-mcp/idemkit/idemkit/sqlitestore"
	"github.com/idemkit-mcp/idemkit/instrument"
	sc "github.com/idemkit-mcp/idemkit/spancontract"
)

var testHashKey = []byte("replica-shared-hash-key-32-bytes")

// testHashKey: two replicas with the same instrument.WithHashKey export the
// same keyed hashes for the same call (so that the Collector groups them),
// none of which is the plain SHA-256 a dictionary recomputes; the session
// ID, in session scope the credential, is exported hashed.
func testHashKeyOnSpans(t *testing.T, h Harness) {
	args := map[string]any{"order_id": "ord_1012", "amount_cents": 250}
	replica := func(opts ...instrument.Option) (map[string]any, string) {
		r := start(t, h, setup{transport: HTTP, bearer: true, tools: []Tool{refundTool(&counter{})}, opts: opts})
		c := r.connect(ClientConfig{Token: "token-alice", Protocol: LegacyProtocol})
		call(t, c, "refund", args, nil)
		return attrs(r.waitSpans("tools/call refund", 1)[0]), c.SessionID()
	}
	a, sidA := replica(instrument.WithHashKey(testHashKey))
	b, _ := replica(instrument.WithHashKey(testHashKey))
	plain, sidPlain := replica()
	for _, name := range []string{sc.ArgsHash, sc.KeyHash, sc.SubjectHash} {
		if a[name] == nil || a[name] != b[name] {
			t.Errorf("%s: %v and %v on two replicas with one key; want one value", name, a[name], b[name])
		}
		if a[name] == plain[name] {
			t.Errorf("%s = %v with a key, the same as without", name, a[name])
		}
	}
	k, err := idemkit.NewKey("x", "refund", []byte(`{"amount_cents":250,"order_id":"ord_1012"}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	if plain[sc.ArgsHash] != k.ArgsHash()[:sc.HashLen] || a[sc.ArgsHash] != hashkey.New(testHashKey).ArgsHash(k.ArgsHash()) {
		t.Errorf("args hash %v unkeyed (want %s), %v keyed", plain[sc.ArgsHash], k.ArgsHash()[:sc.HashLen], a[sc.ArgsHash])
	}
	for _, tc := range []struct {
		sid   string
		attrs map[string]any
	}{{sidA, a}, {sidPlain, plain}} {
		if tc.sid == "" {
			t.Fatal("the client has no session ID: the test needs a session")
		}
		if got, _ := tc.attrs[sc.MCPSessionID].(string); got == "" || got == tc.sid || strings.Contains(got, tc.sid) {
			t.Errorf("mcp.session.id = %q for the session %q: want its hash, never the ID", got, tc.sid)
		}
	}
}

// testDamagedRecord: a stored result overwritten behind the store's back
// is never replayed (its bytes may be another call's) and never run again
// (the refund happened): the duplicate gets result_unreadable, whose text
// says the call already ran.
func testDamagedRecord(t *testing.T, h Harness) {
	store, err := sqlitestore.Open(context.Background(), filepath.Join(t.TempDir(), "idemkit.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	var runs counter
	r := start(t, h, setup{transport: InProcess, store: store, tools: []Tool{refundTool(&runs)}})
	c := r.connect(ClientConfig{Protocol: LegacyProtocol})
	args := map[string]any{"order_id": "ord_1012", "amount_cents": 250}
	if res := call(t, c, "refund", args, nil); isError(res) {
		t.Fatalf("first call: %v", res)
	}
	// Another refund's answer, of the same shape, pasted over this one's.
	if _, err := store.DB().Exec(`UPDATE idemkit_claims SET response = CAST(replace(CAST(response AS TEXT), 'ord_1012', 'ord_1013') AS BLOB)`); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		res := call(t, c, "refund", args, nil)
		if !isError(res) || marker(res, sc.RefusalMetaKey)["reason"] != sc.RefusalResultUnreadable {
			t.Fatalf("duplicate %d of a damaged record: %v; want reason result_unreadable", i, res)
		}
		if txt := text(res); !strings.Contains(txt, "already ran") || strings.Contains(strings.ToLower(txt), "nothing was done") || strings.Contains(txt, "ord_1013") {
			t.Fatalf("refusal text %q", txt)
		}
	}
	if runs.get() != 1 {
		t.Fatalf("the refund ran %d times, want 1", runs.get())
	}
	spans := r.waitSpans("tools/call refund", 3)
	if a := attrs(spans[2]); a[sc.RefusalReason] != sc.RefusalResultUnreadable || a[sc.Outcome] != sc.OutcomeReplayed {
		t.Errorf("span of the refused duplicate: %v", a)
	}
}

// exportedSessionID is the mcp.session.id the instrumentation exports for
// the session ID id without a hash key: its hash.
func exportedSessionID(id string) string { return hashkey.Hasher{}.SessionHash(id) }
