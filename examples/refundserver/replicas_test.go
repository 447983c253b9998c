package main

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/idemkit-mcp/idemkit/examples/internal/refunds"
	"github.com/idemkit-mcp/idemkit/idemkit"
	"github.com/idemkit-mcp/idemkit/idemkit/pgstore"
	"github.com/idemkit-mcp/idemkit/instrument"
	"github.com/idemkit-mcp/idemkit/instrument/jobs"
	"github.com/idemkit-mcp/idemkit/internal/testing/pgtest"
	"github.com/idemkit-mcp/idemkit/spancontract"
)

// replica is one refund desk replica: its own pool, store, Guard, tasks
// and jobs, on the shared PostgreSQL database.
type replica struct {
	url string
	db  *refunds.DB
}

func startReplica(t *testing.T, gw *refunds.Gateway, sdk string) *replica {
	t.Helper()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, pgtest.Database(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	store, err := pgstore.New(pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	db, err := refunds.NewPostgresDB(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	guard, err := idemkit.NewGuard(store, nil)
	if err != nil {
		t.Fatal(err)
	}
	tp, mp := sdktrace.NewTracerProvider(), sdkmetric.NewMeterProvider()
	desk, err := refunds.NewServer(refunds.Config{DB: db, Gateway: gw, Guard: guard, SDK: sdk, TracerProvider: tp, MeterProvider: mp,
		Tokens: refunds.DemoTokens, FastLatency: time.Millisecond, SlowLatency: time.Second, ExportDuration: 200 * time.Millisecond,
		Tasks: instrument.TasksConfig{Lease: 2 * time.Second, Heartbeat: 50 * time.Millisecond, PollInterval: 50 * time.Millisecond},
		Jobs:  jobs.Config{Lease: 2 * time.Second, Heartbeat: 50 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(desk.Handler)
	t.Cleanup(func() {
		hs.Close()
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_ = desk.Close(cctx)
		_ = tp.Shutdown(ctx)
		_ = mp.Shutdown(ctx)
	})
	return &replica{url: hs.URL, db: db}
}

// Two replicas of the refund desk on one PostgreSQL database share tasks,
// jobs and transactional refunds: what one starts, the other answers.
func TestReplicas_SharePostgres(t *testing.T) {
	gw, err := refunds.OpenGateway(context.Background(), ":memory:")
	if err != nil {
		t.Fatal(err)
	}
	defer gw.Close()
	a, b := startReplica(t, gw, refunds.SDKMCPGo), startReplica(t, gw, refunds.SDKMCPGo)
	ca := connect(t, a.url, "demo-token-alice")
	cb := connect(t, b.url, "demo-token-alice")
	rows := func(order string) int {
		list, err := a.db.Refunds(context.Background(), order)
		if err != nil {
			t.Fatal(err)
		}
		return len(list)
	}

	// A task created on A is answered on B: its status, its result, the
	// duplicate sent to B (A's task, replayed), its listing.
	taskCall := map[string]any{"name": "issue_refund", "arguments": map[string]any{"order_id": "ord_1010", "amount_cents": 300}, "task": map[string]any{}}
	created := result(t, ca.call("tools/call", taskCall))
	id := created["task"].(map[string]any)["taskId"].(string)
	dup := result(t, cb.call("tools/call", taskCall))
	if dup["task"].(map[string]any)["taskId"] != id || metaOf(dup, spancontract.ReplayMetaKey)["replayed"] != true {
		t.Fatalf("the duplicate on replica B: %v, want A's task %s, replayed", dup, id)
	}
	res := result(t, cb.call("tasks/result", map[string]any{"taskId": id}))
	related, _ := res["_meta"].(map[string]any)["io.modelcontextprotocol/related-task"].(map[string]any)
	if res["isError"] == true || !strings.Contains(text(res), "Refunded $3.00 on order ord_1010") || related["taskId"] != id {
		t.Fatalf("tasks/result on B: %v", res)
	}
	if got := result(t, cb.call("tasks/get", map[string]any{"taskId": id})); got["status"] != "completed" {
		t.Fatalf("tasks/get on B: %v", got)
	}
	if list := result(t, cb.call("tasks/list", map[string]any{})); !strings.Contains(strings.Join(taskIDs(list), ","), id) {
		t.Fatalf("tasks/list on B: %v", list)
	}
	if rows("ord_1010") != 1 {
		t.Fatalf("ord_1010: %d refund rows, want 1", rows("ord_1010"))
	}

	// A task running on A (the slow gateway) is cancelled on B: it stops,
	// and both report it cancelled.
	slow := map[string]any{"name": "issue_refund", "arguments": map[string]any{"order_id": "ord_1012", "amount_cents": 100}, "task": map[string]any{}}
	sid := result(t, ca.call("tools/call", slow))["task"].(map[string]any)["taskId"].(string)
	if got := result(t, cb.call("tasks/cancel", map[string]any{"taskId": sid})); got["status"] != "cancelled" {
		t.Fatalf("tasks/cancel on B: %v", got)
	}
	if got := result(t, ca.call("tasks/get", map[string]any{"taskId": sid})); got["status"] != "cancelled" {
		t.Fatalf("tasks/get on A after B cancelled: %v", got)
	}
	// A learns of the cancel at its next heartbeat and stops the work
	// before the gateway (which it would call after a second).
	time.Sleep(1500 * time.Millisecond)
	if n, err := gw.Refunds(context.Background(), "ord_1012"); err != nil || n != 0 || rows("ord_1012") != 0 {
		t.Fatalf("the cancelled task refunded: %d gateway refunds (%v), %d rows", n, err, rows("ord_1012"))
	}

	// A job started on A is reported by B; the duplicate start on B gets
	// A's job.
	start := map[string]any{"name": refunds.ToolExportRefunds, "arguments": map[string]any{"order_id": "ord_1010"}}
	jobID := result(t, ca.call("tools/call", start))["structuredContent"].(map[string]any)["job_id"].(string)
	if dsc := result(t, cb.call("tools/call", start))["structuredContent"].(map[string]any); dsc["job_id"] != jobID {
		t.Fatalf("the duplicate job start on B: %v, want %s", dsc, jobID)
	}
	status := map[string]any{"name": refunds.ToolExportRefunds + "_status", "arguments": map[string]any{"job_id": jobID}}
	var st map[string]any
	eventually(t, 10*time.Second, "the job ends", func() bool {
		st = result(t, cb.call("tools/call", status))
		return metaOf(st, spancontract.JobMetaKey)["state"] != "running"
	})
	if metaOf(st, spancontract.JobMetaKey)["state"] != "succeeded" || !strings.Contains(text(st), "Exported the 1 refund(s) of order ord_1010") {
		t.Fatalf("the job's status on B: %v", st)
	}
	if n, err := a.db.Exports(context.Background(), "ord_1010"); err != nil || n != 1 {
		t.Fatalf("ord_1010: %d exports (%v), want 1", n, err)
	}

	// A plain (transactional) refund on B, its duplicate on A: one row.
	plain := map[string]any{"name": "issue_refund", "arguments": map[string]any{"order_id": "ord_1011", "amount_cents": 250}}
	first := result(t, cb.call("tools/call", plain))
	again := result(t, ca.call("tools/call", plain))
	if first["isError"] == true || metaOf(again, spancontract.ReplayMetaKey)["replayed"] != true || rows("ord_1011") != 1 {
		t.Fatalf("plain refund on B %v, duplicate on A %v, %d rows", first, again, rows("ord_1011"))
	}
	// bob sees none of alice's tasks.
	bob := connect(t, b.url, "demo-token-bob")
	if code, _ := rpcError(bob.call("tasks/get", map[string]any{"taskId": id})); code != -32602 {
		t.Errorf("bob's tasks/get of alice's task: code %d, want -32602", code)
	}
}

func taskIDs(list map[string]any) []string {
	var out []string
	tasks, _ := list["tasks"].([]any)
	for _, t := range tasks {
		if m, ok := t.(map[string]any); ok {
			if id, ok := m["taskId"].(string); ok {
				out = append(out, id)
			}
		}
	}
	return out
}

// The go-sdk's transactional handler form on PostgreSQL (a pgx.Tx): a
// refund on one replica, its duplicate on another, one row; the task
// methods are refused (-32601), the task-augmented call runs as a plain
// call.
func TestReplicas_GoSDKOnPostgres(t *testing.T) {
	gw, err := refunds.OpenGateway(context.Background(), ":memory:")
	if err != nil {
		t.Fatal(err)
	}
	defer gw.Close()
	a, b := startReplica(t, gw, refunds.SDKGoSDK), startReplica(t, gw, refunds.SDKGoSDK)
	ca := connect(t, a.url, "demo-token-alice")
	cb := connect(t, b.url, "demo-token-alice")
	plain := map[string]any{"name": "issue_refund", "arguments": map[string]any{"order_id": "ord_1014", "amount_cents": 150}}
	first := result(t, ca.call("tools/call", plain))
	withTask := map[string]any{"name": "issue_refund", "arguments": map[string]any{"order_id": "ord_1014", "amount_cents": 150}, "task": map[string]any{}}
	again := result(t, cb.call("tools/call", withTask))
	list, err := a.db.Refunds(context.Background(), "ord_1014")
	if err != nil {
		t.Fatal(err)
	}
	if first["isError"] == true || metaOf(again, spancontract.ReplayMetaKey)["replayed"] != true || text(again) != text(first) || len(list) != 1 {
		t.Fatalf("go-sdk on PostgreSQL: first %v, the task-augmented duplicate on B %v, %d rows", first, again, len(list))
	}
	if code, _ := rpcError(cb.call("tasks/get", map[string]any{"taskId": "task-x"})); code != -32601 {
		t.Errorf("tasks/get on the go-sdk: code %d, want -32601", code)
	}
}
