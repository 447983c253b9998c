package idemkit_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/idemkit-mcp/idemkit/idemkit"
	"github.com/idemkit-mcp/idemkit/idemkit/idemstore"
	"github.com/idemkit-mcp/idemkit/idemkit/storetest"
)

func TestMemoryStore_Conformance(t *testing.T) {
	storetest.Run(t, storetest.Config{
		NewStore: func(*testing.T) idemstore.Store { return &idemkit.MemoryStore{} },
	})
}

// memGuard returns a Guard on store driven by clock, with a one-minute
// window.
func memGuard(t *testing.T, store *idemkit.MemoryStore, clock *storetest.Clock) *idemkit.Guard {
	t.Helper()
	g, err := idemkit.NewGuard(store, &idemkit.Config{Now: clock.Now, Window: time.Minute, Lease: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func memKey(t *testing.T, i int) idemkit.Key {
	t.Helper()
	k, err := idemkit.NewKey("alice", "refund", fmt.Appendf(nil, `{"order_id":"ord_%d","amount_cents":250}`, i), nil)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func respond(body []byte) idemkit.Work {
	return func(context.Context) (idemkit.Response, error) {
		return idemkit.Response{Body: body, WriteID: "re_1"}, nil
	}
}

// A client that varies one argument makes a new key per call. With nothing
// sweeping, the store must still hold only the records of the current
// window: each new key deletes some of the expired ones.
func TestMemoryStore_ExpiresItsOwnRecordsWithoutASweeper(t *testing.T) {
	store := &idemkit.MemoryStore{}
	clock := storetest.NewClock()
	g := memGuard(t, store, clock)
	ctx := context.Background()
	const perWindow = 1000
	for round := range 6 {
		for i := range perWindow {
			res, err := g.Do(ctx, memKey(t, round*perWindow+i), respond([]byte(`{"content":[]}`)))
			if err != nil || (res.Outcome == idemkit.OutcomeReplayed) {
				t.Fatalf("round %d call %d: %v %v", round, i, res.Outcome, err)
			}
		}
		if n := store.Len(); n != perWindow {
			t.Fatalf("after round %d the store holds %d records, want the %d of the current window", round, n, perWindow)
		}
		clock.Advance(2 * time.Minute) // every record of this round expires
	}
	// Expired records are still deleted by a sweep, and only they.
	if n, err := g.Sweep(ctx); err != nil || n != perWindow || store.Len() != 0 {
		t.Fatalf("sweep deleted %d (%v), %d left; want %d and none", n, err, store.Len(), perWindow)
	}
	if store.Bytes() != 0 {
		t.Fatalf("an empty store counts %d bytes", store.Bytes())
	}
}

// The heap, after a garbage collection, stays flat however many distinct
// keys pass through the store across windows (about 1 KiB each).
func TestMemoryStore_HeapStaysBoundedAcrossWindows(t *testing.T) {
	store := &idemkit.MemoryStore{}
	clock := storetest.NewClock()
	g := memGuard(t, store, clock)
	ctx := context.Background()
	body := bytes.Repeat([]byte("x"), 1000)
	const perWindow, rounds = 20_000, 6
	heap := func() uint64 {
		runtime.GC()
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	var after []uint64
	for round := range rounds {
		for i := range perWindow {
			if _, err := g.Do(ctx, memKey(t, round*perWindow+i), respond(body)); err != nil {
				t.Fatal(err)
			}
		}
		after = append(after, heap())
		t.Logf("round %d: %d keys so far, %d records held, heap %.1f MiB", round, (round+1)*perWindow, store.Len(), float64(after[round])/(1<<20))
		clock.Advance(2 * time.Minute)
	}
	// One window's records take about 20 MiB. From the second round on the
	// heap holds one window (plus what was not yet collected): it must not
	// grow by another window's worth, as it did before the store expired
	// its records (+20 MiB a round).
	const window = perWindow * 1000
	if grew := int64(after[rounds-1]) - int64(after[1]); grew > window/4 {
		t.Fatalf("the heap grew by %.1f MiB from round 1 to round %d, over a quarter of one window's records (%.1f MiB)",
			float64(grew)/(1<<20), rounds-1, float64(window)/(1<<20))
	}
	runtime.KeepAlive(store)
}

// A full store refuses a new key with a typed error, runs nothing, and
// evicts nothing: neither a completed record whose window is open nor one
// in progress. The calls it holds are still answered, and room comes back
// when their windows end.
func TestMemoryStore_RefusesANewKeyWhenFullAndEvictsNothing(t *testing.T) {
	store := &idemkit.MemoryStore{MaxRecords: 3}
	clock := storetest.NewClock()
	g := memGuard(t, store, clock)
	ctx := context.Background()
	for i := range 2 {
		if _, err := g.Do(ctx, memKey(t, i), respond([]byte(`{"n":1}`))); err != nil {
			t.Fatal(err)
		}
	}
	// The third runs while the fourth arrives.
	started, release := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := g.Do(ctx, memKey(t, 2), func(context.Context) (idemkit.Response, error) {
			close(started)
			<-release
			return idemkit.Response{Body: []byte(`{"n":3}`)}, nil
		})
		done <- err
	}()
	<-started
	ran := false
	_, err := g.Do(ctx, memKey(t, 3), func(context.Context) (idemkit.Response, error) {
		ran = true
		return idemkit.Response{}, nil
	})
	full, ok := errors.AsType[*idemstore.StoreFullError](err)
	if !ok || !errors.Is(err, idemstore.ErrStoreFull) || !errors.Is(err, idemkit.ErrStore) || ran {
		t.Fatalf("a fourth key on a store of 3: err %v (ran %v), want a *StoreFullError matching ErrStoreFull and ErrStore, nothing run", err, ran)
	}
	if full.Records != 3 || full.MaxRecords != 3 || full.RetryAfter <= 0 || full.RetryAfter > time.Minute {
		t.Errorf("StoreFullError %+v: want 3 of 3 records and a retry within the minute's window", full)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatalf("the call in progress: %v", err)
	}
	for i := range 3 {
		res, err := g.Do(ctx, memKey(t, i), respond(nil))
		if err != nil || res.Outcome != idemkit.OutcomeReplayed {
			t.Fatalf("key %d on a full store: %v %v, want its stored result", i, res.Outcome, err)
		}
	}
	if store.Len() != 3 {
		t.Fatalf("the store holds %d records, want 3", store.Len())
	}
	clock.Advance(time.Minute)
	if res, err := g.Do(ctx, memKey(t, 3), respond([]byte(`{"n":4}`))); err != nil || (res.Outcome == idemkit.OutcomeReplayed) {
		t.Fatalf("once the windows ended, a new key: %v %v", res.Outcome, err)
	}
	if store.Len() > 3 {
		t.Fatalf("the store holds %d records, over its limit of 3", store.Len())
	}
}

// A released record (the work failed) keeps its window: a full store takes
// it over in place rather than refusing it, and still refuses new keys.
func TestMemoryStore_FullStoreStillTakesOverReleasedRecords(t *testing.T) {
	store := &idemkit.MemoryStore{MaxRecords: 1}
	clock := storetest.NewClock()
	g := memGuard(t, store, clock)
	ctx := context.Background()
	boom := errors.New("gateway timeout")
	if _, err := g.Do(ctx, memKey(t, 0), func(context.Context) (idemkit.Response, error) { return idemkit.Response{}, boom }); !errors.Is(err, boom) {
		t.Fatal(err)
	}
	if _, err := g.Do(ctx, memKey(t, 1), respond(nil)); !errors.Is(err, idemstore.ErrStoreFull) {
		t.Fatalf("a new key on a full store: %v", err)
	}
	res, err := g.Do(ctx, memKey(t, 0), respond([]byte(`{}`)))
	if err != nil || res.Outcome != idemkit.OutcomeTakeover || res.Attempt != 2 {
		t.Fatalf("the retry of the failed call: %v attempt %d, %v; want a takeover, attempt 2", res.Outcome, res.Attempt, err)
	}
}

// MaxBytes bounds the bodies kept too: a store whose records take their
// byte limit refuses new keys, though it holds fewer than MaxRecords.
func TestMemoryStore_ByteLimit(t *testing.T) {
	store := &idemkit.MemoryStore{MaxBytes: 64 << 10}
	clock := storetest.NewClock()
	g := memGuard(t, store, clock)
	ctx := context.Background()
	body := bytes.Repeat([]byte("x"), 10<<10)
	n := 0
	for ; n < 100; n++ {
		if _, err := g.Do(ctx, memKey(t, n), respond(body)); err != nil {
			if !errors.Is(err, idemstore.ErrStoreFull) {
				t.Fatal(err)
			}
			break
		}
	}
	if n < 5 || n > 7 {
		t.Fatalf("%d calls with 10 KiB results fit a 64 KiB store, want 5 to 7", n)
	}
	full, _ := errors.AsType[*idemstore.StoreFullError](func() error { _, err := g.Do(ctx, memKey(t, 1000), respond(nil)); return err }())
	if full == nil || full.Bytes > store.MaxBytes+int64(len(body)) || full.MaxBytes != store.MaxBytes || full.Bytes != store.Bytes() {
		t.Fatalf("StoreFullError %+v, store counts %d bytes", full, store.Bytes())
	}
	clock.Advance(2 * time.Minute)
	if _, err := g.Do(ctx, memKey(t, 1000), respond(body)); err != nil {
		t.Fatalf("after the window: %v", err)
	}
}

func TestMemoryStore_NegativeLimitsAreRejected(t *testing.T) {
	for _, tc := range []struct {
		store *idemkit.MemoryStore
		field string
	}{
		{&idemkit.MemoryStore{MaxRecords: -1}, "MaxRecords"},
		{&idemkit.MemoryStore{MaxBytes: -1}, "MaxBytes"},
	} {
		if _, err := idemkit.NewGuard(tc.store, nil); err == nil || !strings.Contains(err.Error(), "MemoryStore."+tc.field) {
			t.Errorf("NewGuard on a store with a negative %s: %v", tc.field, err)
		}
		_, err := tc.store.Claim(context.Background(), idemstore.ClaimRequest{Key: "k", Token: 1, Lease: time.Minute, Window: time.Minute})
		if err == nil || !strings.Contains(err.Error(), tc.field) || tc.store.Len() != 0 {
			t.Errorf("a claim on a store with a negative %s: %v, %d records", tc.field, err, tc.store.Len())
		}
	}
}

// The expiry index against the records themselves: under random claims,
// finishes, failures, heartbeats and cancellations with mixed windows and
// leases, a sweep deletes exactly the records that have expired, however
// their deadlines moved.
// staleOK fails t unless err is nil or what a finish or heartbeat with a
// token that no longer holds the record may get: the random operations of
// the sweep test use stale tokens on purpose, and no other error may pass.
func staleOK(t *testing.T, op string, err error) {
	t.Helper()
	if err != nil && !errors.Is(err, idemkit.ErrLeaseLost) && !errors.Is(err, idemkit.ErrNotFound) && !errors.Is(err, idemkit.ErrNotInProgress) {
		t.Fatalf("%s with a random token: %v, want nil, ErrLeaseLost, ErrNotFound or ErrNotInProgress", op, err)
	}
}

func TestMemoryStore_SweepDeletesExactlyTheExpired(t *testing.T) {
	store := &idemkit.MemoryStore{}
	clock := storetest.NewClock()
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(1, 2))
	const keys = 64
	tokens := map[string]int64{}
	sec := func(n int) time.Duration { return time.Duration(n) * time.Second }
	for step := range 5000 {
		k := fmt.Sprintf("k%02d", rng.IntN(keys))
		now := clock.Now()
		switch op := rng.IntN(10); {
		case op < 4:
			tok := int64(step + 1)
			cr, err := store.Claim(ctx, idemstore.ClaimRequest{Key: k, Tool: "t", Token: tok, Lease: sec(1 + rng.IntN(20)), Window: sec(1 + rng.IntN(20)), Now: now})
			if err != nil {
				t.Fatal(err)
			}
			if cr.Status == idemstore.ClaimAcquired || cr.Status == idemstore.ClaimTakenOver {
				tokens[k] = tok
			}
		case op < 6:
			err := store.Finish(ctx, idemstore.FinishRequest{Key: k, Token: tokens[k], Succeeded: rng.IntN(2) == 0, Response: idemkit.Response{Body: []byte("b")}, Now: now})
			staleOK(t, "finish", err)
		case op < 8:
			err := store.Extend(ctx, idemstore.ExtendRequest{Key: k, Token: tokens[k], Lease: sec(1 + rng.IntN(30)), Note: "n", Now: now})
			staleOK(t, "extend", err)
		case op < 9:
			_, _ = store.Cancel(ctx, idemstore.CancelRequest{Key: k, Reason: "r", Now: now})
		default:
			clock.Advance(sec(rng.IntN(5)))
		}
		if step%50 != 0 {
			continue
		}
		now = clock.Now()
		before := map[string]idemstore.Record{}
		for i := range keys {
			k := fmt.Sprintf("k%02d", i)
			if rec, err := store.Lookup(ctx, idemstore.LookupRequest{Key: k, Now: now}); err == nil {
				before[k] = rec
			}
		}
		n, err := store.Sweep(ctx, idemstore.SweepRequest{Now: now})
		if err != nil {
			t.Fatal(err)
		}
		deleted := 0
		for k, rec := range before {
			_, err := store.Lookup(ctx, idemstore.LookupRequest{Key: k, Now: now})
			switch gone := errors.Is(err, idemkit.ErrNotFound); {
			case rec.Expired() && !gone:
				t.Fatalf("step %d: %s expired (%+v) and the sweep left it", step, k, rec)
			case !rec.Expired() && gone:
				t.Fatalf("step %d: %s had not expired (%+v) and the sweep deleted it", step, k, rec)
			case gone:
				deleted++
			}
		}
		if n != deleted || store.Len() != len(before)-deleted {
			t.Fatalf("step %d: the sweep reported %d deletions, %d records went, %d left of %d", step, n, deleted, store.Len(), len(before))
		}
	}
}

// StartSweeper sweeps until stopped, and its stop waits for it: a store
// closed right after is never swept.
func TestGuard_StartSweeperSweepsUntilStopped(t *testing.T) {
	store := &idemkit.MemoryStore{}
	clock := storetest.NewClock()
	g := memGuard(t, store, clock)
	if _, err := g.Do(context.Background(), memKey(t, 1), respond(nil)); err != nil {
		t.Fatal(err)
	}
	clock.Advance(2 * time.Minute)
	stop := g.StartSweeper(time.Millisecond, func(err error) { t.Error(err) })
	deadline := time.Now().Add(10 * time.Second)
	for store.Len() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the sweeper did not delete the expired record")
		}
		time.Sleep(time.Millisecond)
	}
	stop() // goleak (TestMain) checks that it returned
}
