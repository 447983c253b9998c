package main

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit-mcp/idemkit/cmd/idemkit/internal/tsfixture"
	"github.com/idemkit-mcp/idemkit/spancontract"
)

// replayMarker returns the result's replay marker, or nil.
func replayMarker(r toolResult) map[string]any {
	m, _ := r.Meta[spancontract.ReplayMetaKey].(map[string]any)
	return m
}

func countExecutions(t *testing.T, log, tool string) int {
	n := 0
	for _, e := range tsfixture.Executions(t, log) {
		if e.Tool == tool {
			n++
		}
	}
	return n
}

// upstreams runs a test against the TypeScript server over Streamable HTTP
// and over stdio, each behind a gateway started with extra flags.
func upstreams(t *testing.T, extra []string, test func(t *testing.T, gw *gatewayProc, log string)) {
	t.Run("http", func(t *testing.T) {
		srv := tsfixture.StartHTTPServer(t, tsfixture.ServerOptions{})
		gw := startGateway(t, append([]string{"--upstream", srv.URL}, extra...)...)
		test(t, gw, srv.Log)
	})
	t.Run("stdio", func(t *testing.T) {
		log := filepath.Join(t.TempDir(), "executions.jsonl")
		gw := startGatewayEnv(t, []string{"FIXTURE_LOG=" + log}, append(append(extra[:len(extra):len(extra)], "--"), stdioServer(t)...)...)
		test(t, gw, log)
	})
}

func TestProtect_DuplicateIsReplayedWithTheMarker(t *testing.T) {
	t.Parallel()
	upstreams(t, []string{"--store", "memory"}, func(t *testing.T, gw *gatewayProc, log string) {
		c := tsfixture.StartClient(t)
		c.MustDo(map[string]any{"op": "connect", "conn": "a", "url": gw.URL, "token": "alice"})
		args := map[string]any{"order_id": "o-1", "amount_cents": 500}
		first := decodeResult(t, call(c, "a", "issue_refund", args))
		second := decodeResult(t, call(c, "a", "issue_refund", args))
		if n := countExecutions(t, log, "issue_refund"); n != 1 {
			t.Fatalf("issue_refund ran %d times, want 1", n)
		}
		if replayMarker(first) != nil {
			t.Errorf("the first call carries a replay marker: %v", first.Meta)
		}
		m := replayMarker(second)
		if m["replayed"] != true || m["attempt"] != float64(1) {
			t.Errorf("the duplicate's replay marker: %v", second.Meta)
		}
		if second.text() != first.text() || second.StructuredContent["refund_id"] != first.StructuredContent["refund_id"] {
			t.Errorf("the replay differs: %+v vs %+v", second, first)
		}
		// A new session of the same caller (a reconnect) is caught too.
		c.MustDo(map[string]any{"op": "connect", "conn": "a2", "url": gw.URL, "token": "alice"})
		third := decodeResult(t, call(c, "a2", "issue_refund", args))
		if replayMarker(third) == nil || countExecutions(t, log, "issue_refund") != 1 {
			t.Errorf("a duplicate on a new session ran again: %+v", third)
		}
		// Read-only and idempotent tools are forwarded every time.
		decodeResult(t, call(c, "a", "set_status", map[string]any{"order_id": "o-1", "status": "x"}))
		r := decodeResult(t, call(c, "a", "set_status", map[string]any{"order_id": "o-1", "status": "x"}))
		if countExecutions(t, log, "set_status") != 2 || replayMarker(r) != nil {
			t.Errorf("an idempotent tool was protected: %d runs, %v", countExecutions(t, log, "set_status"), r.Meta)
		}
	})
}

