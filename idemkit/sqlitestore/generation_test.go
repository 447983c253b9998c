package sqlitestore_test

import (
	"context"
	"testing"
	"time"

	"github.com/idemkit-mcp/idemkit/idemkit"
	"github.com/idemkit-mcp/idemkit/idemkit/idemstore"
	"github.com/idemkit-mcp/idemkit/idemkit/sqlitestore"
)

// A record written before migration 005 (an attempt that crashed holding
// it, on the previous version) is taken over after the upgrade with the
// downstream key that attempt forwarded: "idk_" and the key ID.
func TestMigrate_RowsBeforeGenerationsKeepTheirDownstreamKey(t *testing.T) {
	ctx := context.Background()
	store := openFile(t, nil)
	ms, err := sqlitestore.Migrations()
	if err != nil {
		t.Fatal(err)
	}
	target := 0
	for _, m := range ms {
		if m.Name == "generation" {
			target = m.Version - 1
		}
	}
	if target == 0 {
		t.Fatal("no generation migration")
	}
	tx, err := store.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.MigrateDownTx(ctx, tx, target); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	k, _ := idemkit.NewKey("alice", "issue_refund", []byte(`{"order":"ord_1001"}`), nil)
	now := time.Now()
	if _, err := store.DB().ExecContext(ctx, `INSERT INTO idemkit_claims
    (key, tool, fingerprint, state, token, attempt, started_at, lease_until, expires_at, sweep_at, created_at, updated_at)
VALUES (?1, 'issue_refund', '', 'in_progress', 42, 1, ?2, ?3, ?4, ?4, ?2, ?2)`,
		k.ID(), now.Add(-3*time.Minute).UnixNano(), now.Add(-time.Minute).UnixNano(), now.Add(7*time.Minute).UnixNano()); err != nil {
		t.Fatal(err)
	}
	if err := store.Migrate(ctx); err != nil {
		t.Fatalf("Migrate over the old row: %v", err)
	}
	g, _ := idemkit.NewGuard(store, nil)
	var got string
	res, err := g.Do(ctx, k, func(ctx context.Context) (idemkit.Response, error) {
		got = idemkit.CallFromContext(ctx).IdempotencyKey()
		return idemkit.Response{Body: []byte("ok")}, nil
	})
	if err != nil || res.Outcome != idemkit.OutcomeTakeover || got != "idk_"+k.ID() {
		t.Fatalf("takeover of the old row: %+v %v key %q; want a takeover forwarding %q", res, err, got, "idk_"+k.ID())
	}
	if rec, err := store.Lookup(ctx, idemstore.LookupRequest{Key: k.ID()}); err != nil || rec.Generation != 0 {
		t.Fatalf("old record: %+v %v; want generation 0 kept", rec, err)
	}
}
