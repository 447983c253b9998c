package idemkit

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Sentinel errors. Match them with errors.Is; the typed errors below match
// their sentinel too.
var (
	// ErrInvalidArguments: the arguments could not be canonicalised (not
	// JSON, duplicate member names, too large, an explicit-key field that is
	// not a string). Nothing was claimed or run.
	ErrInvalidArguments = errors.New("idemkit: invalid arguments")

	// ErrInvalidKey: an explicit idempotency key is empty, too long or not
	// printable, or a Key was not built by NewKey. Nothing was claimed or run.
	ErrInvalidKey = errors.New("idemkit: invalid idempotency key")

	// ErrInProgress: the first call with this key is still running. Matched by
	// *InProgressError.
	ErrInProgress = errors.New("idemkit: call already in progress")

	// ErrKeyMismatch: an explicit key was reused with different arguments.
	// Matched by *MismatchError.
	ErrKeyMismatch = errors.New("idemkit: idempotency key reused with different arguments")

	// ErrResponseTooLarge: a response exceeded Config.MaxResponseBytes.
	// Matched by *ResponseTooLargeError.
	ErrResponseTooLarge = errors.New("idemkit: response too large to store")

	// ErrLeaseLost: the claim was taken over by another caller (its lease ran
	// out), so this caller's heartbeat or finish was refused (fencing).
	ErrLeaseLost = errors.New("idemkit: claim lease lost to another caller")

	// ErrStore: the store failed (unreachable, timed out, refused). When the
	// claim fails this way the work has not run.
	ErrStore = errors.New("idemkit: store error")

	// ErrNotFound is returned by Store.Response when no stored body exists,
	// and by Store.Lookup and Guard.Lookup when no record of the key exists.
	ErrNotFound = errors.New("idemkit: not found")
)

// InProgressError is returned to a duplicate that arrives while the first
// call with the same key is still running. Its Error text is written for a
// model: it says the work is in flight, not to retry, and which status tool
// to call. It matches ErrInProgress.
type InProgressError struct {
	// Tool is the tool that is running.
	Tool string
	// StatusTool is the tool that reports progress, from Config, or "".
	StatusTool string
	// Attempt is the running attempt's number.
	Attempt int
	// Started is when the running attempt claimed the key (store clock).
	Started time.Time
	// RetryAfter is how long until the running attempt's lease runs out: an
	// upper bound on how long a crashed first call can block the key.
	RetryAfter time.Duration
}

func (e *InProgressError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "The %s call with these arguments is already in progress", e.Tool)
	if !e.Started.IsZero() {
		if age := time.Since(e.Started); age >= time.Second {
			fmt.Fprintf(&b, " (started %s ago)", age.Round(time.Second))
		}
	}
	b.WriteString(". It has not failed: the work is in flight. Do not call it again now, and do not retry it with the same arguments. ")
	if e.StatusTool != "" {
		fmt.Fprintf(&b, "Call %s to check its status and get its result.", e.StatusTool)
	} else {
		b.WriteString("Once it has finished, a call with the same arguments returns its original result instead of running it twice.")
	}
	return b.String()
}

// Is reports whether target is ErrInProgress.
func (e *InProgressError) Is(target error) bool { return target == ErrInProgress }

// MismatchError is returned when an explicit idempotency key is reused with
// arguments that differ from the ones first sent with it (the IETF
// Idempotency-Key draft's 422). Nothing was run and nothing was replayed.
// It matches ErrKeyMismatch.
type MismatchError struct {
	Tool string
}

func (e *MismatchError) Error() string {
	return fmt.Sprintf("The idempotency key sent with this %s call was already used for a call with different arguments. "+
		"Nothing was done. Send a new idempotency key for a new request, or resend the original arguments to get the original result.", e.Tool)
}

// Is reports whether target is ErrKeyMismatch.
func (e *MismatchError) Is(target error) bool { return target == ErrKeyMismatch }

// ResponseTooLargeError is returned when a response exceeds
// Config.MaxResponseBytes. The work has run and is recorded as done, so it
// is not run again; its response was not kept. The first caller finds the
// response in Result; duplicates get the error with an empty Result.
// It matches ErrResponseTooLarge.
type ResponseTooLargeError struct {
	Tool  string
	Size  int64
	Limit int64
	// Result holds the first caller's result, including the response that
	// could not be stored. It is the zero Result for duplicates.
	Result Result
}

func (e *ResponseTooLargeError) Error() string {
	return fmt.Sprintf("The %s call completed, but its %d-byte response exceeded the %d-byte limit and was not kept. "+
		"Do not call it again: the work is done. Raise the response limit or return a smaller result.", e.Tool, e.Size, e.Limit)
}

// Is reports whether target is ErrResponseTooLarge.
func (e *ResponseTooLargeError) Is(target error) bool { return target == ErrResponseTooLarge }

// storeError wraps a store failure so that it matches both ErrStore and the
// underlying driver error.
func storeError(op string, key Key, err error) error {
	return fmt.Errorf("%w: %s %s: %w", ErrStore, op, key, err)
}
