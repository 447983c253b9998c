package idemstore

import "context"

// LocalTx is the database transaction of a phased call's last phase (see
// idemkit.Guard.DoPhased): the tool's local writes go through it, and the
// Guard records the call's outcome in it and then commits it, so that the
// writes and the outcome commit together or not at all. The SQL stores
// supply it (sqlitestore.Store.BeginLocal, pgstore.Store.BeginLocal); it
// must be a transaction on the database of the Guard's store.
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
