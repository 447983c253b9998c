package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"sync"

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
// their transaction holds SQLite's only write lock across the work, so
// every other call's claim and finish, and the heartbeats of jobs and
// tasks, queue behind the slowest external call in flight. Here the write
// lock is held only for local's writes and the commit.
//
// A process killed during external or local leaves the record in
// progress without any of local's writes; after the lease the next
// duplicate takes it over, runs external again with the same key and
// local once. An attempt whose claim was taken over meanwhile cannot
// commit: its local writes are rolled back (an error matching
// idemkit.ErrLeaseLost). external's error, or local's, releases the claim
// and rolls local's writes back. State passes from external to local
// through the caller's variables, as in any closure. local must write
// through its tx only (see BeginLocal); external may use the store and
// DB() freely (Call.Heartbeat keeps a long external call's lease).
//
// g must be a Guard on this store. ctx bounds the claim and external;
// local's transaction, the recorded outcome and the commit are detached
// from its cancellation (a client that hangs up after the external call
// does not leave the call half done) and bounded by the Guard's
// FinishTimeout for the commit.
func (s *Store) DoPhased(ctx context.Context, g *idemkit.Guard, key idemkit.Key, external func(ctx context.Context) error, local TxWork) (idemkit.Result, error) {
	if g == nil || external == nil || local == nil {
		return idemkit.Result{}, errors.New("sqlitestore: DoPhased needs a Guard, external work and local work")
	}
	var tx *sql.Tx
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

// BeginLocal begins the transaction of a phased call's local phase on
// DB() (BEGIN IMMEDIATE on a store Open made): tx for the tool's writes,
// and lt for the Guard, which records the call's outcome in it and commits
// it (see idemkit.Guard.DoPhased; DoPhased and the instrument/mcpgo and
// instrument/gosdk AddPhasedTool forms call it). The transaction queues
// with the store's own writes, ahead of new claims, and holds the write
// lock until lt commits or rolls back: while it is open, make the tool's
// writes through tx only, and no other call to this store from the same
// goroutine (a Call.Heartbeat, a Guard.Do), which would wait for the
// transaction to end. ctx bounds the wait to begin; the transaction itself
// is not bound to ctx's cancellation.
func (s *Store) BeginLocal(ctx context.Context) (tx *sql.Tx, lt idemstore.LocalTx, err error) {
	if err := s.lock(ctx, endsWork); err != nil {
		return nil, nil, interpretError("begin", err)
	}
	conn, err := s.db.Conn(ctx)
	if err != nil {
		s.unlock()
		return nil, nil, interpretError("begin", err)
	}
	tx, err = conn.BeginTx(context.WithoutCancel(ctx), nil)
	if err != nil {
		_ = conn.Close()
		s.unlock()
		return nil, nil, interpretError("begin", err)
	}
	return tx, &localTx{s: s, conn: conn, tx: tx}, nil
}

// localTx is the idemstore.LocalTx of BeginLocal. It holds the store's gate
// and a connection until it ends.
type localTx struct {
	s    *Store
	conn *sql.Conn
	tx   *sql.Tx

	once sync.Once // ends it: returns the connection and the gate
}

func (l *localTx) Finish(ctx context.Context, req idemstore.FinishRequest) error {
	if !req.Succeeded || req.Storage != idemstore.StorageExternal {
		// The store's statement, prepared on the connection the
		// transaction runs on: no parse while the write lock is held.
		st, err := l.s.prepared(ctx)
		if err != nil {
			return err
		}
		stmt := st.failed
		if req.Succeeded {
			stmt = st.succeeded
		}
		res, err := l.tx.StmtContext(ctx, stmt).ExecContext(ctx, finishArgs(req)...)
		return fenced("finish", res, err)
	}
	return (&txStore{tx: l.tx}).Finish(ctx, req)
}

func (l *localTx) Commit(context.Context) error {
	err := l.tx.Commit()
	l.end()
	return interpretError("commit", err)
}

func (l *localTx) Rollback(context.Context) error {
	err := l.tx.Rollback()
	l.end()
	if errors.Is(err, sql.ErrTxDone) {
		return nil
	}
	return interpretError("rollback", err)
}

func (l *localTx) end() {
	l.once.Do(func() {
		_ = l.conn.Close()
		l.s.unlock()
	})
}
