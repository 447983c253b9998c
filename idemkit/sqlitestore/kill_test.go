package sqlitestore_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/idemkit-mcp/idemkit/idemkit"
	"github.com/idemkit-mcp/idemkit/idemkit/idemstore"
	"github.com/idemkit-mcp/idemkit/idemkit/sqlitestore"
)

// The kill matrix on SQLite: a child process runs one Do or DoTx on a
// shared database file and dies by SIGKILL (sent to itself) at one step,
// 50 times per step; the parent then retries the call as a duplicate
// would, after the dead attempt's lease. Around the finish and the COMMIT
// the kill lands just before the statement, at a random moment during it
// (0-400µs in), or just after it returned.
//
// What must hold: DoTx never runs the side effect twice and never loses it;
// Do runs it twice only when the kill lands after the side effect and
// before the finish is durable, never twice at a downstream that
// deduplicates on Call.IdempotencyKey(); DoPhased (an external call, then
// a local row in the transaction that records the outcome) writes its
// local row exactly once, and repeats its external call only with the
// same key; no retry after the lease is told "in progress", and every key
// ends completed.
const (
	killStepEnv  = "SQLITESTORE_KILL_STEP"
	killDBEnv    = "SQLITESTORE_KILL_DB"
	killOrderEnv = "SQLITESTORE_KILL_ORDER"

	killsPerStep = 50
)

type killStep struct {
	name             string
	tx               bool
	phased           bool
	rawDoubleAllowed bool // the side effect may have run twice before the downstream
	mustReplay       bool // the dead call's outcome was durable
	mustRunAgain     bool // it was not
}

var killSteps = []killStep{
	{name: "do/after-claim", mustRunAgain: true},
	{name: "do/after-side-effect", rawDoubleAllowed: true, mustRunAgain: true},
	{name: "do/before-finish", rawDoubleAllowed: true, mustRunAgain: true},
	{name: "do/during-finish", rawDoubleAllowed: true},
	{name: "do/after-finish", mustReplay: true},
	{name: "dotx/after-claim", tx: true, mustRunAgain: true},
	{name: "dotx/after-side-effect", tx: true, mustRunAgain: true},
	{name: "dotx/before-commit", tx: true, mustRunAgain: true},
	{name: "dotx/during-commit", tx: true},
	{name: "dotx/after-commit", tx: true, mustReplay: true},
	{name: "phased/after-claim", phased: true, mustRunAgain: true},
	{name: "phased/after-external", phased: true, rawDoubleAllowed: true, mustRunAgain: true},
	{name: "phased/after-local-write", phased: true, rawDoubleAllowed: true, mustRunAgain: true},
	{name: "phased/before-commit", phased: true, rawDoubleAllowed: true, mustRunAgain: true},
	{name: "phased/during-commit", phased: true, rawDoubleAllowed: true},
	{name: "phased/after-commit", phased: true, mustReplay: true},
}

const killSchema = `
CREATE TABLE IF NOT EXISTS executions (order_id TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS gateway (order_id TEXT NOT NULL, gateway_key TEXT UNIQUE);
CREATE TABLE IF NOT EXISTS tx_refunds (order_id TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS phased_refunds (order_id TEXT NOT NULL);`

// killSideEffect is the Do side effect: every run counted in executions,
// and a gateway row that deduplicates on the forwarded idempotency key.
func killSideEffect(ctx context.Context, db *sql.DB, order, gatewayKey string) (idemkit.Response, error) {
	if _, err := db.ExecContext(ctx, `INSERT INTO executions (order_id) VALUES (?)`, order); err != nil {
		return idemkit.Response{}, err
	}
	if _, err := db.ExecContext(ctx, `INSERT OR IGNORE INTO gateway (order_id, gateway_key) VALUES (?, ?)`, order, gatewayKey); err != nil {
		return idemkit.Response{}, err
	}
	return idemkit.Response{Body: []byte(`{"refund":"` + order + `"}`)}, nil
}

func die() {
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {}
}

// around runs fn with the kill placed by step's suffix: before, during (a
// random moment, up to 400µs in) or after it.
func around(step string, fn func() error) error {
	switch {
	case strings.HasSuffix(step, "before-finish"), strings.HasSuffix(step, "before-commit"):
		die()
	case strings.HasSuffix(step, "during-finish"), strings.HasSuffix(step, "during-commit"):
		time.AfterFunc(time.Duration(rand.IntN(400))*time.Microsecond, die)
	}
	err := fn()
	if strings.HasSuffix(step, "finish") || strings.HasSuffix(step, "commit") {
		die() // after, or a "during" that came too late: after
	}
	return err
}

// killingStore places the kill around the finish.
type killingStore struct {
	*sqlitestore.Store
	step string
}

func (s *killingStore) Finish(ctx context.Context, req idemstore.FinishRequest) error {
	return around(s.step, func() error { return s.Store.Finish(ctx, req) })
}

// killingLocalTx places the kill around a phased call's commit.
type killingLocalTx struct {
	idemstore.LocalTx
	step string
}

func (l killingLocalTx) Commit(ctx context.Context) error {
	return around(l.step, func() error { return l.LocalTx.Commit(ctx) })
}

