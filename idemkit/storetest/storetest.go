// Package storetest is the conformance suite every idemstore.Store must pass.
// A store package runs it from a test:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, storetest.Config{
//			NewStore: func(t *testing.T) idemstore.Store { return newTestStore(t) },
//		})
//	}
//
// Each subtest gets a fresh store from NewStore. Time-dependent behaviour
// (leases, windows, the sweeper) is driven by a fake clock passed in every
// request's Now, so stores must honour a non-zero Now.
package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit-mcp/idemkit/idemkit"
	"github.com/idemkit-mcp/idemkit/idemkit/idemstore"
)

// Config configures Run.
type Config struct {
	// NewStore returns an empty store for one subtest. Required. It should
	// register its own cleanup with t.Cleanup.
	NewStore func(t *testing.T) idemstore.Store

	// StormGoroutines is how many goroutines the concurrency storm runs.
	// Defaults to 64.
	StormGoroutines int
	// StormKeys is how many distinct keys the storm claims. Defaults to 500.
	StormKeys int

	// Damage, when set, damages the record of key in store (made by
	// NewStore) as d says, with the store's raw access (SQL), so that the
	// suite can check that damaged records are refused, never replayed
	// wrong and never run again (see idemkit.ErrRecordDamaged). It fails t
	// when it cannot. Stores whose records live only in the process leave
	// it nil, and those subtests are skipped. Defaults to nil.
	Damage func(t *testing.T, store idemstore.Store, key string, d Damage)
}

// Run runs the whole conformance suite against the stores cfg.NewStore makes.
func Run(t *testing.T, cfg Config) {
	if cfg.NewStore == nil {
		t.Fatal("storetest: Config.NewStore is required")
	}
	if cfg.StormGoroutines == 0 {
		cfg.StormGoroutines = 64
	}
	if cfg.StormKeys == 0 {
		cfg.StormKeys = 500
	}
	s := &suite{cfg: cfg}
	tests := []struct {
		name string
		fn   func(t *testing.T)
	}{
		{"Guard_RunsOnceAndReplaysByteForByte", s.replaysByteForByte},
		{"Guard_ReplaysWriteIDAndToolErrorFlag", s.replaysWriteID},
		{"Guard_DifferentSubjectsNeverShareAResponse", s.subjectsIsolated},
		{"Guard_AnswersInProgressWithInstructions", s.inProgress},
		{"Guard_WaitModeReturnsFirstCallsResult", s.waitMode},
		{"Guard_TakesOverAfterGoError", s.takeoverAfterError},
		{"Guard_ToolErrorPolicy", s.toolErrorPolicy},
		{"Guard_TakesOverAfterPanic", s.takeoverAfterPanic},
		{"Guard_TakesOverAfterLeaseExpiry", s.takeoverAfterLease},
		{"Guard_HeartbeatKeepsClaim", s.heartbeat},
		{"Guard_FencesStaleFinish", s.fencing},
		{"Guard_ExplicitKeyMismatchIsRejected", s.mismatch},
		{"Guard_WindowExpiryRunsAgain", s.windowExpiry},
		{"Guard_LargeResponseStoredApart", s.largeResponse},
		{"Guard_OversizedResponseNotKeptNorRerun", s.oversizedResponse},
		{"Guard_RefusesDamagedRecords", s.damagedRecords},
		{"Guard_CancelledContextRunsNothing", s.cancelled},
		{"Store_ClaimStatuses", s.claimStatuses},
		{"Store_FinishAndExtendAreFenced", s.storeFencing},
		{"Store_SweepDeletesOnlyExpired", s.sweep},
		{"Store_ConcurrentSweepers", s.concurrentSweepers},
		{"Store_LookupReportsEveryState", s.lookupStates},
		{"Store_LookupReturnsKeptBodies", s.lookupBodies},
		{"Store_ListFiltersAndPages", s.list},
		{"Guard_LookupReportsACall", s.guardLookup},
		{"Store_CancelReleasesAndFences", s.cancelReleasesAndFences},
		{"Store_CancelAbandonedSettlesOnlyLapsedAttempts", s.cancelAbandoned},
		{"Store_CancelRacesFinishOneWins", s.cancelRacesFinish},
		{"Guard_CancelStopsARunningCall", s.guardCancel},
		{"Guard_HeartbeatNoteIsBounded", s.noteBounded},
		{"Store_HostileValuesRoundTrip", s.hostileValues},
		{"Guard_NumbersKeyedByExactValue", s.exactNumbers},
		{"Store_HugeDurationsDoNotOverflow", s.hugeDurations},
		{"Store_GenerationBelongsToTheRecord", s.generationBelongsToTheRecord},
		{"Guard_DownstreamKeyPerRecord", s.downstreamKeyPerRecord},
		{"Guard_DownstreamKeyUnderContention", s.downstreamKeyUnderContention},
		{"Guard_MaxAttemptsStopsAPoisonCall", s.maxAttempts},
		{"Guard_ConcurrencyStorm", s.storm},
		{"Guard_ConcurrencyStormWithWait", s.stormWait},
	}
	for _, tt := range tests {
		t.Run(tt.name, tt.fn)
	}
}

type suite struct {
	cfg Config
}

// Clock is a fake clock safe for concurrent use.
type Clock struct {
	mu  sync.Mutex // protects now
	now time.Time
}

// NewClock returns a Clock at a fixed instant.
func NewClock() *Clock {
	return &Clock{now: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)}
}

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func (s *suite) guard(t *testing.T, store idemstore.Store, cfg *idemkit.Config) *idemkit.Guard {
	t.Helper()
	g, err := idemkit.NewGuard(store, cfg)
	if err != nil {
		t.Fatalf("NewGuard: %v", err)
	}
	return g
}

func (s *suite) setup(t *testing.T, cfg idemkit.Config) (*idemkit.Guard, *Clock) {
	t.Helper()
	clock := NewClock()
	if cfg.Now == nil {
		cfg.Now = clock.Now
	}
	return s.guard(t, s.cfg.NewStore(t), &cfg), clock
}

func key(t *testing.T, subject, tool, args string) idemkit.Key {
	t.Helper()
	k, err := idemkit.NewKey(subject, tool, []byte(args), nil)
	if err != nil {
		t.Fatalf("NewKey(%q, %q, %s): %v", subject, tool, args, err)
	}
	return k
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return c
}

