package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/idemkit-mcp/idemkit/examples/internal/refunds"
	"github.com/idemkit-mcp/idemkit/idemkit"
	"github.com/idemkit-mcp/idemkit/idemkit/sqlitestore"
	"github.com/idemkit-mcp/idemkit/instrument"
)

// tsResult is what testdata/tsclient/client.mjs prints.
type tsResult struct {
	SessionID          string            `json:"sessionId"`
	ReconnectSessionID string            `json:"reconnectSessionId"`
	Tools              map[string]tsTool `json:"tools"`
	Mistyped           []tsCall          `json:"mistyped"`
	First              tsCall            `json:"first"`
	Second             tsCall            `json:"second"`
	Keyed              tsCall            `json:"keyed"`
	Mismatch           tsCall            `json:"mismatch"`
	Concurrent         []tsCall          `json:"concurrent"`
	AfterReconnect     tsCall            `json:"afterReconnect"`
	TasksCapability    bool              `json:"tasksCapability"`
	TaskFirst          tsTask            `json:"taskFirst"`
	TaskDuplicate      tsTask            `json:"taskDuplicate"`
	StreamTaskID       string            `json:"streamTaskId"`
	TaskEvents         []string          `json:"taskEvents"`
	TaskResult         tsCall            `json:"taskResult"`
	TaskError          string            `json:"taskError"`
	TaskGet            string            `json:"taskGet"`
	TaskList           []string          `json:"taskList"`
	CancelCompleted    int               `json:"cancelCompleted"`
}

type tsTask struct {
	TaskID   string `json:"taskId"`
	Status   string `json:"status"`
	Replayed bool   `json:"replayed"`
}

type tsTool struct {
	HasKey      bool `json:"hasKey"`
	RetriesSafe bool `json:"retriesSafe"`
}

type tsCall struct {
	IsError    bool   `json:"isError"`
	Text       string `json:"text"`
	Replayed   bool   `json:"replayed"`
	WriteID    string `json:"writeID"`
	Refusal    string `json:"refusal"`
	StatusTool string `json:"statusTool"`
	RefundID   string `json:"refundID"`
}

// tsClient returns the folder of client.mjs with its node_modules: the
// committed package.json and package-lock.json installed with npm ci into a
// cache folder outside the repository, keyed by the lockfile's hash. Without
// node or npm the test is skipped, except under CI=true, where it fails.
func tsClient(t *testing.T) (node, dir string) {
	t.Helper()
	node, nerr := exec.LookPath("node")
	npm, perr := exec.LookPath("npm")
	if nerr != nil || perr != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("node and npm (Node 20) are needed to run the official TypeScript SDK client: %v %v", nerr, perr)
		}
		t.Skip("node or npm not installed; CI=true makes this a failure")
	}
	src := filepath.Join("testdata", "tsclient")
	lock, err := os.ReadFile(filepath.Join(src, "package-lock.json"))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(lock)
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	dir = filepath.Join(cache, "idemkit", "tsclient-"+hex.EncodeToString(sum[:8]))
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@modelcontextprotocol", "sdk", "package.json")); err != nil {
		// Install next to the cache folder, then move it in place: a
		// concurrent run never sees half an install.
		if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
			t.Fatal(err)
		}
		tmp, err := os.MkdirTemp(filepath.Dir(dir), "install-")
		if err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(tmp)
		for _, f := range []string{"package.json", "package-lock.json"} {
			b, err := os.ReadFile(filepath.Join(src, f))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(tmp, f), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		cmd := exec.Command(npm, "ci", "--no-audit", "--no-fund", "--loglevel=error")
		cmd.Dir = tmp
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("npm ci: %v\n%s", err, out)
		}
		if err := os.Rename(tmp, dir); err != nil {
			if _, statErr := os.Stat(dir); statErr != nil { // nor installed by a concurrent run
				t.Fatal(err)
			}
		}
	}
	b, err := os.ReadFile(filepath.Join(src, "client.mjs"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "client.mjs"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	return node, dir
}

// TestTypeScriptClient drives the refund desk, served by each SDK, with the
// official MCP TypeScript SDK client (npm @modelcontextprotocol/sdk) over
// Streamable HTTP, and checks the answers it got and the refunds written.
func TestTypeScriptClient(t *testing.T) {
	node, dir := tsClient(t)
	for _, sdk := range []string{refunds.SDKMCPGo, refunds.SDKGoSDK} {
		t.Run(sdk, func(t *testing.T) {
			ctx := context.Background()
			// The SQLite store holds the desk's tables: issue_refund writes
			// its row in the transaction of its claim.
			store, err := sqlitestore.Open(ctx, filepath.Join(t.TempDir(), "refunds.db"), nil)
			if err != nil {
				t.Fatal(err)
			}
			db, err := refunds.NewSQLiteDB(ctx, store.DB(), store.ReadDB())
			if err != nil {
				t.Fatal(err)
			}
			guard, err := idemkit.NewGuard(store, nil)
			if err != nil {
				t.Fatal(err)
			}
			tp, mp := sdktrace.NewTracerProvider(), sdkmetric.NewMeterProvider()
			desk, err := refunds.NewServer(refunds.Config{DB: db, SDK: sdk, Guard: guard, TracerProvider: tp, MeterProvider: mp,
				Tokens: refunds.DemoTokens, FastLatency: time.Millisecond, SlowLatency: 500 * time.Millisecond,
				Tasks: instrument.TasksConfig{PollInterval: 50 * time.Millisecond}})
			if err != nil {
				t.Fatal(err)
			}
			hs := httptest.NewServer(desk.Handler)
			t.Cleanup(func() {
				hs.Close()
				_ = desk.Close(ctx)
				_ = store.Close()
				_ = tp.Shutdown(ctx)
				_ = mp.Shutdown(ctx)
			})

			cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(cctx, node, "client.mjs", hs.URL, "demo-token-alice")
			cmd.Dir = dir
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if err := cmd.Run(); err != nil {
				t.Fatalf("node client.mjs: %v\n%s", err, stderr.String())
			}
			t.Logf("the client saw: %s", stdout.String())
			var r tsResult
			if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
				t.Fatalf("%v: %s", err, stdout.String())
			}
			check(t, r, db)
			checkTasks(t, sdk, r, db)
		})
	}
}

