package sqlitestore_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/idemkit-mcp/idemkit/idemkit"
	"github.com/idemkit-mcp/idemkit/idemkit/idemstore"
	"github.com/idemkit-mcp/idemkit/idemkit/sqlitestore"
)

// 64 goroutines hammer keys with Do while others run DoTx transactions that
// insert their side effect: every call is answered (executed, replayed or
// in progress), none fails with "database is locked", and every side effect
// ran exactly once.
func TestStore_NoBusyErrorsUnderStormWithConcurrentDoTx(t *testing.T) {
	store := openFile(t, nil)
	if _, err := store.DB().Exec(sideEffectsSchema); err != nil {
		t.Fatal(err)
	}
	g, err := idemkit.NewGuard(store, nil)
	if err != nil {
		t.Fatal(err)
	}
	const (
		doers, doKeys = 64, 200
		txers, txKeys = 8, 40
	)
	key := func(kind string, i int) idemkit.Key {
		k, err := idemkit.NewKey("s", kind, fmt.Appendf(nil, `{"i":%d}`, i), nil)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	var (
		doRuns               [doKeys]atomic.Int64
		answered, inProgress atomic.Int64
		wg                   sync.WaitGroup
		start                = make(chan struct{})
		ctx                  = context.Background()
		errCount             atomic.Int64
		firstErr             atomic.Value
		recordErr            = func(err error) {
			if errCount.Add(1) == 1 {
				firstErr.Store(err)
			}
		}
	)
	for gi := range doers {
		wg.Go(func() {
			<-start
			for _, i := range rand.New(rand.NewPCG(uint64(gi), 1)).Perm(doKeys) {
				_, err := g.Do(ctx, key("do", i), func(context.Context) (idemkit.Response, error) {
					doRuns[i].Add(1)
					return idemkit.Response{Body: fmt.Appendf(nil, `{"i":%d}`, i)}, nil
				})
				switch {
				case errors.As(err, new(*idemkit.InProgressError)):
					inProgress.Add(1)
				case err != nil:
					recordErr(err)
				default:
					answered.Add(1)
				}
			}
		})
	}
	for gi := range txers {
		wg.Go(func() {
			<-start
			for _, i := range rand.New(rand.NewPCG(uint64(gi), 2)).Perm(txKeys) {
				tx, err := store.DB().BeginTx(ctx, nil)
				if err != nil {
					recordErr(err)
					return
				}
				_, err = store.DoTx(ctx, g, tx, key("tx", i), refundInTx)
				switch {
				case errors.As(err, new(*idemkit.InProgressError)):
					inProgress.Add(1)
					tx.Rollback()
				case err != nil:
					recordErr(err)
					tx.Rollback()
				default:
					answered.Add(1)
					if err := tx.Commit(); err != nil {
						recordErr(err)
					}
				}
			}
		})
	}
	close(start)
	wg.Wait()
	if n := errCount.Load(); n > 0 {
		err := firstErr.Load().(error)
		t.Fatalf("%d calls failed; first: %v (busy: %v)", n, err, errors.Is(err, sqlitestore.ErrBusy))
	}
	for i := range doKeys {
		if n := doRuns[i].Load(); n != 1 {
			t.Fatalf("Do key %d ran %d times, want 1", i, n)
		}
	}
	if n := refunds(t, store.DB()); n != txKeys {
		t.Fatalf("%d refunds from DoTx, want %d (one per key)", n, txKeys)
	}
	if total := answered.Load() + inProgress.Load(); total != doers*doKeys+txers*txKeys {
		t.Fatalf("%d answers, want %d", total, doers*doKeys+txers*txKeys)
	}
	t.Logf("%d answered, %d in progress", answered.Load(), inProgress.Load())
}

// Two Stores on one file stand for two processes (two stdio servers with
// one database): each Do still runs once, and SQLite's busy timeout absorbs
// the contention for the file's write lock.
func TestStore_TwoStoresOnOneFileShareClaims(t *testing.T) {
	path := filepath.Join(t.TempDir(), "shared.db")
	stores := []*sqlitestore.Store{openPath(t, path, nil), openPath(t, path, nil)}
	var guards []*idemkit.Guard
	for _, s := range stores {
		g, err := idemkit.NewGuard(s, nil)
		if err != nil {
			t.Fatal(err)
		}
		guards = append(guards, g)
	}
	const goroutines, keys = 8, 100
	var runs [keys]atomic.Int64
	var wg sync.WaitGroup
	for gi := range goroutines {
		wg.Go(func() {
			g := guards[gi%2]
			for _, i := range rand.New(rand.NewPCG(uint64(gi), 3)).Perm(keys) {
				k, _ := idemkit.NewKey("s", "send", fmt.Appendf(nil, `{"i":%d}`, i), nil)
				_, err := g.Do(context.Background(), k, func(context.Context) (idemkit.Response, error) {
					runs[i].Add(1)
					return idemkit.Response{Body: []byte("sent")}, nil
				})
				if err != nil && !errors.As(err, new(*idemkit.InProgressError)) {
					t.Errorf("key %d: %v", i, err)
					return
				}
			}
		})
	}
	wg.Wait()
	for i := range keys {
		if n := runs[i].Load(); n != 1 {
			t.Fatalf("key %d ran %d times across the two stores, want 1", i, n)
		}
	}
}

// holdWriteLock takes the database's write lock from another connection,
// as another process would, until the returned func is called.
func holdWriteLock(t *testing.T, path string) func() {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(context.Background(), "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	release := func() {
		once.Do(func() {
			conn.ExecContext(context.Background(), "ROLLBACK")
			conn.Close()
			db.Close()
		})
	}
	t.Cleanup(release)
	return release
}

func TestStore_LockHeldPastBusyTimeoutIsErrBusy(t *testing.T) {
	path := filepath.Join(t.TempDir(), "locked.db")
	store := openPath(t, path, &sqlitestore.Config{BusyTimeout: 50 * time.Millisecond})
	holdWriteLock(t, path)
	g, err := idemkit.NewGuard(store, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = g.Do(context.Background(), refundKey(), mustNotRun(t))
	if !errors.Is(err, sqlitestore.ErrBusy) || !errors.Is(err, idemkit.ErrStore) {
		t.Fatalf("claim while another process holds the lock: %v, want ErrBusy wrapped in ErrStore", err)
	}
	var se *sqlite.Error
	if !errors.As(err, &se) || se.Code()&0xff != sqlite3.SQLITE_BUSY {
		t.Fatalf("the driver's *sqlite.Error (SQLITE_BUSY) is not in the chain: %v", err)
	}
}

func TestStore_ContextEndsTheWaitForTheLock(t *testing.T) {
	path := filepath.Join(t.TempDir(), "locked.db")
	store := openPath(t, path, &sqlitestore.Config{BusyTimeout: time.Minute})
	holdWriteLock(t, path)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := store.Claim(ctx, idemstore.ClaimRequest{Key: "k", Tool: "t", Fingerprint: "fp", Token: 1, Lease: time.Minute, Window: time.Hour})
	if err == nil {
		t.Fatal("claim succeeded while another connection held the write lock")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("claim waited %s; its context ended after 200ms", d)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("claim: %v, want the context's error", err)
	}
}

func TestStore_WaitsForALockReleasedWithinTheBusyTimeout(t *testing.T) {
	path := filepath.Join(t.TempDir(), "locked.db")
	store := openPath(t, path, nil)
	release := holdWriteLock(t, path)
	time.AfterFunc(300*time.Millisecond, release)
	g, err := idemkit.NewGuard(store, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := g.Do(context.Background(), refundKey(), func(context.Context) (idemkit.Response, error) {
		return idemkit.Response{Body: []byte("ok")}, nil
	})
	if err != nil || res.Outcome != idemkit.OutcomeExecuted {
		t.Fatalf("Do while another process briefly held the lock: %v %v, want executed", res.Outcome, err)
	}
}

// countingStore counts the finishes that failed with ErrBusy.
type countingStore struct {
	*sqlitestore.Store
	busyFinishes atomic.Int64
}

func (s *countingStore) Finish(ctx context.Context, req idemstore.FinishRequest) error {
	err := s.Store.Finish(ctx, req)
	if errors.Is(err, sqlitestore.ErrBusy) {
		s.busyFinishes.Add(1)
	}
	return err
}

// Another process holds the write lock past the busy timeout while the work
// ends: the finish fails with ErrBusy (transient) and is retried until the
// lock is released, instead of leaving the key in progress for its lease.
func TestGuard_FinishRetriesWhileAnotherProcessHoldsTheLock(t *testing.T) {
	path := filepath.Join(t.TempDir(), "locked.db")
	store := &countingStore{Store: openPath(t, path, &sqlitestore.Config{BusyTimeout: 20 * time.Millisecond})}
	g, err := idemkit.NewGuard(store, nil)
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int64
	res, err := g.Do(context.Background(), refundKey(), func(context.Context) (idemkit.Response, error) {
		runs.Add(1)
		release := holdWriteLock(t, path) // taken after the claim committed
		time.AfterFunc(400*time.Millisecond, release)
		return idemkit.Response{Body: []byte("refunded")}, nil
	})
	if err != nil || res.Outcome != idemkit.OutcomeExecuted {
		t.Fatalf("Do whose finish met a held lock: %+v %v, want executed without error", res, err)
	}
	if n := store.busyFinishes.Load(); n == 0 {
		t.Fatal("the finish never met the held lock: the test did not exercise the retry")
	}
	rep, err := g.Do(context.Background(), refundKey(), mustNotRun(t))
	if err != nil || rep.Outcome != idemkit.OutcomeReplayed || string(rep.Body) != "refunded" || runs.Load() != 1 {
		t.Fatalf("duplicate: %+v %v (runs %d), want the replay", rep, err, runs.Load())
	}
}
