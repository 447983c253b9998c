package storetest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit-mcp/idemkit/idemkit"
	"github.com/idemkit-mcp/idemkit/idemkit/idemstore"
)

// A record keeps the generation its creating claim gave it (that claim's
// token) through every takeover, heartbeat, finish and cancellation; a
// claim that replaces an expired record, or one after a sweep, gives the
// new record its own.
func (s *suite) generationBelongsToTheRecord(t *testing.T) {
	store := s.cfg.NewStore(t)
	clock := NewClock()
	c := ctx(t)
	k := hexKey(300)
	claim := func(name string, tok int64, status idemstore.ClaimStatus, generation int64) {
		t.Helper()
		cr, err := store.Claim(c, idemstore.ClaimRequest{Key: k, Tool: "refund", Fingerprint: "fp", Token: tok, Lease: time.Minute, Window: 10 * time.Minute, Now: clock.Now()})
		if err != nil || cr.Status != status || cr.Generation != generation {
			t.Fatalf("%s: status %s generation %d err %v; want %s generation %d", name, cr.Status, cr.Generation, err, status, generation)
		}
		if rec := mustLookup(t, store, idemstore.LookupRequest{Key: k, Now: clock.Now()}); rec.Generation != generation {
			t.Fatalf("%s: Lookup reports generation %d, want %d", name, rec.Generation, generation)
		}
	}
	finish := func(tok int64, ok bool) {
		t.Helper()
		req := idemstore.FinishRequest{Key: k, Token: tok, Succeeded: ok, Error: "boom", Now: clock.Now()}
		if ok {
			req.Response, req.Size, req.Error = idemkit.Response{Body: []byte("ok")}, 2, ""
		}
		if err := store.Finish(c, req); err != nil {
			t.Fatalf("finish of token %d: %v", tok, err)
		}
	}
	claim("fresh", 11, idemstore.ClaimAcquired, 11)
	if err := store.Extend(c, idemstore.ExtendRequest{Key: k, Token: 11, Lease: time.Minute, Note: "n", Now: clock.Now()}); err != nil {
		t.Fatal(err)
	}
	finish(11, false)
	claim("takeover after a release", 12, idemstore.ClaimTakenOver, 11)
	clock.Advance(2 * time.Minute) // token 12's lease lapses
	claim("takeover after a lapsed lease", 13, idemstore.ClaimTakenOver, 11)
	if _, err := store.Cancel(c, idemstore.CancelRequest{Key: k, Reason: "stop", Now: clock.Now()}); err != nil {
		t.Fatal(err)
	}
	claim("takeover after a cancel", 14, idemstore.ClaimTakenOver, 11)
	finish(14, true)
	if rec := mustLookup(t, store, idemstore.LookupRequest{Key: k, Now: clock.Now()}); rec.Generation != 11 || rec.State != idemstore.StateCompleted {
		t.Fatalf("completed record: %+v, want generation 11", rec)
	}
	if cr, err := store.Claim(c, idemstore.ClaimRequest{Key: k, Tool: "refund", Fingerprint: "fp", Token: 99, Lease: time.Minute, Window: 10 * time.Minute, Now: clock.Now()}); err != nil || cr.Status != idemstore.ClaimCompleted {
		t.Fatalf("duplicate of the completed record: %+v %v", cr, err)
	}

	// A new record: the window is over.
	clock.Advance(time.Hour)
	claim("fresh after the window", 15, idemstore.ClaimAcquired, 15)
	finish(15, false)
	// An expired released record is replaced too.
	clock.Advance(time.Hour)
	claim("fresh over an expired release", 16, idemstore.ClaimAcquired, 16)
	finish(16, true)
	// And after a sweep.
	clock.Advance(time.Hour)
	if n, err := store.Sweep(c, idemstore.SweepRequest{Limit: 10, Now: clock.Now()}); err != nil || n != 1 {
		t.Fatalf("Sweep: %d %v", n, err)
	}
	claim("fresh after a sweep", 17, idemstore.ClaimAcquired, 17)
	if recs, err := store.List(c, idemstore.ListRequest{KeyPrefix: k, Now: clock.Now()}); err != nil || len(recs) != 1 || recs[0].Generation != 17 {
		t.Fatalf("List: %+v %v, want the record with generation 17", recs, err)
	}
}

// dedupProvider is a downstream API that deduplicates on the idempotency
// key for 24 hours, as Stripe does: a repeat of a key inside that time gets
// the first request's answer, and only a new key makes a new refund.
type dedupProvider struct {
	clock *Clock
	mu    sync.Mutex // protects seen and refunds
	seen  map[string]providerEntry
	// refunds counts the refunds the provider really made.
	refunds int
}

type providerEntry struct {
	at time.Time
	id string
}