func TestProtect_TenConcurrentIdenticalCallsRunOnce(t *testing.T) {
	t.Parallel()
	upstreams(t, []string{"--store", "memory"}, func(t *testing.T, gw *gatewayProc, log string) {
		c := tsfixture.StartClient(t)
		c.MustDo(map[string]any{"op": "connect", "conn": "a", "url": gw.URL, "token": "alice"})
		args := map[string]any{"order_id": "o-10", "amount_cents": 700, "delay_ms": 1500}
		answers := make([]toolResult, 10)
		var wg sync.WaitGroup
		for i := range answers {
			wg.Go(func() { answers[i] = decodeResult(t, call(c, "a", "issue_refund", args)) })
		}
		wg.Wait()
		if n := countExecutions(t, log, "issue_refund"); n != 1 {
			t.Fatalf("10 concurrent identical calls ran %d times, want 1", n)
		}
		executed, inProgress := 0, 0
		for _, a := range answers {
			switch {
			case !a.IsError && a.StructuredContent["refund_id"] != nil:
				executed++
			case a.IsError && strings.Contains(a.text(), "already in progress"):
				inProgress++
			default:
				t.Errorf("unexpected answer: %+v", a)
			}
		}
		if executed < 1 || executed+inProgress != 10 {
			t.Errorf("%d executed or replayed and %d in-progress answers, want 10 with at least one result", executed, inProgress)
		}
		// Once it finished, a duplicate gets its result.
		r := decodeResult(t, call(c, "a", "issue_refund", args))
		if replayMarker(r) == nil || countExecutions(t, log, "issue_refund") != 1 {
			t.Errorf("after the first finished: %+v", r)
		}
	})
}

func TestProtect_TwoBearerTokensNeverShareAResult(t *testing.T) {
	t.Parallel()
	upstreams(t, []string{"--store", "memory"}, func(t *testing.T, gw *gatewayProc, log string) {
		c := tsfixture.StartClient(t)
		c.MustDo(map[string]any{"op": "connect", "conn": "a", "url": gw.URL, "token": "alice"})
		c.MustDo(map[string]any{"op": "connect", "conn": "b", "url": gw.URL, "token": "bob"})
		args := map[string]any{"order_id": "o-2", "amount_cents": 900}
		ra := decodeResult(t, call(c, "a", "issue_refund", args))
		rb := decodeResult(t, call(c, "b", "issue_refund", args))
		if n := countExecutions(t, log, "issue_refund"); n != 2 {
			t.Fatalf("two callers' identical calls ran %d times, want 2 (one each)", n)
		}
		if replayMarker(rb) != nil || ra.StructuredContent["refund_id"] == rb.StructuredContent["refund_id"] {
			t.Errorf("bob got alice's result: %+v", rb)
		}
		// The same explicit key from two callers is two keys too.
		args = map[string]any{"order_id": "o-3", "amount_cents": 1, "idempotency_key": "shared-key-1"}
		ra = decodeResult(t, call(c, "a", "issue_refund", args))
		rb = decodeResult(t, call(c, "b", "issue_refund", args))
		if replayMarker(rb) != nil || ra.StructuredContent["refund_id"] == rb.StructuredContent["refund_id"] {
			t.Errorf("bob got alice's result for the same explicit key: %+v", rb)
		}
		ra2 := decodeResult(t, call(c, "a", "issue_refund", args))
		if replayMarker(ra2) == nil || ra2.StructuredContent["refund_id"] != ra.StructuredContent["refund_id"] {
			t.Errorf("alice's retry was not replayed her own result: %+v", ra2)
		}
		// The explicit key never reaches the server.
		for _, e := range tsfixture.Executions(t, log) {
			if _, ok := e.Args["idempotency_key"]; ok {
				t.Errorf("the server received idempotency_key: %+v", e)
			}
		}
	})
}

func TestProtect_ToolsListAdvertisesTheKeyOnWriteToolsOnly(t *testing.T) {
	t.Parallel()
	srv := tsfixture.StartHTTPServer(t, tsfixture.ServerOptions{})
	gw := startGateway(t, "--upstream", srv.URL, "--store", "memory", "--bypass", "charge_card", "--protect", "set_status")
	c := tsfixture.StartClient(t)
	c.MustDo(map[string]any{"op": "connect", "conn": "a", "url": gw.URL, "token": "alice"})
	tools := listTools(t, c, "a")
	want := map[string]bool{
		"issue_refund": true, "export_report": true, "poll_export": true, "crash_server": true,
		"lookup_order": false, // readOnlyHint
		"set_status":   true,  // idempotentHint, but --protect
		"charge_card":  false, // a write tool, but --bypass
	}
	for name, advertised := range want {
		tl, ok := tools[name]
		if !ok {
			t.Errorf("%s is missing from tools/list", name)
			continue
		}
		_, has := tl.InputSchema.Properties["idempotency_key"]
		safe := strings.Contains(tl.Description, "Retries are safe")
		if has != advertised || safe != advertised {
			t.Errorf("%s: idempotency_key in schema %v, retry-safety sentence %v; want %v", name, has, safe, advertised)
		}
	}
	// Without credentials protected calls are refused, so nothing is
	// advertised; and the refusal runs nothing.
	c.MustDo(map[string]any{"op": "connect", "conn": "anon", "url": gw.URL})
	for name, tl := range listTools(t, c, "anon") {
		if _, has := tl.InputSchema.Properties["idempotency_key"]; has {
			t.Errorf("%s advertises the key to a caller without credentials", name)
		}
	}
	r := decodeResult(t, call(c, "anon", "issue_refund", map[string]any{"order_id": "o-4", "amount_cents": 1}))
	refusal, _ := r.Meta[spancontract.RefusalMetaKey].(map[string]any)
	if !r.IsError || refusal["reason"] != "unscoped" || !strings.Contains(r.text(), "caller's credentials") || countExecutions(t, srv.Log, "issue_refund") != 0 {
		t.Errorf("a protected call without credentials: %+v, %d runs", r, countExecutions(t, srv.Log, "issue_refund"))
	}
	decodeResult(t, call(c, "anon", "lookup_order", map[string]any{"order_id": "o-4"}))
}

