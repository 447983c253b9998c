package storetest

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/idemkit-mcp/idemkit/idemkit"
	"github.com/idemkit-mcp/idemkit/idemkit/idemstore"
)

// Cancel releases the attempt in progress, whichever token holds it, marks
// the record cancelled with the reason, and fences the attempt out; the
// next claim takes the record over and clears the mark.
func (s *suite) cancelReleasesAndFences(t *testing.T) {
	store := s.cfg.NewStore(t)
	clock := NewClock()
	c := ctx(t)
	k := hexKey(100)
	claim := func(tok int64) idemstore.ClaimResult {
		t.Helper()
		cr, err := store.Claim(c, idemstore.ClaimRequest{Key: k, Tool: "refund", Fingerprint: "fp", Token: tok, Lease: time.Minute, Window: 10 * time.Minute, Now: clock.Now()})
		if err != nil {
			t.Fatal(err)
		}
		return cr
	}
	t0 := clock.Now()
	claim(1)
	if rec := mustLookup(t, store, idemstore.LookupRequest{Key: k, Now: clock.Now()}); !sameTime(rec.Updated, t0) || rec.Cancelled {
		t.Fatalf("fresh claim: updated %v cancelled %v, want %v and false", rec.Updated, rec.Cancelled, t0)
	}
	clock.Advance(5 * time.Second)
	if err := store.Extend(c, idemstore.ExtendRequest{Key: k, Token: 1, Lease: time.Minute, Note: "halfway", Now: clock.Now()}); err != nil {
		t.Fatal(err)
	}
	if rec := mustLookup(t, store, idemstore.LookupRequest{Key: k, Now: clock.Now()}); !sameTime(rec.Updated, clock.Now()) {
		t.Fatalf("after a heartbeat: updated %v, want %v", rec.Updated, clock.Now())
	}

	clock.Advance(5 * time.Second)
	rec, err := store.Cancel(c, idemstore.CancelRequest{Key: k, Reason: "cancelled by request", Now: clock.Now()})
	if err != nil {
		t.Fatalf("Cancel of a live attempt: %v", err)
	}
	if rec.Key != k || rec.State != idemstore.StateReleased || !rec.Cancelled || rec.Error != "cancelled by request" ||
		rec.Attempt != 1 || !sameTime(rec.Updated, clock.Now()) || rec.Note != "halfway" {
		t.Fatalf("Cancel returned %+v, want the released, cancelled record with the reason", rec)
	}
	if got := mustLookup(t, store, idemstore.LookupRequest{Key: k, Now: clock.Now()}); got.State != idemstore.StateReleased || !got.Cancelled || got.Error != "cancelled by request" {
		t.Fatalf("Lookup after Cancel: %+v", got)
	}
	// The cancelled attempt is fenced out: its heartbeat and both finishes fail.
	if err := store.Extend(c, idemstore.ExtendRequest{Key: k, Token: 1, Lease: time.Minute, Now: clock.Now()}); !errors.Is(err, idemkit.ErrLeaseLost) {
		t.Fatalf("heartbeat of the cancelled attempt: %v, want ErrLeaseLost", err)
	}
	if err := store.Finish(c, idemstore.FinishRequest{Key: k, Token: 1, Succeeded: true, Response: idemkit.Response{Body: []byte("late")}, Size: 4, Now: clock.Now()}); !errors.Is(err, idemkit.ErrLeaseLost) {
		t.Fatalf("finish of the cancelled attempt: %v, want ErrLeaseLost", err)
	}
	if err := store.Finish(c, idemstore.FinishRequest{Key: k, Token: 1, Error: "late failure", Now: clock.Now()}); !errors.Is(err, idemkit.ErrLeaseLost) {
		t.Fatalf("release of the cancelled attempt: %v, want ErrLeaseLost", err)
	}
	if got := mustLookup(t, store, idemstore.LookupRequest{Key: k, Body: true, Now: clock.Now()}); got.State != idemstore.StateReleased || got.Body != nil || got.Error != "cancelled by request" {
		t.Fatalf("the fenced finishes changed the record: %+v", got)
	}
	// A second cancel finds nothing in progress.
	if got, err := store.Cancel(c, idemstore.CancelRequest{Key: k, Reason: "again", Now: clock.Now()}); !errors.Is(err, idemkit.ErrNotInProgress) ||
		got.Error != "cancelled by request" || !got.Cancelled {
		t.Fatalf("second Cancel: %+v, %v; want the record unchanged and ErrNotInProgress", got, err)
	}

	// The next claim takes the cancelled record over, as after a failure.
	clock.Advance(time.Second)
	if cr := claim(2); cr.Status != idemstore.ClaimTakenOver || cr.Attempt != 2 {
		t.Fatalf("claim after Cancel: %s attempt %d, want a takeover, attempt 2", cr.Status, cr.Attempt)
	}
	if got := mustLookup(t, store, idemstore.LookupRequest{Key: k, Now: clock.Now()}); got.Cancelled || got.Error != "" || got.Note != "" || !sameTime(got.Updated, clock.Now()) {
		t.Fatalf("after the takeover: %+v, want the mark, the reason and the note cleared", got)
	}
	clock.Advance(time.Second)
	if err := store.Finish(c, idemstore.FinishRequest{Key: k, Token: 2, Succeeded: true, Response: idemkit.Response{Body: []byte("ok")}, Size: 2, Now: clock.Now()}); err != nil {
		t.Fatal(err)
	}
	if got := mustLookup(t, store, idemstore.LookupRequest{Key: k, Now: clock.Now()}); got.State != idemstore.StateCompleted || !sameTime(got.Updated, clock.Now()) {
		t.Fatalf("after the finish: %+v, want completed, updated now", got)
	}
	// A completed record cannot be cancelled.
	if got, err := store.Cancel(c, idemstore.CancelRequest{Key: k, Reason: "too late", Now: clock.Now()}); !errors.Is(err, idemkit.ErrNotInProgress) || got.State != idemstore.StateCompleted {
		t.Fatalf("Cancel of a completed record: %+v, %v; want it unchanged and ErrNotInProgress", got, err)
	}
	if _, err := store.Cancel(c, idemstore.CancelRequest{Key: hexKey(101), Reason: "x", Now: clock.Now()}); !errors.Is(err, idemkit.ErrNotFound) {
		t.Fatalf("Cancel of a missing record: %v, want ErrNotFound", err)
	}
	// A released (failed) record cannot be cancelled either.
	k2 := hexKey(102)
	if _, err := store.Claim(c, idemstore.ClaimRequest{Key: k2, Tool: "refund", Token: 7, Lease: time.Minute, Window: time.Hour, Now: clock.Now()}); err != nil {
		t.Fatal(err)
	}
	if err := store.Finish(c, idemstore.FinishRequest{Key: k2, Token: 7, Error: "declined", Now: clock.Now()}); err != nil {
		t.Fatal(err)
	}
	if got, err := store.Cancel(c, idemstore.CancelRequest{Key: k2, Reason: "x", Now: clock.Now()}); !errors.Is(err, idemkit.ErrNotInProgress) || got.Cancelled || got.Error != "declined" {
		t.Fatalf("Cancel of a released record: %+v, %v", got, err)
	}
}

