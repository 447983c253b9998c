package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemkit-mcp/idemkit/examples/internal/refunds"
	"github.com/idemkit-mcp/idemkit/idemkit"
	"github.com/idemkit-mcp/idemkit/idemkit/idemstore"
	"github.com/idemkit-mcp/idemkit/idemkit/pgstore"
	"github.com/idemkit-mcp/idemkit/idemkit/sqlitestore"
	"github.com/idemkit-mcp/idemkit/internal/testing/pgtest"
	"github.com/idemkit-mcp/idemkit/spancontract"
)

// counts reads, in the files a killed server left, the refund rows and the
// exports of an order and the refunds the gateway made for it.
func counts(t *testing.T, dir, order string) (rows, exports, gateway int) {
	t.Helper()
	ctx := context.Background()
	db, err := refunds.OpenDB(ctx, filepath.Join(dir, "refunds.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	list, err := db.Refunds(ctx, order)
	if err != nil {
		t.Fatal(err)
	}
	if exports, err = db.Exports(ctx, order); err != nil {
		t.Fatal(err)
	}
	gw, err := refunds.OpenGateway(ctx, filepath.Join(dir, "gateway.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer gw.Close()
	if gateway, err = gw.Refunds(ctx, order); err != nil {
		t.Fatal(err)
	}
	return len(list), exports, gateway
}

func serverArgs(dir string, more ...string) []string {
	return append([]string{"-store", "sqlite", "-db", filepath.Join(dir, "refunds.db"), "-gateway-db", filepath.Join(dir, "gateway.db"),
		"-task-lease", "1s", "-job-lease", "1s"}, more...)
}

// pgArgs are serverArgs on the test's own PostgreSQL database
// (pgtest.Database: the desk keeps its tables and the store's in fixed
// schemas): the store and the desk's tables there, the gateway's ledger in
// dir.
func pgArgs(t *testing.T, dir string, more ...string) []string {
	return append([]string{"-store", "postgres", "-postgres-dsn", pgtest.Database(t), "-gateway-db", filepath.Join(dir, "gateway.db"),
		"-task-lease", "1s", "-job-lease", "1s"}, more...)
}

// pgCounts is counts on PostgreSQL.
func pgCounts(t *testing.T, dir, order string) (rows, gateway int) {
	t.Helper()
	ctx := context.Background()
	db, err := refunds.NewPostgresDB(ctx, pgtest.PoolOn(t, pgtest.Database(t)))
	if err != nil {
		t.Fatal(err)
	}
	list, err := db.Refunds(ctx, order)
	if err != nil {
		t.Fatal(err)
	}
	gw, err := refunds.OpenGateway(ctx, filepath.Join(dir, "gateway.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer gw.Close()
	if gateway, err = gw.Refunds(ctx, order); err != nil {
		t.Fatal(err)
	}
	return len(list), gateway
}

// A task-augmented refund is running when the server is SIGKILLed. After
// the restart the task is reported failed (lost) once its lease has run out,
// never "not found", never working forever; its duplicate gets the same
// task back; and the refund ran at most once (here: not at all, the process
// died before the gateway answered).
//
// On PostgreSQL: its refund holds a transaction for the gateway's latency,
// which on SQLite would hold the database's one write lock, and with it the
// task's heartbeats (see mcpgo.AddTxTool).
func TestKill_TaskThenRestart(t *testing.T) {
	dir := t.TempDir()
	p := startProcess(t, dir, pgArgs(t, dir, "-slow-latency", "30s")...)
	c := connect(t, p.url, "demo-token-alice")
	args := map[string]any{"name": "issue_refund", "arguments": map[string]any{"order_id": "ord_1004", "amount_cents": 700}, "task": map[string]any{"ttl": 60000}}
	created := result(t, c.call("tools/call", args))
	task, _ := created["task"].(map[string]any)
	id, _ := task["taskId"].(string)
	if id == "" || task["status"] != "working" {
		t.Fatalf("CreateTaskResult %v", created)
	}
	if got := result(t, c.call("tasks/get", map[string]any{"taskId": id})); got["status"] != "working" {
		t.Fatalf("before the kill: %v", got)
	}
	p.kill()

	p = startProcess(t, dir, pgArgs(t, dir, "-slow-latency", "30s")...)
	c = connect(t, p.url, "demo-token-alice")
	var final map[string]any
	eventually(t, 10*time.Second, "the killed task is reported failed", func() bool {
		final = result(t, c.call("tasks/get", map[string]any{"taskId": id}))
		switch final["status"] {
		case "working":
			return false
		case "failed":
			return true
		}
		t.Fatalf("after the restart: %v, want working until the lease runs out, then failed", final)
		return false
	})
	if msg, _ := final["statusMessage"].(string); !strings.Contains(msg, "lost") || !strings.Contains(msg, "will not run again") {
		t.Errorf("the lost task's statusMessage %q", msg)
	}
	if code, msg := rpcError(c.call("tasks/result", map[string]any{"taskId": id})); code != -32603 || !strings.Contains(msg, "lost") {
		t.Errorf("tasks/result of the lost task: %d %q", code, msg)
	}
	// The duplicate is answered with the same task, replayed: nothing new runs.
	dup := result(t, c.call("tools/call", args))
	if dup["task"].(map[string]any)["taskId"] != id || metaOf(dup, spancontract.ReplayMetaKey)["replayed"] != true {
		t.Fatalf("the duplicate after the restart: %v", dup)
	}
	if list := result(t, c.call("tasks/list", map[string]any{})); len(list["tasks"].([]any)) != 1 {
		t.Errorf("tasks/list %v", list)
	}
	p.kill()
	if rows, gw := pgCounts(t, dir, "ord_1004"); rows != 0 || gw != 0 {
		t.Errorf("ord_1004: %d refund rows, %d gateway refunds; the killed task must not have refunded (it died waiting for the gateway)", rows, gw)
	}
}

// An export job is running when the server is SIGKILLed. After the restart
// its status tool reports it lost (not "no job found") once its lease has
// run out, the duplicate start call gets the same job ID, and the export
// never happened.
func TestKill_JobThenRestart(t *testing.T) {
	dir := t.TempDir()
	p := startProcess(t, dir, serverArgs(dir, "-export-duration", "30s")...)
	c := connect(t, p.url, "demo-token-alice")
	start := map[string]any{"name": refunds.ToolExportRefunds, "arguments": map[string]any{"order_id": "ord_1007"}}
	started := result(t, c.call("tools/call", start))
	sc, _ := started["structuredContent"].(map[string]any)
	jobID, _ := sc["job_id"].(string)
	if !strings.HasPrefix(jobID, "job_") {
		t.Fatalf("start answer %v", started)
	}
	status := map[string]any{"name": refunds.ToolExportRefunds + "_status", "arguments": map[string]any{"job_id": jobID}}
	if st := result(t, c.call("tools/call", status)); metaOf(st, spancontract.JobMetaKey)["state"] != "running" {
		t.Fatalf("before the kill: %v", st)
	}
	p.kill()

	p = startProcess(t, dir, serverArgs(dir, "-export-duration", "30s")...)
	c = connect(t, p.url, "demo-token-alice")
	var st map[string]any
	eventually(t, 10*time.Second, "the killed job is reported lost", func() bool {
		st = result(t, c.call("tools/call", status))
		switch metaOf(st, spancontract.JobMetaKey)["state"] {
		case "running":
			return false
		case "lost":
			return true
		}
		t.Fatalf("after the restart: %v, want running until the lease runs out, then lost", st)
		return false
	})
	if st["isError"] != true || !strings.Contains(text(st), "was lost") || !strings.Contains(text(st), "will not run again by itself") {
		t.Errorf("the lost job's status %v", st)
	}
	dup := result(t, c.call("tools/call", start))
	if dsc, _ := dup["structuredContent"].(map[string]any); dsc["job_id"] != jobID || metaOf(dup, spancontract.ReplayMetaKey) == nil {
		t.Fatalf("the duplicate start after the restart: %v", dup)
	}
	p.kill()
	if _, exports, _ := counts(t, dir, "ord_1007"); exports != 0 {
		t.Errorf("%d exports of ord_1007: the killed job's work must not have run to its effect", exports)
	}
}

// issue_refund runs in atomic phases: its claim commits, the payment runs
// outside any transaction, then its refund row and its recorded outcome
// commit together. The process is killed after the payment (the gateway
// has refunded, keyed by the call's idempotency key) and before the local
// commit: once with the row not yet written, once with it written and
// uncommitted. No row remains, and the call stays in progress (its claim
// committed) until its lease runs out; then the duplicate takes it over,
// the gateway recognises the key and returns the refund it made, exactly
// one row is written, the next duplicate is a replay, and the key ends
// completed. On both SQL stores.
func TestKill_PhasedRefundBetweenPaymentAndCommit(t *testing.T) {
	for _, backend := range []string{"sqlite", "postgres"} {
		for _, hold := range []string{"after-payment", "after-write"} {
			t.Run(backend+"/"+hold, func(t *testing.T) { testKillPhased(t, backend, hold) })
		}
	}
}

func testKillPhased(t *testing.T, backend, hold string) {
	dir := t.TempDir()
	order := "ord_1001"
	if hold == "after-write" {
		order = "ord_1002"
	}
	if backend == "postgres" {
		// The PostgreSQL database is shared by the package's tests: orders
		// of their own.
		order = "ord_1013"
		if hold == "after-write" {
			order = "ord_1015"
		}
	}
	// The payment server runs in the test's process, outside the desk
	// that is killed, as a provider would: it sees every request and the
	// key each carried.
	gateway, err := refunds.OpenGateway(context.Background(), ":memory:")
	if err != nil {
		t.Fatal(err)
	}
	defer gateway.Close()
	gatewayURL, stopGateway, err := refunds.ServeGateway(gateway)
	if err != nil {
		t.Fatal(err)
	}
	defer stopGateway(context.Background())
	args := func(dir string, more ...string) []string {
		return serverArgs(dir, append([]string{"-gateway-url", gatewayURL}, more...)...)
	}
	if backend == "postgres" {
		args = func(dir string, more ...string) []string {
			return pgArgs(t, dir, append([]string{"-gateway-url", gatewayURL}, more...)...)
		}
	}
	rows := func() (int, int) {
		var r int
		if backend == "postgres" {
			r, _ = pgCounts(t, dir, order)
		} else {
			r, _, _ = counts(t, dir, order)
		}
		g, err := gateway.Refunds(context.Background(), order)
		if err != nil {
			t.Fatal(err)
		}
		return r, g
	}
	// The key the instrumentation derives for the call.
	k, err := idemkit.NewKey("user:alice", refunds.ToolIssueRefund, []byte(`{"order_id":"`+order+`","amount_cents":1200}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	record := func() (idemstore.Record, error) {
		var store idemstore.Store
		if backend == "postgres" {
			if store, err = pgstore.New(pgtest.PoolOn(t, pgtest.Database(t)), nil); err != nil {
				t.Fatal(err)
			}
		} else {
			s, err := sqlitestore.Open(context.Background(), filepath.Join(dir, "refunds.db"), nil)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			store = s
		}
		return store.Lookup(context.Background(), idemstore.LookupRequest{Key: k.ID()})
	}
	const lease = "3s"

	held := filepath.Join(dir, "held")
	p := startProcess(t, dir, args(dir, "-lease", lease, "-fault-hold-"+hold, held)...)
	c := connect(t, p.url, "demo-token-alice")
	call := map[string]any{"name": "issue_refund", "arguments": map[string]any{"order_id": order, "amount_cents": 1200}}
	done := make(chan error, 1)
	go func() {
		_, err := c.try("tools/call", call)
		done <- err
	}()
	eventually(t, 10*time.Second, "the payment is made, the row not committed", func() bool {
		_, err := os.Stat(held)
		return err == nil
	})
	p.kill()
	if err := <-done; err == nil {
		t.Fatal("the killed call answered")
	}
	if r, gw := rows(); r != 0 || gw != 1 {
		t.Fatalf("after the kill: %d refund rows, %d gateway refunds; want no row and the gateway's one refund", r, gw)
	}
	if rec, err := record(); err != nil || rec.State != idemstore.StateInProgress {
		t.Fatalf("after the kill the claim record: %+v, %v; want in progress (the claim committed before the payment)", rec, err)
	}

	p = startProcess(t, dir, args(dir, "-lease", lease)...)
	c = connect(t, p.url, "demo-token-alice")
	var again map[string]any
	eventually(t, 30*time.Second, "the duplicate takes the call over once its lease has run out", func() bool {
		again = result(t, c.call("tools/call", call))
		if again["isError"] == true {
			if reason := metaOf(again, spancontract.RefusalMetaKey)["reason"]; reason != "in_progress" {
				t.Fatalf("the duplicate after the restart: %v; want in progress until the lease runs out, then the refund", again)
			}
			return false
		}
		return true
	})
	if metaOf(again, spancontract.ReplayMetaKey) != nil || !strings.Contains(text(again), "recognised the idempotency key") {
		t.Fatalf("the takeover: %v, want it to run, and the gateway to return its refund", again)
	}
	replay := result(t, c.call("tools/call", call))
	if metaOf(replay, spancontract.ReplayMetaKey)["replayed"] != true {
		t.Fatalf("the next duplicate: %v, want a replay", replay)
	}
	p.kill()
	if r, gw := rows(); r != 1 || gw != 1 {
		t.Fatalf("in the end: %d refund rows, %d gateway refunds; want one of each", r, gw)
	}
	rec, err := record()
	if err != nil || rec.State != idemstore.StateCompleted || rec.Attempt != 2 {
		t.Fatalf("in the end the claim record: %+v, %v; want completed by attempt 2", rec, err)
	}
	// The payment server saw the refund twice (the killed attempt and the
	// takeover), both times with the record's downstream key, and charged
	// once: the second request was answered with the first one's refund.
	want := idemkit.DownstreamKey(k.ID(), rec.Generation)
	reqs := gateway.Requests(order)
	if len(reqs) != 2 || reqs[0].Key != want || reqs[1].Key != want || reqs[0].Replayed || !reqs[1].Replayed || reqs[1].Ref != reqs[0].Ref {
		t.Fatalf("the payment server's requests for %s: %+v; want two, both with key %s, the second a replay of the first", order, reqs, want)
	}
}
