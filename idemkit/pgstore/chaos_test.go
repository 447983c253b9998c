package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit-mcp/idemkit/idemkit"
	"github.com/idemkit-mcp/idemkit/idemkit/idemstore"
	"github.com/idemkit-mcp/idemkit/idemkit/pgstore"
	"github.com/idemkit-mcp/idemkit/internal/testing/pgtest"
	"github.com/jackc/pgx/v5/pgxpool"
)

// finishCounter counts the finishes that failed with a transient error (and
// were then retried by the Guard).
type finishCounter struct {
	*pgstore.Store
	transient atomic.Int64
}

func (s *finishCounter) Finish(ctx context.Context, req idemstore.FinishRequest) error {
	err := s.Store.Finish(ctx, req)
	if errors.Is(err, idemstore.ErrTransient) {
		s.transient.Add(1)
	}
	return err
}

// PostgreSQL restarts (pg_ctl restart -m fast, and -m immediate: a crash)
// while 24 callers run calls whose side effect is counted outside the
// store, each key called by three of them, retrying as agents do. The
// outage is shorter than FinishTimeout, so the finishes caught by it are
// retried until the server is back: every side effect runs exactly once,
// no key is lost or left in progress, every error the callers see during
// the outage is ErrStore (or an in-progress answer), and no work runs
// without a claim.
//
// The bounds are sized for the outage, the assertions are not relaxed: a
// crash restart of a durable cluster on a loaded 2-core machine (it failed
// once at load average 11) can take many seconds of recovery. The lease
// and FinishTimeout are therefore far longer than any outage, so that a
// finish retried through it never outlives its claim (a finish retried
// past a short lease loses the claim to a duplicate, which runs the work
// again: a double caused by the test's bounds, which is Do's documented
// window between the work and a durable finish), and the deadlines leave
// room for a slow machine.
func TestChaos_RestartUnderConcurrentCallers(t *testing.T) {
	for _, mode := range []string{"fast", "immediate"} {
		t.Run(mode, func(t *testing.T) { testRestart(t, mode) })
	}
}

func testRestart(t *testing.T, mode string) {
	cl := pgtest.StartCluster(t, pgtest.ClusterOptions{Durable: true})
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(cl.DSN())
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 32
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	inner, _ := pgstore.New(pool, nil)
	if err := inner.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	store := &finishCounter{Store: inner}
	g, err := idemkit.NewGuard(store, &idemkit.Config{Lease: 2 * time.Minute, FinishTimeout: 90 * time.Second, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}

	const callers, nkeys, dupes = 24, 240, 3
	keys := make([]idemkit.Key, nkeys)
	for i := range keys {
		keys[i] = mustKey(t, fmt.Sprintf("user-%d", i%5), "issue_refund", fmt.Sprintf(`{"order":"o-%d","amount_cents":%d}`, i, 100+i))
	}
	var (
		runs                    [nkeys]atomic.Int64 // the side effect, outside the store
		inFlight, done          atomic.Int64
		unclaimed, finishErrors atomic.Int64
		storeErrors, busy       atomic.Int64
		otherErrors             = make(chan error, callers)
		restartErr              = make(chan error, 1)
		restartedAt             atomic.Int64
	)
	work := func(i int) idemkit.Work {
		return func(ctx context.Context) (idemkit.Response, error) {
			if idemkit.CallFromContext(ctx) == nil {
				unclaimed.Add(1)
			}
			inFlight.Add(1)
			defer inFlight.Add(-1)
			n := runs[i].Add(1)
			time.Sleep(time.Duration(5+rand.IntN(20)) * time.Millisecond)
			return idemkit.Response{Body: fmt.Appendf(nil, `{"refund":"re_%d","run":%d}`, i, n)}, nil
		}
	}
	// The restart: once a quarter of the keys are done and at least 8 calls
	// are inside their work, so that finishes are caught by the outage.
	go func() {
		for done.Load() < nkeys*dupes/4 || inFlight.Load() < 8 {
			time.Sleep(time.Millisecond)
		}
		restartedAt.Store(time.Now().UnixNano())
		rctx, cancel := context.WithTimeout(ctx, 4*time.Minute)
		defer cancel()
		restartErr <- cl.Restart(rctx, mode)
	}()

	deadline := time.Now().Add(8 * time.Minute)
	var wg sync.WaitGroup
	for c := range callers {
		wg.Go(func() {
			// Caller c calls keys c, c+callers, …, and each of those keys'
			// two neighbours: every key is called by three callers.
			for i := c; i < nkeys; i += callers {
				for d := range dupes {
					k := (i + d*7) % nkeys
					for {
						if time.Now().After(deadline) {
							otherErrors <- fmt.Errorf("key %d not done by the deadline", k)
							return
						}
						cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
						_, err := g.Do(cctx, keys[k], work(k))
						cancel()
						var fe *idemkit.FinishError
						switch {
						case err == nil:
						case errors.As(err, &fe):
							finishErrors.Add(1) // recorded nothing: would run again after the lease
						case errors.Is(err, idemkit.ErrInProgress):
							busy.Add(1)
							time.Sleep(20 * time.Millisecond)
							continue
						case errors.Is(err, idemkit.ErrStore):
							storeErrors.Add(1)
							time.Sleep(50 * time.Millisecond)
							continue
						default:
							otherErrors <- fmt.Errorf("key %d: an error that is not ErrStore: %w", k, err)
							return
						}
						done.Add(1)
						break
					}
				}
			}
		})
	}
	wg.Wait()
	close(otherErrors)
	for err := range otherErrors {
		t.Error(err)
	}
	if err := <-restartErr; err != nil {
		t.Fatal(err)
	}
	doubles, lost := 0, 0
	for i := range runs {
		switch n := runs[i].Load(); {
		case n > 1:
			doubles++
		case n == 0:
			lost++
		}
	}
	// Every key ends completed: none lost, none stuck in progress.
	stuck := 0
	for _, k := range keys {
		rec, err := g.Lookup(ctx, k)
		if err != nil || rec.State != idemstore.StateCompleted {
			stuck++
		}
	}
	t.Logf("pg_ctl restart -m %s: %d callers, %d keys x %d: %d store errors and %d in-progress answers during the outage, %d finishes retried after transient errors",
		mode, callers, nkeys, dupes, storeErrors.Load(), busy.Load(), store.transient.Load())
	if doubles != 0 || lost != 0 || stuck != 0 || finishErrors.Load() != 0 || unclaimed.Load() != 0 {
		t.Fatalf("%d doubles, %d lost keys, %d keys not completed, %d finishes that failed for good, %d runs without a claim; want none",
			doubles, lost, stuck, finishErrors.Load(), unclaimed.Load())
	}
	if storeErrors.Load() == 0 || store.transient.Load() == 0 {
		t.Fatalf("the restart caught no claim (%d store errors) or no finish (%d transient finish errors): the test did not test the outage",
			storeErrors.Load(), store.transient.Load())
	}
}