// Cancel with Abandoned leaves a live attempt alone and releases one whose
// lease has run out.
func (s *suite) cancelAbandoned(t *testing.T) {
	store := s.cfg.NewStore(t)
	clock := NewClock()
	c := ctx(t)
	k := hexKey(110)
	if _, err := store.Claim(c, idemstore.ClaimRequest{Key: k, Tool: "export", Token: 1, Lease: time.Minute, Window: time.Hour, Now: clock.Now()}); err != nil {
		t.Fatal(err)
	}
	clock.Advance(30 * time.Second)
	rec, err := store.Cancel(c, idemstore.CancelRequest{Key: k, Reason: "worker lost", Abandoned: true, Now: clock.Now()})
	if !errors.Is(err, idemkit.ErrInProgress) || rec.State != idemstore.StateInProgress || rec.Cancelled {
		t.Fatalf("Abandoned Cancel of a live attempt: %+v, %v; want it unchanged and ErrInProgress", rec, err)
	}
	// It changed nothing: the attempt still heartbeats.
	if err := store.Extend(c, idemstore.ExtendRequest{Key: k, Token: 1, Lease: time.Minute, Now: clock.Now()}); err != nil {
		t.Fatalf("heartbeat after a refused Abandoned Cancel: %v", err)
	}
	clock.Advance(time.Minute) // the lease runs out exactly now
	rec, err = store.Cancel(c, idemstore.CancelRequest{Key: k, Reason: "worker lost", Abandoned: true, Now: clock.Now()})
	if err != nil || rec.State != idemstore.StateReleased || !rec.Cancelled || rec.Error != "worker lost" {
		t.Fatalf("Abandoned Cancel of a lapsed attempt: %+v, %v; want it released", rec, err)
	}
	// The slow worker cannot revive it.
	if err := store.Extend(c, idemstore.ExtendRequest{Key: k, Token: 1, Lease: time.Minute, Now: clock.Now()}); !errors.Is(err, idemkit.ErrLeaseLost) {
		t.Fatalf("heartbeat of the abandoned attempt after it was settled: %v, want ErrLeaseLost", err)
	}
	if err := store.Finish(c, idemstore.FinishRequest{Key: k, Token: 1, Succeeded: true, Response: idemkit.Response{Body: []byte("late")}, Size: 4, Now: clock.Now()}); !errors.Is(err, idemkit.ErrLeaseLost) {
		t.Fatalf("finish of the abandoned attempt after it was settled: %v, want ErrLeaseLost", err)
	}
	// The reason is kept byte for byte.
	k2 := hexKey(111)
	if _, err := store.Claim(c, idemstore.ClaimRequest{Key: k2, Tool: "export", Token: 2, Lease: time.Minute, Window: time.Hour, Now: clock.Now()}); err != nil {
		t.Fatal(err)
	}
	if rec, err := store.Cancel(c, idemstore.CancelRequest{Key: k2, Reason: hostile, Now: clock.Now()}); err != nil || rec.Error != hostile {
		t.Fatalf("hostile reason: %q, %v", rec.Error, err)
	}
	if rec := mustLookup(t, store, idemstore.LookupRequest{Key: k2, Now: clock.Now()}); rec.Error != hostile {
		t.Fatalf("hostile reason after Lookup: %q", rec.Error)
	}
}

