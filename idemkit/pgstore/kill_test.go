package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/idemkit-mcp/idemkit/idemkit"
	"github.com/idemkit-mcp/idemkit/idemkit/idemstore"
	"github.com/idemkit-mcp/idemkit/idemkit/pgstore"
	"github.com/idemkit-mcp/idemkit/internal/testing/pgtest"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The kill matrix: a child process runs one Do or DoTx and is killed with
// SIGKILL at one step of it, 50 times per step, then the parent retries the
// call as a duplicate would, after the dead attempt's lease.
//
// What must hold: DoTx never runs the side effect twice and never loses it
// (the retry replays a committed call and runs an uncommitted one); Do runs
// it twice only when the kill lands after the side effect and before the
// finish reached the server, and never twice at a downstream that
// deduplicates on Call.IdempotencyKey(); DoPhased (the side effect as its
// external call, then a local row in the transaction that records the
// outcome) writes its local row exactly once and repeats its external call
// only with the same key; no retry after the lease is told "in progress"
// (no key stays stuck), and every key ends completed.
//
// Steps that the child reaches by itself kill it from inside (the process
// signals itself: a real SIGKILL). The finish and the COMMIT are killed
// through a TCP proxy between the child and PostgreSQL, which stops at
// that statement, sent to the server or not, so that the child dies with
// the statement unsent, or sent with its outcome never acknowledged.
const (
	killStepEnv   = "PGSTORE_KILL_STEP"
	killDSNEnv    = "PGSTORE_KILL_DSN"
	killSchemaEnv = "PGSTORE_KILL_SCHEMA"
	killOrderEnv  = "PGSTORE_KILL_ORDER"

	killsPerStep = 50
)

// A kill step: where the child dies, and what the retry may find.
type killStep struct {
	name   string
	tx     bool // DoTx instead of Do
	phased bool // DoPhased instead of Do
	// marker and forward arm the proxy; marker "" means the child kills
	// itself (at "claim": first thing in the work; at "effect": after the
	// side effect).
	marker  string
	forward bool
	// rawDoubleAllowed: the side effect may have run twice, before a
	// downstream that deduplicates on Call.IdempotencyKey().
	rawDoubleAllowed bool
}

var killSteps = []killStep{
	{name: "do/after-claim"},
	{name: "do/after-side-effect", rawDoubleAllowed: true},
	{name: "do/finish-unsent", marker: "SET state = 'succeeded'", rawDoubleAllowed: true},
	{name: "do/finish-sent", marker: "SET state = 'succeeded'", forward: true},
	{name: "dotx/after-claim", tx: true},
	{name: "dotx/after-side-effect", tx: true},
	{name: "dotx/commit-unsent", tx: true, marker: "commit"},
	{name: "dotx/commit-sent", tx: true, marker: "commit", forward: true},
	{name: "phased/after-claim", phased: true},
	{name: "phased/after-external", phased: true, rawDoubleAllowed: true},
	{name: "phased/after-local-write", phased: true, rawDoubleAllowed: true},
	{name: "phased/commit-unsent", phased: true, marker: "commit", rawDoubleAllowed: true},
	{name: "phased/commit-sent", phased: true, marker: "commit", forward: true},
}

// phasedLocal is the local phase of the matrix's phased call: a row in
// phased_refunds, which nothing deduplicates.
func phasedLocal(schema, order string) pgstore.TxWork {
	return func(ctx context.Context, tx pgx.Tx) (idemkit.Response, error) {
		_, err := tx.Exec(ctx, "INSERT INTO "+pgx.Identifier{schema, "phased_refunds"}.Sanitize()+" (order_id) VALUES ($1)", order)
		return idemkit.Response{Body: []byte(`{"refund":"` + order + `"}`), WriteID: order}, err
	}
}

