package idemstore

import "errors"

// Errors a store returns. Match them with errors.Is. Package idemkit
// exports the ones its Guard returns to tool authors under the same names
// (idemkit.ErrNotFound is ErrNotFound).
var (
	// ErrInProgress: the record's attempt is still running (Store.Cancel
	// with CancelRequest.Abandoned, on an attempt whose lease holds). The
	// Guard's *idemkit.InProgressError matches it too.
	ErrInProgress = errors.New("idemkit: call already in progress")

	// ErrLeaseLost: the claim was taken over by another caller (its lease ran
	// out), so this caller's heartbeat or finish was refused (fencing).
	ErrLeaseLost = errors.New("idemkit: claim lease lost to another caller")

	// ErrTransient marks a store error that may pass when the call is
	// repeated: a dropped connection, a server restarting or refusing
	// connections for a moment, a lock or serialization conflict, SQLite's
	// busy database. Stores wrap such errors with Transient; the Guard
	// retries a finish that fails this way, with backoff, until
	// idemkit.Config.FinishTimeout.
	ErrTransient = errors.New("idemkit: transient store error")

	// ErrNotInProgress is returned by Store.Cancel (and the Guard's Cancel)
	// for a record that has no attempt in progress: it completed, or was
	// released (after a failure, or by an earlier cancellation).
	ErrNotInProgress = errors.New("idemkit: no attempt in progress")

	// ErrNotFound is returned by Store.Response when no stored body exists,
	// and by Store.Lookup (and the Guard's Lookup) when no record of the
	// key exists.
	ErrNotFound = errors.New("idemkit: not found")
)

// Transient marks err as transient: the result matches ErrTransient and
// everything err matches, and its text is err's. Store implementations
// call it on the errors a retry may cure (see ErrTransient). It returns nil
// for nil.
func Transient(err error) error {
	if err == nil {
		return nil
	}
	return &transientError{err}
}

type transientError struct{ err error }

func (e *transientError) Error() string        { return e.err.Error() }
func (e *transientError) Unwrap() error        { return e.err }
func (e *transientError) Is(target error) bool { return target == ErrTransient }
