package sqlitestore_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemkit-mcp/idemkit/idemkit"
)

// refunds counts the side effects recorded in the database.
func refunds(t *testing.T, db *sql.DB) int {
	t.Helper()
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM refunds`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// mustNotRun is work a replay must not run.
func mustNotRun(t *testing.T) idemkit.Work {
	return func(context.Context) (idemkit.Response, error) {
		t.Errorf("work ran, but the call should have been replayed")
		return idemkit.Response{}, nil
	}
}

func testReplayAfterRestart(t *testing.T, mode string, kill bool) {
	path := filepath.Join(t.TempDir(), "idemkit.db")
	line := startChild(t, mode, path, "done", kill)
	firstBody := strings.TrimPrefix(line, "done ")

	store := openPath(t, path, nil)
	g, err := idemkit.NewGuard(store, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := g.Do(context.Background(), refundKey(), mustNotRun(t))
	if err != nil {
		t.Fatalf("duplicate after restart: %v", err)
	}
	if res.Outcome != idemkit.OutcomeReplayed || string(res.Body) != firstBody || res.WriteID == "" || res.Attempt != 1 {
		t.Fatalf("duplicate after restart: outcome %s body %q write ID %q attempt %d; want replayed %q, attempt 1",
			res.Outcome, res.Body, res.WriteID, res.Attempt, firstBody)
	}
	if n := refunds(t, store.DB()); n != 1 {
		t.Fatalf("%d refunds in the database, want 1", n)
	}
}

func TestRestart_DuplicateIsReplayedAfterCleanExit(t *testing.T) {
	testReplayAfterRestart(t, childDoExit, false)
}

func TestRestart_DuplicateIsReplayedAfterSIGKILL(t *testing.T) {
	testReplayAfterRestart(t, childDoHang, true)
}

// A crash between the side effect and the finish loses nothing and doubles
// nothing when the side effect commits with the claim (DoTx): the
// transaction dies whole, and the retry runs the work exactly once.
func TestRestart_DoTxKilledBeforeFinishRunsExactlyOnceInTotal(t *testing.T) {
	path := filepath.Join(t.TempDir(), "idemkit.db")
	startChild(t, childDoTxHangBeforeFinish, path, "side-effect", true)

	ctx := context.Background()
	store := openPath(t, path, nil)
	if n := refunds(t, store.DB()); n != 0 {
		t.Fatalf("%d refunds after the killed transaction, want 0 (it never committed)", n)
	}
	g, err := idemkit.NewGuard(store, nil)
	if err != nil {
		t.Fatal(err)
	}
	retry := func() idemkit.Result {
		tx, err := store.DB().BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		res, err := store.DoTx(ctx, g, tx, refundKey(), func(ctx context.Context, tx *sql.Tx) (idemkit.Response, error) {
			return insertRefund(ctx, tx)
		})
		if err != nil {
			t.Fatalf("retry after restart: %v", err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		return res
	}
	res := retry()
	if res.Outcome != idemkit.OutcomeExecuted || res.Attempt != 1 {
		t.Fatalf("retry after restart: outcome %s attempt %d, want executed attempt 1 (the killed claim never committed)", res.Outcome, res.Attempt)
	}
	again := retry()
	if again.Outcome != idemkit.OutcomeReplayed || string(again.Body) != string(res.Body) {
		t.Fatalf("second retry: outcome %s body %q, want the retry's %q replayed", again.Outcome, again.Body, res.Body)
	}
	if n := refunds(t, store.DB()); n != 1 {
		t.Fatalf("%d refunds in the database, want exactly 1", n)
	}
}

// Without DoTx, a side effect committed on its own before a crash is the
// residual window the seed article describes: the claim stays in progress
// until its lease runs out, then a duplicate takes it over and runs the work
// again, told so by Attempt 2 (and Call.Attempt), which is why the Guard
// hands the work an idempotency key to forward downstream.
func TestRestart_DoKilledBeforeFinishIsTakenOverAfterTheLease(t *testing.T) {
	path := filepath.Join(t.TempDir(), "idemkit.db")
	startChild(t, childDoHangBeforeFinish, path, "side-effect", true)

	ctx := context.Background()
	store := openPath(t, path, nil)
	g, err := idemkit.NewGuard(store, nil)
	if err != nil {
		t.Fatal(err)
	}
	work := func(ctx context.Context) (idemkit.Response, error) {
		if a := idemkit.CallFromContext(ctx).Attempt(); a != 2 {
			t.Errorf("work sees attempt %d, want 2", a)
		}
		return insertRefund(ctx, store.DB())
	}
	// Inside the dead attempt's lease the duplicate is told to wait (unless
	// a slow machine took longer than the lease to get here).
	res, err := g.Do(ctx, refundKey(), work)
	var ip *idemkit.InProgressError
	if errors.As(err, &ip) {
		time.Sleep(ip.RetryAfter + 50*time.Millisecond)
		res, err = g.Do(ctx, refundKey(), work)
	}
	if err != nil || res.Outcome != idemkit.OutcomeTakeover || res.Attempt != 2 {
		t.Fatalf("duplicate after the lease: outcome %s attempt %d err %v, want takeover attempt 2", res.Outcome, res.Attempt, err)
	}
	if n := refunds(t, store.DB()); n != 2 {
		t.Fatalf("%d refunds, want 2: the dead attempt's and the takeover's", n)
	}
}