// sideEffect is the Do side effect: every run is counted in executions,
// and the refund row deduplicates on the forwarded idempotency key, as a
// payment gateway does.
func sideEffect(ctx context.Context, db pgstore.DB, schema, order, gatewayKey string) (idemkit.Response, error) {
	if _, err := db.Exec(ctx, "INSERT INTO "+pgx.Identifier{schema, "executions"}.Sanitize()+" (order_id) VALUES ($1)", order); err != nil {
		return idemkit.Response{}, err
	}
	if _, err := db.Exec(ctx, "INSERT INTO "+pgx.Identifier{schema, "refunds"}.Sanitize()+" (order_id, gateway_key) VALUES ($1, $2) ON CONFLICT (gateway_key) DO NOTHING", order, gatewayKey); err != nil {
		return idemkit.Response{}, err
	}
	return idemkit.Response{Body: []byte(`{"refund":"` + order + `"}`), WriteID: order}, nil
}

// runKillChild is the child: it runs the step's call and dies in it.
func runKillChild() int {
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(os.Getenv(killDSNEnv))
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	cfg.MaxConns = 2
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	schema, order, step := os.Getenv(killSchemaEnv), os.Getenv(killOrderEnv), os.Getenv(killStepEnv)
	store, _ := pgstore.New(pool, &pgstore.Config{Schema: schema})
	g, _ := idemkit.NewGuard(store, &idemkit.Config{Lease: 2 * time.Second})
	key, _ := idemkit.NewKey("s", "refund", []byte(`{"order":"`+order+`"}`), nil)
	die := func() {
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	}
	switch step {
	case "do/after-claim", "do/after-side-effect", "do/finish-unsent", "do/finish-sent":
		_, err = g.Do(ctx, key, func(ctx context.Context) (idemkit.Response, error) {
			if step == "do/after-claim" {
				die()
			}
			res, err := sideEffect(ctx, pool, schema, order, idemkit.CallFromContext(ctx).IdempotencyKey())
			if err == nil && step == "do/after-side-effect" {
				die()
			}
			return res, err
		})
	case "dotx/after-claim", "dotx/after-side-effect", "dotx/commit-unsent", "dotx/commit-sent":
		err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := store.DoTx(ctx, g, tx, key, func(ctx context.Context, tx pgx.Tx) (idemkit.Response, error) {
				if step == "dotx/after-claim" {
					die()
				}
				if _, err := tx.Exec(ctx, "INSERT INTO "+pgx.Identifier{schema, "refunds"}.Sanitize()+" (order_id) VALUES ($1)", order); err != nil {
					return idemkit.Response{}, err
				}
				if step == "dotx/after-side-effect" {
					die()
				}
				return idemkit.Response{Body: []byte(`{"refund":"` + order + `"}`)}, nil
			})
			return err
		})
	case "phased/after-claim", "phased/after-external", "phased/after-local-write", "phased/commit-unsent", "phased/commit-sent":
		var tx pgx.Tx
		begin := func(ctx context.Context) (idemstore.LocalTx, error) {
			t, lt, err := store.BeginLocal(ctx)
			tx = t
			return lt, err
		}
		_, err = g.DoPhased(ctx, key, begin, func(ctx context.Context, beginLocal func(context.Context) error) (idemkit.Response, error) {
			if step == "phased/after-claim" {
				die()
			}
			if _, err := sideEffect(ctx, pool, schema, order, idemkit.CallFromContext(ctx).IdempotencyKey()); err != nil {
				return idemkit.Response{}, err
			}
			if step == "phased/after-external" {
				die()
			}
			if err := beginLocal(ctx); err != nil {
				return idemkit.Response{}, err
			}
			res, err := phasedLocal(schema, order)(ctx, tx)
			if err == nil && step == "phased/after-local-write" {
				die()
			}
			return res, err
		})
	default:
		err = fmt.Errorf("unknown step %q", step)
	}
	fmt.Println("error: the child was not killed:", err)
	return 1
}