// counter is a side effect that counts its runs.
type counter struct{ n atomic.Int64 }

func (c *counter) work(body string) idemkit.Work {
	return func(context.Context) (idemkit.Response, error) {
		n := c.n.Add(1)
		return idemkit.Response{Body: []byte(body), WriteID: fmt.Sprintf("w-%d", n)}, nil
	}
}

// mustNotRun is work that a replay or an in-progress answer must not run.
func mustNotRun(t *testing.T) idemkit.Work {
	return func(context.Context) (idemkit.Response, error) {
		t.Errorf("work ran, but the call should have been answered without running it")
		return idemkit.Response{Body: []byte("must not run")}, nil
	}
}

func mustDo(t *testing.T, g *idemkit.Guard, k idemkit.Key, w idemkit.Work) idemkit.Result {
	t.Helper()
	res, err := g.Do(ctx(t), k, w)
	if err != nil {
		t.Fatalf("Do(%s): %v", k, err)
	}
	return res
}

func (s *suite) replaysByteForByte(t *testing.T) {
	g, _ := s.setup(t, idemkit.Config{})
	// Bytes a JSON store would reorder or re-encode: key order, spacing,
	// escapes, invalid UTF-8, a NUL.
	body := []byte("{\"z\": 1,  \"a\":[1.0, 2e0],\n\"s\":\"\\u00e9\xff\x00\"}  ")
	var c counter
	k := key(t, "alice", "refund", `{"order":"o-1","amount":500}`)
	w := func(context.Context) (idemkit.Response, error) {
		c.n.Add(1)
		return idemkit.Response{Body: bytes.Clone(body), WriteID: "re_1"}, nil
	}
	first := mustDo(t, g, k, w)
	if first.Outcome != idemkit.OutcomeExecuted || first.Attempt != 1 || (first.Outcome == idemkit.OutcomeReplayed) {
		t.Fatalf("first call: outcome %q attempt %d, want executed attempt 1", first.Outcome, first.Attempt)
	}
	// Same arguments in another spelling: same key.
	k2 := key(t, "alice", "refund", `{ "amount": 5e2, "order": "o-1" }`)
	if k2.ID() != k.ID() {
		t.Fatalf("equivalent arguments gave different keys")
	}
	for i := range 3 {
		res := mustDo(t, g, k2, w)
		if res.Outcome != idemkit.OutcomeReplayed {
			t.Fatalf("duplicate %d: outcome %q, want replayed", i, res.Outcome)
		}
		if !bytes.Equal(res.Body, body) {
			t.Fatalf("duplicate %d: body %q, want %q", i, res.Body, body)
		}
		if res.WriteID != "re_1" || res.Attempt != 1 {
			t.Fatalf("duplicate %d: write ID %q attempt %d, want re_1 and 1", i, res.WriteID, res.Attempt)
		}
	}
	if n := c.n.Load(); n != 1 {
		t.Fatalf("side effect ran %d times, want 1", n)
	}
}

func (s *suite) replaysWriteID(t *testing.T) {
	g, _ := s.setup(t, idemkit.Config{FailurePolicy: idemkit.StoreToolErrors})
	k := key(t, "s", "charge", `{"card":"4242"}`)
	var c counter
	w := func(context.Context) (idemkit.Response, error) {
		c.n.Add(1)
		return idemkit.Response{Body: []byte(`{"declined":true}`), WriteID: "ch_9", IsError: true}, nil
	}
	mustDo(t, g, k, w)
	res := mustDo(t, g, k, w)
	if res.Outcome != idemkit.OutcomeReplayed || !res.IsError || res.WriteID != "ch_9" || string(res.Body) != `{"declined":true}` {
		t.Fatalf("replay = %+v, want the stored tool error with write ID ch_9", res)
	}
	if c.n.Load() != 1 {
		t.Fatalf("side effect ran %d times, want 1", c.n.Load())
	}
}

func (s *suite) subjectsIsolated(t *testing.T) {
	g, _ := s.setup(t, idemkit.Config{})
	var c counter
	args := `{"order":"o-1"}`
	ra := mustDo(t, g, key(t, "alice", "refund", args), c.work("alice's refund"))
	rb := mustDo(t, g, key(t, "bob", "refund", args), c.work("bob's refund"))
	if (ra.Outcome == idemkit.OutcomeReplayed) || (rb.Outcome == idemkit.OutcomeReplayed) {
		t.Fatalf("a different subject was answered from another subject's record")
	}
	if string(rb.Body) != "bob's refund" {
		t.Fatalf("bob got %q", rb.Body)
	}
	// Same explicit key, different subjects: still separate.
	ka, _ := idemkit.NewKey("alice", "refund", []byte(`{"idempotency_key":"k-1"}`), nil)
	kb, _ := idemkit.NewKey("bob", "refund", []byte(`{"idempotency_key":"k-1"}`), nil)
	mustDo(t, g, ka, c.work("alice explicit"))
	if res := mustDo(t, g, kb, c.work("bob explicit")); (res.Outcome == idemkit.OutcomeReplayed) || string(res.Body) != "bob explicit" {
		t.Fatalf("bob's explicit key returned %q (replayed=%v)", res.Body, (res.Outcome == idemkit.OutcomeReplayed))
	}
	// Same subject, different tool: separate.
	if res := mustDo(t, g, key(t, "alice", "cancel", args), c.work("cancel")); res.Outcome == idemkit.OutcomeReplayed {
		t.Fatalf("a different tool was answered from another tool's record")
	}
	if c.n.Load() != 5 {
		t.Fatalf("side effect ran %d times, want 5", c.n.Load())
	}
}

// blockingWork runs until release is closed, signalling started first.
func blockingWork(started chan<- struct{}, release <-chan struct{}, body string, runs *atomic.Int64) idemkit.Work {
	return func(ctx context.Context) (idemkit.Response, error) {
		runs.Add(1)
		close(started)
		select {
		case <-release:
		case <-ctx.Done():
			return idemkit.Response{}, ctx.Err()
		}
		return idemkit.Response{Body: []byte(body)}, nil
	}
}

