package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/idemkit-mcp/idemkit/idemkit"
	"github.com/idemkit-mcp/idemkit/idemkit/sqlitestore"
	"github.com/idemkit-mcp/idemkit/internal/mcpcall"
)

// taskUpstream is an mcp-go server that serves tasks (its own engine, in
// memory, each task visible on its own session only) with one tool that
// supports them, counting its runs; a run waits for release.
type taskUpstream struct {
	URL     string
	runs    atomic.Int64
	release chan struct{}
}

func newTaskUpstream(t *testing.T) *taskUpstream {
	t.Helper()
	u := &taskUpstream{release: make(chan struct{})}
	s := server.NewMCPServer("tasks", "1", server.WithTaskCapabilities(true, true, true))
	s.AddTool(mcp.NewTool("export", mcp.WithString("what"), mcp.WithTaskSupport(mcp.TaskSupportOptional)),
		func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			n := u.runs.Add(1)
			<-u.release
			return mcp.NewToolResultText(fmt.Sprintf("exported %s (run %d)", req.GetString("what", ""), n)), nil
		})
	hs := httptest.NewServer(server.NewStreamableHTTPServer(s, server.WithStateful(true)))
	t.Cleanup(hs.Close)
	u.URL = hs.URL + "/mcp"
	return u
}

const taskInitialize = `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{"tasks":{}},"clientInfo":{"name":"raw","version":"1"}}}`

