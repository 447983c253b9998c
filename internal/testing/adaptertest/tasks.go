package adaptertest

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/idemkit-mcp/idemkit/idemkit/idemstore"
	"github.com/idemkit-mcp/idemkit/idemkit/sqlitestore"
	"github.com/idemkit-mcp/idemkit/instrument"
	sc "github.com/idemkit-mcp/idemkit/spancontract"
)

// rpcClient sends raw JSON-RPC requests on an MCP session a real client
// opened, for the messages SDK clients have no method for (task
// augmentation, the task methods).
type rpcClient struct {
	t     *testing.T
	url   string
	sid   string
	token string
	mu    sync.Mutex // protects id
	id    int
}

// rpc sends method with params and returns the response object (result or
// error), read from a JSON body or an event stream.
func (c *rpcClient) rpc(method string, params any) map[string]any {
	c.t.Helper()
	c.mu.Lock()
	c.id++
	id := 1000 + c.id
	c.mu.Unlock()
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params})
	req, _ := http.NewRequest(http.MethodPost, c.url, strings.NewReader(string(body)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", LegacyProtocol)
	req.Header.Set("Mcp-Session-Id", c.sid)
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		c.t.Fatalf("%s: HTTP %d: %s", method, resp.StatusCode, b)
	}
	var raw []byte
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			data, ok := strings.CutPrefix(sc.Text(), "data:")
			if !ok {
				continue
			}
			var probe struct {
				ID json.RawMessage `json:"id"`
			}
			if json.Unmarshal([]byte(data), &probe) == nil && string(probe.ID) == fmt.Sprint(id) {
				raw = []byte(data)
				break
			}
		}
	} else {
		raw, _ = io.ReadAll(resp.Body)
	}
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		c.t.Fatalf("%s: response %q: %v", method, raw, err)
	}
	return out
}

func resultOf(t *testing.T, resp map[string]any) map[string]any {
	t.Helper()
	res, ok := resp["result"].(map[string]any)
	if !ok {
		t.Fatalf("not a result: %v", resp)
	}
	return res
}

func errorCode(resp map[string]any) int {
	e, _ := resp["error"].(map[string]any)
	f, _ := e["code"].(float64)
	return int(f)
}

func serves(h Harness) bool {
	th, ok := h.(TaskHarness)
	return ok && th.ServesTasks()
}

// Tasks are checked only on a harness that says how it handles them; the
// transactional form only on one that has it.
func skipUnlessDeclared(t *testing.T, h Harness, tasks bool) {
	t.Helper()
	if tasks {
		if _, ok := h.(TaskHarness); !ok {
			t.Skip("the harness does not say how its front end handles MCP tasks (adaptertest.TaskHarness)")
		}
		return
	}
	if th, ok := h.(TxHarness); !ok || !th.ServesTxTools() {
		t.Skip("the front end has no transactional handler form (adaptertest.TxHarness)")
	}
}