func (s *suite) inProgress(t *testing.T) {
	g, _ := s.setup(t, idemkit.Config{Tools: map[string]idemkit.ToolConfig{"refund": {StatusTool: "get_refund_status"}}})
	k := key(t, "s", "refund", `{"order":"o-2"}`)
	started, release := make(chan struct{}), make(chan struct{})
	var runs atomic.Int64
	done := make(chan error, 1)
	go func() {
		_, err := g.Do(ctx(t), k, blockingWork(started, release, "ok", &runs))
		done <- err
	}()
	<-started
	_, err := g.Do(ctx(t), k, func(context.Context) (idemkit.Response, error) {
		runs.Add(1)
		return idemkit.Response{}, nil
	})
	var ip *idemkit.InProgressError
	if !errors.As(err, &ip) || !errors.Is(err, idemkit.ErrInProgress) {
		t.Fatalf("duplicate during work: err = %v, want *InProgressError", err)
	}
	msg := err.Error()
	for _, want := range []string{"in progress", "Do not", "get_refund_status"} {
		if !strings.Contains(msg, want) {
			t.Errorf("in-progress text %q lacks %q", msg, want)
		}
	}
	if ip.Attempt != 1 || ip.Tool != "refund" || ip.RetryAfter <= 0 {
		t.Errorf("InProgressError = %+v, want attempt 1, tool refund, positive RetryAfter", ip)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatalf("first call: %v", err)
	}
	if runs.Load() != 1 {
		t.Fatalf("work ran %d times, want 1", runs.Load())
	}
}

func (s *suite) waitMode(t *testing.T) {
	// Real time here: the waiter polls while the first call runs.
	store := s.cfg.NewStore(t)
	g := s.guard(t, store, &idemkit.Config{Wait: 20 * time.Second})
	k := key(t, "s", "refund", `{"order":"o-3"}`)
	started, release := make(chan struct{}), make(chan struct{})
	var runs atomic.Int64
	first := make(chan idemkit.Result, 1)
	go func() {
		res, err := g.Do(ctx(t), k, blockingWork(started, release, "first body", &runs))
		if err != nil {
			t.Errorf("first call: %v", err)
		}
		first <- res
	}()
	<-started
	second := make(chan error, 1)
	var got idemkit.Result
	go func() {
		var err error
		got, err = g.Do(ctx(t), k, func(context.Context) (idemkit.Response, error) {
			runs.Add(1)
			return idemkit.Response{Body: []byte("second body")}, nil
		})
		second <- err
	}()
	time.Sleep(50 * time.Millisecond) // let the duplicate start waiting
	close(release)
	if err := <-second; err != nil {
		t.Fatalf("waiting duplicate: %v", err)
	}
	<-first
	if got.Outcome != idemkit.OutcomeReplayed || string(got.Body) != "first body" {
		t.Fatalf("waiting duplicate got %q (outcome %s), want the first call's body replayed", got.Body, got.Outcome)
	}
	if runs.Load() != 1 {
		t.Fatalf("work ran %d times, want 1", runs.Load())
	}

	// A bounded wait that runs out answers in progress.
	g2 := s.guard(t, store, &idemkit.Config{Wait: 30 * time.Millisecond})
	k2 := key(t, "s", "refund", `{"order":"o-4"}`)
	started2, release2 := make(chan struct{}), make(chan struct{})
	go func() { _, _ = g2.Do(ctx(t), k2, blockingWork(started2, release2, "x", &runs)) }()
	<-started2
	t0 := time.Now()
	_, err := g2.Do(ctx(t), k2, func(context.Context) (idemkit.Response, error) { return idemkit.Response{}, nil })
	if !errors.Is(err, idemkit.ErrInProgress) {
		t.Fatalf("after a bounded wait: err = %v, want ErrInProgress", err)
	}
	if time.Since(t0) < 30*time.Millisecond {
		t.Fatalf("duplicate answered after %s, before its 30ms wait", time.Since(t0))
	}
	close(release2)
}