// taskClient starts a session of a caller with a bearer token.
func taskClient(t *testing.T, url, token string) *rawClient {
	t.Helper()
	c := newRawClient(t, url, http.Header{"Authorization": {"Bearer " + token}})
	a := c.post(taskInitialize)
	if a.status != http.StatusOK {
		t.Fatalf("initialize: %d %s", a.status, a.body)
	}
	c.sid = a.header.Get("Mcp-Session-Id")
	c.post(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	return c
}

// rpc sends a request and returns its answer.
func (c *rawClient) rpc(method string, params any) rawAnswer {
	c.t.Helper()
	c.next++
	b, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": c.next, "method": method, "params": params})
	if err != nil {
		c.t.Fatal(err)
	}
	return c.post(string(b))
}

// taskOf returns the task of a CreateTaskResult or tasks/get answer.
func taskOf(t *testing.T, a rawAnswer) map[string]any {
	t.Helper()
	r := a.result(t)
	if task, ok := r["task"].(map[string]any); ok {
		return task
	}
	return r
}

func openSQLite(t *testing.T, path string) *idemkit.Guard {
	t.Helper()
	st, err := sqlitestore.Open(context.Background(), path, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	g, err := idemkit.NewGuard(st, nil)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// TestTasks_ReadableOnANewSessionAndAfterARestart: a task-augmented call
// of a protected tool is the gateway's task, kept in its store. Its
// duplicate on a new session of the same caller gets the first
// CreateTaskResult replayed, and tasks/get, tasks/result and tasks/list
// answer for that task on the new session (the upstream's own task lives
// on the first session only), and again from a new gateway on the same
// store; another caller never sees it; the work ran once.
func TestTasks_ReadableOnANewSessionAndAfterARestart(t *testing.T) {
	up := newTaskUpstream(t)
	dbPath := filepath.Join(t.TempDir(), "idemkit.db")
	g1, url1 := newGatewayServer(t, up.URL, Config{Guard: openSQLite(t, dbPath), Instrumentation: newTelemetryPair().config()})

	a1 := taskClient(t, url1, "alice")
	params := map[string]any{"name": "export", "arguments": map[string]any{"what": "orders"}, "task": map[string]any{"ttl": 60000}}
	created := a1.rpc("tools/call", params)
	task := taskOf(t, created)
	id, _ := task["taskId"].(string)
	if id == "" || task["status"] != "working" || replayed(created.result(t)) {
		t.Fatalf("CreateTaskResult %s", created.body)
	}
	// A reconnect: a new session of the same caller.
	a2 := taskClient(t, url1, "alice")
	dup := a2.rpc("tools/call", params)
	if got := taskOf(t, dup); got["taskId"] != id || !replayed(dup.result(t)) {
		t.Fatalf("the duplicate on a new session: %s, want task %s replayed", dup.body, id)
	}
	if got := taskOf(t, a2.rpc("tasks/get", map[string]any{"taskId": id})); got["taskId"] != id || got["status"] != "working" {
		t.Errorf("tasks/get on the new session: %v", got)
	}
	bob := taskClient(t, url1, "bob")
	if e := bob.rpc("tasks/get", map[string]any{"taskId": id}).rpcError(); e == nil || !strings.Contains(fmt.Sprint(e["message"]), "not found") {
		t.Errorf("another caller's tasks/get: %v, want not found", e)
	}
	close(up.release)
	res := a2.rpc("tasks/result", map[string]any{"taskId": id}).result(t)
	meta, _ := res["_meta"].(map[string]any)
	related, _ := meta[mcpcall.RelatedTaskMetaKey].(map[string]any)
	if resultText(res) != "exported orders (run 1)" || related["taskId"] != id {
		t.Errorf("tasks/result on the new session: %v", res)
	}
	if got := taskOf(t, a2.rpc("tasks/get", map[string]any{"taskId": id})); got["status"] != "completed" {
		t.Errorf("tasks/get after the end: %v", got)
	}
	list := a2.rpc("tasks/list", map[string]any{}).result(t)
	if tasks, _ := list["tasks"].([]any); len(tasks) != 1 || tasks[0].(map[string]any)["taskId"] != id {
		t.Errorf("tasks/list: %v", list)
	}
	if bl := bob.rpc("tasks/list", map[string]any{}).result(t); len(bl["tasks"].([]any)) != 0 {
		t.Errorf("another caller's tasks/list: %v", bl)
	}

	// A restart on the same store.
	if err := g1.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	_, url2 := newGatewayServer(t, up.URL, Config{Guard: openSQLite(t, dbPath), Instrumentation: newTelemetryPair().config()})
	a3 := taskClient(t, url2, "alice")
	if got := taskOf(t, a3.rpc("tasks/get", map[string]any{"taskId": id})); got["status"] != "completed" {
		t.Errorf("tasks/get after a restart: %v", got)
	}
	if res := a3.rpc("tasks/result", map[string]any{"taskId": id}).result(t); resultText(res) != "exported orders (run 1)" {
		t.Errorf("tasks/result after a restart: %v", res)
	}
	if dup := a3.rpc("tools/call", params); taskOf(t, dup)["taskId"] != id || !replayed(dup.result(t)) {
		t.Errorf("the duplicate after a restart: %s", dup.body)
	}
	if n := up.runs.Load(); n != 1 {
		t.Errorf("the tool ran %d times, want 1", n)
	}
}

// TestTasks_UpstreamWithoutTasks_AreForwarded: an upstream that does not
// advertise tasks keeps answering the task methods itself (-32601 from
// mcp-go), and a task-augmented call is an ordinary protected call.
func TestTasks_UpstreamWithoutTasks_AreForwarded(t *testing.T) {
	up := newUpstream(t)
	_, url := newGatewayServer(t, up.URL, Config{Guard: newGuard(t), Instrumentation: newTelemetryPair().config()})
	c := taskClient(t, url, "alice")
	if e := c.rpc("tasks/list", map[string]any{}).rpcError(); e == nil || e["code"] != float64(-32601) {
		t.Errorf("tasks/list: %v, want the upstream's -32601", e)
	}
	params := map[string]any{"name": "issue_refund", "arguments": map[string]any{"order_id": "o-1"}, "task": map[string]any{"ttl": 60000}}
	first := c.rpc("tools/call", params).result(t)
	second := c.rpc("tools/call", params).result(t)
	if resultText(first) != "refund issued for o-1" || !replayed(second) || up.count("issue_refund") != 1 {
		t.Errorf("task-augmented calls of an upstream without tasks: %v, %v, %d runs", first, second, up.count("issue_refund"))
	}
}

// TestTasks_CancelStopsTheUpstreamTask: tasks/cancel of a gateway task
// cancels it (tasks/get: cancelled) and the upstream's task it follows.
func TestTasks_CancelStopsTheUpstreamTask(t *testing.T) {
	up := newTaskUpstream(t)
	_, url := newGatewayServer(t, up.URL, Config{Guard: newGuard(t), Instrumentation: newTelemetryPair().config()})
	c := taskClient(t, url, "alice")
	params := map[string]any{"name": "export", "arguments": map[string]any{"what": "x"}, "task": map[string]any{"ttl": 60000}}
	id, _ := taskOf(t, c.rpc("tools/call", params))["taskId"].(string)
	for deadline := time.Now().Add(10 * time.Second); up.runs.Load() == 0 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if got := taskOf(t, c.rpc("tasks/cancel", map[string]any{"taskId": id})); got["status"] != "cancelled" {
		t.Fatalf("tasks/cancel: %v", got)
	}
	if got := taskOf(t, c.rpc("tasks/get", map[string]any{"taskId": id})); got["status"] != "cancelled" {
		t.Errorf("tasks/get after cancel: %v", got)
	}
	close(up.release)
}

// statusClient is an mcp-go client of the gateway with its GET stream open,
// keeping the task IDs of the notifications/tasks/status it receives.
type statusClient struct {
	c    *client.Client
	mu   sync.Mutex
	seen []string
	next int64
}

func newStatusClient(t *testing.T, url, token string) *statusClient {
	t.Helper()
	//lint:ignore SA1019 tasks and their status notifications are protocol 2025-11-25's, whose GET stream carries them
	listen := transport.WithContinuousListening()
	tr, err := transport.NewStreamableHTTP(url, listen, transport.WithHTTPHeaders(map[string]string{"Authorization": "Bearer " + token}))
	if err != nil {
		t.Fatal(err)
	}
	sc := &statusClient{c: client.NewClient(tr), next: 100}
	sc.c.OnNotification(func(n mcp.JSONRPCNotification) {
		if n.Method != mcpcall.NotificationTasksStatus {
			return
		}
		id, _ := n.Params.AdditionalFields["taskId"].(string)
		sc.mu.Lock()
		sc.seen = append(sc.seen, id)
		sc.mu.Unlock()
	})
	startClient(t, sc.c)
	return sc
}

// task makes a task-augmented call and returns the task ID it was given.
func (sc *statusClient) task(t *testing.T, tool string) string {
	t.Helper()
	sc.next++
	params := mcp.CallToolParams{Name: tool, Arguments: map[string]any{"what": "orders"}, Task: &mcp.TaskParams{}}
	resp, err := sc.c.GetTransport().SendRequest(context.Background(), transport.JSONRPCRequest{JSONRPC: mcp.JSONRPC_VERSION, ID: mcp.NewRequestId(sc.next), Method: "tools/call", Params: params})
	if err != nil || resp.Error != nil {
		t.Fatalf("%s as a task: %v %+v", tool, err, resp)
	}
	id := createdTaskID(resp.Result)
	if id == "" {
		t.Fatalf("%s: %s is not a CreateTaskResult", tool, resp.Result)
	}
	return id
}

func (sc *statusClient) saw(id string) bool {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	return slices.Contains(sc.seen, id)
}

// waitFor waits until the client has a status notification of task id.
func (sc *statusClient) waitFor(t *testing.T, id string) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); !sc.saw(id); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no notifications/tasks/status of task %s arrived", id)
		}
	}
}

