package idemkit

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Lease returns how long the attempt's claim holds without a heartbeat (the
// tool's Lease), 0 on a nil *Call.
func (c *Call) Lease() time.Duration {
	if c == nil {
		return 0
	}
	return c.lease
}

// KeepAlive runs fn, and while it runs extends the attempt's lease: once at
// once, then every third of the lease. Use it around a wait on something
// that is neither the work nor a crash: a question to the user (an MCP
// elicitation), a sampling request, a request for the client's roots. A
// human who answers after the lease would otherwise find the call taken
// over by its retry: asked twice, and the side effect done twice.
//
// fn gets a context derived from ctx that is cancelled when a heartbeat
// learns that another caller has taken the claim over (ErrLeaseLost, after
// a Cancel, or a lease that lapsed while the store was unreachable);
// KeepAlive then returns an error matching ErrLeaseLost, and fn's outcome
// must not be acted on. Other heartbeat failures (the store unreachable for
// a moment) are retried at the next beat. Otherwise it returns fn's error.
// On a nil *Call (work that runs unprotected) it only runs fn.
//
// A process that dies stops its heartbeats, so a crashed worker is still
// taken over when its lease runs out; only a live wait keeps the claim.
func (c *Call) KeepAlive(ctx context.Context, fn func(ctx context.Context) error) error {
	if c == nil {
		return fn(ctx)
	}
	fctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	if err := c.Heartbeat(ctx); errors.Is(err, ErrLeaseLost) {
		return err
	}
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		t := time.NewTicker(max(c.lease/3, time.Millisecond))
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-fctx.Done():
				return
			case <-t.C:
				if err := c.Heartbeat(fctx); errors.Is(err, ErrLeaseLost) {
					cancel(err)
					return
				}
			}
		}
	}()
	err := fn(fctx)
	cause := context.Cause(fctx) // a claim lost while fn ran
	close(stop)
	cancel(nil) // a heartbeat in flight does not hold the caller up
	<-stopped
	if errors.Is(cause, ErrLeaseLost) {
		return fmt.Errorf("%w (the wait ended because the call was taken over; do not act on its answer)", cause)
	}
	return err
}
