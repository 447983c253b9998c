package pgstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/idemkit-mcp/idemkit/idemkit"
	"github.com/jackc/pgx/v5"
)

// TxWork is the work of DoTx: it writes its side effect through tx. (It is
// an alias, so that *Store implements instrument.TxRunner[pgx.Tx].)
type TxWork = func(ctx context.Context, tx pgx.Tx) (idemkit.Response, error)

// DoTx is g.Do with the claim, work's writes and the stored outcome in the
// caller's transaction tx, so that they commit or roll back together: there
// is no moment at which the side effect is committed but the claim is not,
// or the reverse, even if the process is killed.
//
// The caller owns tx: it commits after DoTx returns without error, and rolls
// back otherwise (pgx.BeginFunc does both, and rolls back on panic). When
// work fails, DoTx returns its error and the caller must roll back; nothing
// of the call then remains. A replay (Outcome "replayed") or an error from
// the claim leaves nothing in tx to commit.
//
// A duplicate of an in-flight DoTx, from any replica and through Do or
// DoTx, waits on the claim row until tx ends, then replays the committed
// outcome (or, if tx rolled back, claims the key and runs). ctx bounds that
// wait. Under REPEATABLE READ or SERIALIZABLE isolation the waiting
// duplicate's transaction fails with a serialization error instead; retry
// the whole transaction, as for any such error.
//
// The Guard's configuration (window, failure policy, limits) applies, with
// one difference: a duplicate that finds a plain Do of the same key in
// progress gets an *idemkit.InProgressError at once, whatever Wait says,
// because waiting would hold the row lock that call needs to finish.
//
// tx holds the claim row's lock and a connection while work runs: work
// that waits on the network belongs in DoPhased.
func (s *Store) DoTx(ctx context.Context, g *idemkit.Guard, tx pgx.Tx, key idemkit.Key, work TxWork) (idemkit.Result, error) {
	if g == nil || tx == nil || work == nil {
		return idemkit.Result{}, errors.New("pgstore: DoTx needs a Guard, a transaction and work")
	}
	txStore := &Store{db: tx, sql: s.sql}
	return g.InTx(txStore).Do(ctx, key, func(ctx context.Context) (idemkit.Response, error) {
		return work(ctx, tx)
	})
}

// DoInTx is DoTx in a transaction of its own: it begins one on the store's
// DB, runs DoTx in it, and commits it when DoTx succeeds. It rolls it back
// otherwise (work's error, a claim that failed, an in-progress or mismatch
// answer), and when work panics, so that nothing of the call remains. When
// the commit itself fails, nothing of the call happened either: DoInTx
// returns an error matching idemkit.ErrStore, and a retry is safe.
//
// It is the claim a transactional tool handler runs under (the
// instrument/mcpgo and instrument/gosdk AddTxTool handler forms use it).
// ctx bounds the whole transaction.
func (s *Store) DoInTx(ctx context.Context, g *idemkit.Guard, key idemkit.Key, work TxWork) (res idemkit.Result, err error) {
	if g == nil || work == nil {
		return idemkit.Result{}, errors.New("pgstore: DoInTx needs a Guard and work")
	}
	tx, err := s.db.Begin(ctx)
	if err != nil {
		return idemkit.Result{}, fmt.Errorf("%w: %w", idemkit.ErrStore, s.translate("begin", err))
	}
	committed := false
	defer func() {
		if !committed {
			_ = tx.Rollback(context.WithoutCancel(ctx))
		}
	}()
	res, err = s.DoTx(ctx, g, tx, key, work)
	if err != nil {
		return res, err
	}
	if err := tx.Commit(ctx); err != nil {
		return idemkit.Result{}, fmt.Errorf("%w: the transaction of %s did not commit, so nothing of the call happened: %w", idemkit.ErrStore, key, s.translate("commit", err))
	}
	committed = true
	return res, nil
}

// InTx runs fn in a transaction of its own, begun on the store's DB and
// committed when fn returns nil (rolled back otherwise, and when fn
// panics). A transactional tool handler whose call is not protected (see
// DoInTx) runs so.
func (s *Store) InTx(ctx context.Context, fn func(ctx context.Context, tx pgx.Tx) error) error {
	return pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error { return fn(ctx, tx) })
}
