package idemkit

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// LocalTx is the database transaction of a phased call's last phase (see
// Guard.DoPhased): the tool's local writes go through it, and the Guard
// records the call's outcome in it and then commits it, so that the writes
// and the outcome commit together or not at all. The SQL stores supply it
// (sqlitestore.Store.BeginLocal, pgstore.Store.BeginLocal); it must be a
// transaction on the database of the Guard's store.
type LocalTx interface {
	// Finish records an attempt's outcome inside the transaction, as
	// Store.Finish does, fenced by req.Token: it returns an error matching
	// ErrLeaseLost when the record is no longer held by that token.
	Finish(ctx context.Context, req FinishRequest) error
	// Commit commits the transaction.
	Commit(ctx context.Context) error
	// Rollback rolls the transaction back; after Commit it does nothing.
	Rollback(ctx context.Context) error
}

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
//  3. work then calls CallFromContext(ctx).BeginLocal, which begins a
//     transaction with begin, makes its local writes through that
//     transaction, and returns its Response. The Guard records the outcome
//     in the same transaction (fenced by the attempt's token) and commits
//     it: the local writes and the recorded outcome commit together.
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
// A work that never calls BeginLocal (it answered without local writes) is
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
func (g *Guard) DoPhased(ctx context.Context, key Key, begin func(ctx context.Context) (LocalTx, error), work Work) (Result, error) {
	if begin == nil || work == nil {
		return Result{}, errors.New("idemkit: DoPhased needs begin and work")
	}
	return g.do(ctx, key, work, &phase{begin: begin})
}

// phase is the local phase of a DoPhased attempt.
type phase struct {
	begin func(context.Context) (LocalTx, error)

	mu   sync.Mutex // protects tx and done
	tx   LocalTx    // begun by BeginLocal
	done bool       // the work returned: BeginLocal refuses
}

// errNotPhased is BeginLocal's answer outside DoPhased.
var errNotPhased = errors.New("idemkit: BeginLocal is only available in the work of Guard.DoPhased")

// BeginLocal begins the transaction of the attempt's local phase (see
// Guard.DoPhased): the work makes its local writes through it and returns;
// the Guard then records the outcome in it and commits it. Every call in
// one attempt returns the same transaction. It returns an error outside
// the work of DoPhased, and when the transaction cannot begin (an error
// matching ErrStore; the work should return it: the claim is then
// released). ctx bounds the begin.
func (c *Call) BeginLocal(ctx context.Context) (LocalTx, error) {
	if c == nil || c.phase == nil {
		return nil, errNotPhased
	}
	ph := c.phase
	ph.mu.Lock()
	defer ph.mu.Unlock()
	if ph.done {
		return nil, errors.New("idemkit: BeginLocal after the work of Guard.DoPhased returned")
	}
	if ph.tx != nil {
		return ph.tx, nil
	}
	tx, err := ph.begin(ctx)
	if err != nil {
		return nil, storeError("begin the local transaction of", c.key, err)
	}
	if tx == nil {
		return nil, storeError("begin the local transaction of", c.key, errors.New("begin returned no transaction"))
	}
	ph.tx = tx
	return tx, nil
}

// take ends the phase: it returns the transaction BeginLocal began, if any,
// and makes later calls of BeginLocal fail.
func (ph *phase) take() LocalTx {
	ph.mu.Lock()
	defer ph.mu.Unlock()
	ph.done = true
	return ph.tx
}

// end records an attempt's end: in its local transaction when the work of
// DoPhased began one (keep: the work's local writes are kept, for a
// response; false after an error or a panic, which roll them back),
// through the Guard's store otherwise.
func (g *Guard) end(a *attempt, fin *FinishRequest, workErr error, keep bool) error {
	if ph := a.call.phase; ph != nil {
		if tx := ph.take(); tx != nil {
			return g.finishLocal(a, tx, fin, workErr, keep)
		}
	}
	return g.finish(a, fin, workErr)
}

// finishLocal records fin in tx and commits tx; see DoPhased for what
// happens when that fails.
func (g *Guard) finishLocal(a *attempt, tx LocalTx, fin *FinishRequest, workErr error, keep bool) error {
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
	key := a.call.key
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
	rel := FinishRequest{Key: fin.Key, Token: fin.Token, handle: fin.handle,
		Error: TruncateText("the local transaction did not commit: "+err.Error(), MaxErrorBytes)}
	if rerr := g.finish(a, &rel, nil); rerr != nil {
		return errors.Join(localErr, rerr)
	}
	return localErr
}
