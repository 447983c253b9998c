package idemstore

import (
	"errors"
	"fmt"
	"time"
)

// Errors a store returns. Match them with errors.Is. Package idemkit
// exports the ones its Guard returns to tool authors under the same names
// (idemkit.ErrNotFound is ErrNotFound).
var (
	// ErrStoreFull: the store holds as many records as it may keep, none of
	// them expired, so it cannot claim a new key (see
	// MemoryStore.MaxRecords). Nothing was claimed and the work has not
	// run; the calls it holds are still answered. Matched by
	// *StoreFullError.
	ErrStoreFull = errors.New("idemkit: store full")

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

// StoreFullError is returned by a store's Claim of a new key when the store
// holds as many records as it may keep (MemoryStore.MaxRecords and
// MaxBytes) and none of them has expired: nothing was claimed and the work
// has not run. No record whose window is open is evicted to make room
// (that would let a duplicate run the work again): room comes back as
// windows end. idemkit.Guard.Do returns it wrapped (matching idemkit.ErrStore as well). It
// matches ErrStoreFull.
type StoreFullError struct {
	// Records and Bytes are what the store holds; MaxRecords and MaxBytes
	// its limits.
	Records, MaxRecords int
	Bytes, MaxBytes     int64
	// RetryAfter is how long until the next record may expire (an
	// estimate: its window may be extended), or 0 when unknown.
	RetryAfter time.Duration
}

func (e *StoreFullError) Error() string {
	return fmt.Sprintf("idemkit: the store is full: it holds %d records taking %d bytes, against its limits of %d records and %d bytes, "+
		"and none of them has expired; nothing was claimed", e.Records, e.Bytes, e.MaxRecords, e.MaxBytes)
}

// Is reports whether target is ErrStoreFull.
func (e *StoreFullError) Is(target error) bool { return target == ErrStoreFull }
