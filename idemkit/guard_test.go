package idemkit_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit/idemkit"
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
}

var errDown = errors.New("connection refused")

func (s *faultyStore) Claim(ctx context.Context, req idemkit.ClaimRequest) (idemkit.ClaimResult, error) {
	if s.failClaim.Load() {
		return idemkit.ClaimResult{}, errDown
	}
	return s.MemoryStore.Claim(ctx, req)
}

func (s *faultyStore) Finish(ctx context.Context, req idemkit.FinishRequest) error {
	if s.failFinish.Load() {
		return errDown
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
	g, _ := idemkit.NewGuard(store, nil)
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
	if err != nil || !res.Replayed() || string(res.Body) != "refunded" {
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
