package pgstore

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit-mcp/idemkit/idemkit"
	"github.com/idemkit-mcp/idemkit/idemkit/idemstore"
)

// DoPhased runs a call whose work has an external part that waits on the
// network and local writes to this database, in atomic phases (see
// idemkit.Guard.DoPhased): the claim commits on its own; external runs
// outside any transaction (forward idemkit.CallFromContext(ctx).
// IdempotencyKey() to the provider, so that it deduplicates a repeat);
// then local makes the call's writes in a short transaction, in which the
// Guard records the outcome and which it commits, so that the writes and
// the outcome commit together.
//
// Use it instead of DoTx or DoInTx whenever the work waits on the network:
// their transaction holds the claim row's lock, a pooled connection and
// every row the work locked across the wait. Here the transaction lasts
// for local's writes and the commit; nothing is locked during external,
// and reads never wait for it.
//
// A process killed during external or local leaves the record in
// progress without any of local's writes; after the lease the next
// duplicate, on any replica, takes it over, runs external again with the
// same key and local once. An attempt whose claim was taken over meanwhile
// cannot commit: its local writes are rolled back (an error matching
// idemkit.ErrLeaseLost). external's error, or local's, releases the claim
// and rolls local's writes back. State passes from external to local
// through the caller's variables, as in any closure.
//
// g must be a Guard on this store. ctx bounds the claim and external;
// local's transaction, the recorded outcome and the commit are detached
// from its cancellation and bounded by the Guard's FinishTimeout for the
// commit.
func (s *Store) DoPhased(ctx context.Context, g *idemkit.Guard, key idemkit.Key, external func(ctx context.Context) error, local TxWork) (idemkit.Result, error) {
	if g == nil || external == nil || local == nil {
		return idemkit.Result{}, errors.New("pgstore: DoPhased needs a Guard, external work and local work")
	}
	var tx pgx.Tx
	begin := func(ctx context.Context) (idemstore.LocalTx, error) {
		t, lt, err := s.BeginLocal(ctx)
		tx = t
		return lt, err
	}
	return g.DoPhased(ctx, key, begin, func(ctx context.Context, beginLocal func(context.Context) error) (idemkit.Response, error) {
		if err := external(ctx); err != nil {
			return idemkit.Response{}, err
		}
		if err := beginLocal(ctx); err != nil {
			return idemkit.Response{}, err
		}
		return local(context.WithoutCancel(ctx), tx)
	})
}

// BeginLocal begins the transaction of a phased call's local phase on the
// store's DB: tx for the tool's writes, and lt for the Guard, which records
// the call's outcome in it and commits it (see idemkit.Guard.DoPhased;
// DoPhased and the instrument/mcpgo and instrument/gosdk AddPhasedTool
// forms call it). ctx bounds the begin (and the wait for a pooled
// connection).
func (s *Store) BeginLocal(ctx context.Context) (tx pgx.Tx, lt idemstore.LocalTx, err error) {
	tx, err = s.db.Begin(ctx)
	if err != nil {
		return nil, nil, s.translate("begin", err)
	}
	return tx, &localTx{s: s, tx: tx}, nil
}

// localTx is the idemstore.LocalTx of BeginLocal.
type localTx struct {
	s  *Store
	tx pgx.Tx
}

func (l *localTx) Finish(ctx context.Context, req idemstore.FinishRequest) error {
	return (&Store{db: l.tx, sql: l.s.sql}).Finish(ctx, req)
}

func (l *localTx) Commit(ctx context.Context) error {
	if err := l.tx.Commit(ctx); err != nil {
		return l.s.translate("commit", err)
	}
	return nil
}

func (l *localTx) Rollback(ctx context.Context) error {
	if err := l.tx.Rollback(ctx); err != nil && !errors.Is(err, pgx.ErrTxClosed) {
		return l.s.translate("rollback", err)
	}
	return nil
}