func (s *suite) takeoverAfterError(t *testing.T) {
	g, _ := s.setup(t, idemkit.Config{})
	k := key(t, "s", "refund", `{"order":"o-5"}`)
	boom := errors.New("gateway unreachable")
	var runs atomic.Int64
	_, err := g.Do(ctx(t), k, func(context.Context) (idemkit.Response, error) {
		runs.Add(1)
		return idemkit.Response{}, boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("first call: err = %v, want the work's error", err)
	}
	res := mustDo(t, g, k, func(context.Context) (idemkit.Response, error) {
		runs.Add(1)
		return idemkit.Response{Body: []byte("refunded")}, nil
	})
	if res.Outcome != idemkit.OutcomeTakeover || res.Attempt != 2 || string(res.Body) != "refunded" {
		t.Fatalf("retry after failure: %+v, want takeover attempt 2", res)
	}
	if rep := mustDo(t, g, k, mustNotRun(t)); rep.Outcome != idemkit.OutcomeReplayed || rep.Attempt != 2 || string(rep.Body) != "refunded" {
		t.Fatalf("duplicate after takeover: %+v, want replay of attempt 2", rep)
	}
	if runs.Load() != 2 {
		t.Fatalf("work ran %d times, want 2", runs.Load())
	}
}

func (s *suite) toolErrorPolicy(t *testing.T) {
	g, _ := s.setup(t, idemkit.Config{Tools: map[string]idemkit.ToolConfig{"charge": {FailurePolicy: idemkit.StoreToolErrors}}})
	var runs atomic.Int64
	toolErr := func(context.Context) (idemkit.Response, error) {
		runs.Add(1)
		return idemkit.Response{Body: []byte(`{"isError":true}`), IsError: true}, nil
	}
	// Default policy: a tool error is released and run again.
	k := key(t, "s", "refund", `{}`)
	if r := mustDo(t, g, k, toolErr); r.Outcome != idemkit.OutcomeExecuted || !r.IsError {
		t.Fatalf("first tool error: %+v", r)
	}
	if r := mustDo(t, g, k, toolErr); r.Outcome != idemkit.OutcomeTakeover || r.Attempt != 2 {
		t.Fatalf("retry after tool error under the default policy: %+v, want takeover attempt 2", r)
	}
	// StoreToolErrors for "charge": replayed.
	k2 := key(t, "s", "charge", `{}`)
	mustDo(t, g, k2, toolErr)
	if r := mustDo(t, g, k2, toolErr); r.Outcome != idemkit.OutcomeReplayed || !r.IsError {
		t.Fatalf("retry after tool error under StoreToolErrors: %+v, want replayed tool error", r)
	}
	if runs.Load() != 3 {
		t.Fatalf("work ran %d times, want 3", runs.Load())
	}
}

func (s *suite) takeoverAfterPanic(t *testing.T) {
	g, _ := s.setup(t, idemkit.Config{})
	k := key(t, "s", "refund", `{"order":"o-6"}`)
	func() {
		defer func() {
			if r := recover(); r != "kaboom" {
				t.Fatalf("recovered %v, want the work's panic", r)
			}
		}()
		_, _ = g.Do(ctx(t), k, func(context.Context) (idemkit.Response, error) { panic("kaboom") })
	}()
	res := mustDo(t, g, k, func(context.Context) (idemkit.Response, error) { return idemkit.Response{Body: []byte("ok")}, nil })
	if res.Outcome != idemkit.OutcomeTakeover || res.Attempt != 2 {
		t.Fatalf("after a panic: %+v, want takeover attempt 2", res)
	}
}

func (s *suite) takeoverAfterLease(t *testing.T) {
	g, clock := s.setup(t, idemkit.Config{Lease: 30 * time.Second})
	k := key(t, "s", "refund", `{"order":"o-7"}`)
	// A worker claims the key and "crashes": its work never returns.
	started, release := make(chan struct{}), make(chan struct{})
	defer close(release)
	var runs atomic.Int64
	staleDone := make(chan error, 1)
	go func() {
		_, err := g.Do(ctx(t), k, blockingWork(started, release, "stale", &runs))
		staleDone <- err
	}()
	<-started
	clock.Advance(29 * time.Second)
	if _, err := g.Do(ctx(t), k, mustNotRun(t)); !errors.Is(err, idemkit.ErrInProgress) {
		t.Fatalf("inside the lease: err = %v, want ErrInProgress", err)
	}
	clock.Advance(2 * time.Second)
	res := mustDo(t, g, k, func(context.Context) (idemkit.Response, error) {
		runs.Add(1)
		return idemkit.Response{Body: []byte("new owner")}, nil
	})
	if res.Outcome != idemkit.OutcomeTakeover || res.Attempt != 2 {
		t.Fatalf("after the lease ran out: %+v, want takeover attempt 2", res)
	}
	// The crashed worker comes back and finishes late: fenced.
	release <- struct{}{}
	if err := <-staleDone; !errors.Is(err, idemkit.ErrLeaseLost) {
		t.Fatalf("stale worker's finish: err = %v, want ErrLeaseLost", err)
	}
	if rep := mustDo(t, g, k, mustNotRun(t)); string(rep.Body) != "new owner" || rep.Attempt != 2 {
		t.Fatalf("after the stale finish: %q attempt %d, want the new owner's outcome", rep.Body, rep.Attempt)
	}
}

func (s *suite) heartbeat(t *testing.T) {
	g, clock := s.setup(t, idemkit.Config{Lease: 10 * time.Second, Window: 20 * time.Second})
	k := key(t, "s", "export", `{}`)
	res := mustDo(t, g, k, func(ctx context.Context) (idemkit.Response, error) {
		call := idemkit.CallFromContext(ctx)
		if call == nil || call.Attempt() != 1 || call.Key().ID() != k.ID() || !strings.HasPrefix(call.IdempotencyKey(), "idk_") {
			return idemkit.Response{}, fmt.Errorf("CallFromContext = %+v", call)
		}
		// Run for 45s of clock time, past the lease and the window, with a
		// heartbeat every 8s.
		for range 6 {
			clock.Advance(8 * time.Second)
			if err := call.Heartbeat(ctx); err != nil {
				return idemkit.Response{}, err
			}
			if _, err := g.Do(ctx, k, mustNotRun(t)); !errors.Is(err, idemkit.ErrInProgress) {
				return idemkit.Response{}, fmt.Errorf("duplicate during a heartbeating call: %v, want ErrInProgress", err)
			}
		}
		return idemkit.Response{Body: []byte("exported")}, nil
	})
	if res.Outcome != idemkit.OutcomeExecuted {
		t.Fatalf("outcome %s", res.Outcome)
	}
	if rep := mustDo(t, g, k, mustNotRun(t)); rep.Outcome != idemkit.OutcomeReplayed {
		t.Fatalf("after finishing: %s, want replayed", rep.Outcome)
	}
	var nilCall *idemkit.Call
	if err := nilCall.Heartbeat(context.Background()); err != nil {
		t.Fatalf("nil Call heartbeat: %v", err)
	}
}

func (s *suite) fencing(t *testing.T) {
	g, clock := s.setup(t, idemkit.Config{Lease: time.Second})
	k := key(t, "s", "refund", `{"order":"o-8"}`)
	var stale *idemkit.Call
	staleStarted, staleRelease := make(chan struct{}), make(chan struct{})
	staleDone := make(chan error, 1)
	go func() {
		_, err := g.Do(ctx(t), k, func(ctx context.Context) (idemkit.Response, error) {
			stale = idemkit.CallFromContext(ctx)
			close(staleStarted)
			<-staleRelease
			return idemkit.Response{Body: []byte("stale")}, nil
		})
		staleDone <- err
	}()
	<-staleStarted
	clock.Advance(2 * time.Second)
	newStarted, newRelease := make(chan struct{}), make(chan struct{})
	newDone := make(chan error, 1)
	go func() {
		_, err := g.Do(ctx(t), k, func(ctx context.Context) (idemkit.Response, error) {
			close(newStarted)
			<-newRelease
			return idemkit.Response{Body: []byte("owner")}, nil
		})
		newDone <- err
	}()
	<-newStarted
	// The stale worker's heartbeat and finish are refused while the new owner runs.
	if err := stale.Heartbeat(ctx(t)); !errors.Is(err, idemkit.ErrLeaseLost) {
		t.Fatalf("stale heartbeat: %v, want ErrLeaseLost", err)
	}
	close(staleRelease)
	if err := <-staleDone; !errors.Is(err, idemkit.ErrLeaseLost) {
		t.Fatalf("stale finish: %v, want ErrLeaseLost", err)
	}
	if _, err := g.Do(ctx(t), k, mustNotRun(t)); !errors.Is(err, idemkit.ErrInProgress) {
		t.Fatalf("after the stale finish the new owner must still hold the claim: %v", err)
	}
	close(newRelease)
	if err := <-newDone; err != nil {
		t.Fatalf("new owner: %v", err)
	}
	if rep := mustDo(t, g, k, mustNotRun(t)); string(rep.Body) != "owner" {
		t.Fatalf("replay %q, want the new owner's", rep.Body)
	}
}

func (s *suite) mismatch(t *testing.T) {
	g, _ := s.setup(t, idemkit.Config{})
	var c counter
	k1 := key(t, "s", "refund", `{"order":"o-9","amount":5,"idempotency_key":"intent-1"}`)
	k2 := key(t, "s", "refund", `{"order":"o-9","amount":6,"idempotency_key":"intent-1"}`)
	if k1.ID() != k2.ID() || k1.Source() != "explicit" {
		t.Fatalf("explicit keys: ids differ or source %q", k1.Source())
	}
	mustDo(t, g, k1, c.work("five"))
	_, err := g.Do(ctx(t), k2, c.work("six"))
	var me *idemkit.MismatchError
	if !errors.As(err, &me) || !errors.Is(err, idemkit.ErrKeyMismatch) {
		t.Fatalf("reuse with different arguments: err = %v, want *MismatchError", err)
	}
	// The mismatch changed nothing: the original still replays.
	if rep := mustDo(t, g, k1, c.work("again")); rep.Outcome != idemkit.OutcomeReplayed || string(rep.Body) != "five" {
		t.Fatalf("original after mismatch: %q replayed=%v", rep.Body, (rep.Outcome == idemkit.OutcomeReplayed))
	}
	if c.n.Load() != 1 {
		t.Fatalf("work ran %d times, want 1", c.n.Load())
	}
}

func (s *suite) windowExpiry(t *testing.T) {
	g, clock := s.setup(t, idemkit.Config{Window: 10 * time.Minute})
	k := key(t, "s", "send", `{"to":"#ops","text":"deploy done"}`)
	var c counter
	mustDo(t, g, k, c.work("sent"))
	clock.Advance(9*time.Minute + 59*time.Second)
	if r := mustDo(t, g, k, c.work("sent")); r.Outcome != idemkit.OutcomeReplayed {
		t.Fatalf("inside the window: %s, want replayed", r.Outcome)
	}
	clock.Advance(2 * time.Second)
	r := mustDo(t, g, k, c.work("sent again"))
	if r.Outcome != idemkit.OutcomeExecuted || r.Attempt != 1 || string(r.Body) != "sent again" {
		t.Fatalf("after the window: %+v, want a fresh execution (attempt 1)", r)
	}
	if c.n.Load() != 2 {
		t.Fatalf("work ran %d times, want 2", c.n.Load())
	}
	// An expired failed record is fresh work too, attempt back to 1.
	k2 := key(t, "s", "send", `{"to":"#ops","text":"x"}`)
	_, _ = g.Do(ctx(t), k2, func(context.Context) (idemkit.Response, error) { return idemkit.Response{}, errors.New("x") })
	clock.Advance(11 * time.Minute)
	if r := mustDo(t, g, k2, c.work("y")); r.Outcome != idemkit.OutcomeExecuted || r.Attempt != 1 {
		t.Fatalf("expired failed record: %+v, want executed attempt 1", r)
	}
}

func (s *suite) largeResponse(t *testing.T) {
	store := s.cfg.NewStore(t)
	clock := NewClock()
	g := s.guard(t, store, &idemkit.Config{Now: clock.Now})
	body := make([]byte, 200<<10)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range body {
		body[i] = byte(rng.UintN(256))
	}
	k := key(t, "s", "report", `{"month":"2030-01"}`)
	mustDo(t, g, k, func(context.Context) (idemkit.Response, error) {
		return idemkit.Response{Body: bytes.Clone(body), WriteID: "rep-1"}, nil
	})
	// The claim path does not carry the body.
	cr, err := store.Claim(ctx(t), idemstore.ClaimRequest{Key: k.ID(), Tool: "report", Fingerprint: k.Fingerprint(), Token: 77, Lease: time.Minute, Window: time.Hour, Now: clock.Now()})
	if err != nil {
		t.Fatal(err)
	}
	if cr.Status != idemstore.ClaimCompleted || cr.Storage != idemstore.StorageExternal || cr.Response.Body != nil || cr.Size != int64(len(body)) {
		t.Fatalf("claim of a large record: status %s storage %d body %d bytes size %d; want completed, external, no body, size %d",
			cr.Status, cr.Storage, len(cr.Response.Body), cr.Size, len(body))
	}
	rep := mustDo(t, g, k, mustNotRun(t))
	if rep.Outcome != idemkit.OutcomeReplayed || !bytes.Equal(rep.Body, body) || rep.WriteID != "rep-1" {
		t.Fatalf("replay of a %d-byte body: replayed=%v equal=%v writeID=%q", len(body), (rep.Outcome == idemkit.OutcomeReplayed), bytes.Equal(rep.Body, body), rep.WriteID)
	}
	// Exactly at the inline limit stays inline.
	k2 := key(t, "s", "report", `{"month":"2030-02"}`)
	inline := bytes.Repeat([]byte("a"), idemkit.DefaultMaxInlineResponse)
	mustDo(t, g, k2, func(context.Context) (idemkit.Response, error) { return idemkit.Response{Body: inline}, nil })
	cr, err = store.Claim(ctx(t), idemstore.ClaimRequest{Key: k2.ID(), Tool: "report", Fingerprint: k2.Fingerprint(), Token: 78, Lease: time.Minute, Window: time.Hour, Now: clock.Now()})
	if err != nil || cr.Storage != idemstore.StorageInline || !bytes.Equal(cr.Response.Body, inline) {
		t.Fatalf("claim of a body at the inline limit: err %v storage %d len %d", err, cr.Storage, len(cr.Response.Body))
	}
}

func (s *suite) oversizedResponse(t *testing.T) {
	g, _ := s.setup(t, idemkit.Config{MaxResponseBytes: 1000})
	k := key(t, "s", "dump", `{}`)
	var runs atomic.Int64
	w := func(context.Context) (idemkit.Response, error) {
		runs.Add(1)
		return idemkit.Response{Body: bytes.Repeat([]byte("x"), 1001)}, nil
	}
	res, err := g.Do(ctx(t), k, w)
	var tl *idemkit.ResponseTooLargeError
	if !errors.As(err, &tl) || tl.Size != 1001 || tl.Limit != 1000 || len(tl.Result.Body) != 1001 || len(res.Body) != 1001 {
		t.Fatalf("first call: err = %v, want *ResponseTooLargeError carrying the 1001-byte result", err)
	}
	_, err = g.Do(ctx(t), k, w)
	if !errors.As(err, &tl) || tl.Size != 1001 {
		t.Fatalf("duplicate: err = %v, want *ResponseTooLargeError", err)
	}
	if runs.Load() != 1 {
		t.Fatalf("work ran %d times, want 1: an unstorable response must not cause a re-run", runs.Load())
	}
}

func (s *suite) cancelled(t *testing.T) {
	g, _ := s.setup(t, idemkit.Config{})
	c, cancel := context.WithCancel(context.Background())
	cancel()
	var runs atomic.Int64
	_, err := g.Do(c, key(t, "s", "refund", `{}`), func(context.Context) (idemkit.Response, error) {
		runs.Add(1)
		return idemkit.Response{}, nil
	})
	if err == nil || runs.Load() != 0 {
		t.Fatalf("cancelled context: err = %v, runs %d; want an error and no run", err, runs.Load())
	}
	if _, err := g.Do(ctx(t), idemkit.Key{}, mustNotRun(t)); !errors.Is(err, idemkit.ErrInvalidKey) {
		t.Fatalf("zero Key: err = %v, want ErrInvalidKey", err)
	}
}

func (s *suite) claimStatuses(t *testing.T) {
	store := s.cfg.NewStore(t)
	clock := NewClock()
	c := ctx(t)
	req := func(tok int64, fp string) idemstore.ClaimRequest {
		return idemstore.ClaimRequest{Key: "k1", Tool: "t", Fingerprint: fp, Token: tok, Lease: time.Minute, Window: 10 * time.Minute, Now: clock.Now()}
	}
	check := func(name string, cr idemstore.ClaimResult, err error, status idemstore.ClaimStatus, attempt int) {
		t.Helper()
		if err != nil || cr.Status != status || cr.Attempt != attempt {
			t.Fatalf("%s: status %s attempt %d err %v; want %s attempt %d", name, cr.Status, cr.Attempt, err, status, attempt)
		}
	}
	cr, err := store.Claim(c, req(1, "fp"))
	check("fresh", cr, err, idemstore.ClaimAcquired, 1)
	cr, err = store.Claim(c, req(2, "fp"))
	check("busy", cr, err, idemstore.ClaimBusy, 1)
	if !cr.LeaseUntil.Equal(clock.Now().Add(time.Minute)) {
		t.Fatalf("busy lease until %v, want %v", cr.LeaseUntil, clock.Now().Add(time.Minute))
	}
	cr, err = store.Claim(c, req(3, "other"))
	check("mismatch", cr, err, idemstore.ClaimMismatch, 1)
	if err := store.Finish(c, idemstore.FinishRequest{Key: "k1", Token: 1, Error: "boom", Now: clock.Now()}); err != nil {
		t.Fatalf("finish failed: %v", err)
	}
	cr, err = store.Claim(c, req(4, "fp"))
	check("takeover", cr, err, idemstore.ClaimTakenOver, 2)
	if err := store.Finish(c, idemstore.FinishRequest{Key: "k1", Token: 4, Succeeded: true, Response: idemkit.Response{Body: []byte("b"), WriteID: "w", IsError: true}, Size: 1, Now: clock.Now()}); err != nil {
		t.Fatalf("finish succeeded: %v", err)
	}
	cr, err = store.Claim(c, req(5, "fp"))
	check("completed", cr, err, idemstore.ClaimCompleted, 2)
	if string(cr.Response.Body) != "b" || cr.Response.WriteID != "w" || !cr.Response.IsError || cr.Storage != idemstore.StorageInline || cr.Size != 1 {
		t.Fatalf("completed record: %+v", cr)
	}
	if _, err := store.Response(c, "k1"); !errors.Is(err, idemkit.ErrNotFound) {
		t.Fatalf("Response of an inline record: %v, want ErrNotFound", err)
	}
	if _, err := store.Response(c, "nope"); !errors.Is(err, idemkit.ErrNotFound) {
		t.Fatalf("Response of a missing record: %v, want ErrNotFound", err)
	}
	// The same finish again (a retry after a lost acknowledgement)
	// succeeds and leaves the outcome as it is; the other outcome, or
	// another token, is refused.
	done := idemstore.FinishRequest{Key: "k1", Token: 4, Succeeded: true, Response: idemkit.Response{Body: []byte("b"), WriteID: "w", IsError: true}, Size: 1, Now: clock.Now()}
	if err := store.Finish(c, done); err != nil {
		t.Fatalf("repeated finish by the same attempt: %v, want success", err)
	}
	if err := store.Finish(c, idemstore.FinishRequest{Key: "k1", Token: 4, Error: "late failure", Now: clock.Now()}); !errors.Is(err, idemkit.ErrLeaseLost) {
		t.Fatalf("failure after success by the same attempt: %v, want ErrLeaseLost", err)
	}
	if err := store.Finish(c, idemstore.FinishRequest{Key: "k1", Token: 1, Succeeded: true, Now: clock.Now()}); !errors.Is(err, idemkit.ErrLeaseLost) {
		t.Fatalf("finish by an earlier attempt's token: %v, want ErrLeaseLost", err)
	}
	cr, err = store.Claim(c, req(6, "fp"))
	check("completed after repeated finishes", cr, err, idemstore.ClaimCompleted, 2)
	if string(cr.Response.Body) != "b" || cr.Response.WriteID != "w" || !cr.Response.IsError {
		t.Fatalf("record after repeated finishes: %+v", cr)
	}

	// A repeated release succeeds too, and a success after it is refused.
	if _, err := store.Claim(c, idemstore.ClaimRequest{Key: "k3", Tool: "t", Token: 7, Lease: time.Minute, Window: time.Hour, Now: clock.Now()}); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if err := store.Finish(c, idemstore.FinishRequest{Key: "k3", Token: 7, Error: "boom", Now: clock.Now()}); err != nil {
			t.Fatalf("release %d: %v", i+1, err)
		}
	}
	if err := store.Finish(c, idemstore.FinishRequest{Key: "k3", Token: 7, Succeeded: true, Now: clock.Now()}); !errors.Is(err, idemkit.ErrLeaseLost) {
		t.Fatalf("success after a release by the same attempt: %v, want ErrLeaseLost", err)
	}
}

