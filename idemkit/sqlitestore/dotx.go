package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/idemkit-mcp/idemkit/idemkit"
	"github.com/idemkit-mcp/idemkit/idemkit/idemstore"
)

// TxWork is the work of DoTx: it makes its writes through tx, the
// transaction that also holds the claim. (It is an alias, so that *Store
// implements instrument.TxRunner[*sql.Tx].)
type TxWork = func(ctx context.Context, tx *sql.Tx) (idemkit.Response, error)

// DoTx is g.Do with the claim, the work's writes and the recorded outcome
// all in tx, a transaction the caller began on DB() and commits or rolls
// back: the claim and the side effect commit together or not at all, so a
// crash between the two can neither lose the work nor run it twice.
//
// g supplies the configuration (windows, leases, failure policy); its own
// store is not used. The outcomes are Do's, with three differences:
//
//   - Until tx commits, no other connection sees the claim. A duplicate on
//     another connection waits for SQLite's write lock, which tx holds from
//     BEGIN IMMEDIATE, and then finds the committed outcome; a rolled-back
//     attempt leaves no trace, and its retry runs the work afresh.
//   - When work returns an error (or panics), the claim is released inside
//     tx; roll tx back to undo the work's writes too.
//   - A duplicate that finds the call in progress gets an
//     *idemkit.InProgressError at once, whatever Config.Wait says: waiting
//     inside tx would hold the write lock the running call needs to record
//     its outcome.
//
// work must make its writes through tx, and not use DB() or call Guard.Do
// on this store meanwhile: with the default single connection, the pool has
// none to give until tx ends. ctx bounds the claim and the work; recording
// the outcome is bounded by the Guard's FinishTimeout instead (tx itself
// ends with the context it was begun with). tx holds SQLite's only write
// lock while work runs: work that waits on the network belongs in DoPhased.
func (s *Store) DoTx(ctx context.Context, g *idemkit.Guard, tx *sql.Tx, key idemkit.Key, work TxWork) (idemkit.Result, error) {
	if g == nil || tx == nil || work == nil {
		return idemkit.Result{}, errors.New("sqlitestore: DoTx needs a Guard, a *sql.Tx and work")
	}
	return g.InTx(&txStore{tx: tx}).Do(ctx, key, func(ctx context.Context) (idemkit.Response, error) {
		return work(ctx, tx)
	})
}

// txStore is an idemstore.Store that runs the store's statements inside a
// caller's transaction.
type txStore struct {
	tx *sql.Tx
}

var _ idemstore.Store = (*txStore)(nil)

func (t *txStore) Claim(ctx context.Context, req idemstore.ClaimRequest) (idemstore.ClaimResult, error) {
	if err := ctx.Err(); err != nil {
		return idemstore.ClaimResult{}, err
	}
	now := clock(req.Now)
	cr, err := scanClaim(t.tx.QueryRowContext(ctx, claimSQL, claimArgs(req, now)...), now)
	if err != nil {
		return cr, notMigrated(ctx, t.tx, err)
	}
	return cr, nil
}

func (t *txStore) Finish(ctx context.Context, req idemstore.FinishRequest) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	query, args := finishQuery(req), finishArgs(req)
	if !req.Succeeded || req.Storage != idemstore.StorageExternal {
		res, err := t.tx.ExecContext(ctx, query, args...)
		return fenced("finish", res, err)
	}
	// The outcome and its body together, or neither: a savepoint inside the
	// caller's transaction.
	if _, err := t.tx.ExecContext(ctx, "SAVEPOINT idemkit_finish"); err != nil {
		return interpretError("finish", err)
	}
	res, err := t.tx.ExecContext(ctx, query, args...)
	err = fenced("finish", res, err)
	if err == nil {
		_, err = t.tx.ExecContext(ctx, putResponseSQL, req.Key, nonNil(req.Response.Body))
		err = interpretError("finish", err)
	}
	if err != nil {
		_, _ = t.tx.ExecContext(ctx, "ROLLBACK TO idemkit_finish")
	}
	if _, rerr := t.tx.ExecContext(ctx, "RELEASE idemkit_finish"); err == nil && rerr != nil {
		err = interpretError("finish", rerr)
	}
	return err
}