func check(t *testing.T, r tsResult, db *refunds.DB) {
	t.Helper()
	if r.SessionID == "" || r.ReconnectSessionID == "" || r.SessionID == r.ReconnectSessionID {
		t.Errorf("sessions %q, %q", r.SessionID, r.ReconnectSessionID)
	}
	if w := r.Tools[refunds.ToolIssueRefund]; !w.HasKey || !w.RetriesSafe {
		t.Errorf("issue_refund in tools/list: %+v", w)
	}
	for _, name := range []string{refunds.ToolLookupOrder, refunds.ToolRefundStatus} {
		if rt := r.Tools[name]; rt.HasKey || rt.RetriesSafe {
			t.Errorf("%s advertised as protected: %+v", name, rt)
		}
	}
	for i, c := range r.Mistyped {
		if !c.IsError || c.Refusal != "invalid_arguments" {
			t.Errorf("mistyped call %d: %+v", i, c)
		}
	}
	if r.First.IsError || r.First.Replayed || !r.Second.Replayed || r.Second.RefundID != r.First.RefundID || r.Second.WriteID != r.First.RefundID {
		t.Errorf("first %+v, second %+v", r.First, r.Second)
	}
	if r.Keyed.IsError || !r.Mismatch.IsError || r.Mismatch.Refusal != "mismatch" {
		t.Errorf("keyed %+v, mismatch %+v", r.Keyed, r.Mismatch)
	}
	ran, held := 0, 0
	for _, c := range r.Concurrent {
		switch {
		case !c.IsError && !c.Replayed:
			ran++
		case c.Refusal == "in_progress" && c.StatusTool == refunds.ToolRefundStatus, c.Replayed:
			held++
		default:
			t.Errorf("concurrent answer %+v", c)
		}
	}
	if ran != 1 || held != len(r.Concurrent)-1 {
		t.Errorf("concurrent: %d ran, %d held back", ran, held)
	}
	if !r.AfterReconnect.Replayed || r.AfterReconnect.RefundID != r.First.RefundID {
		t.Errorf("after a reconnect: %+v", r.AfterReconnect)
	}
	for order, want := range map[string]int{"ord_1001": 0, "ord_1003": 1, "ord_1004": 1, "ord_1005": 1} {
		list, err := db.Refunds(context.Background(), order)
		if err != nil {
			t.Fatal(err)
		}
		if len(list) != want {
			t.Errorf("%s: %d refunds, want %d", order, len(list), want)
		}
	}
}

// checkTasks checks what the TypeScript client saw of MCP tasks: on mcp-go
// one task for the refund, its duplicates answered with it (replayed), its
// result through the SDK's task stream, one refund written; the go-sdk
// advertises no tasks.
func checkTasks(t *testing.T, sdk string, r tsResult, db *refunds.DB) {
	t.Helper()
	rows, err := db.Refunds(context.Background(), "ord_1006")
	if err != nil {
		t.Fatal(err)
	}
	if sdk == refunds.SDKGoSDK {
		if r.TasksCapability || len(rows) != 0 {
			t.Errorf("the go-sdk server advertised tasks (%v) or refunded ord_1006 (%d rows)", r.TasksCapability, len(rows))
		}
		return
	}
	if !r.TasksCapability {
		t.Fatal("the mcp-go server does not advertise task-augmented tools/call")
	}
	id := r.TaskFirst.TaskID
	if id == "" || r.TaskFirst.Replayed || r.TaskFirst.Status != "working" {
		t.Errorf("first task-augmented call: %+v", r.TaskFirst)
	}
	if r.TaskDuplicate.TaskID != id || !r.TaskDuplicate.Replayed {
		t.Errorf("duplicate task-augmented call: %+v, want task %s replayed", r.TaskDuplicate, id)
	}
	if r.StreamTaskID != id || r.TaskError != "" || r.TaskResult.RefundID == "" || r.TaskResult.IsError {
		t.Errorf("the SDK's task stream: task %s, result %+v, error %q", r.StreamTaskID, r.TaskResult, r.TaskError)
	}
	if len(r.TaskEvents) < 3 || r.TaskEvents[0] != "taskCreated" || r.TaskEvents[len(r.TaskEvents)-1] != "result" {
		t.Errorf("task stream events %v", r.TaskEvents)
	}
	if r.TaskGet != "completed" || !slices.Contains(r.TaskList, id) || r.CancelCompleted != -32602 {
		t.Errorf("tasks/get %q, tasks/list %v, cancel of the completed task %d", r.TaskGet, r.TaskList, r.CancelCompleted)
	}
	if len(rows) != 1 || rows[0].ID != r.TaskResult.RefundID {
		t.Errorf("ord_1006: %d refund rows (%v), want the task's one refund %s", len(rows), rows, r.TaskResult.RefundID)
	}
}