func newDedupProvider(clock *Clock) *dedupProvider {
	return &dedupProvider{clock: clock, seen: map[string]providerEntry{}}
}

// refund makes a refund under key, or returns the one a request with key
// made in the last 24 hours.
func (p *dedupProvider) refund(key string) (string, error) {
	if key == "" {
		return "", errors.New("provider: no idempotency key")
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.clock.Now()
	if e, ok := p.seen[key]; ok && now.Sub(e.at) < 24*time.Hour {
		return e.id, nil
	}
	p.refunds++
	id := fmt.Sprintf("re_%d", p.refunds)
	p.seen[key] = providerEntry{at: now, id: id}
	return id, nil
}

func (p *dedupProvider) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.refunds
}

// The key a Guard forwards downstream belongs to the record: every attempt
// of one record (a retry after a released failure, a takeover after a
// crash) forwards the same one, so a provider that deduplicates for 24
// hours makes one refund; a deliberate repeat after the window is a new
// record with a new key, which the provider serves as the new request it
// is (before, the argument-derived key made it answer the second refund
// with the first one's).
func (s *suite) downstreamKeyPerRecord(t *testing.T) {
	g, clock := s.setup(t, idemkit.Config{Window: 10 * time.Minute, Lease: 30 * time.Second})
	provider := newDedupProvider(clock)
	k := key(t, "alice", "issue_refund", `{"order":"ord_1001","amount_cents":25000}`)
	var keys []string
	refund := func(fail bool) idemkit.Work {
		return func(ctx context.Context) (idemkit.Response, error) {
			dk := idemkit.CallFromContext(ctx).IdempotencyKey()
			keys = append(keys, dk)
			id, err := provider.refund(dk)
			if err != nil {
				return idemkit.Response{}, err
			}
			if fail { // the refund went through, but the answer was lost
				return idemkit.Response{}, errors.New("gateway timeout")
			}
			return idemkit.Response{Body: []byte(id), WriteID: id}, nil
		}
	}
	if _, err := g.Do(ctx(t), k, refund(true)); err == nil {
		t.Fatal("the failing attempt succeeded")
	}
	res := mustDo(t, g, k, refund(false))
	if res.Outcome != idemkit.OutcomeTakeover || res.WriteID != "re_1" || provider.count() != 1 {
		t.Fatalf("retry after the released failure: %+v, provider refunds %d; want a takeover answered re_1, one refund", res, provider.count())
	}
	if keys[0] != keys[1] {
		t.Fatalf("the retry forwarded %q, the first attempt %q; want one key per record", keys[1], keys[0])
	}
	if !strings.HasPrefix(keys[0], "idk_"+k.Hash()+"_") || strings.Contains(keys[0], "alice") {
		t.Fatalf("downstream key %q: want idk_<key hash>_…, no subject", keys[0])
	}

	// 11 minutes later the user asks for the same refund again, on
	// purpose: a new record, a new key, a second refund.
	clock.Advance(11 * time.Minute)
	res = mustDo(t, g, k, refund(false))
	if res.Outcome != idemkit.OutcomeExecuted || res.WriteID != "re_2" || provider.count() != 2 {
		t.Fatalf("deliberate repeat after the window: %+v, provider refunds %d; want a new refund re_2", res, provider.count())
	}
	if keys[2] == keys[0] {
		t.Fatalf("the deliberate repeat forwarded the first record's key %q", keys[2])
	}

	// A worker that crashes after the provider call: the takeover after
	// its lease lapses forwards the same key, and the provider answers with
	// the crashed attempt's refund.
	k2 := key(t, "alice", "issue_refund", `{"order":"ord_1002","amount_cents":100}`)
	crashed, release := make(chan string, 1), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := g.Do(ctx(t), k2, func(ctx context.Context) (idemkit.Response, error) {
			dk := idemkit.CallFromContext(ctx).IdempotencyKey()
			if _, err := provider.refund(dk); err != nil {
				return idemkit.Response{}, err
			}
			crashed <- dk
			<-release // hangs: never heartbeats again
			return idemkit.Response{}, errors.New("late")
		})
		done <- err
	}()
	crashedKey := <-crashed
	clock.Advance(31 * time.Second)
	var takeoverKey string
	res = mustDo(t, g, k2, func(ctx context.Context) (idemkit.Response, error) {
		takeoverKey = idemkit.CallFromContext(ctx).IdempotencyKey()
		id, err := provider.refund(takeoverKey)
		return idemkit.Response{Body: []byte(id), WriteID: id}, err
	})
	close(release)
	<-done
	if res.Outcome != idemkit.OutcomeTakeover || takeoverKey != crashedKey || res.WriteID != "re_3" || provider.count() != 3 {
		t.Fatalf("takeover after a lapsed lease: %+v key %q (crashed attempt %q), provider refunds %d; want the crashed attempt's key and refund re_3",
			res, takeoverKey, crashedKey, provider.count())
	}

	// Another subject's identical call is another record.
	var bobKey string
	mustDo(t, g, key(t, "bob", "issue_refund", `{"order":"ord_1001","amount_cents":25000}`), func(ctx context.Context) (idemkit.Response, error) {
		bobKey = idemkit.CallFromContext(ctx).IdempotencyKey()
		return idemkit.Response{}, nil
	})
	if bobKey == keys[2] || bobKey == keys[0] {
		t.Fatalf("two subjects forwarded one key %q", bobKey)
	}
}

