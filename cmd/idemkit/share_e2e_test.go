package main

import (
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/idemkit-mcp/idemkit/cmd/idemkit/internal/tsfixture"
)

// TestShareUpstream_OneTypeScriptProcessPerCaller: with --share-upstream
// subject, the TypeScript client's sessions of one caller run in one
// TypeScript server process, another caller's in another; two sessions'
// calls at once (whose request IDs and progress tokens are alike) each get
// their own progress and answer; the process outlives a session that is
// ended.
func TestShareUpstream_OneTypeScriptProcessPerCaller(t *testing.T) {
	t.Parallel()
	log := filepath.Join(t.TempDir(), "executions.jsonl")
	gw := startGatewayEnv(t, []string{"FIXTURE_LOG=" + log}, append([]string{"--store", "memory", "--share-upstream", "subject", "--"}, stdioServer(t)...)...)
	c := tsfixture.StartClient(t)
	for _, conn := range [][2]string{{"a1", "alice"}, {"a2", "alice"}, {"b", "bob"}} {
		c.MustDo(map[string]any{"op": "connect", "conn": conn[0], "url": gw.URL, "token": conn[1]})
	}
	for _, conn := range []string{"a1", "a2", "b"} {
		decodeResult(t, call(c, conn, "issue_refund", map[string]any{"order_id": "o-" + conn, "amount_cents": 1}))
	}
	execs := tsfixture.Executions(t, log)
	if len(execs) != 3 {
		t.Fatalf("executions %+v, want 3", execs)
	}
	if execs[0].PID != execs[1].PID || execs[2].PID == execs[0].PID {
		t.Errorf("processes: alice's sessions %d and %d, bob's %d; want alice's shared, bob's apart", execs[0].PID, execs[1].PID, execs[2].PID)
	}
	// At once, from both of alice's sessions.
	var wg sync.WaitGroup
	answers := map[string]tsfixture.Answer{}
	var mu sync.Mutex
	for _, conn := range []string{"a1", "a2"} {
		wg.Go(func() {
			a := c.Do(map[string]any{"op": "call", "conn": conn, "tool": "export_report", "progress": true,
				"args": map[string]any{"name": "r-" + conn, "steps": 3, "step_ms": 100}})
			mu.Lock()
			answers[conn] = a
			mu.Unlock()
		})
	}
	wg.Wait()
	for conn, a := range answers {
		r := decodeResult(t, a)
		if len(a.Progress) != 3 || r.StructuredContent["report_id"] == nil {
			t.Errorf("%s: %d progress notifications, result %+v; want 3 and its own report", conn, len(a.Progress), r)
		}
	}
	if answers["a1"].Result != nil && string(answers["a1"].Result) == string(answers["a2"].Result) {
		t.Errorf("both sessions got the same answer: %s", answers["a1"].Result)
	}
	// One of alice's sessions ends; the other goes on in the same process.
	c.MustDo(map[string]any{"op": "close", "conn": "a1", "terminate": true})
	decodeResult(t, call(c, "a2", "issue_refund", map[string]any{"order_id": "o-after", "amount_cents": 1}))
	execs = tsfixture.Executions(t, log)
	if last := execs[len(execs)-1]; last.PID != execs[0].PID {
		t.Errorf("after a1 ended, a2's call ran in %d, want %d", last.PID, execs[0].PID)
	}
}

func TestShareUpstream_UsageErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"gateway", "--store", "memory", "--share-upstream", "pool", "--", "node"}, "--share-upstream must be session or subject"},
		{[]string{"gateway", "--store", "memory", "--share-upstream", "subject", "--upstream", "http://127.0.0.1:1/mcp"}, "needs a command after --"},
		{[]string{"gateway", "--store", "memory", "--share-upstream", "subject", "--stdio", "--", "node"}, "no --stdio"},
		{[]string{"gateway", "--store", "memory", "--share-upstream", "subject", "--subject-header", "-", "--", "node"}, "needs a subject header"},
	} {
		if code, _, errOut := runCLI(t, c.args...); code != exitUsage || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d, %q; want exit 2 and %q", c.args, code, errOut, c.want)
		}
	}
}
