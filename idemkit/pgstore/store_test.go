package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit-mcp/idemkit/idemkit"
	"github.com/idemkit-mcp/idemkit/idemkit/idemstore"
	"github.com/idemkit-mcp/idemkit/idemkit/pgstore"
	"github.com/idemkit-mcp/idemkit/idemkit/storetest"
	"github.com/idemkit-mcp/idemkit/internal/testing/pgtest"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(runChild())
	}
	if os.Getenv(killStepEnv) != "" {
		os.Exit(runKillChild())
	}
	code := pgtest.Run(m)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// newStore returns a migrated store in a schema of its own.
func newStore(t testing.TB, pool *pgxpool.Pool) *pgstore.Store {
	t.Helper()
	schema := pgtest.Schema(t, pool)
	store, err := pgstore.New(pool, &pgstore.Config{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Migrate(context.Background()); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	storeSchemas.Store(store, schema)
	return store
}

// storeSchemas maps the stores newStore made to their schemas, for the
// raw SQL of damageRecord.
var storeSchemas sync.Map // *pgstore.Store -> string

func TestStore_Conformance(t *testing.T) {
	pool := pgtest.Pool(t)
	storetest.Run(t, storetest.Config{
		NewStore: func(t *testing.T) idemstore.Store { return newStore(t, pool) },
		Damage:   damageRecord,
	})
}

func mustKey(t testing.TB, subject, tool, args string) idemkit.Key {
	t.Helper()
	k, err := idemkit.NewKey(subject, tool, []byte(args), nil)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// The database clock drives leases when the Guard has no clock of its own.
func TestStore_DatabaseClockLease(t *testing.T) {
	store := newStore(t, pgtest.Pool(t))
	g, _ := idemkit.NewGuard(store, &idemkit.Config{Lease: 300 * time.Millisecond})
	k := mustKey(t, "s", "refund", `{"order":"o-1"}`)
	started, release := make(chan struct{}), make(chan struct{})
	staleDone := make(chan error, 1)
	go func() {
		_, err := g.Do(context.Background(), k, func(context.Context) (idemkit.Response, error) {
			close(started)
			<-release
			return idemkit.Response{Body: []byte("stale")}, nil
		})
		staleDone <- err
	}()
	<-started
	if _, err := g.Do(context.Background(), k, nil); !errors.Is(err, idemkit.ErrInProgress) {
		t.Fatalf("inside the lease: %v", err)
	}
	time.Sleep(500 * time.Millisecond)
	res, err := g.Do(context.Background(), k, func(context.Context) (idemkit.Response, error) {
		return idemkit.Response{Body: []byte("owner")}, nil
	})
	if err != nil || res.Outcome != idemkit.OutcomeTakeover || res.Attempt != 2 {
		t.Fatalf("after the lease: %+v %v, want takeover attempt 2", res, err)
	}
	close(release)
	if err := <-staleDone; !errors.Is(err, idemkit.ErrLeaseLost) {
		t.Fatalf("stale finish: %v, want ErrLeaseLost", err)
	}
}

// Replicas: several pools and Guards on one database, as servers behind a
// load balancer. The claim row is the only arbiter.
func TestStore_ReplicasRunEachKeyOnce(t *testing.T) {
	base := pgtest.Pool(t)
	schema := pgtest.Schema(t, base)
	const replicas, goroutines, keys = 4, 64, 500
	guards := make([]*idemkit.Guard, replicas)
	for i := range guards {
		pool, err := pgxpool.New(context.Background(), pgtest.DSN(t))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		store, _ := pgstore.New(pool, &pgstore.Config{Schema: schema})
		if err := store.Migrate(context.Background()); err != nil { // concurrent-safe, idempotent
			t.Fatal(err)
		}
		guards[i], _ = idemkit.NewGuard(store, nil)
	}
	runs := make([]atomic.Int64, keys)
	var wg sync.WaitGroup
	for gi := range goroutines {
		wg.Go(func() {
			g := guards[gi%replicas]
			for j := range keys {
				i := (j + gi*7) % keys
				k := mustKey(t, "s", "refund", fmt.Sprintf(`{"order":%d}`, i))
				_, err := g.Do(context.Background(), k, func(context.Context) (idemkit.Response, error) {
					runs[i].Add(1)
					return idemkit.Response{Body: []byte("ok")}, nil
				})
				if err != nil && !errors.Is(err, idemkit.ErrInProgress) {
					t.Errorf("key %d: %v", i, err)
					return
				}
			}
		})
	}
	wg.Wait()
	for i := range runs {
		if n := runs[i].Load(); n != 1 {
			t.Fatalf("key %d ran %d times across %d replicas, want 1", i, n, replicas)
		}
	}
}

func TestStore_MigrateIsIdempotentAndReversible(t *testing.T) {
	pool := pgtest.Pool(t)
	schema := pgtest.Schema(t, pool)
	store, _ := pgstore.New(pool, &pgstore.Config{Schema: schema})
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() { errs <- store.Migrate(ctx) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("concurrent Migrate: %v", err)
		}
	}
	migrations, err := pgstore.Migrations()
	if err != nil || len(migrations) == 0 {
		t.Fatalf("Migrations: %v", err)
	}
	if v, err := store.Version(ctx); err != nil || v != migrations[len(migrations)-1].Version {
		t.Fatalf("Version = %d, %v", v, err)
	}
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return store.MigrateDownTx(ctx, tx, 0) }); err != nil {
		t.Fatalf("MigrateDownTx: %v", err)
	}
	g, _ := idemkit.NewGuard(store, nil)
	_, err = g.Do(ctx, mustKey(t, "s", "t", `{}`), func(context.Context) (idemkit.Response, error) {
		t.Error("work ran without tables")
		return idemkit.Response{}, nil
	})
	if !errors.Is(err, idemkit.ErrStore) || !strings.Contains(err.Error(), "Migrate") {
		t.Fatalf("claim without tables: %v, want an error telling to run Migrate", err)
	}
	if err := store.Migrate(ctx); err != nil {
		t.Fatalf("Migrate after down: %v", err)
	}
	if _, err := g.Do(ctx, mustKey(t, "s", "t", `{}`), func(context.Context) (idemkit.Response, error) { return idemkit.Response{}, nil }); err != nil {
		t.Fatalf("Do after re-migrating: %v", err)
	}
}