// Tasks: on a front end that serves them, a duplicate task-augmented call
// gets the first call's task (its CreateTaskResult, replayed), the work runs
// once, and the task methods answer from the store with SERVER spans; on
// one that does not (the go-sdk has no tasks), a task-augmented call is a
// plain protected call and the task methods are unknown.
func testTasks(t *testing.T, h Harness) {
	skipUnlessDeclared(t, h, true)
	var runs counter
	release := make(chan struct{})
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	t.Cleanup(free)
	tool := Tool{Name: "refund", TaskSupport: "optional", Run: func(ctx context.Context, args map[string]any) (Result, error) {
		n := runs.inc()
		if err := instrument.Progress(ctx, 1, 2, "calling the gateway"); err != nil {
			return Result{}, err
		}
		<-release
		instrument.RecordWrite(ctx, fmt.Sprintf("re_%d", n))
		return Result{Text: []string{fmt.Sprintf("refunded %v (run %d)", args["order_id"], n)}}, nil
	}}
	r := start(t, h, setup{transport: HTTP, bearer: true, tasks: true, tools: []Tool{tool}})
	c := r.connect(ClientConfig{Token: "token-alice", Protocol: LegacyProtocol})
	rc := &rpcClient{t: t, url: r.srv.URL(), sid: c.SessionID(), token: "token-alice"}
	args := map[string]any{"order_id": "o-1", "amount_cents": 100}
	taskCall := func() map[string]any {
		return rc.rpc("tools/call", map[string]any{"name": "refund", "arguments": args, "task": map[string]any{"ttl": 60000}})
	}

	if !serves(h) {
		free()
		first := resultOf(t, taskCall())
		second := resultOf(t, taskCall())
		if text(first) != "refunded o-1 (run 1)" || marker(second, sc.ReplayMetaKey) == nil || runs.get() != 1 {
			t.Fatalf("without tasks a task-augmented call must run as a plain protected call: %v / %v (%d runs)", first, second, runs.get())
		}
		if code := errorCode(rc.rpc("tasks/get", map[string]any{"taskId": "x"})); code != -32601 {
			t.Errorf("tasks/get on a front end without tasks: code %d, want -32601", code)
		}
		if s := r.spans("tasks/get"); len(s) != 1 || s[0].SpanKind() != trace.SpanKindServer || attrs(s[0])[sc.ErrorType] != "-32601" {
			t.Errorf("tasks/get span %v", s)
		}
		return
	}

	first := resultOf(t, taskCall())
	task, _ := first["task"].(map[string]any)
	id, _ := task["taskId"].(string)
	if id == "" || task["status"] != "working" || task["createdAt"] == nil || task["ttl"] == nil {
		t.Fatalf("CreateTaskResult %v", first)
	}
	second := resultOf(t, taskCall())
	if second["task"].(map[string]any)["taskId"] != id || marker(second, sc.ReplayMetaKey)["replayed"] != true {
		t.Fatalf("the duplicate's answer %v: want the first task, replayed", second)
	}
	calls := r.spans("tools/call refund")
	if len(calls) != 2 || attrs(calls[0])[sc.Outcome] != sc.OutcomeExecuted || attrs(calls[1])[sc.Outcome] != sc.OutcomeReplayed ||
		attrs(calls[0])[sc.KeyHash] != attrs(calls[1])[sc.KeyHash] {
		t.Fatalf("the task-creating calls' spans: %v", calls)
	}
	// Working, with the progress the work reported.
	deadline := time.Now().Add(5 * time.Second)
	for {
		got := resultOf(t, rc.rpc("tasks/get", map[string]any{"taskId": id}))
		if got["status"] != "working" {
			t.Fatalf("status %v before the work ended", got)
		}
		if msg, _ := got["statusMessage"].(string); strings.Contains(msg, "calling the gateway") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the work's progress never showed: %v", got)
		}
		time.Sleep(10 * time.Millisecond)
	}
	free()
	res := resultOf(t, rc.rpc("tasks/result", map[string]any{"taskId": id}))
	related, _ := res["_meta"].(map[string]any)["io.modelcontextprotocol/related-task"].(map[string]any)
	if text(res) != "refunded o-1 (run 1)" || related["taskId"] != id {
		t.Fatalf("tasks/result %v", res)
	}
	if got := resultOf(t, rc.rpc("tasks/get", map[string]any{"taskId": id})); got["status"] != "completed" {
		t.Fatalf("final status %v", got)
	}
	// The background execution has a span of its own, a child of the
	// creating call's, with the write the work recorded (the tools/call
	// span ended before the work ran). It is no tool call of its own.
	if runSpans := r.waitSpans("execute_task refund", 1); true {
		rs, a := runSpans[0], attrs(runSpans[0])
		if rs.SpanKind() != trace.SpanKindInternal || a[sc.WriteID] != "re_1" || a[sc.GenAIToolName] != "refund" ||
			a["idemkit.task.id"] != id || a[sc.GenAIOperationName] != nil || a[sc.Attempt] != int64(1) ||
			rs.Parent().SpanID() != calls[0].SpanContext().SpanID() {
			t.Fatalf("the task's execution span: kind %s parent %s attributes %v; want INTERNAL, the creating call's child, write re_1",
				rs.SpanKind(), rs.Parent().SpanID(), a)
		}
	}
	list := resultOf(t, rc.rpc("tasks/list", map[string]any{}))
	if tasks, _ := list["tasks"].([]any); len(tasks) != 1 {
		t.Fatalf("tasks/list %v", list)
	}
	if code := errorCode(rc.rpc("tasks/cancel", map[string]any{"taskId": id})); code != -32602 {
		t.Errorf("cancelling a completed task: code %d, want -32602", code)
	}
	if runs.get() != 1 {
		t.Errorf("the work ran %d times, want once", runs.get())
	}
	// Another caller sees none of it.
	bob := r.connect(ClientConfig{Token: "token-bob", Protocol: LegacyProtocol})
	rb := &rpcClient{t: t, url: r.srv.URL(), sid: bob.SessionID(), token: "token-bob"}
	if code := errorCode(rb.rpc("tasks/get", map[string]any{"taskId": id})); code != -32602 {
		t.Errorf("another caller's tasks/get: code %d, want -32602", code)
	}
	// Every task method has its SERVER span, named after the method.
	for _, m := range []string{"tasks/get", "tasks/result", "tasks/list", "tasks/cancel"} {
		spans := r.spans(m)
		if len(spans) == 0 {
			t.Errorf("no %s span", m)
			continue
		}
		for _, s := range spans {
			a := attrs(s)
			if s.SpanKind() != trace.SpanKindServer || a[sc.MCPMethodName] != m || a[sc.JSONRPCRequestID] == nil || a[sc.MCPSessionID] == nil {
				t.Errorf("%s span: kind %s attributes %v", m, s.SpanKind(), a)
			}
		}
	}
	if a := attrs(r.spans("tasks/cancel")[0]); a[sc.ErrorType] != "-32602" {
		t.Errorf("the refused cancel's span %v", a)
	}
	if a := attrs(r.spans("tasks/get")[0]); a[sc.ErrorType] != nil {
		t.Errorf("a tasks/get answered from the store must not carry mcp-go's own error: %v", a)
	}

	// Cancelling a running task stops its work.
	stopped := make(chan struct{})
	slow := Tool{Name: "export", TaskSupport: "required", Run: func(ctx context.Context, _ map[string]any) (Result, error) {
		<-ctx.Done()
		close(stopped)
		return Result{}, ctx.Err()
	}}
	r2 := start(t, h, setup{transport: HTTP, bearer: true, tasks: true, tools: []Tool{slow}})
	c2 := r2.connect(ClientConfig{Token: "token-alice", Protocol: LegacyProtocol})
	rc2 := &rpcClient{t: t, url: r2.srv.URL(), sid: c2.SessionID(), token: "token-alice"}
	tools, err := c2.ListTools(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if exec, _ := tools[0]["execution"].(map[string]any); exec["taskSupport"] != "required" {
		t.Errorf("the task tool's listing %v, want execution.taskSupport required", tools[0])
	}
	created := resultOf(t, rc2.rpc("tools/call", map[string]any{"name": "export", "arguments": map[string]any{}, "task": map[string]any{}}))
	id2 := created["task"].(map[string]any)["taskId"].(string)
	if got := resultOf(t, rc2.rpc("tasks/cancel", map[string]any{"taskId": id2})); got["status"] != "cancelled" {
		t.Fatalf("tasks/cancel %v", got)
	}
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		t.Fatal("the cancelled task's work did not stop")
	}
	if got := resultOf(t, rc2.rpc("tasks/get", map[string]any{"taskId": id2})); got["status"] != "cancelled" {
		t.Errorf("after the work stopped: %v", got)
	}

	// A job-and-poll tool called as a task: the task is the work itself
	// (tasks/result returns the work's result, no job starts); called
	// plainly, it is still job-and-poll.
	var exports counter
	export := Tool{Name: "export", Run: func(ctx context.Context, args map[string]any) (Result, error) {
		return Result{Text: []string{fmt.Sprintf("exported %v (run %d)", args["what"], exports.inc())}}, nil
	}}
	r3 := start(t, h, setup{transport: HTTP, bearer: true, tasks: true, jobTools: []Tool{export}})
	c3 := r3.connect(ClientConfig{Token: "token-alice", Protocol: LegacyProtocol})
	rc3 := &rpcClient{t: t, url: r3.srv.URL(), sid: c3.SessionID(), token: "token-alice"}
	asTask := resultOf(t, rc3.rpc("tools/call", map[string]any{"name": "export", "arguments": map[string]any{"what": "orders"}, "task": map[string]any{}}))
	id3, _ := asTask["task"].(map[string]any)["taskId"].(string)
	if got := resultOf(t, rc3.rpc("tasks/result", map[string]any{"taskId": id3})); text(got) != "exported orders (run 1)" {
		t.Errorf("tasks/result of the job tool called as a task: %v, want the work's own result", got)
	}
	plain := call(t, c3, "export", map[string]any{"what": "invoices"}, nil)
	if sc3, _ := plain["structuredContent"].(map[string]any); !strings.HasPrefix(fmt.Sprint(sc3["job_id"]), "job_") {
		t.Errorf("the job tool called plainly: %v, want a job", plain)
	}
}

