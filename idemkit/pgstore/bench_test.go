package pgstore_test

// Run: go test -run '^$' -bench Postgres -benchmem ./idemkit/pgstore
// (a throwaway no-fsync cluster is started unless TEST_DATABASE_URL is set).
// `make bench` prints the ratios.

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/idemkit-mcp/idemkit/idemkit"
	"github.com/idemkit-mcp/idemkit/idemkit/pgstore"
	"github.com/idemkit-mcp/idemkit/internal/testing/benchpair"
	"github.com/idemkit-mcp/idemkit/internal/testing/pgtest"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

const benchKeys = 1 << 18

func benchKeyPool() []idemkit.Key { return benchpair.Keys(benchKeys) }

var benchBody = benchpair.Body

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
			// Each side claims its own fresh keys: even indices for the
			// Guard, odd ones for the seed statements.
			base := int(next.Add(int64(2*b.N))) - 2*b.N
			if base+2*b.N > benchKeys {
				b.Fatal("key pool exhausted: lower -benchtime")
			}
			benchpair.Run(b, callers, 8*callers,
				func(i int) error { return guardOp(keys[base+2*i]) },
				func(i int) error { return seedOp(keys[base+2*i+1]) })
		})
	}
}

// BenchmarkPostgresReplay compares a duplicate of a completed call through
// Guard.Do (the fresh claim meets the record, a read answers it: nothing is
// written) with the seed's claim statement meeting an existing row (its
// conflict update answers it, writing the row), through one pool, at 1 and
// 32 callers over 256 completed keys per side: on the package's no-fsync
// server, and on a durable one (fsync and synchronous commits on, as in
// production), where the seed's write costs a WAL flush per duplicate.
func BenchmarkPostgresReplay(b *testing.B) {
	for _, durable := range []bool{false, true} {
		b.Run(fmt.Sprintf("durable=%v", durable), func(b *testing.B) {
			dsn := pgtest.DSN(b)
			if durable {
				dsn = pgtest.StartCluster(b, pgtest.ClusterOptions{Durable: true}).DSN()
			}
			benchReplay(b, dsn)
		})
	}
}

func benchReplay(b *testing.B, dsn string) {
	keys := benchKeyPool()
	ctx := context.Background()
	admin, err := pgxpool.New(ctx, dsn)
	if err != nil {
		b.Fatal(err)
	}
	defer admin.Close()
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		b.Fatal(err)
	}
	cfg.MaxConns = 32
	cfg.ConnConfig.RuntimeParams["search_path"] = pgtest.Schema(b, admin)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer pool.Close()
	store, _ := pgstore.New(pool, nil)
	if err := store.Migrate(ctx); err != nil {
		b.Fatal(err)
	}
	if _, err := pool.Exec(ctx, seedTable); err != nil {
		b.Fatal(err)
	}
	guard, _ := idemkit.NewGuard(store, nil)
	work := func(context.Context) (idemkit.Response, error) {
		return idemkit.Response{Body: benchBody, WriteID: "re_123"}, nil
	}
	const n = 256
	for i := range n {
		if _, err := guard.Do(ctx, keys[2*i], work); err != nil {
			b.Fatal(err)
		}
		id := keys[2*i+1].ID()
		if _, err := pool.Exec(ctx, seedClaim, id); err != nil {
			b.Fatal(err)
		}
		if _, err := pool.Exec(ctx, seedFinish, id, benchBody); err != nil {
			b.Fatal(err)
		}
	}
	guardOp := func(i int) error {
		res, err := guard.Do(ctx, keys[2*(i%n)], work)
		if err == nil && res.Outcome != idemkit.OutcomeReplayed {
			err = fmt.Errorf("outcome %s on a completed key", res.Outcome)
		}
		return err
	}
	seedOp := func(i int) error {
		var (
			state    string
			response []byte
			attempt  int
			inserted bool
		)
		err := pool.QueryRow(ctx, seedClaim, keys[2*(i%n)+1].ID()).Scan(&state, &response, &attempt, &inserted)
		if err == nil && (inserted || state != "succeeded") {
			err = fmt.Errorf("seed duplicate: inserted %v state %s", inserted, state)
		}
		return err
	}
	for _, callers := range []int{1, 32} {
		b.Run(fmt.Sprintf("callers=%d", callers), func(b *testing.B) {
			benchpair.Run(b, callers, 8*callers, guardOp, seedOp)
		})
	}
}