// phasedLocal is the local phase of the kill matrix's phased call.
func phasedLocal(order string) sqlitestore.TxWork {
	return func(ctx context.Context, tx *sql.Tx) (idemkit.Response, error) {
		_, err := tx.ExecContext(ctx, `INSERT INTO phased_refunds (order_id) VALUES (?)`, order)
		return idemkit.Response{Body: []byte(`{"refund":"` + order + `"}`)}, err
	}
}

func runPhasedKillChild(ctx context.Context, store *sqlitestore.Store, step, order string, key idemkit.Key) error {
	g, _ := idemkit.NewGuard(store, &idemkit.Config{Lease: 2 * time.Second})
	var tx *sql.Tx
	begin := func(ctx context.Context) (idemstore.LocalTx, error) {
		t, lt, err := store.BeginLocal(ctx)
		tx = t
		return killingLocalTx{LocalTx: lt, step: step}, err
	}
	_, err := g.DoPhased(ctx, key, begin, func(ctx context.Context, beginLocal func(context.Context) error) (idemkit.Response, error) {
		if step == "phased/after-claim" {
			die()
		}
		if _, err := killSideEffect(ctx, store.DB(), order, idemkit.CallFromContext(ctx).IdempotencyKey()); err != nil {
			return idemkit.Response{}, err
		}
		if step == "phased/after-external" {
			die()
		}
		if err := beginLocal(ctx); err != nil {
			return idemkit.Response{}, err
		}
		res, err := phasedLocal(order)(ctx, tx)
		if step == "phased/after-local-write" {
			die()
		}
		return res, err
	})
	return fmt.Errorf("the child was not killed: %v", err)
}

