package idemstore

import (
	"fmt"
	"time"
)

// Bounds on the text the Guard (idemkit.Guard) stores with a record.
const (
	// MaxNoteBytes is the longest progress note a heartbeat stores
	// (ExtendRequest.Note); a longer one is cut at a character boundary.
	MaxNoteBytes = 256
	// MaxErrorBytes is the longest failure text stored with a released
	// record (FinishRequest.Error); a longer one is cut at a character
	// boundary.
	MaxErrorBytes = 512
)

// RecordState is the state of a stored record, as Lookup and List report it.
type RecordState uint8

// Record states.
const (
	// StateInProgress: an attempt holds the claim and is running the work
	// (or died holding it: see Record.Abandoned).
	StateInProgress RecordState = iota + 1
	// StateCompleted: the outcome is stored and replayed to duplicates.
	StateCompleted
	// StateReleased: the last attempt failed and released the claim; the
	// next duplicate takes it over and runs the work again.
	StateReleased
)

// String returns the state's name: "in_progress", "completed" or
// "released".
func (s RecordState) String() string {
	switch s {
	case StateInProgress:
		return "in_progress"
	case StateCompleted:
		return "completed"
	case StateReleased:
		return "released"
	}
	return fmt.Sprintf("RecordState(%d)", uint8(s))
}

// MarshalText implements encoding.TextMarshaler with String's names.
func (s RecordState) MarshalText() ([]byte, error) {
	if s < StateInProgress || s > StateReleased {
		return nil, fmt.Errorf("idemkit: invalid RecordState %d", uint8(s))
	}
	return []byte(s.String()), nil
}

// UnmarshalText implements encoding.TextUnmarshaler. It accepts String's
// names, and "in_flight" for StateInProgress.
func (s *RecordState) UnmarshalText(b []byte) error {
	v, err := ParseRecordState(string(b))
	if err != nil {
		return err
	}
	*s = v
	return nil
}

// ParseRecordState returns the state named name: "in_progress" (or
// "in_flight"), "completed" or "released".
func ParseRecordState(name string) (RecordState, error) {
	switch name {
	case "in_progress", "in_flight":
		return StateInProgress, nil
	case "completed":
		return StateCompleted, nil
	case "released":
		return StateReleased, nil
	}
	return 0, fmt.Errorf("idemkit: unknown record state %q: want in_progress, completed or released", name)
}

// Record is a stored record as it stands, read without claiming it (see
// Store.Lookup and Store.List). An expired record that no sweep has deleted
// yet is reported as it is: Expired says so.
type Record struct {
	// Key is the record's identity, idemkit.Key.ID(). Its first
	// spancontract.HashLen characters are the idemkit.key.hash attribute.
	Key string
	// Tool is the tool name.
	Tool string
	// Fingerprint is the argument hash of an explicit key, "" for a derived
	// one (see idemkit.Key.Fingerprint).
	Fingerprint string
	// State is in progress, completed or released.
	State RecordState
	// Attempt is the record's attempt count: 1 for a first run, higher
	// after takeovers.
	Attempt int
	// Generation identifies this life of the key's record: the Token of
	// the claim that created it, kept by every attempt; 0 for a record
	// written before the store kept generations. The record's downstream
	// key is DownstreamKey(Key, Generation), or DownstreamKey(Key, 0) for a
	// record claimed in a caller's transaction (see Call.IdempotencyKey).
	Generation int64
	// Started is when the current (or last) attempt claimed the key.
	Started time.Time
	// LeaseUntil is when the current attempt's lease runs out. It matters
	// only in progress: past it, a duplicate takes the claim over.
	LeaseUntil time.Time
	// ExpiresAt is the end of the deduplication window.
	ExpiresAt time.Time
	// Now is the store's clock at the read (the request's Now when set).
	Now time.Time

	// WriteID, IsError, Storage and Size describe a completed record's
	// stored response.
	WriteID string
	IsError bool
	Storage Storage
	Size    int64
	// Body is the stored response body, inline or external, when the
	// request asked for it and the record is completed with a kept body;
	// nil otherwise.
	Body []byte
	// Checksum is the checksum stored with a completed record's outcome
	// (see FinishRequest.Checksum), or nil when none was: Guard.Lookup
	// verifies it.
	Checksum []byte

	// Error is the failure text of the attempt that released the record
	// (at most MaxErrorBytes), or the reason of the Store.Cancel that
	// released it, "" otherwise. A new attempt clears it.
	Error string
	// Note is the last progress note a heartbeat of the current attempt
	// stored (at most MaxNoteBytes), "" when none. A new attempt clears it.
	Note string
	// Cancelled reports a record released by Store.Cancel rather than by
	// its attempt's own finish: Error holds the canceller's reason. A new
	// attempt clears it.
	Cancelled bool
	// Updated is when the record last changed: its claim, the last
	// heartbeat, the finish or the cancellation (store clock). A record
	// written before the store kept it reports Started.
	Updated time.Time
}