// TxTool: a transactional tool's claim, its writes and its outcome commit
// together; a duplicate is replayed with the marker; a handler error rolls
// its writes back and stores nothing; a commit that fails leaves nothing,
// says so, and the retry runs once.
func testTxTool(t *testing.T, h Harness) {
	skipUnlessDeclared(t, h, false)
	store, err := sqlitestore.Open(context.Background(), filepath.Join(t.TempDir(), "tx.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	ctx := context.Background()
	if _, err := store.DB().ExecContext(ctx, `CREATE TABLE orders (id TEXT PRIMARY KEY);
		CREATE TABLE refunds (id TEXT PRIMARY KEY, order_id TEXT NOT NULL REFERENCES orders(id), cents INTEGER NOT NULL);
		INSERT INTO orders VALUES ('o-1'), ('o-2')`); err != nil {
		t.Fatal(err)
	}
	var runs counter
	tool := TxTool{Name: "refund", Run: func(ctx context.Context, tx *sql.Tx, args map[string]any) (Result, error) {
		n := runs.inc()
		id := fmt.Sprintf("re_%d", n)
		order, _ := args["order_id"].(string)
		if args["defer_check"] == true {
			// The foreign key is checked at the commit: an unknown order
			// makes the commit fail after the write.
			if _, err := tx.ExecContext(ctx, `PRAGMA defer_foreign_keys = ON`); err != nil {
				return Result{}, err
			}
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO refunds (id, order_id, cents) VALUES (?, ?, ?)`, id, order, args["amount_cents"]); err != nil {
			return Result{}, err
		}
		if args["fail"] == true {
			return Result{}, fmt.Errorf("the gateway refused the refund")
		}
		instrument.RecordWrite(ctx, id)
		return Result{Text: []string{"refunded " + order + " as " + id}}, nil
	}}
	r := start(t, h, setup{transport: HTTP, bearer: true, store: store, txTools: []TxTool{tool}, txRunner: store})
	c := r.connect(ClientConfig{Token: "token-alice", Protocol: LegacyProtocol})
	count := func(order string) int {
		var n int
		if err := store.DB().QueryRowContext(ctx, `SELECT count(*) FROM refunds WHERE order_id = ?`, order).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	first := call(t, c, "refund", map[string]any{"order_id": "o-1", "amount_cents": 100}, nil)
	second := call(t, c, "refund", map[string]any{"order_id": "o-1", "amount_cents": 100}, nil)
	if text(first) != "refunded o-1 as re_1" || text(second) != text(first) || marker(second, sc.ReplayMetaKey)["write_id"] != "re_1" || count("o-1") != 1 {
		t.Fatalf("transactional replay: %v / %v, %d rows", first, second, count("o-1"))
	}
	spans := r.spans("tools/call refund")
	if a := attrs(spans[0]); a[sc.Outcome] != sc.OutcomeExecuted || a[sc.WriteID] != "re_1" {
		t.Errorf("first span %v", a)
	}
	if a := attrs(spans[1]); a[sc.Outcome] != sc.OutcomeReplayed || a[sc.WriteID] != "re_1" {
		t.Errorf("replay span %v", a)
	}

	// A handler error: its write is rolled back, nothing is stored, and the
	// retry runs again.
	args := map[string]any{"order_id": "o-2", "amount_cents": 5, "fail": true}
	if _, err := c.CallTool(ctx, "refund", args, nil); err == nil {
		t.Fatal("a handler error must reach the client as an error")
	}
	if count("o-2") != 0 {
		t.Fatalf("the failed call's write survived: %d rows", count("o-2"))
	}
	args["fail"] = false
	if res := call(t, c, "refund", args, nil); isError(res) || count("o-2") != 1 {
		t.Fatalf("the retry after a handler error: %v, %d rows", res, count("o-2"))
	}

	// A commit that fails after the write: neither the write nor the claim
	// remain; the caller is told nothing was done; the retry runs once.
	bad := map[string]any{"order_id": "o-404", "amount_cents": 7, "defer_check": true}
	res := call(t, c, "refund", bad, nil)
	if !isError(res) || marker(res, sc.RefusalMetaKey)["reason"] != sc.RefusalStoreUnavailable || !strings.Contains(text(res), "nothing it did was kept") {
		t.Fatalf("a failed commit's answer %v", res)
	}
	if count("o-404") != 0 {
		t.Fatalf("the uncommitted write survived: %d rows", count("o-404"))
	}
	if a := attrs(last(r.spans("tools/call refund"))); a[sc.RefusalReason] != sc.RefusalStoreUnavailable || a[sc.FinishError] != sc.FinishStoreError || a[sc.Outcome] != nil {
		t.Errorf("the rolled-back call's span %v", a)
	}
	before := runs.get()
	if _, err := store.DB().ExecContext(ctx, `INSERT INTO orders VALUES ('o-404')`); err != nil {
		t.Fatal(err)
	}
	if res := call(t, c, "refund", bad, nil); isError(res) || count("o-404") != 1 || runs.get() != before+1 {
		t.Fatalf("the retry after the failed commit: %v, %d rows, %d runs", res, count("o-404"), runs.get()-before)
	}
	if res := call(t, c, "refund", bad, nil); marker(res, sc.ReplayMetaKey) == nil || count("o-404") != 1 {
		t.Fatalf("the duplicate of the retry: %v, %d rows", res, count("o-404"))
	}
	// The claim was committed with the write: the store has the record.
	recs, err := store.List(ctx, idemstore.ListRequest{Tool: "refund", State: idemstore.StateCompleted})
	if err != nil || len(recs) != 3 {
		t.Fatalf("completed records %d, %v; want 3 (o-1, o-2, o-404)", len(recs), err)
	}
	// The metrics of any protected tool: the handler error and the three
	// committed calls executed, two replays, one call refused after its
	// transaction did not commit (no outcome: nothing happened).
	ms := r.metrics()
	if got, want := sums(t, ms[sc.MetricToolCalls]), map[string]int64{
		key(sc.GenAIToolName, "refund", sc.Outcome, sc.OutcomeExecuted):               4,
		key(sc.GenAIToolName, "refund", sc.Outcome, sc.OutcomeReplayed):               2,
		key(sc.GenAIToolName, "refund", sc.RefusalReason, sc.RefusalStoreUnavailable): 1,
	}; !reflect.DeepEqual(got, want) {
		t.Errorf("%s = %v, want %v", sc.MetricToolCalls, got, want)
	}
	if got := sums(t, ms[sc.MetricFinishErrors]); !reflect.DeepEqual(got, map[string]int64{
		key(sc.GenAIToolName, "refund", sc.FinishError, sc.FinishStoreError): 1}) {
		t.Errorf("%s = %v", sc.MetricFinishErrors, got)
	}
}

func last[T any](s []T) T { return s[len(s)-1] }