func (t *txStore) Extend(ctx context.Context, req idemstore.ExtendRequest) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	res, err := t.tx.ExecContext(ctx, extendSQL, extendArgs(req)...)
	return fenced("extend", res, err)
}

func (t *txStore) Response(ctx context.Context, key string) ([]byte, error) {
	return scanResponse(t.tx.QueryRowContext(ctx, responseSQL, key))
}

func (t *txStore) Lookup(ctx context.Context, req idemstore.LookupRequest) (idemstore.Record, error) {
	return lookup(t.tx.QueryRowContext(ctx, lookupSQL, req.Key, req.Body), req)
}

func (t *txStore) Cancel(ctx context.Context, req idemstore.CancelRequest) (idemstore.Record, error) {
	return cancel(ctx, req,
		func(args ...any) *sql.Row { return t.tx.QueryRowContext(ctx, cancelSQL, args...) },
		func(lr idemstore.LookupRequest) (idemstore.Record, error) {
			return lookup(t.tx.QueryRowContext(ctx, lookupSQL, lr.Key, lr.Body), lr)
		})
}

func (t *txStore) List(ctx context.Context, req idemstore.ListRequest) ([]idemstore.Record, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	rows, err := t.tx.QueryContext(ctx, listSQL, listArgs(req)...)
	return list(rows, err, req)
}

func (t *txStore) Sweep(ctx context.Context, req idemstore.SweepRequest) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	res, err := t.tx.ExecContext(ctx, sweepSQL, sweepArgs(req)...)
	if err != nil {
		return 0, interpretError("sweep", err)
	}
	n, err := res.RowsAffected()
	return int(n), interpretError("sweep", err)
}

// DoInTx is DoTx in a transaction of its own: it begins one on DB(), runs
// DoTx in it, and commits it when DoTx succeeds. It rolls it back
// otherwise (work's error, a claim that failed, an in-progress or mismatch
// answer), and when work panics, so that nothing of the call remains. When
// the commit itself fails, nothing of the call happened either: DoInTx
// returns an error matching idemkit.ErrStore, and a retry is safe.
//
// It is the claim a transactional tool handler runs under (the
// instrument/mcpgo and instrument/gosdk AddTxTool handler forms use it).
// work must write through its tx only (see DoTx). ctx bounds the whole
// transaction. The transaction queues with the store's own writes, in
// order (see Store), and holds the write lock until it ends: when work
// waits on the network, use DoPhased instead.
func (s *Store) DoInTx(ctx context.Context, g *idemkit.Guard, key idemkit.Key, work TxWork) (res idemkit.Result, err error) {
	if g == nil || work == nil {
		return idemkit.Result{}, errors.New("sqlitestore: DoInTx needs a Guard and work")
	}
	if err := s.lock(ctx, startsWork); err != nil {
		return idemkit.Result{}, fmt.Errorf("%w: %w", idemkit.ErrStore, interpretError("begin", err))
	}
	defer s.unlock()
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return idemkit.Result{}, fmt.Errorf("%w: %w", idemkit.ErrStore, interpretError("begin", err))
	}
	committed := false
	defer func() {
		if !committed {
			_ = tx.Rollback()
		}
	}()
	res, err = s.DoTx(ctx, g, tx, key, work)
	if err != nil {
		return res, err
	}
	if err := tx.Commit(); err != nil {
		return idemkit.Result{}, fmt.Errorf("%w: the transaction of %s did not commit, so nothing of the call happened: %w", idemkit.ErrStore, key, interpretError("commit", err))
	}
	committed = true
	return res, nil
}

// InTx runs fn in a transaction of its own, begun on DB() and committed
// when fn returns nil (rolled back otherwise, and when fn panics). A
// transactional tool handler whose call is not protected (see DoInTx) runs
// so.
func (s *Store) InTx(ctx context.Context, fn func(ctx context.Context, tx *sql.Tx) error) (err error) {
	if err := s.lock(ctx, startsWork); err != nil {
		return interpretError("begin", err)
	}
	defer s.unlock()
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return interpretError("begin", err)
	}
	committed := false
	defer func() {
		if !committed {
			_ = tx.Rollback()
		}
	}()
	if err := fn(ctx, tx); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return interpretError("commit", err)
	}
	committed = true
	return nil
}
