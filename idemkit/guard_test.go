package idemkit_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit-mcp/idemkit/idemkit"
	"github.com/idemkit-mcp/idemkit/idemkit/idemstore"
)

func TestNewGuard_ValidatesConfig(t *testing.T) {
	if _, err := idemkit.NewGuard(nil, nil); err == nil {
		t.Fatal("NewGuard(nil store) succeeded")
	}
	for name, cfg := range map[string]idemkit.Config{
		"Window":        {Window: -time.Second},
		"Lease":         {Lease: -1},
		"Wait":          {Wait: -1},
		"FinishTimeout": {FinishTimeout: -1},
		"FailurePolicy": {FailurePolicy: 9},
		"Tools":         {Tools: map[string]idemkit.ToolConfig{"refund": {Lease: -1}}},
	} {
		_, err := idemkit.NewGuard(&idemkit.MemoryStore{}, &cfg)
		if err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: err = %v, want an error naming the field", name, err)
		}
	}
	if _, err := idemkit.NewGuard(&idemkit.MemoryStore{}, nil); err != nil {
		t.Fatalf("nil config: %v", err)
	}
}

// faultyStore fails chosen operations of a working store, as a store that
// is down would.
type faultyStore struct {
	idemkit.MemoryStore
	failClaim, failFinish atomic.Bool
	// transientFinishes fails that many finishes with a transient error
	// (-1: all of them); finishes counts the calls.
	transientFinishes atomic.Int64
	finishes          atomic.Int64
}

var errDown = errors.New("connection refused")

func (s *faultyStore) Claim(ctx context.Context, req idemstore.ClaimRequest) (idemstore.ClaimResult, error) {
	if s.failClaim.Load() {
		return idemstore.ClaimResult{}, errDown
	}
	return s.MemoryStore.Claim(ctx, req)
}

