package sqlitestore

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/idemkit-mcp/idemkit/idemkit/idemstore"
)

// claimSQL returns idemkit's claim statuses as numbers.
func TestClaimStatusCodesAreIdemkits(t *testing.T) {
	for code, want := range map[int]idemstore.ClaimStatus{
		statusAcquired:  idemstore.ClaimAcquired,
		statusTakenOver: idemstore.ClaimTakenOver,
		statusCompleted: idemstore.ClaimCompleted,
		statusBusy:      idemstore.ClaimBusy,
		statusMismatch:  idemstore.ClaimMismatch,
	} {
		if idemstore.ClaimStatus(code) != want {
			t.Errorf("status code %d is idemkit's %s, want %s", code, idemstore.ClaimStatus(code), want)
		}
	}
}

// The down scripts undo the up scripts exactly, and the up scripts apply
// again after them.
func TestMigrations_DownRevertsUp(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "x.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	objects := func() int {
		var n int
		if err := s.db.QueryRow(`SELECT count(*) FROM sqlite_schema WHERE name LIKE 'idemkit%' AND name <> 'idemkit_migrations'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	before := objects()
	if before == 0 {
		t.Fatal("no idemkit schema objects after Open")
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.MigrateDownTx(ctx, tx, 0); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if n := objects(); n != 0 {
		t.Fatalf("%d idemkit schema objects left after migrating down, want 0", n)
	}
	if v, err := s.Version(ctx); err != nil || v != 0 {
		t.Fatalf("Version after migrating down: %d %v, want 0", v, err)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if n := objects(); n != before {
		t.Fatalf("%d schema objects after migrating up again, want %d", n, before)
	}
	ms, err := Migrations()
	if err != nil {
		t.Fatal(err)
	}
	if v, err := s.Version(ctx); err != nil || v != ms[len(ms)-1].Version {
		t.Fatalf("Version after migrating up: %d %v, want %d", v, err, ms[len(ms)-1].Version)
	}
}

// Inside a DoTx transaction, Lookup and List read the transaction's own
// uncommitted claim.
func TestTxStore_LookupAndListSeeTheTransaction(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "x.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	ts := &txStore{tx: tx}
	if _, err := ts.Claim(ctx, idemstore.ClaimRequest{Key: "k", Tool: "refund", Token: 7, Lease: time.Minute, Window: time.Hour}); err != nil {
		t.Fatal(err)
	}
	rec, err := ts.Lookup(ctx, idemstore.LookupRequest{Key: "k", Body: true})
	if err != nil || rec.State != idemstore.StateInProgress || rec.Tool != "refund" {
		t.Fatalf("Lookup in the transaction: %+v %v", rec, err)
	}
	recs, err := ts.List(ctx, idemstore.ListRequest{State: idemstore.StateInProgress})
	if err != nil || len(recs) != 1 || recs[0].Key != "k" {
		t.Fatalf("List in the transaction: %+v %v", recs, err)
	}
}

// A database migrated without one migration (a lower-numbered migration
// merged after a higher one was applied) gets it on the next Migrate, and
// the migrations table then lists every version once.
func TestMigrate_AppliesAMissingLowerVersion(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "x.db"), &Config{NoMigrate: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ms, err := Migrations()
	if err != nil || len(ms) < 2 {
		t.Fatalf("Migrations: %d %v", len(ms), err)
	}
	gap := ms[len(ms)-2]
	without := append(append([]Migration(nil), ms[:len(ms)-2]...), ms[len(ms)-1])
	if err := applyMigrations(ctx, s.db, without); err != nil {
		t.Fatal(err)
	}
	applied, err := appliedVersions(ctx, s.db)
	if err != nil || applied[gap.Version] || !applied[ms[len(ms)-1].Version] {
		t.Fatalf("applied %v %v; want all but %d", applied, err, gap.Version)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("Migrate over the gap: %v", err)
	}
	applied, err = appliedVersions(ctx, s.db)
	if err != nil || len(applied) != len(ms) || !allApplied(ms, applied) {
		t.Fatalf("after Migrate: applied %v %v; want all %d", applied, err, len(ms))
	}
	// The store works on the result.
	if _, err := s.Claim(ctx, idemstore.ClaimRequest{Key: "k", Tool: "t", Token: 3, Lease: time.Minute, Window: time.Hour}); err != nil {
		t.Fatalf("claim after the gap was filled: %v", err)
	}
}
