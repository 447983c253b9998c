package mcpcall

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemkit-mcp/idemkit/idemkit"
	"github.com/idemkit-mcp/idemkit/spancontract"
)

// withTasks gives a rig's server task support (a replica when another rig
// shares the store).
func (r *rig) withTasks(cfg TasksConfig) *Tasks {
	r.t.Helper()
	ts, err := r.srv.in.NewTasks(cfg)
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = ts.Close(ctx)
	})
	r.srv.tasks = ts
	return ts
}

func (r *rig) taskCall(tool, args string) map[string]any {
	r.t.Helper()
	return r.send("tools/call", map[string]any{"name": tool, "arguments": json.RawMessage(args), "task": map[string]any{"ttl": 60000}})
}

func rpcErr(resp map[string]any) (int64, string) {
	e, _ := resp["error"].(map[string]any)
	code, _ := e["code"].(int64)
	if f, ok := e["code"].(float64); ok {
		code = int64(f)
	}
	msg, _ := e["message"].(string)
	return code, msg
}

// waitStatus polls tasks/get until the task leaves "working".
func (r *rig) waitStatus(id string) map[string]any {
	r.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		task := result(r.t, r.send("tasks/get", map[string]any{"taskId": id}))
		if task["status"] != "working" || time.Now().After(deadline) {
			return task
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A duplicate task-augmented call gets the first call's CreateTaskResult,
// replayed, on another replica too; the work runs once; every task method
// answers from the store on either replica.
func TestTasks_DuplicatesShareOneTaskAcrossReplicas(t *testing.T) {
	store := &idemkit.MemoryStore{}
	a := newRig(t, rigConfig{store: store, session: "s1", authentc: true, cfg: func(c *Config) {
		c.Subject = func(context.Context) string { return "alice" }
	}})
	b := newRig(t, rigConfig{store: store, session: "s2", authentc: true, cfg: func(c *Config) {
		c.Subject = func(context.Context) string { return "alice" }
	}})
	a.withTasks(TasksConfig{Heartbeat: 10 * time.Millisecond, PollInterval: 250 * time.Millisecond})
	b.withTasks(TasksConfig{Heartbeat: 10 * time.Millisecond})
	release := make(chan struct{})
	var mu sync.Mutex
	var runs int
	for _, r := range []*rig{a, b} {
		r.srv.tools["issue_refund"] = &rawTool{run: func(ctx context.Context, _ json.RawMessage) (json.RawMessage, error) {
			mu.Lock()
			runs++
			mu.Unlock()
			if err := Progress(ctx, 1, 2, "calling the gateway"); err != nil {
				return nil, err
			}
			<-release
			RecordWrite(ctx, "re_1")
			return json.RawMessage(`{"content":[{"type":"text","text":"refunded"}],"structuredContent":{"refund_id":"re_1"}}`), nil
		}}
	}
	first := result(t, a.taskCall("issue_refund", `{"order":"o-1","cents":100}`))
	task, _ := first["task"].(map[string]any)
	id, _ := task["taskId"].(string)
	if !strings.HasPrefix(id, "task-") || task["status"] != "working" || task["ttl"] != float64(idemkit.DefaultWindow.Milliseconds()) ||
		task["pollInterval"] != float64(250) || task["createdAt"] == "" {
		t.Fatalf("CreateTaskResult %v", first)
	}
	if m, _ := first["_meta"].(map[string]any); m[ModelImmediateResponseMetaKey] == nil || m[spancontract.ReplayMetaKey] != nil {
		t.Fatalf("the first CreateTaskResult's _meta %v", first["_meta"])
	}
	firstSpan := a.spans("tools/call issue_refund")[0]
	assertOutcome(t, firstSpan, spancontract.OutcomeExecuted)

	// The duplicate, on the other replica: the first call's task, replayed.
	second := result(t, b.taskCall("issue_refund", `{"cents":100,"order":"o-1"}`))
	if second["task"].(map[string]any)["taskId"] != id || metaOf(second, spancontract.ReplayMetaKey)["replayed"] != true {
		t.Fatalf("the duplicate's answer %v, want task %s replayed", second, id)
	}
	assertOutcome(t, b.spans("tools/call issue_refund")[0], spancontract.OutcomeReplayed)
	if got, want := attrMap(b.spans("tools/call issue_refund")[0])[spancontract.KeyHash], attrMap(firstSpan)[spancontract.KeyHash]; got != want || got == nil {
		t.Fatalf("the duplicate's key hash %v, the first's %v", got, want)
	}

	// Working, with its progress, on the other replica.
	deadline := time.Now().Add(5 * time.Second)
	for {
		got := result(t, b.send("tasks/get", map[string]any{"taskId": id}))
		if got["status"] != "working" {
			t.Fatalf("status %v before the work ended", got)
		}
		if got["statusMessage"] == "calling the gateway (1 of 2)" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("progress never showed: %v", got)
		}
		time.Sleep(5 * time.Millisecond)
	}
	// tasks/result blocks on the other replica until the work ends.
	done := make(chan map[string]any)
	go func() { done <- b.send("tasks/result", map[string]any{"taskId": id}) }()
	select {
	case resp := <-done:
		t.Fatalf("tasks/result answered before the task ended: %v", resp)
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	res := result(t, <-done)
	if text(res) != "refunded" || metaOf(res, RelatedTaskMetaKey)["taskId"] != id {
		t.Fatalf("tasks/result %v", res)
	}
	if got := a.waitStatus(id); got["status"] != "completed" {
		t.Fatalf("final status %v", got)
	}
	mu.Lock()
	if runs != 1 {
		t.Errorf("the work ran %d times", runs)
	}
	mu.Unlock()

	// tasks/list pages this caller's tasks; cancelling a completed task is
	// refused with -32602.
	list := result(t, b.send("tasks/list", map[string]any{}))
	if tasks, _ := list["tasks"].([]any); len(tasks) != 1 || tasks[0].(map[string]any)["taskId"] != id {
		t.Fatalf("tasks/list %v", list)
	}
	if code, msg := rpcErr(a.send("tasks/cancel", map[string]any{"taskId": id})); code != -32602 || !strings.Contains(msg, "completed") {
		t.Fatalf("cancel of a completed task: %d %q", code, msg)
	}
	// The task methods' spans: SERVER, named after the method, no target.
	for _, m := range []string{"tasks/get", "tasks/result", "tasks/list", "tasks/cancel"} {
		var spans []string
		for _, r := range []*rig{a, b} {
			for _, s := range r.spans(m) {
				if s.SpanKind() != trace.SpanKindServer || attrMap(s)[spancontract.MCPMethodName] != m {
					t.Errorf("%s span kind %s attributes %v", m, s.SpanKind(), attrMap(s))
				}
				spans = append(spans, s.Name())
			}
		}
		if len(spans) == 0 {
			t.Errorf("no %s span", m)
		}
	}
	cancelSpan := a.spans("tasks/cancel")[0]
	if attrMap(cancelSpan)[spancontract.ErrorType] != "-32602" {
		t.Errorf("the refused cancel's span %v", attrMap(cancelSpan))
	}
}

func assertOutcome(t *testing.T, s sdktrace.ReadOnlySpan, want string) {
	t.Helper()
	if got := attrMap(s)[spancontract.Outcome]; got != want {
		t.Errorf("span %s outcome %v, want %s (attributes %v)", s.Name(), got, want, attrMap(s))
	}
}

// A cancelled task stops its work and stays cancelled; another caller
// cannot see it; a failing tool makes a failed task whose tasks/result is
// exactly what the call would have returned.
func TestTasks_CancelIsolationAndFailures(t *testing.T) {
	subject := "alice"
	var smu sync.Mutex
	r := newRig(t, rigConfig{session: "s1", authentc: true, cfg: func(c *Config) {
		c.Subject = func(context.Context) string { smu.Lock(); defer smu.Unlock(); return subject }
	}})
	r.withTasks(TasksConfig{Heartbeat: 10 * time.Millisecond})
	stopped := make(chan struct{})
	r.srv.tools["export"] = &rawTool{run: func(ctx context.Context, _ json.RawMessage) (json.RawMessage, error) {
		<-ctx.Done()
		close(stopped)
		return nil, ctx.Err()
	}}
	r.srv.tools["declined"] = &rawTool{run: func(context.Context, json.RawMessage) (json.RawMessage, error) {
		return json.RawMessage(`{"content":[{"type":"text","text":"card declined"}],"isError":true}`), nil
	}}
	r.srv.tools["broken"] = &rawTool{run: func(context.Context, json.RawMessage) (json.RawMessage, error) {
		return nil, &rpcError{code: -32603, msg: "gateway unreachable"}
	}}
	task := result(t, r.taskCall("export", `{}`))["task"].(map[string]any)
	id := task["taskId"].(string)

	smu.Lock()
	subject = "bob"
	smu.Unlock()
	for _, m := range []string{"tasks/get", "tasks/result", "tasks/cancel"} {
		if code, _ := rpcErr(r.send(m, map[string]any{"taskId": id})); code != -32602 {
			t.Errorf("another caller's %s: code %d, want -32602 (not found)", m, code)
		}
	}
	if list := result(t, r.send("tasks/list", nil)); len(list["tasks"].([]any)) != 0 {
		t.Errorf("another caller's tasks/list: %v", list)
	}
	smu.Lock()
	subject = "alice"
	smu.Unlock()

	cancelled := result(t, r.send("tasks/cancel", map[string]any{"taskId": id}))
	if cancelled["status"] != "cancelled" || cancelled["taskId"] != id {
		t.Fatalf("tasks/cancel %v", cancelled)
	}
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		t.Fatal("the cancelled task's work did not stop")
	}
	if got := r.waitStatus(id); got["status"] != "cancelled" {
		t.Fatalf("after the work stopped: %v", got)
	}
	if code, msg := rpcErr(r.send("tasks/result", map[string]any{"taskId": id})); code != -32603 || !strings.Contains(msg, "cancelled") {
		t.Errorf("tasks/result of a cancelled task: %d %q", code, msg)
	}

	// An error result: a failed task, whose result is the error result.
	id = result(t, r.taskCall("declined", `{}`))["task"].(map[string]any)["taskId"].(string)
	if got := r.waitStatus(id); got["status"] != "failed" {
		t.Fatalf("status of a task whose tool returned isError: %v", got)
	}
	if res := result(t, r.send("tasks/result", map[string]any{"taskId": id})); !isError(res) || text(res) != "card declined" {
		t.Errorf("tasks/result of the declined task: %v", res)
	}
	// A JSON-RPC error: a failed task, whose result is that error.
	id = result(t, r.taskCall("broken", `{}`))["task"].(map[string]any)["taskId"].(string)
	if got := r.waitStatus(id); got["status"] != "failed" || got["statusMessage"] != "gateway unreachable" {
		t.Fatalf("status of a task whose tool failed: %v", got)
	}
	if code, msg := rpcErr(r.send("tasks/result", map[string]any{"taskId": id})); code != -32603 || msg != "gateway unreachable" {
		t.Errorf("tasks/result of the broken task: %d %q", code, msg)
	}
	if code, _ := rpcErr(r.send("tasks/get", map[string]any{"taskId": "task-nope"})); code != -32602 {
		t.Errorf("unknown task: %d", code)
	}
	if code, _ := rpcErr(r.send("tasks/list", map[string]any{"cursor": "zzz"})); code != -32602 {
		t.Errorf("bad cursor: %d", code)
	}
}

// A refused task-augmented call is a JSON-RPC error carrying the refusal
// marker, and creates nothing.
func TestTasks_RefusalsAreJSONRPCErrors(t *testing.T) {
	r := newRig(t, rigConfig{}) // no subject, no session: unidentified
	r.withTasks(TasksConfig{})
	tool := r.tool("issue_refund", ToolInfo{}, `{"content":[]}`)
	code, msg := rpcErr(r.taskCall("issue_refund", `{}`))
	if code != -32603 || !strings.Contains(msg, "cannot tell which caller") || tool.count() != 0 {
		t.Fatalf("unidentified task call: %d %q, %d runs", code, msg, tool.count())
	}
	if code, _ := rpcErr(r.send("tasks/list", nil)); code != -32600 {
		t.Errorf("unidentified tasks/list: %d, want -32600", code)
	}
	local := newRig(t, rigConfig{local: true})
	local.withTasks(TasksConfig{})
	local.tool("issue_refund", ToolInfo{}, `{"content":[]}`)
	resp := local.send("tools/call", map[string]any{"name": "issue_refund", "arguments": map[string]any{}, "task": map[string]any{},
		"_meta": map[string]any{spancontract.KeyMetaKey: 12}})
	code, _ = rpcErr(resp)
	data, _ := resp["error"].(map[string]any)["data"].(map[string]json.RawMessage)
	if code != -32602 || !strings.Contains(string(data[spancontract.RefusalMetaKey]), "invalid_key") {
		t.Fatalf("a malformed key: %v", resp)
	}
	s := local.spans("tools/call issue_refund")[0]
	if a := attrMap(s); a[spancontract.ErrorType] != "-32602" || a[spancontract.RefusalReason] != "invalid_key" {
		t.Errorf("the refused call's span %v", a)
	}
}

// Concurrent duplicates of a task-augmented call all get the one task: the
// ones that arrive while the first is creating it wait for its answer, and
// replay it.
func TestTasks_ConcurrentDuplicatesShareOneTask(t *testing.T) {
	r := newRig(t, rigConfig{local: true})
	r.withTasks(TasksConfig{})
	var mu sync.Mutex
	runs := 0
	r.srv.tools["export"] = &rawTool{run: func(context.Context, json.RawMessage) (json.RawMessage, error) {
		mu.Lock()
		runs++
		mu.Unlock()
		return json.RawMessage(`{"content":[{"type":"text","text":"exported"}]}`), nil
	}}
	const n = 8
	ids := make(chan string, n)
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp := r.taskCall("export", `{"report":"q3"}`)
			res, _ := resp["result"].(map[string]any)
			task, _ := res["task"].(map[string]any)
			id, _ := task["taskId"].(string)
			ids <- id
		}()
	}
	wg.Wait()
	close(ids)
	var first string
	for id := range ids {
		if id == "" || first != "" && id != first {
			t.Fatalf("concurrent duplicates got tasks %q and %q, want one", first, id)
		}
		first = id
	}
	if got := r.waitStatus(first); got["status"] != "completed" {
		t.Fatalf("the task: %v", got)
	}
	mu.Lock()
	defer mu.Unlock()
	if runs != 1 {
		t.Fatalf("the work ran %d times, want once", runs)
	}
	outcomes := map[any]int{}
	for _, s := range r.spans("tools/call export") {
		outcomes[attrMap(s)[spancontract.Outcome]]++
	}
	if outcomes[spancontract.OutcomeExecuted] != 1 || outcomes[spancontract.OutcomeReplayed] != n-1 {
		t.Fatalf("outcomes %v, want 1 executed and %d replayed", outcomes, n-1)
	}
}
