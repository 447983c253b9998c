package idemstore

import (
	"context"
	"time"
)

// Store keeps claim records. A record is created by the first Claim of a key
// and lives until its window expires and Sweep deletes it (a store may also
// delete expired records itself, as MemoryStore does). A store with bounded
// room refuses the Claim of a new key when full with an error matching
// ErrStoreFull (see StoreFullError), and never deletes a record that has
// not expired to make room.
//
// The Guard (idemkit.Guard) relies on these guarantees, which
// idemkit/storetest checks for every implementation:
//
//   - Claim is atomic: of any number of concurrent Claims of one key, exactly
//     one acquires it (or takes it over); none may observe a half-written
//     record.
//   - An expired record (window over, and no live lease) never wins against
//     fresh work: Claim replaces it as if it did not exist.
//   - Finish and Extend are fenced by the claim's token: once another caller
//     has taken the claim over, they change nothing and return ErrLeaseLost.
//   - Finish is idempotent for its token: the same request repeated (a retry
//     after a lost acknowledgement) succeeds and changes nothing; the other
//     outcome for the same token is refused with ErrLeaseLost.
//   - Errors a retry may cure match ErrTransient (see Transient); the Guard
//     retries a finish that fails so, until idemkit.Config.FinishTimeout.
//   - A stored body is returned byte for byte, and so are WriteID, Error
//     and Note, whatever bytes they hold (NUL, invalid UTF-8).
//   - The Checksum a successful Finish carries is kept with its outcome
//     and returned with it (ClaimResult.Checksum, Record.Checksum), and
//     never with another outcome of the record: a store that cannot tell
//     returns none. The Guard verifies it on every replay, so that a record
//     damaged in storage is refused instead of replayed (ErrRecordDamaged).
//     A store that keeps no checksum (returns nil) leaves its records
//     unchecked; the storage kind and a missing external body are checked
//     all the same. A Claim that meets a record it cannot read at all (a
//     column holding a value its schema forbids) returns an error
//     matching ErrRecordDamaged, which the Guard answers as it answers a
//     failed checksum: never as a store failure (the call ran), never by
//     running the work again.
//   - A record keeps its generation for its whole life: a claim that
//     creates it (the first of a key, or one that replaces an expired
//     record) stores its own Token as the record's generation; takeovers,
//     heartbeats, finishes and cancellations keep it. Claim reports it
//     (ClaimResult.Generation) to the caller that holds the claim, so that
//     every attempt of one record, on every replica, forwards the same
//     downstream key (Call.IdempotencyKey), and a new record another.
//
// Times: when a request's Now is zero the store uses its own clock (for SQL
// stores, the database's, so that replicas agree); tests set Now to drive
// expiry deterministically. All methods are safe for concurrent use, and ctx
// bounds each call.
type Store interface {
	// Claim claims req.Key for req.Token, or reports the record that stands
	// in the way. It never runs the work and never blocks on an in-progress
	// record (SQL stores may wait for a concurrent transaction holding the
	// record to end, as pgstore.DoTx relies on).
	Claim(ctx context.Context, req ClaimRequest) (ClaimResult, error)

	// Finish records the outcome of the attempt holding req.Token. It returns
	// ErrLeaseLost when the record is no longer held by that token (a repeat
	// of the finish that token already recorded succeeds).
	Finish(ctx context.Context, req FinishRequest) error

	// Extend pushes the lease of the attempt holding req.Token to
	// Now+req.Lease (and the window's end at least that far). It returns
	// ErrLeaseLost when the record is no longer held by that token.
	Extend(ctx context.Context, req ExtendRequest) error

	// Response returns a body that Finish stored apart from the record
	// (StorageExternal). It returns ErrNotFound when there is none.
	Response(ctx context.Context, key string) ([]byte, error)

	// Sweep deletes up to req.Limit expired records (window over and no live
	// lease) and returns how many it deleted. Many callers may sweep at once.
	Sweep(ctx context.Context, req SweepRequest) (int, error)

	// Lookup returns the record of req.Key as it stands, without claiming
	// or changing it, or ErrNotFound when there is none. An expired record
	// not yet swept is returned as it is (Record.Expired tells). With
	// req.Body, a completed record's kept body comes back too.
	Lookup(ctx context.Context, req LookupRequest) (Record, error)

	// Cancel ends the attempt in progress on req.Key, whichever attempt
	// holds it: the record is released (StateReleased) with Cancelled set
	// and req.Reason as its Error, and the attempt is fenced out, so that
	// its later Extend and Finish return ErrLeaseLost (its work learns at
	// its next heartbeat that it must stop). The next Claim of the key
	// takes the record over, as after a failure. It returns the record as
	// it stands afterwards.
	//
	// It changes nothing, and returns the record as it stands, with an
	// error matching ErrNotInProgress when the record is completed or
	// released already, and with ErrInProgress when req.Abandoned is set
	// and the attempt's lease still holds. It returns ErrNotFound when
	// there is no record. Of a Cancel and a Finish racing on one record,
	// exactly one wins.
	Cancel(ctx context.Context, req CancelRequest) (Record, error)

	// List returns up to req.PageSize() records that pass req's filters,
	// in ascending Key order, after req.After; never their bodies. It is
	// for operators and status tools, not for the hot path: a filter on
	// State or Tool may scan the records in key order until a page fills.
	List(ctx context.Context, req ListRequest) ([]Record, error)
}

