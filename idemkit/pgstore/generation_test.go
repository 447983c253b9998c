package pgstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idemkit-mcp/idemkit/idemkit"
	"github.com/idemkit-mcp/idemkit/idemkit/idemstore"
	"github.com/idemkit-mcp/idemkit/idemkit/pgstore"
	"github.com/idemkit-mcp/idemkit/internal/testing/pgtest"
	"github.com/jackc/pgx/v5"
)

// generationVersion returns the version of the migration that added the
// generation column.
func generationVersion(t *testing.T) int {
	t.Helper()
	ms, err := pgstore.Migrations()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if m.Name == "generation" {
			return m.Version
		}
	}
	t.Fatal("no generation migration")
	return 0
}

// A record written before migration 005 (an attempt that crashed holding
// it, on the previous version) is taken over after the upgrade with the
// downstream key that attempt forwarded: "idk_" and the key ID. A fresh
// record gets the per-record form.
func TestMigrate_RowsBeforeGenerationsKeepTheirDownstreamKey(t *testing.T) {
	pool := pgtest.Pool(t)
	schema := pgtest.Schema(t, pool)
	store, _ := pgstore.New(pool, &pgstore.Config{Schema: schema})
	ctx := context.Background()
	if err := store.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return store.MigrateDownTx(ctx, tx, generationVersion(t)-1) }); err != nil {
		t.Fatalf("MigrateDownTx: %v", err)
	}
	old := mustKey(t, "alice", "issue_refund", `{"order":"ord_1001"}`)
	table := pgx.Identifier{schema, "idemkit_claims"}.Sanitize()
	// In progress, its lease lapsed a minute ago: the old worker died.
	if _, err := pool.Exec(ctx, `INSERT INTO `+table+` (key, tool, fingerprint, state, token, attempt, started_at, lease_until, expires_at)
VALUES ($1, 'issue_refund', '', 'in_progress', 42, 1, now() - interval '3 minutes', now() - interval '1 minute', now() + interval '7 minutes')`, old.ID()); err != nil {
		t.Fatal(err)
	}
	if err := store.Migrate(ctx); err != nil {
		t.Fatalf("Migrate over the old row: %v", err)
	}
	if rec, err := store.Lookup(ctx, idemstore.LookupRequest{Key: old.ID()}); err != nil || rec.Generation != 0 {
		t.Fatalf("old row after the upgrade: %+v %v; want generation 0", rec, err)
	}
	g, _ := idemkit.NewGuard(store, nil)
	var got string
	res, err := g.Do(ctx, old, func(ctx context.Context) (idemkit.Response, error) {
		got = idemkit.CallFromContext(ctx).IdempotencyKey()
		return idemkit.Response{Body: []byte("ok")}, nil
	})
	if err != nil || res.Outcome != idemkit.OutcomeTakeover || got != "idk_"+old.ID() {
		t.Fatalf("takeover of the old row: %+v %v key %q; want a takeover forwarding %q", res, err, got, "idk_"+old.ID())
	}
	fresh := mustKey(t, "alice", "issue_refund", `{"order":"ord_1002"}`)
	if _, err := g.Do(ctx, fresh, func(ctx context.Context) (idemkit.Response, error) {
		got = idemkit.CallFromContext(ctx).IdempotencyKey()
		return idemkit.Response{}, nil
	}); err != nil {
		t.Fatal(err)
	}
	rec, err := store.Lookup(ctx, idemstore.LookupRequest{Key: fresh.ID()})
	if err != nil || rec.Generation == 0 || got != idemkit.DownstreamKey(fresh.ID(), rec.Generation) || got == "idk_"+fresh.ID() {
		t.Fatalf("fresh record: generation %d key %q %v; want a per-record key", rec.Generation, got, err)
	}
}

// In a caller's transaction (DoTx) the claim commits with the work: an
// attempt rolled back after it called a provider leaves no record, and its
// retry is a fresh record. The retry must forward the key the rolled-back
// attempt forwarded, or the provider refunds twice: there the key is the
// argument-derived one.
func TestDoTx_RetryOfARolledBackAttemptForwardsItsKey(t *testing.T) {
	pool := pgtest.Pool(t)
	store := newStore(t, pool)
	g, _ := idemkit.NewGuard(store, &idemkit.Config{Lease: time.Minute})
	ctx := context.Background()
	k := mustKey(t, "s", "issue_refund", `{"order":"o-tx"}`)
	var keys []string
	work := func(fail bool) pgstore.TxWork {
		return func(ctx context.Context, tx pgx.Tx) (idemkit.Response, error) {
			keys = append(keys, idemkit.CallFromContext(ctx).IdempotencyKey())
			if fail {
				return idemkit.Response{}, errors.New("killed before the commit")
			}
			return idemkit.Response{Body: []byte("ok")}, nil
		}
	}
	if _, err := store.DoInTx(ctx, g, k, work(true)); err == nil {
		t.Fatal("failing DoInTx succeeded")
	}
	if _, err := store.Lookup(ctx, idemstore.LookupRequest{Key: k.ID()}); !errors.Is(err, idemkit.ErrNotFound) {
		t.Fatalf("after the rollback: %v, want no record", err)
	}
	if _, err := store.DoInTx(ctx, g, k, work(false)); err != nil {
		t.Fatal(err)
	}
	if len(keys) != 2 || keys[0] != keys[1] || keys[1] != idemkit.DownstreamKey(k.ID(), 0) {
		t.Fatalf("keys %q; want the rolled-back attempt's key again, the argument-derived one", keys)
	}
}
