package mcpcall

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit-mcp/idemkit/idemkit"
	"github.com/idemkit-mcp/idemkit/idemkit/idemstore"
	"github.com/idemkit-mcp/idemkit/spancontract"
)

// statusRig is an Instrumenter serving the call status tool, on a Guard
// whose clock the test moves, with the caller "alice" (or none).
type statusRig struct {
	in    *Instrumenter
	store idemstore.Store
	now   atomic.Int64
}

func newStatusRig(t *testing.T, store idemstore.Store) *statusRig {
	t.Helper()
	r := &statusRig{store: store}
	r.now.Store(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC).UnixNano())
	g, err := idemkit.NewGuard(store, &idemkit.Config{Now: func() time.Time { return time.Unix(0, r.now.Load()).UTC() }, Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.CallStatusTool = DefaultCallStatusTool
	cfg.Subject = func(ctx context.Context) string { s, _ := ctx.Value(subjectCtx{}).(string); return s }
	r.in = New(g, cfg)
	return r
}

type subjectCtx struct{}

func (r *statusRig) advance(d time.Duration) { r.now.Add(int64(d)) }

func (r *statusRig) clock() time.Time { return time.Unix(0, r.now.Load()).UTC() }

// ask answers a call status request of subject (none when "") and returns
// the decoded answer.
func (r *statusRig) ask(t *testing.T, subject, args string) map[string]any {
	t.Helper()
	ctx := context.WithValue(context.Background(), subjectCtx{}, subject)
	_, op := r.in.Start(ctx, &Request{Method: "tools/call", Target: DefaultCallStatusTool, Transport: Transport{Network: "tcp"}})
	defer op.End(Response{})
	res := CallStatus(op, RawCodec{}, json.RawMessage(args), func(string) (ToolInfo, bool) { return ToolInfo{}, true })
	var m map[string]any
	if err := json.Unmarshal(res, &m); err != nil {
		t.Fatalf("%s: %v", res, err)
	}
	return m
}

func statusOf(m map[string]any) map[string]any {
	meta, _ := m["_meta"].(map[string]any)
	s, _ := meta[CallStatusMetaKey].(map[string]any)
	return s
}

func textOf(m map[string]any) string {
	c, _ := m["content"].([]any)
	if len(c) == 0 {
		return ""
	}
	first, _ := c[0].(map[string]any)
	s, _ := first["text"].(string)
	return s
}

// claim makes alice's record of a call of tool with args in progress, as a
// worker that then stops would leave it.
func (r *statusRig) claim(t *testing.T, tool, args string) {
	t.Helper()
	k, err := idemkit.NewKey("alice", tool, []byte(args), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.store.Claim(context.Background(), idemstore.ClaimRequest{Key: k.ID(), Tool: tool, Token: 7, Lease: time.Minute, Window: 10 * time.Minute, Now: r.clock()}); err != nil {
		t.Fatal(err)
	}
}

// TestCallStatus_InProgressThenAbandoned: a running call is reported in
// progress with a wait hint that grows with its run and never passes its
// lease; once the lease has run out without a heartbeat, abandoned, with
// what to check before calling again. Asking changes nothing.
func TestCallStatus_InProgressThenAbandoned(t *testing.T) {
	r := newStatusRig(t, &idemkit.MemoryStore{})
	r.claim(t, "export", `{"what":"orders"}`)
	q := `{"tool":"export","arguments":{"what":"orders"}}`

	s := statusOf(r.ask(t, "alice", q))
	if s["state"] != CallInProgress || s["retry_after_ms"] != float64(1000) || s["lease_expires_in_ms"] != float64(60000) || s["attempt"] != float64(1) {
		t.Errorf("just started: %v", s)
	}
	r.advance(40 * time.Second)
	m := r.ask(t, "alice", q)
	s = statusOf(m)
	if s["state"] != CallInProgress || s["retry_after_ms"] != float64(10000) || s["lease_expires_in_ms"] != float64(20000) {
		t.Errorf("after 40s: %v, want a 10s hint and 20s of lease", s)
	}
	if txt := textOf(m); !strings.Contains(txt, "started 40s ago") || !strings.Contains(txt, "in about 10s") || !strings.Contains(txt, "runs out in 20s") {
		t.Errorf("after 40s: %q", txt)
	}
	r.advance(15 * time.Second)
	if s := statusOf(r.ask(t, "alice", q)); s["retry_after_ms"] != float64(5000) {
		t.Errorf("5s of lease left: hint %v, want 5s (never past the lease)", s["retry_after_ms"])
	}
	r.advance(10 * time.Second)
	m = r.ask(t, "alice", q)
	if s := statusOf(m); s["state"] != CallAbandoned || !strings.Contains(textOf(m), "check its effect") {
		t.Errorf("past the lease: %v", m)
	}
	// Still abandoned: asking released nothing and took nothing over.
	k, _ := idemkit.NewKey("alice", "export", []byte(`{"what":"orders"}`), nil)
	rec, err := r.in.Guard().Lookup(context.Background(), k)
	if err != nil || rec.State != idemstore.StateInProgress || rec.Attempt != 1 {
		t.Errorf("the record after asking: %+v, %v", rec, err)
	}
	// Another caller sees nothing of it.
	if s := statusOf(r.ask(t, "bob", q)); s["state"] != CallUnknown {
		t.Errorf("bob: %v", s)
	}
}

// failingLookup is a store whose Lookup fails as an unreachable database.
type failingLookup struct{ idemkit.MemoryStore }

func (*failingLookup) Lookup(context.Context, idemstore.LookupRequest) (idemstore.Record, error) {
	return idemstore.Record{}, errors.New("connection refused")
}

func TestCallStatus_RefusesWhatItCannotAnswer(t *testing.T) {
	r := newStatusRig(t, &failingLookup{})
	q := `{"tool":"export","arguments":{"what":"orders"}}`
	if m := r.ask(t, "alice", q); m["isError"] != true || statusOf(m)["state"] != "store_unavailable" || !strings.Contains(textOf(m), "Nothing was done") {
		t.Errorf("store down: %v", m)
	}
	if m := r.ask(t, "", q); m["isError"] != true || statusOf(m)["state"] != "unscoped" {
		t.Errorf("no caller: %v", m)
	}
	for _, bad := range []string{`[]`, `{"tool":""}`, `{"tool":"export"}`, `{"tool":"export","arguments":[1]}`, `{"tool":"export","key":3}`} {
		if m := r.ask(t, "alice", bad); m["isError"] != true || statusOf(m)["state"] != "rejected" {
			t.Errorf("%s: %v", bad, m)
		}
	}
	if m := r.ask(t, "alice", `{"tool":"idemkit_call_status","arguments":{}}`); statusOf(m)["state"] != CallNotRecorded {
		t.Errorf("itself: %v", m)
	}
}

// TestCallStatus_AResultTooLargeToKeep is answered as its duplicates are:
// done, not to be run again.
func TestCallStatus_AResultTooLargeToKeep(t *testing.T) {
	store := &idemkit.MemoryStore{}
	r := newStatusRig(t, store)
	k, _ := idemkit.NewKey("alice", "export", []byte(`{}`), nil)
	if _, err := store.Claim(context.Background(), idemstore.ClaimRequest{Key: k.ID(), Tool: "export", Token: 1, Lease: time.Minute, Window: time.Hour, Now: r.clock()}); err != nil {
		t.Fatal(err)
	}
	if err := store.Finish(context.Background(), idemstore.FinishRequest{Key: k.ID(), Token: 1, Succeeded: true, Storage: idemstore.StorageDropped, Size: 1 << 30, Now: r.clock()}); err != nil {
		t.Fatal(err)
	}
	m := r.ask(t, "alice", `{"tool":"export","arguments":{}}`)
	meta, _ := m["_meta"].(map[string]any)
	refusal, _ := meta[spancontract.RefusalMetaKey].(map[string]any)
	if refusal["reason"] != "response_not_kept" || statusOf(m)["state"] != CallCompleted || !strings.Contains(textOf(m), "Do not call it again") {
		t.Errorf("%v", m)
	}
}

func TestPollHint(t *testing.T) {
	for _, c := range []struct{ ran, left, want time.Duration }{
		{0, time.Minute, time.Second},
		{40 * time.Second, time.Minute, 10 * time.Second},
		{time.Hour, time.Hour, 30 * time.Second},
		{time.Hour, 3 * time.Second, 3 * time.Second},
		{time.Hour, 0, 0},
	} {
		if got := pollHint(c.ran, c.left); got != c.want {
			t.Errorf("pollHint(%s, %s) = %s, want %s", c.ran, c.left, got, c.want)
		}
	}
}