func runKillChild(step, path, order string) error {
	ctx := context.Background()
	store, err := sqlitestore.Open(ctx, path, nil)
	if err != nil {
		return err
	}
	g, _ := idemkit.NewGuard(&killingStore{Store: store, step: step}, &idemkit.Config{Lease: 2 * time.Second})
	key, _ := idemkit.NewKey("s", "refund", []byte(`{"order":"`+order+`"}`), nil)
	if strings.HasPrefix(step, "phased/") {
		return runPhasedKillChild(ctx, store, step, order, key)
	}
	if !strings.HasPrefix(step, "dotx/") {
		_, err = g.Do(ctx, key, func(ctx context.Context) (idemkit.Response, error) {
			if step == "do/after-claim" {
				die()
			}
			res, err := killSideEffect(ctx, store.DB(), order, idemkit.CallFromContext(ctx).IdempotencyKey())
			if step == "do/after-side-effect" {
				die()
			}
			return res, err
		})
		return fmt.Errorf("the child was not killed: %v", err)
	}
	tx, err := store.DB().BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	g, _ = idemkit.NewGuard(store, &idemkit.Config{Lease: 2 * time.Second})
	if _, err := store.DoTx(ctx, g, tx, key, func(ctx context.Context, tx *sql.Tx) (idemkit.Response, error) {
		if step == "dotx/after-claim" {
			die()
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO tx_refunds (order_id) VALUES (?)`, order); err != nil {
			return idemkit.Response{}, err
		}
		if step == "dotx/after-side-effect" {
			die()
		}
		return idemkit.Response{Body: []byte(`{"refund":"` + order + `"}`)}, nil
	}); err != nil {
		return err
	}
	err = around(step, tx.Commit)
	return fmt.Errorf("the child was not killed: %v", err)
}

func TestCrash_KillMatrix(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kill.db")
	store := openPath(t, path, nil)
	if _, err := store.DB().Exec(killSchema); err != nil {
		t.Fatal(err)
	}
	for _, step := range killSteps {
		t.Run(step.name, func(t *testing.T) {
			var (
				rawDoubles, replays atomic.Int64
				wg                  sync.WaitGroup
				next                atomic.Int64
			)
			kills := killsPerStep
			for range 4 {
				wg.Go(func() {
					for n := next.Add(1); n <= int64(kills) && !t.Failed(); n = next.Add(1) {
						order := fmt.Sprintf("%s-%d", step.name, n)
						raw, replayed, err := killOnce(t, store, path, step, order)
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
				step.name, kills, replays.Load(), int64(kills)-replays.Load(), rawDoubles.Load())
		})
	}
}

func killOnce(t *testing.T, store *sqlitestore.Store, path string, step killStep, order string) (int, bool, error) {
	ctx := context.Background()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), killStepEnv+"="+step.name, killDBEnv+"="+path, killOrderEnv+"="+order)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	exited := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		return 0, false, err
	}
	go func() { exited <- cmd.Wait() }()
	var werr error
	select {
	case werr = <-exited:
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		return 0, false, errors.New("the child did not die")
	}
	var exit *exec.ExitError
	if !errors.As(werr, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		return 0, false, fmt.Errorf("the child did not die by SIGKILL: %v", werr)
	}
	count := func(query string) int {
		var n int
		if err := store.DB().QueryRowContext(ctx, query, order).Scan(&n); err != nil {
			t.Errorf("%s: %v", query, err)
		}
		return n
	}
	key := refundKeyFor(order)
	var (
		res idemkit.Result
		err error
		raw int
	)
	switch {
	case step.phased:
		// After the lease (2s): a clock 3s ahead judges it lapsed.
		g, _ := idemkit.NewGuard(store, &idemkit.Config{Lease: 2 * time.Second, Now: func() time.Time { return time.Now().Add(3 * time.Second) }})
		res, err = store.DoPhased(ctx, g, key, func(ctx context.Context) error {
			_, err := killSideEffect(ctx, store.DB(), order, idemkit.CallFromContext(ctx).IdempotencyKey())
			return err
		}, phasedLocal(order))
		if err != nil {
			return 0, false, fmt.Errorf("retry after the lease: %w", err)
		}
		raw = count(`SELECT count(*) FROM executions WHERE order_id = ?`)
		if n := count(`SELECT count(*) FROM phased_refunds WHERE order_id = ?`); n != 1 {
			return raw, false, fmt.Errorf("%d local refund rows after the retry (outcome %s), want exactly 1", n, res.Outcome)
		}
		if n := count(`SELECT count(*) FROM gateway WHERE order_id = ?`); n != 1 {
			return raw, false, fmt.Errorf("%d refunds at the downstream after the retry, want exactly 1", n)
		}
		switch {
		case raw < 1 || raw > 2:
			return raw, false, fmt.Errorf("the external call ran %d times", raw)
		case raw == 2 && !step.rawDoubleAllowed:
			return raw, false, errors.New("the external call ran twice although the kill came before it or after the commit")
		}
		if rec, err := g.Lookup(ctx, key); err != nil || rec.State != idemstore.StateCompleted {
			return raw, false, fmt.Errorf("record after the retry: %+v %v, want completed", rec, err)
		}
	case step.tx:
		g, _ := idemkit.NewGuard(store, &idemkit.Config{Lease: 2 * time.Second})
		tx, terr := store.DB().BeginTx(ctx, nil)
		if terr != nil {
			return 0, false, terr
		}
		res, err = store.DoTx(ctx, g, tx, key, func(ctx context.Context, tx *sql.Tx) (idemkit.Response, error) {
			_, err := tx.ExecContext(ctx, `INSERT INTO tx_refunds (order_id) VALUES (?)`, order)
			return idemkit.Response{Body: []byte(`{"refund":"` + order + `"}`)}, err
		})
		if err == nil {
			err = tx.Commit()
		} else {
			_ = tx.Rollback()
		}
		if err != nil {
			return 0, false, fmt.Errorf("retry: %w", err)
		}
		if raw = count(`SELECT count(*) FROM tx_refunds WHERE order_id = ?`); raw != 1 {
			return raw, false, fmt.Errorf("%d refunds after the retry (outcome %s), want exactly 1", raw, res.Outcome)
		}
	default:
		// After the lease (2s): a clock 3s ahead judges it lapsed.
		g, _ := idemkit.NewGuard(store, &idemkit.Config{Lease: 2 * time.Second, Now: func() time.Time { return time.Now().Add(3 * time.Second) }})
		res, err = g.Do(ctx, key, func(ctx context.Context) (idemkit.Response, error) {
			return killSideEffect(ctx, store.DB(), order, idemkit.CallFromContext(ctx).IdempotencyKey())
		})
		if err != nil {
			return 0, false, fmt.Errorf("retry after the lease: %w", err)
		}
		raw = count(`SELECT count(*) FROM executions WHERE order_id = ?`)
		if n := count(`SELECT count(*) FROM gateway WHERE order_id = ?`); n != 1 {
			return raw, false, fmt.Errorf("%d refunds at the downstream after the retry, want exactly 1", n)
		}
		switch {
		case raw < 1 || raw > 2:
			return raw, false, fmt.Errorf("the side effect ran %d times", raw)
		case raw == 2 && !step.rawDoubleAllowed:
			return raw, false, errors.New("the side effect ran twice although the kill came before it or after the finish")
		case (res.Outcome == idemkit.OutcomeReplayed) && raw != 1:
			return raw, false, fmt.Errorf("replayed, yet the side effect ran %d times", raw)
		}
		if rec, err := g.Lookup(ctx, key); err != nil || rec.State != idemstore.StateCompleted {
			return raw, false, fmt.Errorf("record after the retry: %+v %v, want completed", rec, err)
		}
	}
	switch {
	case step.mustReplay && res.Outcome != idemkit.OutcomeReplayed:
		return raw, false, fmt.Errorf("the retry ran the call again (%s), but the dead call's outcome was durable", res.Outcome)
	case step.mustRunAgain && (res.Outcome == idemkit.OutcomeReplayed):
		return raw, true, errors.New("the retry replayed a call that never recorded its outcome")
	}
	return raw, (res.Outcome == idemkit.OutcomeReplayed), nil
}

func refundKeyFor(order string) idemkit.Key {
	k, err := idemkit.NewKey("s", "refund", []byte(`{"order":"`+order+`"}`), nil)
	if err != nil {
		panic(err)
	}
	return k
}