func (s *suite) storeFencing(t *testing.T) {
	store := s.cfg.NewStore(t)
	clock := NewClock()
	c := ctx(t)
	claim := func(tok int64) idemstore.ClaimResult {
		cr, err := store.Claim(c, idemstore.ClaimRequest{Key: "k2", Tool: "t", Fingerprint: "fp", Token: tok, Lease: time.Second, Window: time.Hour, Now: clock.Now()})
		if err != nil {
			t.Fatal(err)
		}
		return cr
	}
	claim(10)
	if err := store.Extend(c, idemstore.ExtendRequest{Key: "k2", Token: 10, Lease: 5 * time.Second, Now: clock.Now()}); err != nil {
		t.Fatalf("owner's extend: %v", err)
	}
	clock.Advance(4 * time.Second)
	if cr := claim(11); cr.Status != idemstore.ClaimBusy {
		t.Fatalf("after extend, inside the new lease: %s, want busy", cr.Status)
	}
	clock.Advance(2 * time.Second)
	if cr := claim(12); cr.Status != idemstore.ClaimTakenOver {
		t.Fatalf("after the extended lease: %s, want taken_over", cr.Status)
	}
	if err := store.Extend(c, idemstore.ExtendRequest{Key: "k2", Token: 10, Lease: time.Minute, Now: clock.Now()}); !errors.Is(err, idemkit.ErrLeaseLost) {
		t.Fatalf("stale extend: %v, want ErrLeaseLost", err)
	}
	if err := store.Finish(c, idemstore.FinishRequest{Key: "k2", Token: 10, Succeeded: true, Response: idemkit.Response{Body: []byte("stale")}, Now: clock.Now()}); !errors.Is(err, idemkit.ErrLeaseLost) {
		t.Fatalf("stale finish: %v, want ErrLeaseLost", err)
	}
	if err := store.Finish(c, idemstore.FinishRequest{Key: "missing", Token: 10, Succeeded: true, Now: clock.Now()}); !errors.Is(err, idemkit.ErrLeaseLost) {
		t.Fatalf("finish of a missing record: %v, want ErrLeaseLost", err)
	}
	if err := store.Finish(c, idemstore.FinishRequest{Key: "k2", Token: 12, Succeeded: true, Response: idemkit.Response{Body: []byte("owner")}, Size: 5, Now: clock.Now()}); err != nil {
		t.Fatalf("owner's finish: %v", err)
	}
	if cr := claim(13); cr.Status != idemstore.ClaimCompleted || string(cr.Response.Body) != "owner" {
		t.Fatalf("after fencing: %s %q, want completed with the owner's body", cr.Status, cr.Response.Body)
	}
}