// TestProtect_SlowToolProgressExtendsItsLease: a call that runs past its
// lease while reporting progress keeps its claim: a duplicate after the
// lease is told it is in progress instead of running it again.
func TestProtect_SlowToolProgressExtendsItsLease(t *testing.T) {
	upstreams(t, []string{"--store", "memory", "--lease", "1s"}, func(t *testing.T, gw *gatewayProc, log string) {
		c := tsfixture.StartClient(t)
		c.MustDo(map[string]any{"op": "connect", "conn": "a", "url": gw.URL, "token": "alice"})
		c.MustDo(map[string]any{"op": "connect", "conn": "b", "url": gw.URL, "token": "alice"})
		args := map[string]any{"name": "q1", "steps": 8, "step_ms": 400} // 3.2s, the lease is 1s
		done := make(chan tsfixture.Answer, 1)
		go func() {
			done <- c.Do(map[string]any{"op": "call", "conn": "a", "tool": "export_report", "progress": true, "args": args})
		}()
		time.Sleep(2 * time.Second) // twice the lease
		dup := decodeResult(t, call(c, "b", "export_report", args))
		if !dup.IsError || !strings.Contains(dup.text(), "already in progress") {
			t.Errorf("a duplicate past the lease of a call that reports progress: %+v, want in progress", dup)
		}
		a := <-done
		first := decodeResult(t, a)
		if len(a.Progress) != 8 {
			t.Errorf("the client got %d progress notifications, want 8", len(a.Progress))
		}
		if n := countExecutions(t, log, "export_report"); n != 1 {
			t.Fatalf("export_report ran %d times, want 1", n)
		}
		r := decodeResult(t, call(c, "b", "export_report", args))
		if replayMarker(r) == nil || r.StructuredContent["report_id"] != first.StructuredContent["report_id"] {
			t.Errorf("after it finished: %+v", r)
		}
	})
}

// TestProtect_KilledGatewayLeavesNoKeyStuckPastItsLease: SIGKILL of the
// gateway mid-call, then a restart on the same SQLite store: a duplicate
// within the lease is told the call is in progress; after the lease it
// takes the claim over and runs; its result is then replayed.
func TestProtect_KilledGatewayLeavesNoKeyStuckPastItsLease(t *testing.T) {
	srv := tsfixture.StartHTTPServer(t, tsfixture.ServerOptions{})
	store := "sqlite:" + filepath.Join(t.TempDir(), "idemkit.db")
	const lease = 3 * time.Second
	flags := []string{"--upstream", srv.URL, "--store", store, "--lease", lease.String()}
	gw := startGateway(t, flags...)
	c := tsfixture.StartClient(t)
	c.MustDo(map[string]any{"op": "connect", "conn": "a", "url": gw.URL, "token": "alice"})
	args := map[string]any{"order_id": "o-k", "amount_cents": 100, "delay_ms": 1000}
	done := make(chan tsfixture.Answer, 1)
	go func() { done <- call(c, "a", "issue_refund", args) }()
	time.Sleep(400 * time.Millisecond)
	killedAt := time.Now()
	gw.Kill()
	if a := <-done; a.OK {
		t.Fatalf("the call answered through a killed gateway: %s", a.Result)
	}

	gw2 := startGateway(t, flags...)
	c.MustDo(map[string]any{"op": "connect", "conn": "b", "url": gw2.URL, "token": "alice"})
	if time.Since(killedAt) < lease-time.Second {
		r := decodeResult(t, call(c, "b", "issue_refund", args))
		if !r.IsError || !strings.Contains(r.text(), "already in progress") {
			t.Errorf("a duplicate within the dead call's lease: %+v, want in progress", r)
		}
	}
	time.Sleep(time.Until(killedAt.Add(lease + 500*time.Millisecond)))
	r := decodeResult(t, call(c, "b", "issue_refund", args))
	if r.IsError || replayMarker(r) != nil || r.StructuredContent["refund_id"] == nil {
		t.Fatalf("a duplicate after the lease: %+v, want it run (taken over)", r)
	}
	again := decodeResult(t, call(c, "b", "issue_refund", args))
	m := replayMarker(again)
	if m == nil || m["attempt"] != float64(2) || again.StructuredContent["refund_id"] != r.StructuredContent["refund_id"] {
		t.Errorf("after the takeover: %+v, want the takeover's result replayed with attempt 2", again)
	}
	t.Logf("executions: %d (the killed attempt's upstream call ran to its end: the gap a gateway cannot close without the server's help)",
		countExecutions(t, srv.Log, "issue_refund"))
}

