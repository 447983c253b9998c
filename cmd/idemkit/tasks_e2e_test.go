package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemkit-mcp/idemkit/cmd/idemkit/internal/tsfixture"
)

// taskAnswer is a CreateTaskResult or a tasks/get answer.
type taskAnswer struct {
	Task   *taskObject    `json:"task"`
	Meta   map[string]any `json:"_meta"`
	TaskID string         `json:"taskId"`
	Status string         `json:"status"`
}

type taskObject struct {
	TaskID string `json:"taskId"`
	Status string `json:"status"`
}

func request(c *tsfixture.Client, conn, method string, params map[string]any) tsfixture.Answer {
	return c.Do(map[string]any{"op": "request", "conn": conn, "method": method, "params": params})
}

func decodeTask(t *testing.T, a tsfixture.Answer) taskAnswer {
	t.Helper()
	if !a.OK {
		t.Fatalf("the request failed: %s", a.Error)
	}
	var r taskAnswer
	if err := json.Unmarshal(a.Result, &r); err != nil {
		t.Fatalf("%s: %v", a.Result, err)
	}
	if r.Task != nil {
		r.TaskID, r.Status = r.Task.TaskID, r.Task.Status
	}
	return r
}

// TestTasks_TypeScript_ReadableOnANewSessionAndAfterARestart: the
// TypeScript server keeps a task on the session that created it. Behind
// the gateway, the TypeScript client's task-augmented call is a task the
// gateway keeps in its SQLite store: the call's duplicate on a new session
// gets the first CreateTaskResult back, tasks/get and tasks/result answer
// for it on that session, another caller gets "not found", and a restarted
// gateway on the same store still answers; the work ran once. Over
// Streamable HTTP and over stdio.
func TestTasks_TypeScript_ReadableOnANewSessionAndAfterARestart(t *testing.T) {
	t.Parallel()
	run := func(t *testing.T, start func() *gatewayProc, log string) {
		gw := start()
		c := tsfixture.StartClient(t)
		c.MustDo(map[string]any{"op": "connect", "conn": "a", "url": gw.URL, "token": "alice"})
		params := map[string]any{"name": "export_task", "arguments": map[string]any{"name": "q4", "delay_ms": 600}, "task": map[string]any{"ttl": 60000}}
		created := decodeTask(t, request(c, "a", "tools/call", params))
		id := created.TaskID
		if id == "" || created.Meta["io.idemkit/replay"] != nil {
			t.Fatalf("CreateTaskResult %+v", created)
		}
		c.MustDo(map[string]any{"op": "connect", "conn": "a2", "url": gw.URL, "token": "alice"})
		dup := decodeTask(t, request(c, "a2", "tools/call", params))
		if dup.TaskID != id || dup.Meta["io.idemkit/replay"] == nil {
			t.Fatalf("the duplicate on a new session: %+v, want task %s replayed", dup, id)
		}
		if got := decodeTask(t, request(c, "a2", "tasks/get", map[string]any{"taskId": id})); got.TaskID != id {
			t.Errorf("tasks/get on the new session: %+v", got)
		}
		res := decodeResult(t, request(c, "a2", "tasks/result", map[string]any{"taskId": id}))
		if !strings.Contains(res.text(), "done for q4") || res.StructuredContent["export_id"] == nil {
			t.Errorf("tasks/result on the new session: %+v", res)
		}
		c.MustDo(map[string]any{"op": "connect", "conn": "b", "url": gw.URL, "token": "bob"})
		if a := request(c, "b", "tasks/get", map[string]any{"taskId": id}); a.OK || !strings.Contains(strings.ToLower(a.Error), "not found") {
			t.Errorf("another caller's tasks/get: %+v", a)
		}
		if got := decodeTask(t, request(c, "a2", "tasks/get", map[string]any{"taskId": id})); got.Status != "completed" {
			t.Errorf("tasks/get after the end: %+v", got)
		}

		gw.Stop()
		gw2 := start()
		c.MustDo(map[string]any{"op": "connect", "conn": "a3", "url": gw2.URL, "token": "alice"})
		if got := decodeTask(t, request(c, "a3", "tasks/get", map[string]any{"taskId": id})); got.Status != "completed" {
			t.Errorf("tasks/get after a restart: %+v", got)
		}
		again := decodeResult(t, request(c, "a3", "tasks/result", map[string]any{"taskId": id}))
		if again.StructuredContent["export_id"] != res.StructuredContent["export_id"] {
			t.Errorf("tasks/result after a restart: %+v, want %+v", again, res)
		}
		if d := decodeTask(t, request(c, "a3", "tools/call", params)); d.TaskID != id {
			t.Errorf("the duplicate after a restart: %+v", d)
		}
		if n := countExecutions(t, log, "export_task"); n != 1 {
			t.Errorf("export_task ran %d times, want 1", n)
		}
	}
	t.Run("http", func(t *testing.T) {
		srv := tsfixture.StartHTTPServer(t, tsfixture.ServerOptions{})
		db := "sqlite:" + filepath.Join(t.TempDir(), "idemkit.db")
		run(t, func() *gatewayProc { return startGateway(t, "--upstream", srv.URL, "--store", db) }, srv.Log)
	})
	t.Run("stdio", func(t *testing.T) {
		dir := t.TempDir()
		log, db := filepath.Join(dir, "executions.jsonl"), "sqlite:"+filepath.Join(dir, "idemkit.db")
		run(t, func() *gatewayProc {
			return startGatewayEnv(t, []string{"FIXTURE_LOG=" + log}, append([]string{"--store", db, "--"}, stdioServer(t)...)...)
		}, log)
	})
}
