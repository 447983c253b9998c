package main

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/idemkit-mcp/idemkit/idemkit"
)

// TestGatewaySweep_EmptiesAMemoryStore: the gateway's sweeper deletes the
// expired records of its store, so that a memory store holds at most one
// window of calls however many distinct keys its callers send.
func TestGatewaySweep_EmptiesAMemoryStore(t *testing.T) {
	st := &idemkit.MemoryStore{}
	for i := range 50 {
		expiredRecord(t, st, fmt.Sprintf("tool_%d", i))
	}
	guard, err := idemkit.NewGuard(st, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := guard.Do(context.Background(), mustKey(t, "live"), func(context.Context) (idemkit.Response, error) {
		return idemkit.Response{Body: []byte(`{}`)}, nil
	}); err != nil {
		t.Fatal(err)
	}
	// A memory store deletes a few expired records on each new claim by
	// itself; the rest wait for the sweeper.
	if st.Len() < 2 {
		t.Fatalf("%d records before the sweep: the test needs expired records left to sweep", st.Len())
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		sweep(ctx, guard, 5*time.Millisecond, slog.New(slog.DiscardHandler))
	}()
	for deadline := time.Now().Add(10 * time.Second); st.Len() > 1 && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	<-done
	if n := st.Len(); n != 1 {
		t.Errorf("%d records after sweeping, want 1 (the live one)", n)
	}
}

func mustKey(t *testing.T, tool string) idemkit.Key {
	t.Helper()
	k, err := idemkit.NewKey("s", tool, []byte(`{}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	return k
}
