package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/idemkit-mcp/idemkit/idemkit/idemstore"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// Errors. The Guard wraps every store error in idemkit.ErrStore; these say
// which store failure it was. The driver's *sqlite.Error stays in the chain
// for errors.As.
var (
	// ErrBusy: SQLite's write lock stayed taken (by another process, or a
	// long transaction on another connection) past the busy timeout, or a
	// transaction that read first could not take it. Nothing was written;
	// the call may be retried. Errors matching it match idemstore.ErrTransient
	// too, so that the Guard retries a finish that fails this way.
	ErrBusy = errors.New("sqlitestore: database is locked")

	// ErrReadOnly: the database cannot be written (file permissions, a
	// read-only mount, mode=ro).
	ErrReadOnly = errors.New("sqlitestore: database is read-only")

	// ErrNotMigrated: the idemkit tables do not exist in the database. Call
	// Store.Migrate (Open does unless Config.NoMigrate).
	ErrNotMigrated = errors.New("sqlitestore: the idemkit tables do not exist: call Store.Migrate")

	// ErrClosed: the Store has been closed.
	ErrClosed = errors.New("sqlitestore: store is closed")
)

// interpretError translates a driver error into the store's errors, by
// SQLite result code (never by message). It returns nil for nil.
func interpretError(op string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("sqlitestore: %s: %w", op, err)
	}
	var se *sqlite.Error
	if !errors.As(err, &se) {
		return fmt.Errorf("sqlitestore: %s: %w", op, err)
	}
	code := se.Code()
	switch code & 0xff {
	case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED:
		// Transient: the Guard retries a finish that fails this way.
		if code == sqlite3.SQLITE_BUSY_SNAPSHOT {
			return idemstore.Transient(fmt.Errorf("%w: %s: a transaction that read before it wrote found the database changed by another connection; "+
				"begin transactions with BEGIN IMMEDIATE (the _txlock=immediate DSN parameter, as Open sets) and retry: %w", ErrBusy, op, err))
		}
		return idemstore.Transient(fmt.Errorf("%w: %s: another connection or process held the write lock past the busy timeout "+
			"(or a transaction that read before it wrote could not take it; begin those with BEGIN IMMEDIATE); retry later: %w", ErrBusy, op, err))
	case sqlite3.SQLITE_READONLY:
		return fmt.Errorf("%w: %s: %w", ErrReadOnly, op, err)
	case sqlite3.SQLITE_INTERRUPT:
		// The driver interrupts a statement whose context is done.
		return fmt.Errorf("sqlitestore: %s: interrupted: %w", op, err)
	}
	return fmt.Errorf("sqlitestore: %s: %w", op, err)
}

// isCheckViolation reports a CHECK constraint failure.
func isCheckViolation(err error) bool {
	var se *sqlite.Error
	return errors.As(err, &se) && se.Code() == sqlite3.SQLITE_CONSTRAINT_CHECK
}

// querier is what the store runs statements on: its pool, or a caller's
// transaction.
type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// notMigrated returns an error matching ErrNotMigrated when err, already
// translated, is a generic SQLite error and the idemkit tables are missing
// (a statement named them); otherwise err.
func notMigrated(ctx context.Context, q querier, err error) error {
	var se *sqlite.Error
	if !errors.As(err, &se) || se.Code()&0xff != sqlite3.SQLITE_ERROR {
		return err
	}
	var n int
	if qerr := q.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = 'idemkit_claims'`).Scan(&n); qerr == nil && n == 0 {
		return fmt.Errorf("%w (%w)", ErrNotMigrated, err)
	}
	return err
}
