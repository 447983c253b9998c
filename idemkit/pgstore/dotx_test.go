package pgstore_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/idemkit-mcp/idemkit/idemkit"
	"github.com/idemkit-mcp/idemkit/idemkit/pgstore"
	"github.com/idemkit-mcp/idemkit/internal/testing/pgtest"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// refunds is the side effect of these tests: a table in the same database.
func createRefunds(t testing.TB, pool *pgxpool.Pool, schema string) string {
	t.Helper()
	table := pgx.Identifier{schema, "refunds"}.Sanitize()
	if _, err := pool.Exec(context.Background(), "CREATE TABLE "+table+" (id bigserial PRIMARY KEY, order_id text NOT NULL, gateway_key text UNIQUE)"); err != nil {
		t.Fatal(err)
	}
	return table
}

func count(t testing.TB, pool *pgxpool.Pool, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

type txFixture struct {
	pool   *pgxpool.Pool
	store  *pgstore.Store
	guard  *idemkit.Guard
	schema string
	table  string
}

func newTxFixture(t *testing.T) *txFixture {
	pool := pgtest.Pool(t)
	schema := pgtest.Schema(t, pool)
	store, _ := pgstore.New(pool, &pgstore.Config{Schema: schema})
	if err := store.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	g, _ := idemkit.NewGuard(store, nil)
	return &txFixture{pool: pool, store: store, guard: g, schema: schema, table: createRefunds(t, pool, schema)}
}

func (f *txFixture) claims(t *testing.T) int {
	return count(t, f.pool, "SELECT count(*) FROM "+pgx.Identifier{f.schema, "idemkit_claims"}.Sanitize())
}

func (f *txFixture) refunds(t *testing.T) int {
	return count(t, f.pool, "SELECT count(*) FROM "+f.table)
}

func (f *txFixture) insertRefund(order string) pgstore.TxWork {
	return func(ctx context.Context, tx pgx.Tx) (idemkit.Response, error) {
		var id int64
		if err := tx.QueryRow(ctx, "INSERT INTO "+f.table+" (order_id) VALUES ($1) RETURNING id", order).Scan(&id); err != nil {
			return idemkit.Response{}, err
		}
		return idemkit.Response{Body: fmt.Appendf(nil, `{"refund_id":%d}`, id), WriteID: fmt.Sprint(id)}, nil
	}
}

func TestDoTx_CommitsClaimAndSideEffectTogether(t *testing.T) {
	f := newTxFixture(t)
	ctx := context.Background()
	k := mustKey(t, "s", "refund", `{"order":"o-1"}`)
	var first idemkit.Result
	err := pgx.BeginFunc(ctx, f.pool, func(tx pgx.Tx) error {
		var err error
		first, err = f.store.DoTx(ctx, f.guard, tx, k, f.insertRefund("o-1"))
		return err
	})
	if err != nil || first.Outcome != idemkit.OutcomeExecuted {
		t.Fatalf("DoTx: %+v %v", first, err)
	}
	if f.claims(t) != 1 || f.refunds(t) != 1 {
		t.Fatalf("after commit: %d claims, %d refunds; want 1 and 1", f.claims(t), f.refunds(t))
	}
	// Duplicates through DoTx and through Do replay the committed outcome.
	err = pgx.BeginFunc(ctx, f.pool, func(tx pgx.Tx) error {
		res, err := f.store.DoTx(ctx, f.guard, tx, k, f.insertRefund("o-1"))
		if err == nil && (res.Outcome != idemkit.OutcomeReplayed || string(res.Body) != string(first.Body) || res.WriteID != first.WriteID) {
			err = fmt.Errorf("DoTx duplicate: %+v", res)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	res, err := f.guard.Do(ctx, k, nil)
	if err != nil || res.Outcome != idemkit.OutcomeReplayed || string(res.Body) != string(first.Body) {
		t.Fatalf("Do duplicate: %+v %v", res, err)
	}
	if f.refunds(t) != 1 {
		t.Fatalf("%d refunds, want 1", f.refunds(t))
	}
}

func TestDoTx_RollbackOnErrorLeavesNothing(t *testing.T) {
	f := newTxFixture(t)
	ctx := context.Background()
	k := mustKey(t, "s", "refund", `{"order":"o-2"}`)
	boom := errors.New("gateway said no after our insert")
	err := pgx.BeginFunc(ctx, f.pool, func(tx pgx.Tx) error {
		_, err := f.store.DoTx(ctx, f.guard, tx, k, func(ctx context.Context, tx pgx.Tx) (idemkit.Response, error) {
			if _, err := f.insertRefund("o-2")(ctx, tx); err != nil {
				return idemkit.Response{}, err
			}
			return idemkit.Response{}, boom
		})
		return err
	})
	if !errors.Is(err, boom) {
		t.Fatalf("DoTx: %v, want the work's error", err)
	}
	if f.claims(t) != 0 || f.refunds(t) != 0 {
		t.Fatalf("after rollback: %d claims, %d refunds; want none", f.claims(t), f.refunds(t))
	}
	// A retry runs, as attempt 1: nothing of the failed call remains.
	var res idemkit.Result
	err = pgx.BeginFunc(ctx, f.pool, func(tx pgx.Tx) error {
		var err error
		res, err = f.store.DoTx(ctx, f.guard, tx, k, f.insertRefund("o-2"))
		return err
	})
	if err != nil || res.Outcome != idemkit.OutcomeExecuted || res.Attempt != 1 || f.refunds(t) != 1 {
		t.Fatalf("retry: %+v %v, %d refunds", res, err, f.refunds(t))
	}
}

func TestDoTx_RollbackOnPanicLeavesNothing(t *testing.T) {
	f := newTxFixture(t)
	ctx := context.Background()
	k := mustKey(t, "s", "refund", `{"order":"o-3"}`)
	func() {
		defer func() {
			if r := recover(); r != "kaboom" {
				t.Fatalf("recovered %v", r)
			}
		}()
		_ = pgx.BeginFunc(ctx, f.pool, func(tx pgx.Tx) error {
			_, err := f.store.DoTx(ctx, f.guard, tx, k, func(ctx context.Context, tx pgx.Tx) (idemkit.Response, error) {
				if _, err := f.insertRefund("o-3")(ctx, tx); err != nil {
					return idemkit.Response{}, err
				}
				panic("kaboom")
			})
			return err
		})
	}()
	if f.claims(t) != 0 || f.refunds(t) != 0 {
		t.Fatalf("after a panic: %d claims, %d refunds; want none", f.claims(t), f.refunds(t))
	}
}

// A duplicate of an in-flight DoTx waits on the row, then replays; if the
// first transaction rolls back instead, the duplicate runs.
func TestDoTx_DuplicateWaitsThenReplays(t *testing.T) {
	for _, commit := range []bool{true, false} {
		t.Run(fmt.Sprintf("commit=%v", commit), func(t *testing.T) {
			f := newTxFixture(t)
			ctx := context.Background()
			k := mustKey(t, "s", "refund", `{"order":"o-4"}`)
			tx, err := f.pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(ctx)
			first, err := f.store.DoTx(ctx, f.guard, tx, k, f.insertRefund("o-4"))
			if err != nil {
				t.Fatal(err)
			}
			var dupRuns atomic.Int64
			type answer struct {
				res idemkit.Result
				err error
			}
			dup := make(chan answer, 1)
			go func() {
				res, err := f.guard.Do(ctx, k, func(context.Context) (idemkit.Response, error) {
					dupRuns.Add(1)
					return idemkit.Response{Body: []byte("dup ran")}, nil
				})
				dup <- answer{res, err}
			}()
			select {
			case a := <-dup:
				t.Fatalf("the duplicate answered before the first transaction ended: %+v", a)
			case <-time.After(300 * time.Millisecond):
			}
			if commit {
				if err := tx.Commit(ctx); err != nil {
					t.Fatal(err)
				}
			} else {
				_ = tx.Rollback(ctx)
			}
			a := <-dup
			if a.err != nil {
				t.Fatalf("duplicate: %v", a.err)
			}
			if commit && (a.res.Outcome != idemkit.OutcomeReplayed || string(a.res.Body) != string(first.Body) || dupRuns.Load() != 0) {
				t.Fatalf("after commit the duplicate got %+v (ran %d), want the replay", a.res, dupRuns.Load())
			}
			if !commit && (a.res.Outcome != idemkit.OutcomeExecuted || dupRuns.Load() != 1) {
				t.Fatalf("after rollback the duplicate got %+v (ran %d), want it to run", a.res, dupRuns.Load())
			}
		})
	}
}

// ---- Crash tests: a child process killed with SIGKILL mid-call. ----

const childEnv = "PGSTORE_CRASH_CHILD"

// runChild runs one scenario in a child process. It prints "ready" when it
// has reached the point at which the parent kills it.
func runChild() int {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("PGSTORE_DSN"))
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	schema := os.Getenv("PGSTORE_SCHEMA")
	table := pgx.Identifier{schema, "refunds"}.Sanitize()
	store, _ := pgstore.New(pool, &pgstore.Config{Schema: schema})
	g, _ := idemkit.NewGuard(store, &idemkit.Config{Lease: time.Second})
	key, _ := idemkit.NewKey("s", "refund", []byte(`{"order":"o-crash"}`), nil)
	block := func() { fmt.Println("ready"); select {} }
	switch os.Getenv(childEnv) {
	case "dotx-between-effect-and-commit":
		tx, err := pool.Begin(ctx)
		if err != nil {
			fmt.Println("error", err)
			return 1
		}
		_, _ = store.DoTx(ctx, g, tx, key, func(ctx context.Context, tx pgx.Tx) (idemkit.Response, error) {
			if _, err := tx.Exec(ctx, "INSERT INTO "+table+" (order_id) VALUES ('o-crash')"); err != nil {
				fmt.Println("error", err)
				os.Exit(1)
			}
			block()
			return idemkit.Response{}, nil
		})
	case "do-between-effect-and-finish":
		_, _ = g.Do(ctx, key, func(ctx context.Context) (idemkit.Response, error) {
			// The side effect is external and committed; the gateway
			// deduplicates on the forwarded key, as Stripe does.
			gk := idemkit.CallFromContext(ctx).IdempotencyKey()
			if _, err := pool.Exec(ctx, "INSERT INTO "+table+" (order_id, gateway_key) VALUES ('o-crash', $1) ON CONFLICT (gateway_key) DO NOTHING", gk); err != nil {
				fmt.Println("error", err)
				os.Exit(1)
			}
			block()
			return idemkit.Response{}, nil
		})
	case "after-do-returns":
		res, err := g.Do(ctx, key, func(ctx context.Context) (idemkit.Response, error) {
			if _, err := pool.Exec(ctx, "INSERT INTO "+table+" (order_id) VALUES ('o-crash')"); err != nil {
				return idemkit.Response{}, err
			}
			return idemkit.Response{Body: []byte(`{"refund":"done by the child"}`)}, nil
		})
		if err != nil || res.Outcome != idemkit.OutcomeExecuted {
			fmt.Println("error", res, err)
			return 1
		}
		block()
	}
	fmt.Println("error unknown scenario")
	return 1
}

// crashChild starts the scenario in a child process, waits until it is
// ready and kills it with SIGKILL.
func crashChild(t *testing.T, scenario, schema string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+scenario, "PGSTORE_DSN="+pgtest.DSN(t), "PGSTORE_SCHEMA="+schema)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if strings.TrimSpace(line) != "ready" {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("child %s: %q %v", scenario, line, err)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("child %s did not die by SIGKILL: %v", scenario, err)
	}
}

// Killed between the side effect and the commit: the transaction never
// commits, so neither the claim nor the side effect exists, and the retry
// runs exactly once.
func TestCrash_DoTxKilledBetweenSideEffectAndCommit(t *testing.T) {
	f := newTxFixture(t)
	crashChild(t, "dotx-between-effect-and-commit", f.schema)
	deadline := time.Now().Add(10 * time.Second)
	for f.refunds(t) != 0 || f.claims(t) != 0 { // the server notices the dead client
		if time.Now().After(deadline) {
			t.Fatalf("after the crash: %d refunds, %d claims; want none", f.refunds(t), f.claims(t))
		}
		time.Sleep(50 * time.Millisecond)
	}
	ctx := context.Background()
	key := mustKey(t, "s", "refund", `{"order":"o-crash"}`)
	var res idemkit.Result
	err := pgx.BeginFunc(ctx, f.pool, func(tx pgx.Tx) error {
		var err error
		res, err = f.store.DoTx(ctx, f.guard, tx, key, f.insertRefund("o-crash"))
		return err
	})
	if err != nil || res.Outcome != idemkit.OutcomeExecuted || f.refunds(t) != 1 {
		t.Fatalf("retry: %+v %v, %d refunds; want one execution", res, err, f.refunds(t))
	}
}

// Killed between an external side effect and the finish: the claim stays in
// progress until its lease runs out (duplicates are told so), then a retry
// takes it over; the forwarded idempotency key lets the downstream
// deduplicate the second attempt, so the effect happens once.
func TestCrash_DoKilledBetweenSideEffectAndFinish(t *testing.T) {
	f := newTxFixture(t)
	crashChild(t, "do-between-effect-and-finish", f.schema)
	if f.refunds(t) != 1 {
		t.Fatalf("%d refunds after the child's side effect, want 1", f.refunds(t))
	}
	ctx := context.Background()
	key := mustKey(t, "s", "refund", `{"order":"o-crash"}`)
	store := f.store
	g, _ := idemkit.NewGuard(store, &idemkit.Config{Lease: time.Second})
	var downstreamCalls atomic.Int64
	work := func(ctx context.Context) (idemkit.Response, error) {
		downstreamCalls.Add(1)
		gk := idemkit.CallFromContext(ctx).IdempotencyKey()
		if _, err := f.pool.Exec(ctx, "INSERT INTO "+f.table+" (order_id, gateway_key) VALUES ('o-crash', $1) ON CONFLICT (gateway_key) DO NOTHING", gk); err != nil {
			return idemkit.Response{}, err
		}
		return idemkit.Response{Body: []byte(`{"refund":"ok"}`)}, nil
	}
	if _, err := g.Do(ctx, key, work); !errors.Is(err, idemkit.ErrInProgress) {
		t.Fatalf("duplicate inside the dead worker's lease: %v, want ErrInProgress", err)
	}
	time.Sleep(1200 * time.Millisecond)
	res, err := g.Do(ctx, key, work)
	if err != nil || res.Outcome != idemkit.OutcomeTakeover || res.Attempt != 2 {
		t.Fatalf("after the lease: %+v %v, want takeover attempt 2", res, err)
	}
	if n := f.refunds(t); n != 1 || downstreamCalls.Load() != 1 {
		t.Fatalf("%d refunds after the takeover (downstream called %d times), want 1", n, downstreamCalls.Load())
	}
	if rep, err := g.Do(ctx, key, work); err != nil || rep.Outcome != idemkit.OutcomeReplayed {
		t.Fatalf("later duplicate: %+v %v, want replay", rep, err)
	}
}

// Killed after Do returned: the outcome is durable; the restarted process's
// duplicate is replayed, not re-executed.
func TestCrash_KilledAfterDoReturnedReplays(t *testing.T) {
	f := newTxFixture(t)
	crashChild(t, "after-do-returns", f.schema)
	key := mustKey(t, "s", "refund", `{"order":"o-crash"}`)
	res, err := f.guard.Do(context.Background(), key, func(context.Context) (idemkit.Response, error) {
		t.Error("re-executed after a restart")
		return idemkit.Response{}, nil
	})
	if err != nil || res.Outcome != idemkit.OutcomeReplayed || string(res.Body) != `{"refund":"done by the child"}` || f.refunds(t) != 1 {
		t.Fatalf("after restart: %+v %v, %d refunds", res, err, f.refunds(t))
	}
}

// A DoTx that meets a plain Do in progress answers at once, even with Wait
// set: waiting would hold the row lock that the running call needs.
func TestDoTx_InProgressIsAnsweredWithoutWaiting(t *testing.T) {
	f := newTxFixture(t)
	ctx := context.Background()
	g, _ := idemkit.NewGuard(f.store, &idemkit.Config{Wait: 10 * time.Second})
	k := mustKey(t, "s", "refund", `{"order":"o-5"}`)
	started, release := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := g.Do(ctx, k, func(context.Context) (idemkit.Response, error) {
			close(started)
			<-release
			return idemkit.Response{Body: []byte("first")}, nil
		})
		done <- err
	}()
	<-started
	t0 := time.Now()
	err := pgx.BeginFunc(ctx, f.pool, func(tx pgx.Tx) error {
		_, err := f.store.DoTx(ctx, g, tx, k, f.insertRefund("o-5"))
		return err
	})
	if !errors.Is(err, idemkit.ErrInProgress) || time.Since(t0) > 5*time.Second {
		t.Fatalf("DoTx during a running Do: %v after %s, want ErrInProgress at once", err, time.Since(t0))
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatalf("the running Do could not finish: %v", err)
	}
}