func TestCrash_KillMatrix(t *testing.T) {
	pool := pgtest.Pool(t)
	schema := pgtest.Schema(t, pool)
	store, _ := pgstore.New(pool, &pgstore.Config{Schema: schema})
	ctx := context.Background()
	if err := store.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	createRefunds(t, pool, schema)
	if _, err := pool.Exec(ctx, "CREATE TABLE "+pgx.Identifier{schema, "executions"}.Sanitize()+" (order_id text NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "CREATE TABLE "+pgx.Identifier{schema, "phased_refunds"}.Sanitize()+" (order_id text NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	dsn, err := url.Parse(pgtest.DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, step := range killSteps {
		t.Run(step.name, func(t *testing.T) {
			var (
				rawDoubles, replays atomic.Int64
				wg                  sync.WaitGroup
				next                atomic.Int64
			)
			for range 4 { // kills in parallel, each with its own proxy and order
				wg.Go(func() {
					for n := next.Add(1); n <= killsPerStep && !t.Failed(); n = next.Add(1) {
						order := fmt.Sprintf("%s-%d", step.name, n)
						raw, replayed, err := killOnce(t, store, pool, schema, *dsn, step, order)
						if err != nil {
							t.Errorf("%s: %v", order, err)
							return
						}
						if raw > 1 {
							rawDoubles.Add(1)
						}
						if replayed {
							replays.Add(1)
						}
					}
				})
			}
			wg.Wait()
			t.Logf("%s: %d kills; %d retries replayed the dead call's outcome, %d ran it again; %d side effects ran twice before the downstream's deduplication, 0 after it",
				step.name, killsPerStep, replays.Load(), killsPerStep-replays.Load(), rawDoubles.Load())
		})
	}
}

// killOnce kills one child at step for order, retries the call, and checks
// the outcome. It returns how many times the side effect ran and whether
// the retry replayed the dead call's outcome.
func killOnce(t *testing.T, store *pgstore.Store, pool *pgxpool.Pool, schema string, dsn url.URL, step killStep, order string) (int, bool, error) {
	ctx := context.Background()
	proxy := pgtest.NewProxy(t, dsn.Host)
	defer proxy.Close()
	var fired <-chan struct{}
	if step.marker != "" {
		fired = proxy.Arm(step.marker, step.forward)
	}
	dsn.Host = proxy.Addr()
	appName := "kill-" + order
	q := dsn.Query()
	q.Set("application_name", appName)
	dsn.RawQuery = q.Encode()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), killStepEnv+"="+step.name, killDSNEnv+"="+dsn.String(), killSchemaEnv+"="+schema, killOrderEnv+"="+order)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		return 0, false, err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	var werr error
	if fired != nil {
		select {
		case <-fired:
			_ = cmd.Process.Signal(syscall.SIGKILL)
			werr = <-exited
		case werr = <-exited:
			return 0, false, fmt.Errorf("the child exited before the proxy stopped at %q: %v", step.marker, werr)
		case <-time.After(60 * time.Second):
			_ = cmd.Process.Kill()
			return 0, false, fmt.Errorf("the proxy never saw %q", step.marker)
		}
	} else {
		select {
		case werr = <-exited:
		case <-time.After(60 * time.Second):
			_ = cmd.Process.Kill()
			return 0, false, errors.New("the child did not die")
		}
	}
	var exit *exec.ExitError
	if !errors.As(werr, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		return 0, false, fmt.Errorf("the child did not die by SIGKILL: %v", werr)
	}
	proxy.Close() // the server sees the dead client's connections close
	// Wait until the server has let go of them (processed what they sent,
	// rolled back what they left open), as it has long before a real
	// retry's lease runs out.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if count(t, pool, "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1", appName) == 0 {
			break
		}
		if time.Now().After(deadline) {
			return 0, false, errors.New("the dead child's connections did not end")
		}
	}

	key := mustKey(t, "s", "refund", `{"order":"`+order+`"}`)
	refunds := func() int {
		return count(t, pool, "SELECT count(*) FROM "+pgx.Identifier{schema, "refunds"}.Sanitize()+" WHERE order_id = $1", order)
	}
	var res idemkit.Result
	var err error
	if step.tx {
		// The retry: another DoTx. Nothing of an uncommitted transaction
		// remains; a committed one replays.
		g, _ := idemkit.NewGuard(store, &idemkit.Config{Lease: 2 * time.Second})
		err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			var err error
			res, err = store.DoTx(ctx, g, tx, key, func(ctx context.Context, tx pgx.Tx) (idemkit.Response, error) {
				_, err := tx.Exec(ctx, "INSERT INTO "+pgx.Identifier{schema, "refunds"}.Sanitize()+" (order_id) VALUES ($1)", order)
				return idemkit.Response{Body: []byte(`{"refund":"` + order + `"}`)}, err
			})
			return err
		})
		if err != nil {
			return 0, false, fmt.Errorf("retry: %w", err)
		}
		if n := refunds(); n != 1 {
			return n, false, fmt.Errorf("%d refunds after the retry (outcome %s), want exactly 1", n, res.Outcome)
		}
		if step.forward != (res.Outcome == idemkit.OutcomeReplayed) {
			return 1, (res.Outcome == idemkit.OutcomeReplayed), fmt.Errorf("the retry's outcome is %s, but the COMMIT reached the server: %v", res.Outcome, step.forward)
		}
		return 1, (res.Outcome == idemkit.OutcomeReplayed), nil
	}
	// The retry after the dead attempt's lease (2s): a clock 3s ahead
	// judges it lapsed without waiting. It must not be told "in progress":
	// no key stays stuck past its lease.
	g, _ := idemkit.NewGuard(store, &idemkit.Config{Lease: 2 * time.Second, Now: func() time.Time { return time.Now().Add(3 * time.Second) }})
	if step.phased {
		res, err = store.DoPhased(ctx, g, key, func(ctx context.Context) error {
			_, err := sideEffect(ctx, pool, schema, order, idemkit.CallFromContext(ctx).IdempotencyKey())
			return err
		}, phasedLocal(schema, order))
		if err == nil {
			if n := count(t, pool, "SELECT count(*) FROM "+pgx.Identifier{schema, "phased_refunds"}.Sanitize()+" WHERE order_id = $1", order); n != 1 {
				return 0, false, fmt.Errorf("%d local refund rows after the retry (outcome %s), want exactly 1", n, res.Outcome)
			}
		}
	} else {
		res, err = g.Do(ctx, key, func(ctx context.Context) (idemkit.Response, error) {
			return sideEffect(ctx, pool, schema, order, idemkit.CallFromContext(ctx).IdempotencyKey())
		})
	}
	if err != nil {
		return 0, false, fmt.Errorf("retry after the lease: %w", err)
	}
	raw := count(t, pool, "SELECT count(*) FROM "+pgx.Identifier{schema, "executions"}.Sanitize()+" WHERE order_id = $1", order)
	if n := refunds(); n != 1 {
		return raw, false, fmt.Errorf("%d refunds at the downstream after the retry, want exactly 1", n)
	}
	switch {
	case raw < 1 || raw > 2:
		return raw, false, fmt.Errorf("the side effect ran %d times", raw)
	case raw == 2 && !step.rawDoubleAllowed:
		return raw, false, fmt.Errorf("the side effect ran twice although the kill came before it")
	case (res.Outcome == idemkit.OutcomeReplayed) && raw != 1:
		return raw, false, fmt.Errorf("replayed, yet the side effect ran %d times", raw)
	case step.marker != "" && step.forward != (res.Outcome == idemkit.OutcomeReplayed):
		return raw, (res.Outcome == idemkit.OutcomeReplayed), fmt.Errorf("the retry's outcome is %s, but the finish reached the server: %v", res.Outcome, step.forward)
	}
	if rec, err := g.Lookup(ctx, key); err != nil || rec.State != idemstore.StateCompleted {
		return raw, false, fmt.Errorf("record after the retry: %+v %v, want completed", rec, err)
	}
	return raw, (res.Outcome == idemkit.OutcomeReplayed), nil
}