// Of a Cancel and a Finish racing on one record, exactly one wins.
func (s *suite) cancelRacesFinish(t *testing.T) {
	store := s.cfg.NewStore(t)
	c := ctx(t)
	for i := range 40 {
		k := hexKey(200 + i)
		if _, err := store.Claim(c, idemstore.ClaimRequest{Key: k, Tool: "refund", Token: 5, Lease: time.Minute, Window: time.Hour}); err != nil {
			t.Fatal(err)
		}
		var (
			wg              sync.WaitGroup
			finErr, canErr  error
			cancelledRecord idemstore.Record
		)
		wg.Add(2)
		go func() {
			defer wg.Done()
			finErr = store.Finish(c, idemstore.FinishRequest{Key: k, Token: 5, Succeeded: true, Response: idemkit.Response{Body: []byte("done")}, Size: 4})
		}()
		go func() {
			defer wg.Done()
			cancelledRecord, canErr = store.Cancel(c, idemstore.CancelRequest{Key: k, Reason: "stop"})
		}()
		wg.Wait()
		rec := mustLookup(t, store, idemstore.LookupRequest{Key: k, Body: true})
		switch {
		case finErr == nil && errors.Is(canErr, idemkit.ErrNotInProgress):
			if rec.State != idemstore.StateCompleted || string(rec.Body) != "done" || rec.Cancelled {
				t.Fatalf("race %d: the finish won, but the record is %+v", i, rec)
			}
		case canErr == nil && errors.Is(finErr, idemkit.ErrLeaseLost):
			if rec.State != idemstore.StateReleased || !rec.Cancelled || rec.Body != nil || !cancelledRecord.Cancelled {
				t.Fatalf("race %d: the cancel won, but the record is %+v", i, rec)
			}
		default:
			t.Fatalf("race %d: finish %v, cancel %v: want exactly one to win", i, finErr, canErr)
		}
	}
}

// Guard.Cancel stops a running call at its next heartbeat, and the next
// duplicate takes the key over.
func (s *suite) guardCancel(t *testing.T) {
	g, _ := s.setup(t, idemkit.Config{})
	k := key(t, "s", "export", `{"report":"q3"}`)
	started := make(chan struct{})
	stop := make(chan struct{})
	var runs counter
	done := make(chan error, 1)
	go func() {
		_, err := g.Do(ctx(t), k, func(ctx context.Context) (idemkit.Response, error) {
			runs.n.Add(1)
			close(started)
			<-stop
			// The heartbeat tells the work it was cancelled.
			if err := idemkit.CallFromContext(ctx).Heartbeat(ctx); err != nil {
				return idemkit.Response{}, err
			}
			return idemkit.Response{Body: []byte("finished")}, nil
		})
		done <- err
	}()
	<-started
	rec, err := g.Cancel(ctx(t), k, "the user cancelled the export")
	if err != nil || !rec.Cancelled || rec.State != idemstore.StateReleased {
		t.Fatalf("Guard.Cancel: %+v, %v", rec, err)
	}
	close(stop)
	if err := <-done; !errors.Is(err, idemkit.ErrLeaseLost) {
		t.Fatalf("the cancelled call returned %v, want its heartbeat's ErrLeaseLost", err)
	}
	if rec, err := g.Lookup(ctx(t), k); err != nil || !rec.Cancelled || rec.Error != "the user cancelled the export" {
		t.Fatalf("Lookup after the cancelled call ended: %+v, %v; want it still cancelled", rec, err)
	}
	if _, err := g.Cancel(ctx(t), k, "again"); !errors.Is(err, idemkit.ErrNotInProgress) {
		t.Fatalf("second Guard.Cancel: %v, want ErrNotInProgress", err)
	}
	if _, err := g.ReleaseAbandoned(ctx(t), key(t, "s", "export", `{"report":"none"}`), "x"); !errors.Is(err, idemkit.ErrNotFound) {
		t.Fatalf("ReleaseAbandoned of a missing key: %v, want ErrNotFound", err)
	}
	res := mustDo(t, g, k, runs.work("second run"))
	if res.Outcome != idemkit.OutcomeTakeover || res.Attempt != 2 || runs.n.Load() != 2 {
		t.Fatalf("duplicate after the cancel: outcome %s attempt %d runs %d, want a takeover (attempt 2, second run)", res.Outcome, res.Attempt, runs.n.Load())
	}
}
