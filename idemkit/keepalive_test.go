package idemkit_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit-mcp/idemkit/idemkit"
)

// A handler that waits on the user longer than its lease: with KeepAlive
// around the wait, the retry that arrives after the lease is told the call
// is in progress, and the side effect runs once; without it, the retry
// takes the claim over and the side effect runs twice (the measured
// failure: asked twice, money wired twice).
func TestCall_KeepAliveHoldsTheClaimWhileWaiting(t *testing.T) {
	const lease = 300 * time.Millisecond
	for _, keep := range []bool{true, false} {
		name := map[bool]string{true: "with KeepAlive", false: "without"}[keep]
		t.Run(name, func(t *testing.T) {
			g, _ := idemkit.NewGuard(&idemkit.MemoryStore{}, &idemkit.Config{Lease: lease})
			k, _ := idemkit.NewKey("alice", "wire_money", []byte(`{"to":"bob","cents":25000}`), nil)
			var wired, asked atomic.Int64
			answered := make(chan struct{})
			waiting := make(chan struct{})
			work := func(ctx context.Context) (idemkit.Response, error) {
				asked.Add(1)
				wait := func(ctx context.Context) error {
					close(waiting)
					select {
					case <-answered: // the human answers, well after the lease
						return nil
					case <-ctx.Done():
						return ctx.Err()
					}
				}
				var err error
				if keep {
					err = idemkit.CallFromContext(ctx).KeepAlive(ctx, wait)
				} else {
					err = wait(ctx)
				}
				if err != nil {
					return idemkit.Response{}, err
				}
				wired.Add(1)
				return idemkit.Response{Body: []byte("wired")}, nil
			}
			first := make(chan error, 1)
			go func() {
				_, err := g.Do(context.Background(), k, work)
				first <- err
			}()
			<-waiting
			time.Sleep(3 * lease) // the retry comes after the lease
			retry := make(chan error, 1)
			go func() {
				_, err := g.Do(context.Background(), k, func(ctx context.Context) (idemkit.Response, error) {
					asked.Add(1)
					wired.Add(1)
					return idemkit.Response{Body: []byte("wired again")}, nil
				})
				retry <- err
			}()
			rerr := <-retry
			close(answered)
			ferr := <-first
			if keep {
				if !errors.Is(rerr, idemkit.ErrInProgress) || ferr != nil || wired.Load() != 1 || asked.Load() != 1 {
					t.Fatalf("retry %v, first %v, wired %d, asked %d; want in progress, one question, one transfer", rerr, ferr, wired.Load(), asked.Load())
				}
				return
			}
			if rerr != nil || wired.Load() != 2 || !errors.Is(ferr, idemkit.ErrLeaseLost) {
				t.Fatalf("without KeepAlive: retry %v, first %v, wired %d; the measured failure is a takeover and a second transfer", rerr, ferr, wired.Load())
			}
		})
	}
}

// A wait whose claim is cancelled by an operator ends: its context is
// cancelled and KeepAlive reports ErrLeaseLost.
func TestCall_KeepAliveEndsTheWaitWhenTheClaimIsLost(t *testing.T) {
	g, _ := idemkit.NewGuard(&idemkit.MemoryStore{}, &idemkit.Config{Lease: 90 * time.Millisecond})
	k, _ := idemkit.NewKey("alice", "wire_money", []byte(`{}`), nil)
	waiting := make(chan struct{})
	var kerr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = g.Do(context.Background(), k, func(ctx context.Context) (idemkit.Response, error) {
			kerr = idemkit.CallFromContext(ctx).KeepAlive(ctx, func(ctx context.Context) error {
				close(waiting)
				<-ctx.Done()
				return ctx.Err()
			})
			return idemkit.Response{}, kerr
		})
	}()
	<-waiting
	if _, err := g.Cancel(context.Background(), k, "operator"); err != nil {
		t.Fatal(err)
	}
	<-done
	if !errors.Is(kerr, idemkit.ErrLeaseLost) {
		t.Fatalf("KeepAlive after the claim was cancelled: %v, want ErrLeaseLost", kerr)
	}
	var nilCall *idemkit.Call
	ran := false
	if err := nilCall.KeepAlive(context.Background(), func(context.Context) error { ran = true; return nil }); err != nil || !ran {
		t.Fatalf("nil Call: %v ran %v", err, ran)
	}
}