// TestTasks_StatusNotificationsReachOnlyTheirCaller: mcp-go sends each
// task's status notification to every session it has; through the
// gateway a client gets those of the upstream tasks it was given only,
// never another caller's, nor that of the upstream task behind a gateway
// task (which the client knows by the gateway's ID).
func TestTasks_StatusNotificationsReachOnlyTheirCaller(t *testing.T) {
	s := server.NewMCPServer("tasks", "1", server.WithTaskCapabilities(true, true, true))
	// Each run waits for a release: a task long enough for its
	// CreateTaskResult to reach the gateway before it ends (a status that
	// comes first is dropped: the client was not given the task yet).
	release := make(chan struct{}, 8)
	done := func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		<-release
		return mcp.NewToolResultText("done " + req.Params.Name), nil
	}
	s.AddTool(mcp.NewTool("export", mcp.WithString("what"), mcp.WithTaskSupport(mcp.TaskSupportOptional)), done)
	s.AddTool(mcp.NewTool("report", mcp.WithString("what"), mcp.WithReadOnlyHintAnnotation(true), mcp.WithTaskSupport(mcp.TaskSupportOptional)), done)
	hs := httptest.NewServer(server.NewStreamableHTTPServer(s, server.WithStateful(true)))
	t.Cleanup(hs.Close)
	g, url := newGatewayServer(t, hs.URL+"/mcp", Config{Guard: newGuard(t), Instrumentation: newTelemetryPair().config()})
	alice, bob := newStatusClient(t, url, "alice"), newStatusClient(t, url, "bob")

	report := alice.task(t, "report") // read-only: forwarded, the upstream's task
	release <- struct{}{}
	alice.waitFor(t, report)
	export := alice.task(t, "export") // a write tool: the gateway's task, following one upstream
	var behind string
	for deadline := time.Now().Add(20 * time.Second); behind == ""; time.Sleep(5 * time.Millisecond) {
		g.mu.Lock()
		for _, ss := range g.sessions {
			ss.mu.Lock()
			if len(ss.followed.order) > 0 {
				behind = ss.followed.order[0]
			}
			ss.mu.Unlock()
		}
		g.mu.Unlock()
		if time.Now().After(deadline) {
			t.Fatal("the gateway task followed no upstream task")
		}
	}
	release <- struct{}{}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		// The gateway task ends after the upstream's, whose status
		// notification is then on its way to every session.
		task, err := alice.c.GetTask(context.Background(), mcp.GetTaskRequest{Params: mcp.GetTaskParams{TaskId: export}})
		if err == nil && task.Status == mcp.TaskStatusCompleted {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the export task did not complete: %v %v", task, err)
		}
	}
	// Notifications of one session arrive in order: once each client has
	// the status of a task that ended after alice's, alice's have come, or
	// never will.
	for _, c := range []*statusClient{alice, bob} {
		id := c.task(t, "report")
		release <- struct{}{}
		c.waitFor(t, id)
	}
	// Her tasks/list: the gateway's task and the upstream's report tasks
	// she was given, not the upstream task behind the gateway's.
	list, err := alice.c.ListTasks(context.Background(), mcp.ListTasksRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var listed []string
	for _, task := range list.Tasks {
		listed = append(listed, task.TaskId)
	}
	if !slices.Contains(listed, export) || !slices.Contains(listed, report) || slices.Contains(listed, behind) || len(listed) != 3 {
		t.Errorf("alice's tasks/list %v: want %s (the gateway's), %s and her second report (the upstream's), and not %s", listed, export, report, behind)
	}
	if alice.saw(behind) {
		t.Errorf("alice got the status of upstream task %s, which is behind her gateway task", behind)
	}
	for _, id := range []string{report, behind} {
		if bob.saw(id) {
			t.Errorf("bob got the status of alice's upstream task %s", id)
		}
	}
}