func TestProtect_ExplicitKeyReusedWithOtherArgumentsIsAMismatch(t *testing.T) {
	t.Parallel()
	srv := tsfixture.StartHTTPServer(t, tsfixture.ServerOptions{})
	gw := startGateway(t, "--upstream", srv.URL, "--store", "memory")
	c := tsfixture.StartClient(t)
	c.MustDo(map[string]any{"op": "connect", "conn": "a", "url": gw.URL, "token": "alice"})
	decodeResult(t, call(c, "a", "issue_refund", map[string]any{"order_id": "o-5", "amount_cents": 1, "idempotency_key": "k-5"}))
	r := decodeResult(t, call(c, "a", "issue_refund", map[string]any{"order_id": "o-5", "amount_cents": 2, "idempotency_key": "k-5"}))
	if !r.IsError || !strings.Contains(r.text(), "already used for a call with different arguments") {
		t.Errorf("a reused key with other arguments: %+v", r)
	}
	if n := countExecutions(t, srv.Log, "issue_refund"); n != 1 {
		t.Errorf("ran %d times, want 1", n)
	}
	// A tool error is not stored: the retry runs again.
	decodeResult(t, call(c, "a", "charge_card", map[string]any{"card": "4242"}))
	decodeResult(t, call(c, "a", "charge_card", map[string]any{"card": "4242"}))
	if n := countExecutions(t, srv.Log, "charge_card"); n != 2 {
		t.Errorf("a declined charge was replayed: %d runs, want 2", n)
	}
}

func TestProtect_ServesStdioWithReplay(t *testing.T) {
	t.Parallel()
	logFile := filepath.Join(t.TempDir(), "executions.jsonl")
	c := tsfixture.StartClient(t, "FIXTURE_LOG="+logFile)
	c.MustDo(map[string]any{"op": "connect", "conn": "s", "command": mustSelf(t),
		"args": append([]string{"gateway", "--stdio", "--store", "sqlite:" + filepath.Join(t.TempDir(), "i.db"), "--"}, stdioServer(t)...),
		"env":  map[string]string{"IDEMKIT_TEST_EXEC": "1"}})
	tools := listTools(t, c, "s")
	if _, ok := tools["issue_refund"].InputSchema.Properties["idempotency_key"]; !ok {
		t.Errorf("over stdio (one client, no subject needed) the key is not advertised")
	}
	args := map[string]any{"order_id": "o-s", "amount_cents": 3}
	first := decodeResult(t, call(c, "s", "issue_refund", args))
	second := decodeResult(t, call(c, "s", "issue_refund", args))
	if replayMarker(second) == nil || second.StructuredContent["refund_id"] != first.StructuredContent["refund_id"] {
		t.Errorf("the duplicate over stdio: %+v", second)
	}
	if n := countExecutions(t, logFile, "issue_refund"); n != 1 {
		t.Errorf("ran %d times over stdio, want 1", n)
	}
}

func mustSelf(t *testing.T) string {
	t.Helper()
	self, err := filepath.Abs(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	return self
}