func (s *suite) sweep(t *testing.T) {
	store := s.cfg.NewStore(t)
	clock := NewClock()
	c := ctx(t)
	claim := func(k string, lease, window time.Duration) {
		cr, err := store.Claim(c, idemstore.ClaimRequest{Key: k, Tool: "t", Fingerprint: "fp", Token: 1, Lease: lease, Window: window, Now: clock.Now()})
		if err != nil || cr.Status != idemstore.ClaimAcquired {
			t.Fatalf("claim %s: %v %v", k, cr.Status, err)
		}
	}
	finish := func(k string, body []byte, storage idemstore.Storage) {
		if err := store.Finish(c, idemstore.FinishRequest{Key: k, Token: 1, Succeeded: true, Response: idemkit.Response{Body: body}, Storage: storage, Size: int64(len(body)), Now: clock.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 25 {
		claim(fmt.Sprintf("short-%02d", i), time.Second, time.Minute)
		finish(fmt.Sprintf("short-%02d", i), []byte("x"), idemstore.StorageInline)
	}
	claim("external", time.Second, time.Minute)
	finish("external", bytes.Repeat([]byte("e"), 100), idemstore.StorageExternal)
	claim("long", time.Second, time.Hour)
	finish("long", []byte("x"), idemstore.StorageInline)
	claim("running", 2*time.Hour, time.Minute) // window over, lease live
	clock.Advance(2 * time.Minute)

	total := 0
	for {
		n, err := store.Sweep(c, idemstore.SweepRequest{Limit: 10, Now: clock.Now()})
		if err != nil {
			t.Fatal(err)
		}
		if n > 10 {
			t.Fatalf("sweep deleted %d records, over its limit of 10", n)
		}
		total += n
		if n < 10 {
			break
		}
	}
	if total != 26 {
		t.Fatalf("swept %d records, want 26", total)
	}
	if _, err := store.Response(c, "external"); !errors.Is(err, idemkit.ErrNotFound) {
		t.Fatalf("external body after sweep: %v, want ErrNotFound", err)
	}
	cr, err := store.Claim(c, idemstore.ClaimRequest{Key: "long", Tool: "t", Fingerprint: "fp", Token: 2, Lease: time.Second, Window: time.Hour, Now: clock.Now()})
	if err != nil || cr.Status != idemstore.ClaimCompleted {
		t.Fatalf("unexpired record after sweep: %s %v, want completed", cr.Status, err)
	}
	cr, err = store.Claim(c, idemstore.ClaimRequest{Key: "running", Tool: "t", Fingerprint: "fp", Token: 2, Lease: time.Second, Window: time.Hour, Now: clock.Now()})
	if err != nil || cr.Status != idemstore.ClaimBusy {
		t.Fatalf("record with a live lease after sweep: %s %v, want busy", cr.Status, err)
	}
	cr, err = store.Claim(c, idemstore.ClaimRequest{Key: "short-00", Tool: "t", Fingerprint: "fp", Token: 2, Lease: time.Second, Window: time.Hour, Now: clock.Now()})
	if err != nil || cr.Status != idemstore.ClaimAcquired {
		t.Fatalf("swept key claimed again: %s %v, want acquired", cr.Status, err)
	}
}

func (s *suite) concurrentSweepers(t *testing.T) {
	store := s.cfg.NewStore(t)
	clock := NewClock()
	g := s.guard(t, store, &idemkit.Config{Now: clock.Now, Window: time.Minute, SweepBatch: 7})
	const n = 300
	for i := range n {
		mustDo(t, g, key(t, "s", "t", fmt.Sprintf(`{"i":%d}`, i)), func(context.Context) (idemkit.Response, error) {
			return idemkit.Response{Body: []byte("x")}, nil
		})
	}
	clock.Advance(2 * time.Minute)
	var wg sync.WaitGroup
	var total atomic.Int64
	for range 6 {
		wg.Go(func() {
			n, err := g.Sweep(ctx(t))
			if err != nil {
				t.Errorf("sweep: %v", err)
			}
			total.Add(int64(n))
		})
	}
	wg.Wait()
	if total.Load() != n {
		t.Fatalf("concurrent sweepers deleted %d records in all, want exactly %d", total.Load(), n)
	}
	if left, err := g.Sweep(ctx(t)); err != nil || left != 0 {
		t.Fatalf("a later sweep found %d records (err %v), want 0", left, err)
	}
}

func (s *suite) storm(t *testing.T) { s.stormWith(t, idemkit.Config{}) }

// stormWait is the storm with Config.Wait set: every duplicate that finds
// the call in progress waits for it, so none is answered "in progress".
func (s *suite) stormWait(t *testing.T) { s.stormWith(t, idemkit.Config{Wait: 30 * time.Second}) }

func (s *suite) stormWith(t *testing.T, cfg idemkit.Config) {
	store := s.cfg.NewStore(t)
	g := s.guard(t, store, &cfg)
	nk, ng := s.cfg.StormKeys, s.cfg.StormGoroutines
	keys := make([]idemkit.Key, nk)
	for i := range keys {
		keys[i] = key(t, fmt.Sprintf("subject-%d", i%7), "refund", fmt.Sprintf(`{"order":"o-%d","amount":%d}`, i, i*10))
	}
	runs := make([]atomic.Int64, nk)
	bodies := make([]sync.Map, nk) // distinct bodies returned per key
	var inProgress, replayed, executed atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for gi := range ng {
		wg.Go(func() {
			<-start
			order := rand.New(rand.NewPCG(uint64(gi), 7)).Perm(nk)
			for _, i := range order {
				res, err := g.Do(context.Background(), keys[i], func(context.Context) (idemkit.Response, error) {
					n := runs[i].Add(1)
					return idemkit.Response{Body: fmt.Appendf(nil, `{"refund":"re_%d","run":%d}`, i, n)}, nil
				})
				switch {
				case errors.Is(err, idemkit.ErrInProgress):
					inProgress.Add(1)
				case err != nil:
					t.Errorf("key %d: %v", i, err)
					return
				default:
					if res.Outcome == idemkit.OutcomeReplayed {
						replayed.Add(1)
					} else {
						executed.Add(1)
					}
					bodies[i].Store(string(res.Body), true)
				}
			}
		})
	}
	close(start)
	wg.Wait()
	for i := range nk {
		if n := runs[i].Load(); n != 1 {
			t.Fatalf("key %d: side effect ran %d times, want exactly 1", i, n)
		}
		distinct := 0
		bodies[i].Range(func(any, any) bool { distinct++; return true })
		if distinct != 1 {
			t.Fatalf("key %d: callers saw %d different bodies, want 1", i, distinct)
		}
	}
	if executed.Load() != int64(nk) {
		t.Fatalf("%d executions reported, want %d", executed.Load(), nk)
	}
	if total := executed.Load() + replayed.Load() + inProgress.Load(); total != int64(nk*ng) {
		t.Fatalf("%d answers, want %d", total, nk*ng)
	}
	if cfg.Wait > 0 && inProgress.Load() != 0 {
		t.Fatalf("%d duplicates were answered in progress although Wait is %s", inProgress.Load(), cfg.Wait)
	}
	// Afterwards every key replays its one body.
	for i := range nk {
		res := mustDo(t, g, keys[i], mustNotRun(t))
		if want := fmt.Sprintf(`{"refund":"re_%d","run":1}`, i); res.Outcome != idemkit.OutcomeReplayed || string(res.Body) != want {
			t.Fatalf("key %d after the storm: %q replayed=%v, want %q", i, res.Body, (res.Outcome == idemkit.OutcomeReplayed), want)
		}
	}
	t.Logf("storm (wait %s): %d goroutines x %d keys: %d executed, %d replayed, %d in progress", cfg.Wait, ng, nk, executed.Load(), replayed.Load(), inProgress.Load())
}

// A lease or window of any size, even past what a Guard accepts, neither
// wraps a deadline negative nor fails: the record deduplicates.
func (s *suite) hugeDurations(t *testing.T) {
	store := s.cfg.NewStore(t)
	clock := NewClock()
	c := ctx(t)
	huge := time.Duration(math.MaxInt64)
	claim := func(tok int64) idemstore.ClaimResult {
		t.Helper()
		cr, err := store.Claim(c, idemstore.ClaimRequest{Key: "k-huge", Tool: "t", Token: tok, Lease: huge, Window: huge, Now: clock.Now()})
		if err != nil {
			t.Fatalf("claim with huge durations: %v", err)
		}
		return cr
	}
	if cr := claim(1); cr.Status != idemstore.ClaimAcquired {
		t.Fatalf("first claim: %s", cr.Status)
	}
	clock.Advance(1000 * time.Hour)
	if cr := claim(2); cr.Status != idemstore.ClaimBusy {
		t.Fatalf("duplicate inside a huge lease: %s, want busy", cr.Status)
	}
	if err := store.Extend(c, idemstore.ExtendRequest{Key: "k-huge", Token: 1, Lease: huge, Now: clock.Now()}); err != nil {
		t.Fatalf("extend by a huge lease: %v", err)
	}
	if err := store.Finish(c, idemstore.FinishRequest{Key: "k-huge", Token: 1, Succeeded: true, Response: idemkit.Response{Body: []byte("x")}, Size: 1, Now: clock.Now()}); err != nil {
		t.Fatal(err)
	}
	clock.Advance(10 * 365 * 24 * time.Hour)
	if cr := claim(3); cr.Status != idemstore.ClaimCompleted {
		t.Fatalf("duplicate ten years later inside a huge window: %s, want completed", cr.Status)
	}
	rec, err := store.Lookup(c, idemstore.LookupRequest{Key: "k-huge", Now: clock.Now()})
	if err != nil || !rec.ExpiresAt.After(rec.Now) || rec.Expired() {
		t.Fatalf("record with a huge window: expires %v at %v (%v)", rec.ExpiresAt, rec.Now, err)
	}
	if n, err := store.Sweep(c, idemstore.SweepRequest{Limit: 10, Now: clock.Now()}); err != nil || n != 0 {
		t.Fatalf("sweep deleted %d records (%v), want none", n, err)
	}
}