func TestStore_DownStoreRunsNothing(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	cfg, _ := pgxpool.ParseConfig("postgres://postgres@" + addr + "/postgres?sslmode=disable&connect_timeout=2")
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	store, _ := pgstore.New(pool, nil)
	g, _ := idemkit.NewGuard(store, nil)
	var runs atomic.Int64
	_, err = g.Do(context.Background(), mustKey(t, "s", "refund", `{}`), func(context.Context) (idemkit.Response, error) {
		runs.Add(1)
		return idemkit.Response{}, nil
	})
	if !errors.Is(err, idemkit.ErrStore) || runs.Load() != 0 {
		t.Fatalf("down store: err %v runs %d; want ErrStore and no run", err, runs.Load())
	}
}

func TestNew_Validates(t *testing.T) {
	if _, err := pgstore.New(nil, nil); err == nil {
		t.Fatal("New(nil) succeeded")
	}
}

// Migration 002 turns write_id and last_error into bytea: records stored
// before it keep their values, and read back through Lookup.
func TestMigrate_UpgradeKeepsStoredRecords(t *testing.T) {
	pool := pgtest.Pool(t)
	schema := pgtest.Schema(t, pool)
	store, _ := pgstore.New(pool, &pgstore.Config{Schema: schema})
	ctx := context.Background()
	if err := store.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return store.MigrateDownTx(ctx, tx, 1) }); err != nil {
		t.Fatalf("MigrateDownTx(1): %v", err)
	}
	table := pgx.Identifier{schema, "idemkit_claims"}.Sanitize()
	if _, err := pool.Exec(ctx, `INSERT INTO `+table+` (key, tool, fingerprint, state, token, attempt, started_at, lease_until, expires_at, response, write_id, last_error)
VALUES ('k-done', 'refund', '', 'succeeded', 1, 1, now(), now(), now() + interval '1 hour', 'body', 're_é1', NULL),
       ('k-failed', 'refund', '', 'failed', 2, 1, now(), now(), now() + interval '1 hour', NULL, NULL, 'gateway said ü')`); err != nil {
		t.Fatal(err)
	}
	if err := store.Migrate(ctx); err != nil {
		t.Fatalf("Migrate over version 1 with records: %v", err)
	}
	done, err := store.Lookup(ctx, idemstore.LookupRequest{Key: "k-done", Body: true})
	if err != nil || done.WriteID != "re_é1" || string(done.Body) != "body" || done.State != idemstore.StateCompleted {
		t.Fatalf("completed record after the upgrade: %+v %v", done, err)
	}
	failed, err := store.Lookup(ctx, idemstore.LookupRequest{Key: "k-failed"})
	if err != nil || failed.Error != "gateway said ü" || failed.State != idemstore.StateReleased {
		t.Fatalf("released record after the upgrade: %+v %v", failed, err)
	}
}
