package sqlitestore_test

// Run (both sides in one run):
//
//	go test -run '^$' -bench '^Benchmark(Do|BaselineRawSQL|DoVsBaselineRawSQL)$' -benchmem -benchtime 3000x ./idemkit/sqlitestore
//
// BenchmarkDo is Guard.Do on a Store (claim, work, finish on a fresh key);
// BenchmarkBaselineRawSQL runs the seed article's two statements (the claim
// INSERT … ON CONFLICT … RETURNING and the finish UPDATE) by hand through
// database/sql, prepared, on a database opened by the same Open, so with the
// same pragmas, durability and pool. Sub-benchmarks: sync=FULL (the default)
// and sync=NORMAL, each with 1 and 16 concurrent callers.
// BenchmarkDoVsBaselineRawSQL interleaves the two and reports the ratio of
// their throughputs: read the ratio there.

import (
	"context"
	"fmt"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit-mcp/idemkit/idemkit"
	"github.com/idemkit-mcp/idemkit/idemkit/sqlitestore"
	"github.com/idemkit-mcp/idemkit/internal/testing/benchpair"
)

const benchKeys = 1 << 17

func benchKeyPool() []idemkit.Key { return benchpair.Keys(benchKeys) }

var benchBody = benchpair.Body

// benchCases runs body for each durability setting and caller count.
func benchCases(b *testing.B, body func(b *testing.B, cfg *sqlitestore.Config, callers int)) {
	for _, sync := range []sqlitestore.Synchronous{sqlitestore.SynchronousFull, sqlitestore.SynchronousNormal} {
		for _, callers := range []int{1, 16} {
			b.Run(fmt.Sprintf("sync=%s/callers=%d", sync, callers), func(b *testing.B) {
				body(b, &sqlitestore.Config{Synchronous: sync}, callers)
			})
		}
	}
}

// requestContext is the context both sides get: cancellable, as an MCP
// request's is. (With context.Background the driver skips the goroutine that
// watches a statement's context; the Guard's finish, bounded by
// FinishTimeout, always has one.)
func requestContext() (context.Context, context.CancelFunc) {
	return context.WithCancel(context.Background())
}

// runCallers runs op b.N times from callers goroutines, each call on a fresh
// key index, and reports calls/s.
func runCallers(b *testing.B, callers int, op func(ctx context.Context, i int) error) {
	if b.N > benchKeys {
		b.Fatalf("b.N %d exceeds the key pool (%d)", b.N, benchKeys)
	}
	b.ReportAllocs()
	var next atomic.Int64
	ctx, cancel := requestContext()
	defer cancel()
	start := time.Now()
	if callers == 1 {
		for i := range b.N {
			if err := op(ctx, i); err != nil {
				b.Fatal(err)
			}
		}
	} else {
		b.SetParallelism(max(1, callers/runtime.GOMAXPROCS(0)))
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := op(ctx, int(next.Add(1)-1)); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "calls/s")
}

// guardOp returns Guard.Do on a fresh key per index, against a new store.
func guardOp(b *testing.B, cfg *sqlitestore.Config) func(ctx context.Context, i int) error {
	keys := benchKeyPool()
	store := openPath(b, filepath.Join(b.TempDir(), "guard.db"), cfg)
	g, err := idemkit.NewGuard(store, nil)
	if err != nil {
		b.Fatal(err)
	}
	work := func(context.Context) (idemkit.Response, error) {
		return idemkit.Response{Body: benchBody, WriteID: "re_123"}, nil
	}
	return func(ctx context.Context, i int) error {
		res, err := g.Do(ctx, keys[i], work)
		if err == nil && (res.Outcome == idemkit.OutcomeReplayed) {
			err = fmt.Errorf("key %d replayed", i)
		}
		return err
	}
}

// The seed article's table and statements, in SQLite.
const (
	baselineSchema = `CREATE TABLE tool_idempotency (
    key           TEXT PRIMARY KEY,
    state         TEXT NOT NULL CHECK (state IN ('in_progress', 'succeeded', 'failed')),
    response      BLOB,
    attempt_count INTEGER NOT NULL DEFAULT 1,
    created_at    INTEGER NOT NULL,
    expires_at    INTEGER NOT NULL
);
CREATE INDEX tool_idempotency_expires_at ON tool_idempotency (expires_at);`
	baselineClaim = `INSERT INTO tool_idempotency (key, state, created_at, expires_at)
VALUES (?1, 'in_progress', ?2, ?3)
ON CONFLICT (key) DO UPDATE SET attempt_count = attempt_count + 1
RETURNING state, response, attempt_count`
	baselineFinish = `UPDATE tool_idempotency SET state = 'succeeded', response = ?2 WHERE key = ?1`
)

