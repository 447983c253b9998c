package idemkit

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/idemkit-mcp/idemkit/idemkit/idemstore"
	"github.com/idemkit-mcp/idemkit/internal/clip"
)

// DoPhased is Do for a call whose work has an external part that waits on
// the network (a payment provider, another service) and local writes to
// the database of the Guard's store: it runs in atomic phases, and no
// store transaction is ever held across the external part.
//
//  1. The claim commits on its own, as in Do (a replay, an in-progress
//     answer or a mismatch end the call here, as in Do).
//  2. work runs outside any store transaction: it makes its external call,
//     forwarding Call.IdempotencyKey() so that the provider deduplicates a
//     repeat of it.
//  3. work then calls beginLocal (its second argument), which begins the
//     local transaction with begin, makes its local writes through that
//     transaction (the one begin returned to its caller), and returns its
//     Response. The Guard records the outcome in the same transaction
//     (fenced by the attempt's token) and commits it: the local writes and
//     the recorded outcome commit together. beginLocal returns an error
//     matching ErrStore when the transaction cannot begin (work should
//     return it: the claim is then released) or after work returned; a
//     second call does nothing.
//
// A process killed during phase 2 or 3 leaves the record in progress, with
// none of the local writes; once the lease runs out (Config.Lease; extend
// it with Call.Heartbeat during a long external call), the next duplicate
// takes the record over, repeats the external call with the same
// Call.IdempotencyKey (the provider answers with what it did the first
// time) and makes the local writes once. An attempt whose claim was taken
// over meanwhile (its lease ran out while it worked) cannot record its
// outcome: its transaction is rolled back, its local writes with it, and
// DoPhased returns an error matching ErrLeaseLost. So, killed anywhere, the
// local writes are made exactly once per record.
//
// A work that never calls beginLocal (it answered without local writes) is
// finished as in Do. When work returns an error or panics, the transaction
// is rolled back and the claim released (the next duplicate runs it
// again). An IsError response commits its local writes, and is recorded as
// the FailurePolicy says (released by default, in the same transaction).
// When recording the outcome or the commit fails, the local writes are
// rolled back, the claim is released so that a retry takes it over at
// once, and DoPhased returns an error matching ErrStore (and the store's
// error): the retry repeats the external call with the same key. A failed
// commit may, rarely, have committed after all (a connection lost during
// COMMIT): the retry then gets the replay.
//
// Use DoPhased, not a store's DoTx, whenever the work waits on the
// network: DoTx holds its transaction across the work, which on SQLite
// holds the database's only write lock (every other call's claim waits for
// it) and on PostgreSQL the claim row's lock. ctx bounds the claim and the
// work; recording the outcome and the commit are detached from its
// cancellation and bounded by Config.FinishTimeout.
func (g *Guard) DoPhased(ctx context.Context, key Key, begin func(ctx context.Context) (idemstore.LocalTx, error),
	work func(ctx context.Context, beginLocal func(ctx context.Context) error) (Response, error)) (Result, error) {
	if begin == nil || work == nil {
		return Result{}, errors.New("idemkit: DoPhased needs begin and work")
	}
	ph := &phase{begin: begin}
	return g.do(ctx, key, func(ctx context.Context) (Response, error) {
		c := CallFromContext(ctx)
		return work(ctx, func(ctx context.Context) error { return c.beginLocal(ctx) })
	}, ph)
}

// phase is the local phase of a DoPhased attempt.
type phase struct {
	begin func(context.Context) (idemstore.LocalTx, error)

	mu   sync.Mutex        // protects tx and done
	tx   idemstore.LocalTx // begun by beginLocal
	done bool              // the work returned: beginLocal refuses
}

// beginLocal begins the transaction of the attempt's local phase (see
// Guard.DoPhased); every call in one attempt after the first does nothing.
// ctx bounds the begin.
func (c *Call) beginLocal(ctx context.Context) error {
	ph := c.phase
	ph.mu.Lock()
	defer ph.mu.Unlock()
	if ph.done {
		return storeError("begin the local transaction of", c.guard.label(c.key), errors.New("the work of Guard.DoPhased already returned"))
	}
	if ph.tx != nil {
		return nil
	}
	tx, err := ph.begin(ctx)
	if err != nil {
		return storeError("begin the local transaction of", c.guard.label(c.key), err)
	}
	if tx == nil {
		return storeError("begin the local transaction of", c.guard.label(c.key), errors.New("begin returned no transaction"))
	}
	ph.tx = tx
	return nil
}

// take ends the phase: it returns the transaction beginLocal began, if any,
// and makes later calls of beginLocal fail.
func (ph *phase) take() idemstore.LocalTx {
	ph.mu.Lock()
	defer ph.mu.Unlock()
	ph.done = true
	return ph.tx
}

// end records an attempt's end: in its local transaction when the work of
// DoPhased began one (keep: the work's local writes are kept, for a
// response; false after an error or a panic, which roll them back),
// through the Guard's store otherwise.
func (g *Guard) end(a *attempt, fin *idemstore.FinishRequest, workErr error, keep bool) error {
	if ph := a.call.phase; ph != nil {
		if tx := ph.take(); tx != nil {
			return g.finishLocal(a, tx, fin, workErr, keep)
		}
	}
	return g.finish(a, fin, workErr)
}

// finishLocal records fin in tx and commits tx; see DoPhased for what
// happens when that fails.
func (g *Guard) finishLocal(a *attempt, tx idemstore.LocalTx, fin *idemstore.FinishRequest, workErr error, keep bool) error {
	fctx, cancel := context.WithTimeout((*detachedAttempt)(a), g.cfg.FinishTimeout)
	defer cancel()
	if !keep {
		_ = tx.Rollback(fctx)
		return g.finish(a, fin, workErr)
	}
	fin.Now = g.now()
	err := tx.Finish(fctx, *fin)
	committing := err == nil
	if committing {
		err = tx.Commit(fctx)
	}
	if err == nil {
		return nil
	}
	_ = tx.Rollback(fctx)
	key := g.label(a.call.key)
	if !committing && errors.Is(err, ErrLeaseLost) {
		// Another attempt took the claim over while this one worked: its
		// outcome is that attempt's to record, and these local writes are
		// gone with the transaction.
		return fmt.Errorf("idemkit: finish %s: %w; another attempt took the claim over, so this attempt's local writes were rolled back", key, ErrLeaseLost)
	}
	step := "recording its outcome"
	if committing {
		step = "its commit"
	}
	localErr := fmt.Errorf("%w: the local transaction of %s failed at %s, so none of its local writes were kept; "+
		"its claim is released, and a retry takes it over and repeats the external work with the same Call.IdempotencyKey: %w", ErrStore, key, step, err)
	rel := idemstore.FinishRequest{Key: fin.Key, Token: fin.Token, Handle: fin.Handle,
		Error: clip.Text("the local transaction did not commit: "+err.Error(), idemstore.MaxErrorBytes)}
	if rerr := g.finish(a, &rel, nil); rerr != nil {
		return errors.Join(localErr, rerr)
	}
	return localErr
}
