package pgstore_test

// Run: go test -run '^$' -bench Postgres -benchmem ./idemkit/pgstore
// (a throwaway no-fsync cluster is started unless TEST_DATABASE_URL is set).
// `make bench` prints the ratios.

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit/idemkit"
	"github.com/idemkit/idemkit/idemkit/pgstore"
	"github.com/idemkit/idemkit/internal/pgtest"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

const benchKeys = 1 << 18

var benchKeyPool = sync.OnceValue(func() []idemkit.Key {
	keys := make([]idemkit.Key, benchKeys)
	for i := range keys {
		k, err := idemkit.NewKey("user-42", "issue_refund", fmt.Appendf(nil, `{"order":"o-%d","amount_cents":500}`, i), nil)
		if err != nil {
			panic(err)
		}
		keys[i] = k
	}
	return keys
})

var benchBody = []byte(`{"content":[{"type":"text","text":"refund re_123 issued"}],"structuredContent":{"refund_id":"re_123"}}`)

// The seed article's table and its two statements, verbatim: the claim and
// the finish a hand-written implementation would run.
const (
	seedTable = `create table tool_idempotency (
  key           text primary key,
  state         text not null check (state in ('in_progress','succeeded','failed')),
  response      jsonb,
  attempt_count int not null default 1,
  created_at    timestamptz not null default now(),
  expires_at    timestamptz not null
);
create index on tool_idempotency (expires_at);`
	seedClaim = `insert into tool_idempotency (key, state, expires_at)
values ($1, 'in_progress', now() + interval '10 minutes')
on conflict (key) do update
  set attempt_count = tool_idempotency.attempt_count + 1
returning state, response, attempt_count, (xmax = 0) as inserted`
	seedFinish = `update tool_idempotency set state = 'succeeded', response = $2 where key = $1`
)

// BenchmarkPostgres compares Guard.Do on pgstore (claim, work, finish on a
// fresh key) with the seed's two statements run by hand through the same
// pgx pool, at 1 and 32 concurrent callers.
func BenchmarkPostgres(b *testing.B) {
	keys := benchKeyPool()
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(pgtest.DSN(b))
	if err != nil {
		b.Fatal(err)
	}
	cfg.MaxConns = 32
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer pool.Close()
	schema := pgtest.Schema(b, pool)
	store, _ := pgstore.New(pool, &pgstore.Config{Schema: schema})
	if err := store.Migrate(ctx); err != nil {
		b.Fatal(err)
	}
	guard, _ := idemkit.NewGuard(store, nil)
	if _, err := pool.Exec(ctx, "SET search_path TO "+pgx.Identifier{schema}.Sanitize()); err != nil {
		b.Fatal(err)
	}
	// The seed table lives in the same schema; every connection sets it.
	seedPool := func() *pgxpool.Pool {
		c := cfg.Copy()
		c.ConnConfig.RuntimeParams["search_path"] = schema
		p, err := pgxpool.NewWithConfig(ctx, c)
		if err != nil {
			b.Fatal(err)
		}
		return p
	}()
	defer seedPool.Close()
	if _, err := seedPool.Exec(ctx, seedTable); err != nil {
		b.Fatal(err)
	}

	var next atomic.Int64 // keys are never reused across runs
	work := func(context.Context) (idemkit.Response, error) {
		return idemkit.Response{Body: benchBody, WriteID: "re_123"}, nil
	}
	guardOp := func(key idemkit.Key) error {
		res, err := guard.Do(ctx, key, work)
		if err == nil && res.Outcome != idemkit.OutcomeExecuted {
			err = fmt.Errorf("outcome %s on a fresh key", res.Outcome)
		}
		return err
	}
	seedOp := func(key idemkit.Key) error {
		var (
			state    string
			response []byte
			attempt  int
			inserted bool
		)
		id := key.ID()
		if err := seedPool.QueryRow(ctx, seedClaim, id).Scan(&state, &response, &attempt, &inserted); err != nil || !inserted {
			return fmt.Errorf("seed claim: %v inserted=%v", err, inserted)
		}
		resp, _ := work(ctx)
		_, err := seedPool.Exec(ctx, seedFinish, id, resp.Body)
		return err
	}
	for _, callers := range []int{1, 32} {
		b.Run(fmt.Sprintf("callers=%d", callers), func(b *testing.B) {
			pairedRun(b, callers, func() idemkit.Key {
				i := next.Add(1) - 1
				if i >= benchKeys {
					b.Fatal("key pool exhausted: lower -benchtime")
				}
				return keys[i]
			}, guardOp, seedOp)
		})
	}
}

// pairedRun runs b.N pairs of calls, one of guard and one of baseline on
// fresh keys, alternating which goes first, over exactly callers
// goroutines. Pairing makes the two sides share whatever else the machine
// is doing, so their ratio is stable even when absolute times are not. It
// reports the median time of each side and the throughput ratio
// guard/baseline (1.0 = as fast as the baseline).
func pairedRun(b *testing.B, callers int, nextKey func() idemkit.Key, guard, baseline func(idemkit.Key) error) {
	b.ReportAllocs()
	var (
		mu             sync.Mutex
		gTimes, bTimes []time.Duration
		next           atomic.Int64
	)
	n := int64(b.N)
	b.ResetTimer()
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			var gt, bt []time.Duration
			for i := next.Add(1); i <= n; i = next.Add(1) {
				kg, kb := nextKey(), nextKey()
				first, second := guard, baseline
				if i%2 == 0 {
					first, second = baseline, guard
				}
				t0 := time.Now()
				if err := first(kg); err != nil {
					b.Error(err)
					return
				}
				t1 := time.Now()
				if err := second(kb); err != nil {
					b.Error(err)
					return
				}
				t2 := time.Now()
				if i%2 == 0 {
					bt, gt = append(bt, t1.Sub(t0)), append(gt, t2.Sub(t1))
				} else {
					gt, bt = append(gt, t1.Sub(t0)), append(bt, t2.Sub(t1))
				}
			}
			mu.Lock()
			gTimes, bTimes = append(gTimes, gt...), append(bTimes, bt...)
			mu.Unlock()
		})
	}
	wg.Wait()
	b.StopTimer()
	if len(gTimes) == 0 || len(bTimes) == 0 {
		return
	}
	gMed, bMed := median(gTimes), median(bTimes)
	gMean, bMean := mean(gTimes), mean(bTimes)
	b.ReportMetric(float64(gMed.Microseconds()), "guard-µs/call")
	b.ReportMetric(float64(bMed.Microseconds()), "baseline-µs/call")
	// Throughput ratio from total time spent on each side.
	b.ReportMetric(float64(bMean)/float64(gMean), "throughput-ratio")
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

func mean(d []time.Duration) time.Duration {
	var sum time.Duration
	for _, x := range d {
		sum += x
	}
	return sum / time.Duration(len(d))
}