// ClaimRequest is the input of Store.Claim.
type ClaimRequest struct {
	// Key is idemkit.Key.ID(): the record's identity.
	Key string
	// Tool is the tool name, kept for operators.
	Tool string
	// Fingerprint is idemkit.Key.Fingerprint(): the argument hash for an explicit
	// key, "" for a derived one (whose ID already commits to the
	// arguments). A live record whose fingerprint differs answers
	// ClaimMismatch.
	Fingerprint string
	// Token identifies this attempt; Finish and Extend must present it.
	Token int64
	// Lease is how long the claim holds without a heartbeat.
	Lease time.Duration
	// Window is how long the record deduplicates, from this claim.
	Window time.Duration
	// Now is the current time, or zero for the store's clock.
	Now time.Time
}

// ClaimStatus is what Claim found.
type ClaimStatus uint8

// Claim statuses.
const (
	// ClaimAcquired: no live record existed; the caller holds a fresh claim
	// (attempt 1) and must run the work.
	ClaimAcquired ClaimStatus = iota + 1
	// ClaimTakenOver: the record had failed, or its lease had run out; the
	// caller now holds it (attempt incremented) and must run the work.
	ClaimTakenOver
	// ClaimCompleted: the record holds a stored outcome to replay.
	ClaimCompleted
	// ClaimBusy: another caller holds a live lease on the record.
	ClaimBusy
	// ClaimMismatch: the record was made with a different fingerprint.
	ClaimMismatch
)

func (s ClaimStatus) String() string {
	switch s {
	case ClaimAcquired:
		return "acquired"
	case ClaimTakenOver:
		return "taken_over"
	case ClaimCompleted:
		return "completed"
	case ClaimBusy:
		return "busy"
	case ClaimMismatch:
		return "mismatch"
	}
	return "invalid"
}

// Storage says where a completed record's response body lives.
type Storage uint8

// Storage kinds.
const (
	// StorageInline: the body is in the record and returned by Claim.
	StorageInline Storage = iota
	// StorageExternal: the body is stored apart, read with Store.Response
	// only when a duplicate needs it (never on the claim path).
	StorageExternal
	// StorageDropped: the body exceeded the hard maximum and was not kept;
	// only its size is.
	StorageDropped
)

// Response is what a call produced, as a store keeps it: the body is
// stored and replayed byte for byte (idemkit.Response is this type).
type Response struct {
	// Body is the serialised response (for MCP, the CallToolResult JSON).
	Body []byte
	// WriteID names the downstream write the call made (a refund ID, a row
	// ID). It is stored with the body, so a replay reports the same one.
	WriteID string
	// IsError marks a tool-level error result (MCP isError). Whether such a
	// response is stored and replayed is idemkit.Config.FailurePolicy's
	// choice.
	IsError bool
	// NotKept, in what a call returns to idemkit.Guard.Do, says the work
	// ran but its response cannot be stored (an MCP result that does not
	// encode): the call is recorded as done without a body, as one over
	// MaxResponseBytes is (StorageDropped). Do returns the Result with an
	// *idemkit.ResponseTooLargeError, every duplicate gets one, and the
	// work does not run again within the window. A store never sees it
	// set.
	NotKept bool
}

// ClaimResult is the output of Store.Claim.
type ClaimResult struct {
	Status ClaimStatus
	// Attempt is the record's attempt count (1 for a fresh claim).
	Attempt int
	// Started is when the current attempt claimed the record.
	Started time.Time
	// LeaseUntil is when the current attempt's lease runs out (ClaimBusy).
	LeaseUntil time.Time
	// Now is the store's clock at the claim, when it used its own.
	Now time.Time
	// Generation is the record's generation (ClaimAcquired,
	// ClaimTakenOver): the Token of the claim that created the record,
	// kept by every takeover; 0 for a record written before the store
	// kept generations. See Store.
	Generation int64

	// For ClaimCompleted:
	// Response is the stored outcome; Body is nil unless Storage is
	// StorageInline.
	Response Response
	// Storage says where the body is.
	Storage Storage
	// Size is the body's length in bytes.
	Size int64
	// Checksum is FinishRequest.Checksum as the outcome's finish stored it,
	// or nil (none was stored, as for records written before the store
	// kept checksums).
	Checksum []byte

	// Handle is an in-process store's reference to the record it claimed
	// (ClaimAcquired, ClaimTakenOver), which the Guard hands back as
	// FinishRequest.Handle so that the store need not look the key up
	// again. Stores that have no use for it leave it nil.
	Handle any
}

// FinishRequest is the input of Store.Finish.
type FinishRequest struct {
	Key   string
	Token int64
	// Succeeded stores Response for replay. When false the attempt failed:
	// the record is released for the next caller to take over and Response
	// is ignored.
	Succeeded bool
	Response  Response
	// Storage says where to keep Response.Body; for StorageDropped the body
	// is not kept and Size records its length.
	Storage Storage
	Size    int64
	// Error is a short description of a failure, kept for operators
	// (Record.Error) byte for byte. The Guard bounds it to MaxErrorBytes.
	Error string
	// Checksum, for a success, is what the Guard computed over the
	// outcome (key, storage, size, write ID, error flag and body): the
	// store keeps it with the outcome, byte for byte, and returns it with
	// that outcome only. nil keeps none. In-process stores may ignore it.
	Checksum []byte
	// Now is the current time, or zero for the store's clock.
	Now time.Time

	// Handle is ClaimResult.Handle of the claim this finish ends. A store
	// that set it checks that it still refers to the key's live record
	// before using it.
	Handle any
}

// ExtendRequest is the input of Store.Extend.
type ExtendRequest struct {
	Key   string
	Token int64
	Lease time.Duration
	// Note is a short progress note kept with the record (Record.Note),
	// byte for byte; "" leaves the previous note. The Guard bounds it to
	// MaxNoteBytes.
	Note string
	Now  time.Time
}

// SweepRequest is the input of Store.Sweep.
type SweepRequest struct {
	// Limit caps the records deleted by one call.
	Limit int
	Now   time.Time
}
