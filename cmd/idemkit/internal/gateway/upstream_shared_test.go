package gateway

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
)

// newSharedGatewayServer serves a Gateway in front of the test binary's
// stdio server, one process per subject.
func newSharedGatewayServer(t *testing.T, cfg Config) (*Gateway, string, func() int) {
	t.Helper()
	base, alive := stdioUpstream(t)
	cfg.Upstream = NewSharedStdioUpstream(base)
	g, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return g, serveGateway(t, g), alive
}

// pidOf returns the upstream process that answered a refund ("… by PID").
func pidOf(t *testing.T, r map[string]any) string {
	t.Helper()
	_, pid, ok := strings.Cut(resultText(r), " by ")
	if !ok {
		t.Fatalf("no process in %v", r)
	}
	return pid
}

// TestSharedStdioUpstream_OneProcessPerSubject: the sessions of one caller
// share one process, another caller gets its own; calls from two sessions
// of the process at once each get their own answer (their request IDs are
// rewritten apart); replays cross sessions as before; the process outlives
// a session that ends and ends with the last one.
func TestSharedStdioUpstream_OneProcessPerSubject(t *testing.T) {
	_, url, alive := newSharedGatewayServer(t, Config{Guard: newGuard(t)})
	client := func(tok string) *rawClient {
		c := newRawClient(t, url, http.Header{"Authorization": {"Bearer " + tok}})
		c.mustInitialize()
		return c
	}
	a1, a2, b := client("alice"), client("alice"), client("bob")
	if n := alive(); n != 2 {
		t.Fatalf("%d upstream processes for two callers' three sessions, want 2", n)
	}
	pa := pidOf(t, a1.call("issue_refund", map[string]any{"order_id": "o-1"}).result(t))
	if got := pidOf(t, a2.call("issue_refund", map[string]any{"order_id": "o-2"}).result(t)); got != pa {
		t.Errorf("alice's second session ran in process %s, her first in %s", got, pa)
	}
	if got := pidOf(t, b.call("issue_refund", map[string]any{"order_id": "o-3"}).result(t)); got == pa {
		t.Errorf("bob's call ran in alice's process %s", pa)
	}
	// Both sessions number their requests alike (1, 2, …): at once, each
	// must get its own answer.
	var wg sync.WaitGroup
	errs := make(chan string, 40)
	for i := range 20 {
		for _, c := range []*rawClient{a1, a2} {
			order := fmt.Sprintf("c-%p-%d", c, i)
			wg.Go(func() {
				// A fresh raw client per call shares the session (its ID)
				// without sharing the request counter.
				cc := *c
				cc.next = i
				r := cc.call("issue_refund", map[string]any{"order_id": order}).result(t)
				if !strings.HasPrefix(resultText(r), "refund issued for "+order+" by ") {
					errs <- fmt.Sprintf("%s got %q", order, resultText(r))
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	// A duplicate on the other session is replayed.
	if r := a2.call("issue_refund", map[string]any{"order_id": "o-1"}).result(t); !replayed(r) {
		t.Errorf("alice's duplicate on her other session: %v", r)
	}
	// One session ends: the process stays for the other.
	if got := a1.send(http.MethodDelete, ""); got.status != http.StatusOK {
		t.Fatalf("DELETE: %d %s", got.status, got.body)
	}
	if got := pidOf(t, a2.call("issue_refund", map[string]any{"order_id": "o-4"}).result(t)); got != pa {
		t.Errorf("after her first session ended, alice's call ran in %s, want %s", got, pa)
	}
	if n := alive(); n != 2 {
		t.Errorf("%d processes after one of alice's sessions ended, want 2", n)
	}
	// The last one ends: so does the process; a new session starts anew.
	a2.send(http.MethodDelete, "")
	if !eventually(func() bool { return alive() == 1 }) {
		t.Errorf("%d processes after alice's last session ended, want 1", alive())
	}
	a3 := client("alice")
	if got := pidOf(t, a3.call("issue_refund", map[string]any{"order_id": "o-5"}).result(t)); got == pa {
		t.Errorf("a new session after the process ended ran in the old process %s", got)
	}
}

// TestSharedStdioUpstream_CapsCountProcesses: --max-upstreams bounds the
// processes (callers), --max-upstreams-per-subject one caller's sessions.
func TestSharedStdioUpstream_CapsCountProcesses(t *testing.T) {
	_, url, alive := newSharedGatewayServer(t, Config{Guard: newGuard(t), MaxUpstreams: 2, MaxUpstreamsPerSubject: 3})
	client := func(tok string) *rawClient {
		return newRawClient(t, url, http.Header{"Authorization": {"Bearer " + tok}})
	}
	for range 3 {
		client("alice").mustInitialize()
	}
	if got := client("alice").initialize(); got.status != http.StatusTooManyRequests || !hasText(got.body, "they share one server process") {
		t.Errorf("alice's fourth session: %d %s, want 429", got.status, got.body)
	}
	client("bob").mustInitialize()
	if got := client("carol").initialize(); got.status != http.StatusServiceUnavailable || !hasText(got.body, "--max-upstreams 2, one per caller") {
		t.Errorf("a third caller: %d %s, want 503", got.status, got.body)
	}
	if n := alive(); n != 2 {
		t.Errorf("%d processes, want 2", n)
	}
}

func TestSharedStdioUpstream_NeedsASubjectHeader(t *testing.T) {
	base, _ := stdioUpstream(t)
	if _, err := New(Config{Upstream: NewSharedStdioUpstream(base), SubjectHeader: "-"}); err == nil || !strings.Contains(err.Error(), "needs a SubjectHeader") {
		t.Errorf("New: %v", err)
	}
}