// Many concurrent callers of one key, released failures in between: every
// attempt that ran forwarded one key.
func (s *suite) downstreamKeyUnderContention(t *testing.T) {
	g, _ := s.setup(t, idemkit.Config{Wait: 30 * time.Second})
	k := key(t, "s", "issue_refund", `{"order":"ord_7"}`)
	var (
		mu   sync.Mutex
		seen = map[string]int{}
		runs atomic.Int64
	)
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			_, _ = g.Do(ctx(t), k, func(ctx context.Context) (idemkit.Response, error) {
				mu.Lock()
				seen[idemkit.CallFromContext(ctx).IdempotencyKey()]++
				mu.Unlock()
				if runs.Add(1) < 4 {
					return idemkit.Response{}, errors.New("transient")
				}
				return idemkit.Response{Body: []byte("ok")}, nil
			})
		})
	}
	wg.Wait()
	if len(seen) != 1 || runs.Load() < 4 {
		t.Fatalf("%d runs forwarded %d keys (%v); want at least 4 runs and one key", runs.Load(), len(seen), seen)
	}
}

// A poison call (ToolConfig.MaxAttempts): once its attempts have failed
// that many times (a Go error, a crash that let the lease lapse), a retry
// runs nothing and is told so, until the window ends; then the call is
// fresh work again.
func (s *suite) maxAttempts(t *testing.T) {
	g, clock := s.setup(t, idemkit.Config{Lease: 30 * time.Second, Window: 10 * time.Minute,
		Tools: map[string]idemkit.ToolConfig{"import": {MaxAttempts: 2}}})
	k := key(t, "s", "import", `{"file":"huge.csv"}`)
	var runs atomic.Int64
	failing := func(ctx context.Context) (idemkit.Response, error) {
		runs.Add(1)
		return idemkit.Response{}, errors.New("out of memory")
	}
	if _, err := g.Do(ctx(t), k, failing); err == nil || errors.Is(err, idemkit.ErrAttemptsExhausted) {
		t.Fatalf("attempt 1: %v", err)
	}
	// Attempt 2 crashes: its lease lapses.
	started, release := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := g.Do(ctx(t), k, blockingWork(started, release, "late", &runs))
		done <- err
	}()
	<-started
	clock.Advance(31 * time.Second)
	_, err := g.Do(ctx(t), k, failing)
	if !errors.Is(err, idemkit.ErrAttemptsExhausted) || !strings.Contains(err.Error(), "has failed 2 times") || runs.Load() != 2 ||
		!strings.Contains(err.Error(), "Do not retry") {
		t.Fatalf("attempt 3: %v, %d runs; want ErrAttemptsExhausted after 2 failed attempts, nothing run", err, runs.Load())
	}
	close(release)
	<-done
	if _, err := g.Do(ctx(t), k, failing); !errors.Is(err, idemkit.ErrAttemptsExhausted) || runs.Load() != 2 {
		t.Fatalf("attempt 4: %v, %d runs", err, runs.Load())
	}
	if rec, err := g.Lookup(ctx(t), k); err != nil || rec.State != idemstore.StateReleased || !strings.Contains(rec.Error, "MaxAttempts") {
		t.Fatalf("record after the refusals: %+v %v", rec, err)
	}
	// After the window the call is fresh work again.
	clock.Advance(11 * time.Minute)
	if res := mustDo(t, g, k, func(context.Context) (idemkit.Response, error) {
		runs.Add(1)
		return idemkit.Response{Body: []byte("ok")}, nil
	}); res.Attempt != 1 || runs.Load() != 3 {
		t.Fatalf("after the window: %+v, %d runs; want a fresh run", res, runs.Load())
	}
	if _, err := idemkit.NewGuard(s.cfg.NewStore(t), &idemkit.Config{Tools: map[string]idemkit.ToolConfig{"x": {MaxAttempts: -1}}}); err == nil || !strings.Contains(err.Error(), "MaxAttempts") {
		t.Fatalf("negative MaxAttempts: %v, want an error naming the field", err)
	}
}
