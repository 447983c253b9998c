package sqlitestore_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/idemkit-mcp/idemkit/idemkit"
	"github.com/idemkit-mcp/idemkit/idemkit/idemstore"
	"github.com/idemkit-mcp/idemkit/idemkit/sqlitestore"
	"github.com/idemkit-mcp/idemkit/idemkit/storetest"
)

func TestMain(m *testing.M) {
	if child() {
		return
	}
	if step := os.Getenv(killStepEnv); step != "" {
		err := runKillChild(step, os.Getenv(killDBEnv), os.Getenv(killOrderEnv))
		fmt.Fprintln(os.Stderr, "kill child:", err)
		os.Exit(2)
	}
	goleak.VerifyTestMain(m)
}

// openFile opens a migrated store on a new database file in t.TempDir.
func openFile(t testing.TB, cfg *sqlitestore.Config) *sqlitestore.Store {
	t.Helper()
	return openPath(t, filepath.Join(t.TempDir(), "idemkit.db"), cfg)
}

func openPath(t testing.TB, path string, cfg *sqlitestore.Config) *sqlitestore.Store {
	t.Helper()
	s, err := sqlitestore.Open(context.Background(), path, cfg)
	if err != nil {
		t.Fatalf("Open(%s): %v", path, err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

func TestStore_Conformance(t *testing.T) {
	storetest.Run(t, storetest.Config{
		NewStore: func(t *testing.T) idemstore.Store { return openFile(t, nil) },
		Damage:   damageRecord,
	})
}

func TestStore_ConformanceInMemory(t *testing.T) {
	storetest.Run(t, storetest.Config{
		NewStore: func(t *testing.T) idemstore.Store { return openPath(t, ":memory:", nil) },
		Damage:   damageRecord,
	})
}

func TestOpen_ConfigErrorsNameTheField(t *testing.T) {
	_, err := sqlitestore.Open(context.Background(), filepath.Join(t.TempDir(), "x.db"), &sqlitestore.Config{
		BusyTimeout:  -time.Second,
		Synchronous:  "SOMETIMES",
		MaxOpenConns: -1,
	})
	if err == nil {
		t.Fatal("Open accepted an invalid Config")
	}
	for _, field := range []string{"Config.BusyTimeout", "Config.Synchronous", "Config.MaxOpenConns"} {
		if !strings.Contains(err.Error(), field) {
			t.Errorf("error %q does not name %s", err, field)
		}
	}
	if _, err := sqlitestore.Open(context.Background(), "", nil); err == nil {
		t.Error("Open accepted an empty path")
	}
	if _, err := sqlitestore.New(nil, nil); err == nil {
		t.Error("New accepted a nil *sql.DB")
	}
}

func TestOpen_SetsWALAndDurabilityPragmas(t *testing.T) {
	for _, tt := range []struct {
		cfg  *sqlitestore.Config
		sync int
		busy int
	}{
		{nil, 2, 5000},
		{&sqlitestore.Config{Synchronous: sqlitestore.SynchronousNormal, BusyTimeout: 1500 * time.Millisecond}, 1, 1500},
	} {
		store := openFile(t, tt.cfg)
		db := store.DB()
		var journal string
		var sync, busy, fk int
		if err := db.QueryRow(`PRAGMA journal_mode`).Scan(&journal); err != nil {
			t.Fatal(err)
		}
		db.QueryRow(`PRAGMA synchronous`).Scan(&sync)
		db.QueryRow(`PRAGMA busy_timeout`).Scan(&busy)
		db.QueryRow(`PRAGMA foreign_keys`).Scan(&fk)
		if journal != "wal" || sync != tt.sync || busy != tt.busy || fk != 1 {
			t.Errorf("cfg %+v: journal_mode=%s synchronous=%d busy_timeout=%d foreign_keys=%d; want wal, %d, %d, 1",
				tt.cfg, journal, sync, busy, fk, tt.sync, tt.busy)
		}
		if n := db.Stats().MaxOpenConnections; n != 1 {
			t.Errorf("pool of %d connections, want 1", n)
		}
	}
}

func TestOpen_PathWithURICharacters(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "dir with space")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "a?b#c%20d.db")
	store := openPath(t, path, nil)
	g, _ := idemkit.NewGuard(store, nil)
	if _, err := g.Do(context.Background(), refundKey(), func(context.Context) (idemkit.Response, error) {
		return idemkit.Response{Body: []byte("ok")}, nil
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("the database is not at the path given: %v", err)
	}
}

func TestStore_CloseIsIdempotentAndFinal(t *testing.T) {
	store, err := sqlitestore.Open(context.Background(), filepath.Join(t.TempDir(), "x.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Close(); err != nil {
		t.Fatal(err)
	}
	if err := store.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	_, err = store.Claim(context.Background(), idemstore.ClaimRequest{Key: "k", Tool: "t", Fingerprint: "fp", Token: 1, Lease: time.Minute, Window: time.Hour})
	if !errors.Is(err, sqlitestore.ErrClosed) {
		t.Fatalf("Claim after Close: %v, want ErrClosed", err)
	}
}

// rawDB opens a database with the driver's defaults (no WAL, no foreign
// keys, no busy timeout), as a caller handing its own *sql.DB to New might.
func rawDB(t *testing.T) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", filepath.Join(t.TempDir(), "raw.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func TestNew_NeedsMigrateAndLeavesTheDBOpen(t *testing.T) {
	ctx := context.Background()
	db := rawDB(t)
	store, err := sqlitestore.New(db, nil)
	if err != nil {
		t.Fatal(err)
	}
	req := idemstore.ClaimRequest{Key: "k", Tool: "t", Fingerprint: "fp", Token: 1, Lease: time.Minute, Window: time.Hour}
	if _, err := store.Claim(ctx, req); !errors.Is(err, sqlitestore.ErrNotMigrated) {
		t.Fatalf("Claim before Migrate: %v, want ErrNotMigrated", err)
	}
	if err := store.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if cr, err := store.Claim(ctx, req); err != nil || cr.Status != idemstore.ClaimAcquired {
		t.Fatalf("Claim after Migrate: %v %v", cr.Status, err)
	}
	if err := store.Close(); err != nil {
		t.Fatal(err)
	}
	if err := db.Ping(); err != nil {
		t.Fatalf("Close closed the caller's *sql.DB: %v", err)
	}
}

func TestMigrate_IsIdempotentAndRecordsTheVersion(t *testing.T) {
	store := openFile(t, nil)
	for range 3 {
		if err := store.Migrate(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	ms, err := sqlitestore.Migrations()
	if err != nil {
		t.Fatal(err)
	}
	last := ms[len(ms)-1]
	var n, version int
	var name string
	if err := store.DB().QueryRow(`SELECT count(*), max(version), (SELECT name FROM idemkit_migrations ORDER BY version DESC LIMIT 1) FROM idemkit_migrations`).Scan(&n, &version, &name); err != nil {
		t.Fatal(err)
	}
	if n != len(ms) || version != last.Version || name != last.Name {
		t.Fatalf("migrations table: %d rows, version %d %q; want %d rows, the last %d %s", n, version, name, len(ms), last.Version, last.Name)
	}
}

func TestMigrate_ConcurrentOpensOfOneFileApplyOnce(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.db")
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for range 16 {
		wg.Go(func() {
			s, err := sqlitestore.Open(context.Background(), path, nil)
			if err == nil {
				err = s.Close()
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("concurrent Open: %v", err)
		}
	}
	store := openPath(t, path, nil)
	ms, err := sqlitestore.Migrations()
	if err != nil {
		t.Fatal(err)
	}
	var n int
	store.DB().QueryRow(`SELECT count(*) FROM idemkit_migrations`).Scan(&n)
	if n != len(ms) {
		t.Fatalf("%d migration rows, want %d (each migration once)", n, len(ms))
	}
}

func TestMigrateTx_CommitsWithTheCallersTransaction(t *testing.T) {
	ctx := context.Background()
	db := rawDB(t)
	store, _ := sqlitestore.New(db, nil)
	tables := func() int {
		var n int
		db.QueryRow(`SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name LIKE 'idemkit%'`).Scan(&n)
		return n
	}
	for _, commit := range []bool{false, true} {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := store.MigrateTx(ctx, tx); err != nil {
			t.Fatal(err)
		}
		if commit {
			err = tx.Commit()
		} else {
			err = tx.Rollback()
		}
		if err != nil {
			t.Fatal(err)
		}
		if got, want := tables(), map[bool]int{false: 0, true: 3}[commit]; got != want {
			t.Fatalf("commit=%v: %d idemkit tables, want %d", commit, got, want)
		}
	}
}

// On a caller's connection without PRAGMA foreign_keys, Sweep still deletes
// the external bodies of the records it deletes (a trigger does).
func TestStore_SweepDeletesExternalBodiesWithoutForeignKeys(t *testing.T) {
	ctx := context.Background()
	db := rawDB(t)
	store, _ := sqlitestore.New(db, nil)
	if err := store.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	if _, err := store.Claim(ctx, idemstore.ClaimRequest{Key: "k", Tool: "t", Fingerprint: "fp", Token: 1, Lease: time.Second, Window: time.Minute, Now: now}); err != nil {
		t.Fatal(err)
	}
	body := strings.Repeat("b", 1000)
	if err := store.Finish(ctx, idemstore.FinishRequest{Key: "k", Token: 1, Succeeded: true, Response: idemkit.Response{Body: []byte(body)}, Storage: idemstore.StorageExternal, Size: 1000, Now: now}); err != nil {
		t.Fatal(err)
	}
	if n, err := store.Sweep(ctx, idemstore.SweepRequest{Limit: 10, Now: now.Add(time.Hour)}); err != nil || n != 1 {
		t.Fatalf("sweep: %d %v", n, err)
	}
	var left int
	db.QueryRow(`SELECT count(*) FROM idemkit_responses`).Scan(&left)
	if left != 0 {
		t.Fatalf("%d external bodies left after the sweep, want 0", left)
	}
}

// A replay and an in-progress answer change nothing, and write nothing: no
// synced commit for a duplicate.
func TestStore_DuplicatesWriteNothing(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "x.db")
	store := openPath(t, path, nil)
	g, _ := idemkit.NewGuard(store, nil)
	done := refundKey()
	if _, err := g.Do(ctx, done, func(context.Context) (idemkit.Response, error) {
		return idemkit.Response{Body: []byte("ok")}, nil
	}); err != nil {
		t.Fatal(err)
	}
	running := idemstore.ClaimRequest{Key: "running", Tool: "t", Fingerprint: "fp", Token: 1, Lease: time.Hour, Window: time.Hour}
	if _, err := store.Claim(ctx, running); err != nil {
		t.Fatal(err)
	}
	if _, err := store.DB().Exec(`PRAGMA wal_checkpoint(TRUNCATE)`); err != nil {
		t.Fatal(err)
	}
	for range 20 {
		if res, err := g.Do(ctx, done, mustNotRun(t)); err != nil || res.Outcome != idemkit.OutcomeReplayed {
			t.Fatalf("replay: %v %v", res.Outcome, err)
		}
		running.Token++
		if cr, err := store.Claim(ctx, running); err != nil || cr.Status != idemstore.ClaimBusy {
			t.Fatalf("busy claim: %v %v", cr.Status, err)
		}
	}
	fi, err := os.Stat(path + "-wal")
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() != 0 {
		t.Fatalf("the WAL grew to %d bytes over 40 duplicate claims; they should write nothing", fi.Size())
	}
}

func TestMigrations_AreNumberedAndPaired(t *testing.T) {
	ms, err := sqlitestore.Migrations()
	if err != nil {
		t.Fatal(err)
	}
	// Versions ascend from 1; a gap is allowed while branches that number
	// their migrations apart are merged (Migrate applies a lower version
	// missing from a database, see TestMigrate_AppliesAMissingLowerVersion).
	for i, m := range ms {
		if i == 0 && m.Version != 1 || i > 0 && m.Version <= ms[i-1].Version || m.Name == "" || m.Up == "" || m.Down == "" {
			t.Fatalf("migration %d: %d %q, up %d bytes, down %d bytes; want ascending versions from 1, named, with both scripts", i, m.Version, m.Name, len(m.Up), len(m.Down))
		}
	}
}

// A failed Open leaves a nil *Store; NewGuard refuses it at once instead of
// panicking on the first call.
func TestNewGuard_RefusesTheNilStoreOfAFailedOpen(t *testing.T) {
	s, err := sqlitestore.Open(context.Background(), filepath.Join(t.TempDir(), "missing-dir", "x.db"), nil)
	if err == nil {
		s.Close()
		t.Fatal("Open in a missing directory succeeded")
	}
	g, err := idemkit.NewGuard(s, nil)
	if err == nil || g != nil || !strings.Contains(err.Error(), "nil *sqlitestore.Store") {
		t.Fatalf("NewGuard(nil *sqlitestore.Store) = %v, %v; want an error naming the nil store", g, err)
	}
}