// Expired reports whether the record no longer deduplicates at r.Now: its
// window is over and no live lease holds it. The next claim of its key
// starts afresh, and Sweep deletes it.
func (r *Record) Expired() bool {
	if r.Now.Before(r.ExpiresAt) {
		return false
	}
	return r.State != StateInProgress || !r.Now.Before(r.LeaseUntil)
}

// Abandoned reports whether the record is in progress with a lease that has
// run out at r.Now: its worker stopped heartbeating (it crashed, or hangs),
// and the next duplicate takes it over.
func (r *Record) Abandoned() bool {
	return r.State == StateInProgress && !r.Now.Before(r.LeaseUntil)
}

// CancelRequest is the input of Store.Cancel.
type CancelRequest struct {
	// Key is idemkit.Key.ID() of the record to cancel.
	Key string
	// Reason is kept as the record's Error (Record.Error), byte for byte.
	// The Guard bounds it to MaxErrorBytes.
	Reason string
	// Abandoned cancels the attempt only if it is abandoned: its lease has
	// run out at Now (its worker stopped heartbeating). A live attempt is
	// left alone, and Cancel returns ErrInProgress. A status reader uses it
	// to settle a background run whose worker died, so that a worker that
	// was only slow cannot revive it later.
	Abandoned bool
	// Now is the current time, or zero for the store's clock.
	Now time.Time
}

// LookupRequest is the input of Store.Lookup.
type LookupRequest struct {
	// Key is idemkit.Key.ID() of the record to read.
	Key string
	// Body asks for the stored response body of a completed record, inline
	// or external (one more read for an external one).
	Body bool
	// Now is the current time, or zero for the store's clock.
	Now time.Time
}

// Limits of ListRequest.
const (
	// DefaultListLimit is the page size of List when ListRequest.Limit is 0.
	DefaultListLimit = 100
	// MaxListLimit is the largest page List returns.
	MaxListLimit = 1000
)

// ListRequest is the input of Store.List. Zero fields do not filter.
type ListRequest struct {
	// State keeps only records in this state (StateInProgress lists the
	// claims in flight, abandoned ones included). Zero: any state.
	State RecordState
	// Tool keeps only records of this tool.
	Tool string
	// KeyPrefix keeps only records whose Key starts with it: an operator
	// finds a key by its idemkit.key.hash, the first 32 characters of the
	// 64-character Key.
	KeyPrefix string
	// After starts the page after this Key (keyset pagination: pass the
	// last Key of the previous page). Zero: from the first key.
	After string
	// Limit is the page size. Defaults to DefaultListLimit; at most
	// MaxListLimit.
	Limit int
	// Now is the current time, or zero for the store's clock.
	Now time.Time
}

// PageSize returns the number of records a List of r returns at most:
// Limit, defaulted and capped. Stores use it.
func (r *ListRequest) PageSize() int {
	switch {
	case r.Limit <= 0:
		return DefaultListLimit
	case r.Limit > MaxListLimit:
		return MaxListLimit
	}
	return r.Limit
}

// Validate reports whether r can be listed: a State, if set, must be a
// known one. Stores call it.
func (r *ListRequest) Validate() error {
	if r.State != 0 && (r.State < StateInProgress || r.State > StateReleased) {
		return fmt.Errorf("idemkit: ListRequest.State %d is not a known state", uint8(r.State))
	}
	return nil
}