// baselineOp returns the seed's claim and finish by hand, on a fresh key
// per index, against a new database opened by Open (same pragmas, same
// pool) holding the seed's table.
func baselineOp(b *testing.B, cfg *sqlitestore.Config) func(ctx context.Context, i int) error {
	keys := benchKeyPool()
	store := openPath(b, filepath.Join(b.TempDir(), "baseline.db"), cfg)
	db := store.DB()
	if _, err := db.Exec(baselineSchema); err != nil {
		b.Fatal(err)
	}
	claim, err := db.Prepare(baselineClaim)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { claim.Close() })
	finish, err := db.Prepare(baselineFinish)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { finish.Close() })
	work := func() []byte { return benchBody }
	return func(ctx context.Context, i int) error {
		now := time.Now()
		var (
			state    string
			response []byte
			attempts int
		)
		if err := claim.QueryRowContext(ctx, keys[i].ID(), now.UnixNano(), now.Add(10*time.Minute).UnixNano()).Scan(&state, &response, &attempts); err != nil {
			return err
		}
		if attempts != 1 {
			return fmt.Errorf("key %d: attempt %d", i, attempts)
		}
		_, err := finish.ExecContext(ctx, keys[i].ID(), work())
		return err
	}
}

func BenchmarkDo(b *testing.B) {
	benchCases(b, func(b *testing.B, cfg *sqlitestore.Config, callers int) {
		op := guardOp(b, cfg)
		b.ResetTimer()
		runCallers(b, callers, op)
	})
}

func BenchmarkBaselineRawSQL(b *testing.B) {
	benchCases(b, func(b *testing.B, cfg *sqlitestore.Config, callers int) {
		op := baselineOp(b, cfg)
		b.ResetTimer()
		runCallers(b, callers, op)
	})
}

// BenchmarkDoVsBaselineRawSQL interleaves the two sides finely (a single
// caller alternates call by call; concurrent callers alternate in phases of
// 8 calls each), so that both see the same machine load and disk state: the
// two benchmarks above, run one after the other, drift apart on a busy
// machine. It reports each side's throughput and their ratio, guard over
// baseline (1.0 = as fast as the hand-written SQL).
func BenchmarkDoVsBaselineRawSQL(b *testing.B) {
	benchCases(b, func(b *testing.B, cfg *sqlitestore.Config, callers int) {
		if b.N > benchKeys {
			b.Fatalf("b.N %d exceeds the key pool (%d)", b.N, benchKeys)
		}
		guard, baseline := guardOp(b, cfg), baselineOp(b, cfg)
		phase := 1
		if callers > 1 {
			phase = 8 * callers
		}
		b.ReportAllocs()
		b.ResetTimer()
		var guardTime, baseTime time.Duration
		for done := 0; done < b.N; done += phase {
			n := min(phase, b.N-done)
			first, second, firstTime, secondTime := guard, baseline, &guardTime, &baseTime
			if (done/phase)%2 == 1 {
				first, second, firstTime, secondTime = baseline, guard, &baseTime, &guardTime
			}
			*firstTime += runPhase(b, callers, done, n, first)
			*secondTime += runPhase(b, callers, done, n, second)
		}
		b.ReportMetric(float64(b.N)/guardTime.Seconds(), "guard-calls/s")
		b.ReportMetric(float64(b.N)/baseTime.Seconds(), "baseline-calls/s")
		b.ReportMetric(baseTime.Seconds()/guardTime.Seconds(), "ratio")
	})
}

// runPhase runs op on indices [from, from+n) from callers goroutines and
// returns the wall time it took.
func runPhase(b *testing.B, callers, from, n int, op func(ctx context.Context, i int) error) time.Duration {
	ctx, cancel := requestContext()
	defer cancel()
	start := time.Now()
	if callers == 1 {
		for i := from; i < from+n; i++ {
			if err := op(ctx, i); err != nil {
				b.Fatal(err)
			}
		}
		return time.Since(start)
	}
	var next atomic.Int64
	next.Store(int64(from))
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= from+n {
					return
				}
				if err := op(ctx, i); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	return time.Since(start)
}
