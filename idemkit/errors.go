package idemkit

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/idemkit-mcp/idemkit/idemkit/idemstore"
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
	// *InProgressError. It is idemstore.ErrInProgress.
	ErrInProgress = idemstore.ErrInProgress

	// ErrKeyMismatch: an explicit key was reused with different arguments.
	// Matched by *MismatchError.
	ErrKeyMismatch = errors.New("idemkit: idempotency key reused with different arguments")

	// ErrResponseTooLarge: a response exceeded Config.MaxResponseBytes.
	// Matched by *ResponseTooLargeError.
	ErrResponseTooLarge = errors.New("idemkit: response too large to store")

	// ErrLeaseLost: the claim was taken over by another caller (its lease ran
	// out), so this caller's heartbeat or finish was refused (fencing).
	// It is idemstore.ErrLeaseLost.
	ErrLeaseLost = idemstore.ErrLeaseLost

	// ErrStore: the store failed (unreachable, timed out, refused). When the
	// claim fails this way the work has not run.
	ErrStore = errors.New("idemkit: store error")

	// ErrNotInProgress is returned by Guard.Cancel for a record that has
	// no attempt in progress: it completed, or was released (after a
	// failure, or by an earlier cancellation). It is
	// idemstore.ErrNotInProgress.
	ErrNotInProgress = idemstore.ErrNotInProgress

	// ErrNotFound is returned by Guard.Lookup and Guard.Cancel when no
	// record of the key exists. It is idemstore.ErrNotFound.
	ErrNotFound = idemstore.ErrNotFound

	// ErrRecordDamaged: the call already ran (its completed record exists),
	// but the record cannot be read back as it was written: it fails the
	// checksum stored with it, names a storage kind that does not exist, or
	// its body stored apart is missing. Nothing was replayed and nothing
	// was run again. Matched by *RecordDamagedError. It does not match
	// ErrStore: the store answered, and a retry gets the same answer until
	// the record's window ends.
	ErrRecordDamaged = errors.New("idemkit: stored record is damaged")
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
// Config.MaxResponseBytes, or could not be kept at all (Response.NotKept;
// Size is then 0). The work has run and is recorded as done, so it is not
// run again; its response was not kept. The first caller finds the response
// in Result; duplicates get the error with an empty Result.
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
	if e.Size <= 0 || e.Size <= e.Limit {
		return fmt.Sprintf("The %s call completed, but its response could not be kept. "+
			"Do not call it again: the work is done.", e.Tool)
	}
	return fmt.Sprintf("The %s call completed, but its %d-byte response exceeded the %d-byte limit and was not kept. "+
		"Do not call it again: the work is done. Raise the response limit or return a smaller result.", e.Tool, e.Size, e.Limit)
}

// Is reports whether target is ErrResponseTooLarge.
func (e *ResponseTooLargeError) Is(target error) bool { return target == ErrResponseTooLarge }

// RecordDamagedError is returned to a duplicate whose call completed but
// whose stored record cannot be read back as it was written (see
// ErrRecordDamaged): the work ran, and its answer is lost. The Guard never
// replays such a record (its bytes may be another call's, or garbage) and
// never runs the work again (it already ran: a second refund is worse than
// a missing answer); it logs every refusal (Config.Logger). Its Error text
// is written for a model. It matches ErrRecordDamaged.
type RecordDamagedError struct {
	// Tool is the tool, KeyHash the key's idemkit.key.hash (keyed as the
	// Guard's Config.HashKey says; never the raw subject), Attempt the
	// record's attempt count (0 when the store could not read the record
	// at all).
	Tool    string
	KeyHash string
	Attempt int
	// Reason says what is wrong with the record, for operators: "checksum
	// mismatch", "unknown storage kind 7", "body stored apart is missing".
	Reason string
}

func (e *RecordDamagedError) Error() string {
	return fmt.Sprintf("The %s call with these arguments already ran, but its stored result cannot be read: "+
		"the idempotency record is damaged (%s, key %s). Do not call it again: the work is done, and a retry gets this same answer. "+
		"Tell the user that the call completed but its result is unavailable, and ask the server's operator to inspect the record.",
		e.Tool, e.Reason, e.KeyHash)
}

// Is reports whether target is ErrRecordDamaged.
func (e *RecordDamagedError) Is(target error) bool { return target == ErrRecordDamaged }

// FinishOp says which finish failed.
type FinishOp string

// Finish operations.
const (
	// FinishRecord stores the outcome of work that ran (a success, or a
	// tool error kept by StoreToolErrors).
	FinishRecord FinishOp = "record"
	// FinishRelease releases the claim of work that failed (a Go error, a
	// panic, or a tool error under ReleaseToolErrors), so that the next
	// duplicate takes it over.
	FinishRelease FinishOp = "release"
)

// FinishError is returned by Guard.Do when the store could not record the
// end of an attempt whose work ran, after retrying transient errors until
// Config.FinishTimeout. It matches ErrStore and the store's error (Err);
// for a release, it matches the work's error (WorkErr) too, so that
// errors.Is(err, workErr) still holds.
//
// The key stays in progress until its lease runs out: duplicates are told
// the call is in progress, then one takes it over and runs the work again
// (forward Call.IdempotencyKey downstream so that the downstream
// deduplicates that run). The Guard logs every FinishError (Config.Logger).
type FinishError struct {
	// Op is FinishRecord or FinishRelease.
	Op FinishOp
	// Tool is the tool, KeyHash the key's idemkit.key.hash (never the raw
	// subject), Attempt the claim's attempt.
	Tool    string
	KeyHash string
	Attempt int
	// Tries is how many times the finish was tried.
	Tries int
	// Err is the store's last error.
	Err error
	// WorkErr is the work's error, for a release after the work returned
	// one; nil otherwise.
	WorkErr error
}

func (e *FinishError) Error() string {
	tries := "once"
	if e.Tries != 1 {
		tries = fmt.Sprintf("%d times", e.Tries)
	}
	if e.Op == FinishRelease {
		msg := fmt.Sprintf("idemkit: releasing the claim of %s (key %s) failed, tried %s: %v; duplicates are told it is in progress until its lease runs out",
			e.Tool, e.KeyHash, tries, e.Err)
		if e.WorkErr != nil {
			return e.WorkErr.Error() + " (" + msg + ")"
		}
		return msg
	}
	return fmt.Sprintf("idemkit: the %s call (key %s) ran, but recording its outcome failed, tried %s: %v; "+
		"duplicates are told it is in progress until its lease runs out, then one runs it again", e.Tool, e.KeyHash, tries, e.Err)
}

// Unwrap returns the store's error and, for a release, the work's error.
func (e *FinishError) Unwrap() []error {
	if e.WorkErr != nil {
		return []error{e.WorkErr, e.Err}
	}
	return []error{e.Err}
}

// Is reports whether target is ErrStore.
func (e *FinishError) Is(target error) bool { return target == ErrStore }

// storeError wraps a store failure so that it matches both ErrStore and the
// underlying driver error. key is the key's label (Guard.label).
func storeError(op, key string, err error) error {
	return fmt.Errorf("%w: %s %s: %w", ErrStore, op, key, err)
}