func (s *faultyStore) Finish(ctx context.Context, req idemstore.FinishRequest) error {
	s.finishes.Add(1)
	if s.failFinish.Load() {
		return errDown
	}
	if n := s.transientFinishes.Load(); n != 0 {
		if n > 0 {
			s.transientFinishes.Add(-1)
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		return idemstore.Transient(fmt.Errorf("terminating connection due to administrator command: %w", errDown))
	}
	return s.MemoryStore.Finish(ctx, req)
}

func TestGuard_StoreDownRunsNothing(t *testing.T) {
	store := &faultyStore{}
	g, _ := idemkit.NewGuard(store, nil)
	key, _ := idemkit.NewKey("s", "refund", []byte(`{}`), nil)
	store.failClaim.Store(true)
	var runs atomic.Int64
	_, err := g.Do(context.Background(), key, func(context.Context) (idemkit.Response, error) {
		runs.Add(1)
		return idemkit.Response{}, nil
	})
	if !errors.Is(err, idemkit.ErrStore) || !errors.Is(err, errDown) || runs.Load() != 0 {
		t.Fatalf("claim on a down store: err = %v, runs %d; want ErrStore wrapping the cause and no run", err, runs.Load())
	}
	if store.Len() != 0 {
		t.Fatal("a failed claim left a record")
	}
}

func TestGuard_FinishFailureReturnsResultAndError(t *testing.T) {
	store := &faultyStore{}
	g, _ := idemkit.NewGuard(store, &idemkit.Config{Logger: slog.New(slog.DiscardHandler)})
	key, _ := idemkit.NewKey("s", "refund", []byte(`{}`), nil)
	store.failFinish.Store(true)
	res, err := g.Do(context.Background(), key, func(context.Context) (idemkit.Response, error) {
		return idemkit.Response{Body: []byte("done")}, nil
	})
	if !errors.Is(err, idemkit.ErrStore) || string(res.Body) != "done" {
		t.Fatalf("finish failure: res %q err %v; want the work's result and ErrStore", res.Body, err)
	}
	// The claim stays in progress (lease) rather than inviting a re-run.
	store.failFinish.Store(false)
	if _, err := g.Do(context.Background(), key, func(context.Context) (idemkit.Response, error) {
		t.Error("work re-ran while the first attempt's lease holds")
		return idemkit.Response{}, nil
	}); !errors.Is(err, idemkit.ErrInProgress) {
		t.Fatalf("duplicate after a failed finish: %v, want ErrInProgress", err)
	}
}

func TestGuard_FinishSurvivesCancelledRequest(t *testing.T) {
	g, _ := idemkit.NewGuard(&idemkit.MemoryStore{}, nil)
	key, _ := idemkit.NewKey("s", "refund", []byte(`{}`), nil)
	ctx, cancel := context.WithCancel(context.Background())
	_, err := g.Do(ctx, key, func(context.Context) (idemkit.Response, error) {
		cancel() // the client hangs up after the side effect committed
		return idemkit.Response{Body: []byte("refunded")}, nil
	})
	if err != nil {
		t.Fatalf("Do: %v", err)
	}
	res, err := g.Do(context.Background(), key, func(context.Context) (idemkit.Response, error) {
		t.Error("work re-ran after the first call's client cancelled")
		return idemkit.Response{}, nil
	})
	if err != nil || res.Outcome != idemkit.OutcomeReplayed || string(res.Body) != "refunded" {
		t.Fatalf("duplicate: %+v %v, want the replay", res, err)
	}
}

func TestGuard_WithStoreSharesConfig(t *testing.T) {
	g, _ := idemkit.NewGuard(&idemkit.MemoryStore{}, &idemkit.Config{Tools: map[string]idemkit.ToolConfig{"refund": {StatusTool: "status"}}})
	other := &idemkit.MemoryStore{}
	g2 := g.WithStore(other)
	if g2.Store() != other || g.Store() == other {
		t.Fatal("WithStore changed the wrong Guard")
	}
	key, _ := idemkit.NewKey("s", "refund", []byte(`{}`), nil)
	_, _ = g2.Do(context.Background(), key, func(ctx context.Context) (idemkit.Response, error) {
		_, err := g2.Do(ctx, key, nil)
		if !strings.Contains(err.Error(), "Call status") {
			t.Errorf("per-tool config lost by WithStore: %v", err)
		}
		return idemkit.Response{}, nil
	})
	if other.Len() != 1 {
		t.Fatalf("the other store holds %d records, want 1", other.Len())
	}
}

// capture returns a logger that writes JSON records to the returned buffer.
func capture() (*slog.Logger, *bytes.Buffer) {
	var buf bytes.Buffer
	return slog.New(slog.NewJSONHandler(&buf, nil)), &buf
}

func TestGuard_FinishRetriesTransientErrors(t *testing.T) {
	store := &faultyStore{}
	logger, logs := capture()
	g, _ := idemkit.NewGuard(store, &idemkit.Config{Logger: logger})
	key, _ := idemkit.NewKey("s", "refund", []byte(`{}`), nil)
	store.transientFinishes.Store(3)
	var runs atomic.Int64
	res, err := g.Do(context.Background(), key, func(context.Context) (idemkit.Response, error) {
		runs.Add(1)
		return idemkit.Response{Body: []byte("refunded")}, nil
	})
	if err != nil || string(res.Body) != "refunded" {
		t.Fatalf("Do through 3 transient finish failures: %+v %v, want success", res, err)
	}
	if n := store.finishes.Load(); n != 4 {
		t.Fatalf("finish tried %d times, want 4", n)
	}
	if logs.Len() != 0 {
		t.Fatalf("a finish that succeeded on retry was logged: %s", logs)
	}
	rep, err := g.Do(context.Background(), key, func(context.Context) (idemkit.Response, error) {
		runs.Add(1)
		return idemkit.Response{}, nil
	})
	if err != nil || rep.Outcome != idemkit.OutcomeReplayed || runs.Load() != 1 {
		t.Fatalf("duplicate: %+v %v (runs %d), want the replay", rep, err, runs.Load())
	}
}

func TestGuard_FinishGivesUpAtFinishTimeoutAndLogs(t *testing.T) {
	store := &faultyStore{}
	logger, logs := capture()
	g, _ := idemkit.NewGuard(store, &idemkit.Config{Logger: logger, FinishTimeout: 300 * time.Millisecond})
	key, _ := idemkit.NewKey("alice@example.com", "refund", []byte(`{"order":"o-1"}`), nil)
	store.transientFinishes.Store(-1)
	res, err := g.Do(context.Background(), key, func(context.Context) (idemkit.Response, error) {
		return idemkit.Response{Body: []byte("refunded")}, nil
	})
	var fe *idemkit.FinishError
	if !errors.As(err, &fe) || !errors.Is(err, idemkit.ErrStore) || !errors.Is(err, errDown) || string(res.Body) != "refunded" {
		t.Fatalf("Do with a finish that never succeeds: %+v %v; want the Result and a *FinishError matching ErrStore and the cause", res, err)
	}
	if fe.Op != idemkit.FinishRecord || fe.Tries < 2 || fe.KeyHash != key.Hash() || fe.Tool != "refund" || fe.Attempt != 1 || fe.WorkErr != nil {
		t.Fatalf("FinishError = %+v, want a record finish tried more than once", fe)
	}
	if int64(fe.Tries) != store.finishes.Load() {
		t.Fatalf("FinishError says %d tries, the store saw %d", fe.Tries, store.finishes.Load())
	}
	line := logs.String()
	if strings.Count(line, "\n") != 1 || strings.Count(line, "finish failed") != 1 ||
		!strings.Contains(line, key.Hash()) || !strings.Contains(line, `"idemkit.finish.op":"record"`) || strings.Contains(line, "alice") {
		t.Fatalf("log: %s; want one record with the key hash and op, and no raw subject", line)
	}
}

func TestGuard_PermanentFinishErrorIsNotRetried(t *testing.T) {
	store := &faultyStore{}
	logger, _ := capture()
	g, _ := idemkit.NewGuard(store, &idemkit.Config{Logger: logger})
	key, _ := idemkit.NewKey("s", "refund", []byte(`{}`), nil)
	store.failFinish.Store(true)
	_, err := g.Do(context.Background(), key, func(context.Context) (idemkit.Response, error) { return idemkit.Response{}, nil })
	var fe *idemkit.FinishError
	if !errors.As(err, &fe) || fe.Tries != 1 || store.finishes.Load() != 1 {
		t.Fatalf("permanent finish error: %v (tries %d), want one try", err, store.finishes.Load())
	}
}

// When the work fails and the release fails too, the error says both: it
// matches the work's error, ErrStore and *FinishError, and it is logged.
func TestGuard_ReleaseFailureIsReportedWithTheWorksError(t *testing.T) {
	store := &faultyStore{}
	logger, logs := capture()
	g, _ := idemkit.NewGuard(store, &idemkit.Config{Logger: logger, FinishTimeout: 100 * time.Millisecond})
	key, _ := idemkit.NewKey("s", "refund", []byte(`{}`), nil)
	store.transientFinishes.Store(-1)
	boom := errors.New("gateway unreachable")
	_, err := g.Do(context.Background(), key, func(context.Context) (idemkit.Response, error) { return idemkit.Response{}, boom })
	var fe *idemkit.FinishError
	if !errors.Is(err, boom) || !errors.Is(err, idemkit.ErrStore) || !errors.As(err, &fe) || !errors.Is(err, errDown) {
		t.Fatalf("failed work, failed release: %v; want it to match the work's error, ErrStore, *FinishError and the store's error", err)
	}
	if fe.Op != idemkit.FinishRelease || fe.WorkErr != boom || !strings.HasPrefix(err.Error(), boom.Error()) {
		t.Fatalf("FinishError = %+v (%q), want a release carrying the work's error first", fe, err)
	}
	if !strings.Contains(logs.String(), `"idemkit.finish.op":"release"`) {
		t.Fatalf("release failure not logged: %s", logs)
	}
	// The claim stays in progress for its lease: not dropped silently.
	store.transientFinishes.Store(0)
	if _, err := g.Do(context.Background(), key, nil); !errors.Is(err, idemkit.ErrInProgress) {
		t.Fatalf("duplicate after the failed release: %v, want ErrInProgress", err)
	}

	// A tool error under ReleaseToolErrors: the Result and the FinishError.
	k2, _ := idemkit.NewKey("s", "refund", []byte(`{"n":2}`), nil)
	store.transientFinishes.Store(-1)
	res, err := g.Do(context.Background(), k2, func(context.Context) (idemkit.Response, error) {
		return idemkit.Response{Body: []byte("declined"), IsError: true}, nil
	})
	if !errors.As(err, &fe) || fe.Op != idemkit.FinishRelease || string(res.Body) != "declined" {
		t.Fatalf("tool error, failed release: %+v %v", res, err)
	}

	// A panic: the release failure is logged, the panic continues.
	k3, _ := idemkit.NewKey("s", "refund", []byte(`{"n":3}`), nil)
	logs.Reset()
	func() {
		defer func() {
			if r := recover(); r != "kaboom" {
				t.Fatalf("recovered %v", r)
			}
		}()
		_, _ = g.Do(context.Background(), k3, func(context.Context) (idemkit.Response, error) { panic("kaboom") })
	}()
	if !strings.Contains(logs.String(), k3.Hash()) {
		t.Fatalf("release failure after a panic not logged: %s", logs)
	}
}

// A release that finds the claim already taken over has nothing left to do:
// the work's error alone is returned.
func TestGuard_ReleaseOfATakenOverClaimIsNotAnError(t *testing.T) {
	clock := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	now := func() time.Time { return clock }
	g, _ := idemkit.NewGuard(&idemkit.MemoryStore{}, &idemkit.Config{Lease: time.Second, Now: now})
	key, _ := idemkit.NewKey("s", "refund", []byte(`{}`), nil)
	boom := errors.New("boom")
	_, err := g.Do(context.Background(), key, func(ctx context.Context) (idemkit.Response, error) {
		clock = clock.Add(2 * time.Second)
		if _, err := g.Do(ctx, key, func(context.Context) (idemkit.Response, error) { return idemkit.Response{}, nil }); err != nil {
			return idemkit.Response{}, err
		}
		return idemkit.Response{}, boom
	})
	if err != boom {
		t.Fatalf("release after a takeover: %v, want the work's error alone", err)
	}
}

func TestNewGuard_RejectsTypedNilStore(t *testing.T) {
	var ms *idemkit.MemoryStore
	_, err := idemkit.NewGuard(ms, nil)
	if err == nil || !strings.Contains(err.Error(), "nil *idemkit.MemoryStore") {
		t.Fatalf("NewGuard(typed nil): %v, want an error naming the nil store", err)
	}
	var fs *faultyStore
	if _, err := idemkit.NewGuard(fs, nil); err == nil {
		t.Fatal("NewGuard(typed nil faultyStore) succeeded")
	}
}

func TestNewGuard_RejectsDurationsThatOverflow(t *testing.T) {
	huge := time.Duration(math.MaxInt64)
	for name, cfg := range map[string]idemkit.Config{
		"Config.Window":                 {Window: huge},
		"Config.Lease":                  {Lease: huge},
		"Config.Wait":                   {Wait: huge},
		"Config.FinishTimeout":          {FinishTimeout: huge},
		`Config.Tools["refund"].Window`: {Tools: map[string]idemkit.ToolConfig{"refund": {Window: huge}}},
		`Config.Tools["refund"].Lease`:  {Tools: map[string]idemkit.ToolConfig{"refund": {Lease: idemkit.MaxDuration + 1}}},
	} {
		_, err := idemkit.NewGuard(&idemkit.MemoryStore{}, &cfg)
		if err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: err = %v, want an error naming the field", name, err)
		}
	}
	// The limit itself is accepted, and deduplicates.
	g, err := idemkit.NewGuard(&idemkit.MemoryStore{}, &idemkit.Config{Window: idemkit.MaxDuration, Lease: idemkit.MaxDuration})
	if err != nil {
		t.Fatal(err)
	}
	key, _ := idemkit.NewKey("s", "refund", []byte(`{}`), nil)
	var runs atomic.Int64
	for range 3 {
		if _, err := g.Do(context.Background(), key, func(context.Context) (idemkit.Response, error) {
			runs.Add(1)
			return idemkit.Response{}, nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	if runs.Load() != 1 {
		t.Fatalf("work ran %d times with a 100-year window, want 1", runs.Load())
	}
}

// The memory store finishes through the record its claim returned, not a
// second lookup: a record swept, or replaced by a fresh claim after it
// expired, while its work ran must still refuse that work's finish.
func TestGuard_FinishOfARecordSweptOrReplacedMidWorkLosesTheLease(t *testing.T) {
	for _, sweep := range []bool{false, true} {
		t.Run(fmt.Sprintf("sweep=%v", sweep), func(t *testing.T) {
			clock := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
			now := func() time.Time { return clock }
			store := &idemkit.MemoryStore{}
			g, _ := idemkit.NewGuard(store, &idemkit.Config{Window: time.Minute, Lease: time.Second, Now: now})
			key, _ := idemkit.NewKey("s", "refund", []byte(`{}`), nil)
			ctx := context.Background()
			_, err := g.Do(ctx, key, func(ctx context.Context) (idemkit.Response, error) {
				clock = clock.Add(2 * time.Minute)
				if sweep {
					if n, err := store.Sweep(ctx, idemstore.SweepRequest{Now: clock}); n != 1 || err != nil {
						t.Fatalf("Sweep = %d, %v; want the expired record deleted", n, err)
					}
				}
				res, err := g.Do(ctx, key, func(context.Context) (idemkit.Response, error) {
					return idemkit.Response{Body: []byte(`"second"`), WriteID: "w2"}, nil
				})
				if err != nil || res.Outcome != idemkit.OutcomeExecuted {
					t.Fatalf("second call: %v, %v; want it executed on the expired key", res.Outcome, err)
				}
				return idemkit.Response{Body: []byte(`"first"`), WriteID: "w1"}, nil
			})
			if !errors.Is(err, idemkit.ErrLeaseLost) {
				t.Fatalf("finish of the replaced record: %v, want ErrLeaseLost", err)
			}
			rec, err := store.Lookup(ctx, idemstore.LookupRequest{Key: key.ID(), Body: true, Now: clock})
			if err != nil || rec.WriteID != "w2" || string(rec.Body) != `"second"` || rec.State != idemstore.StateCompleted {
				t.Fatalf("record = %+v, %v; want the second call's outcome", rec, err)
			}
			if store.Len() != 1 {
				t.Fatalf("store holds %d records, want 1", store.Len())
			}
		})
	}
}

// A finish on the store's own clock records when it happened: after the
// claim, not before it, and no later than a reading taken after Do.
func TestMemoryStore_FinishRecordsItsTime(t *testing.T) {
	store := &idemkit.MemoryStore{}
	g, _ := idemkit.NewGuard(store, nil)
	key, _ := idemkit.NewKey("s", "refund", []byte(`{}`), nil)
	ctx := context.Background()
	if _, err := g.Do(ctx, key, func(context.Context) (idemkit.Response, error) {
		time.Sleep(20 * time.Millisecond)
		return idemkit.Response{Body: []byte(`{}`)}, nil
	}); err != nil {
		t.Fatal(err)
	}
	after := time.Now()
	rec, err := store.Lookup(ctx, idemstore.LookupRequest{Key: key.ID()})
	if err != nil {
		t.Fatal(err)
	}
	if !rec.Updated.After(rec.Started) || rec.Updated.Sub(rec.Started) < 20*time.Millisecond || rec.Updated.After(after) {
		t.Fatalf("Started %v, Updated %v, read after Do %v: want Updated at the finish", rec.Started, rec.Updated, after)
	}
}
