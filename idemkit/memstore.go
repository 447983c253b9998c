package idemkit

import (
	"context"
	"fmt"

	"github.com/idemkit-mcp/idemkit/idemkit/idemstore"
	"math"
	"slices"
	"strings"
	"sync"
	"time"
)

// Defaults of MemoryStore.
const (
	defaultMemoryMaxRecords = 100_000
	defaultMemoryMaxBytes   = 256 << 20
)

// MemoryStore is a Store that keeps records in process memory. Its zero
// value is ready to use and it is safe for concurrent use. It forgets
// everything when the process exits, and is shared only by the Guards of one
// process: use it for tests, single-process servers that accept losing
// protection on restart, and as the reference implementation of Store.
//
// Its memory is bounded whatever its callers send. It expires its own
// records: each claim of a new key also deletes a few of the records whose
// window has ended (found in an index by expiry time, never by scanning),
// so it needs no sweeper (Guard.Sweep and runSweeper work on it all the
// same). And it holds at most MaxRecords records taking at most about
// MaxBytes: when it is full and none of its records has expired, a Claim
// of a new key fails with an *idemstore.StoreFullError (matching idemstore.ErrStoreFull), so
// nothing runs, and the middleware answers the call with a refusal
// (store_full: nothing was done, retry later). It never evicts a record
// whose window is still open to make room: that would let a duplicate run
// the work again. Duplicates of the calls it holds are answered as ever.
type MemoryStore struct {
	// MaxRecords caps the records held at once, expired ones not yet
	// deleted included. Set it before the store's first use; it must not be
	// negative. Defaults to 100,000.
	MaxRecords int

	// MaxBytes caps the memory of the records, as the store counts it: each
	// record's key, tool name, fingerprint, stored body, write ID, error
	// and note, plus 256 bytes for the record itself and its index entries.
	// A new key is refused once the records take MaxBytes; the outcome of a
	// call that ran is always recorded, so the store may exceed it by the
	// responses of the calls in flight. Set it before the store's first
	// use; it must not be negative. Defaults to 256 MiB.
	MaxBytes int64

	mu      sync.Mutex            // protects the fields below
	records map[string]*memRecord // by key ID; nil until the first Claim
	bytes   int64                 // the records' cost (memRecord.cost), summed
	queue   memQueue              // every record in records, by deadline
}

var _ idemstore.Store = (*MemoryStore)(nil)

type memState uint8

const (
	memInProgress memState = iota + 1
	memSucceeded
	memFailed
)

// memRecord is one claim. Times are Unix nanoseconds: compact, and no
// pointers for the garbage collector to chase. It is laid out to fit a
// 160-byte allocation: a call allocates one per fresh key.
type memRecord struct {
	key         string // the record's key in MemoryStore.records
	tool        string
	fingerprint string
	body        []byte     // the stored response's body (memSucceeded; nil when dropped)
	writeID     string     // the stored response's WriteID
	detail      *memDetail // nil until the record has an error or a note
	token       int64
	generation  int64 // the creating claim's token, kept by takeovers
	size        int64
	started     int64
	leaseUntil  int64
	expiresAt   int64
	updated     int64
	// mono is the current attempt's claim time on the monotonic clock
	// (since memEpoch), when the store's clock took it; 0 when the request
	// brought its own Now. A finish then takes its time as started plus
	// the monotonic time elapsed since: one clock reading, not time.Now's
	// two.
	mono      int64
	attempt   int32
	state     memState
	storage   idemstore.Storage
	isError   bool // the stored response's IsError
	cancelled bool
}

// memDetail holds what few records have: the last attempt's error and
// note.
type memDetail struct {
	lastError, note string
}

// setDetail sets the record's error and note.
func (r *memRecord) setDetail(lastError, note string) {
	switch {
	case lastError == "" && note == "":
		r.detail = nil
	case r.detail == nil:
		r.detail = &memDetail{lastError: lastError, note: note}
	default:
		r.detail.lastError, r.detail.note = lastError, note
	}
}

func (r *memRecord) lastError() string {
	if r.detail == nil {
		return ""
	}
	return r.detail.lastError
}

func (r *memRecord) note() string {
	if r.detail == nil {
		return ""
	}
	return r.detail.note
}

// memEpoch is the origin of memRecord.mono.
var memEpoch = time.Now()

// memGone is the state of a record no longer in the map (swept, or
// replaced by a fresh claim after it expired): a finish holding it as its
// handle is told ErrLeaseLost, as a lookup of the key would say.
const memGone memState = 0

func memNow(t time.Time) int64 {
	if t.IsZero() {
		return time.Now().UnixNano()
	}
	return t.UnixNano()
}

// addDuration returns now+d in Unix nanoseconds, with d clamped to
// [0, MaxDuration] and the sum saturated instead of wrapping.
func addDuration(now int64, d time.Duration) int64 {
	d = min(max(d, 0), MaxDuration)
	if now > math.MaxInt64-int64(d) {
		return math.MaxInt64
	}
	return now + int64(d)
}

func fromNanos(n int64) time.Time { return time.Unix(0, n) }

// expired reports whether r no longer deduplicates at now: its window is
// over and no live lease holds it.
func (r *memRecord) expired(now int64) bool {
	if now < r.expiresAt {
		return false
	}
	return r.state != memInProgress || now >= r.leaseUntil
}

// Claim implements Store.
func (s *MemoryStore) Claim(ctx context.Context, req idemstore.ClaimRequest) (idemstore.ClaimResult, error) {
	var res idemstore.ClaimResult
	err := s.claim(ctx, &req, &res)
	return res, err
}

// claim is Claim with its request and result by pointer: the Guard calls it
// directly, sparing the copies of both (about 270 bytes), which cost more
// than the claim itself.
func (s *MemoryStore) claim(ctx context.Context, req *idemstore.ClaimRequest, res *idemstore.ClaimResult) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	var now, mono int64
	if req.Now.IsZero() {
		t := time.Now()
		now, mono = t.UnixNano(), int64(t.Sub(memEpoch))
	} else {
		now = req.Now.UnixNano()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.records == nil {
		if err := s.validate(); err != nil {
			return err
		}
		s.records = make(map[string]*memRecord)
	}
	r := s.records[req.Key]
	if r == nil || r.expired(now) {
		if s.queue.dueBy(now) {
			// Amortised sweeping: a few of the records due are examined
			// with every new one (r among them, perhaps).
			s.sweepDue(now, memSweepStep, 0)
		}
		if r != nil && r.state != memGone {
			s.forget(r) // replaced below, in place: the count stays
		} else if err := s.makeRoom(now, req); err != nil {
			return err
		}
		r = &memRecord{
			key:         req.Key,
			tool:        req.Tool,
			fingerprint: req.Fingerprint,
			state:       memInProgress,
			token:       req.Token,
			generation:  req.Token,
			attempt:     1,
			started:     now,
			leaseUntil:  addDuration(now, req.Lease),
			expiresAt:   addDuration(now, req.Window),
			updated:     now,
			mono:        mono,
		}
		s.records[req.Key] = r
		s.bytes += r.cost()
		s.queue.push(r, r.deadline())
		t := fromNanos(now)
		*res = idemstore.ClaimResult{Status: idemstore.ClaimAcquired, Attempt: 1, Started: t, Now: t, Generation: req.Token, Handle: r}
		return nil
	}
	if r.fingerprint != req.Fingerprint {
		*res = idemstore.ClaimResult{Status: idemstore.ClaimMismatch, Attempt: int(r.attempt), Started: fromNanos(r.started), Now: fromNanos(now)}
		return nil
	}
	switch {
	case r.state == memSucceeded:
		*res = idemstore.ClaimResult{
			Status: idemstore.ClaimCompleted, Attempt: int(r.attempt), Started: fromNanos(r.started), Now: fromNanos(now),
			Response: Response{WriteID: r.writeID, IsError: r.isError}, Storage: r.storage, Size: r.size,
		}
		if r.storage == idemstore.StorageInline {
			res.Response.Body = append([]byte(nil), r.body...)
		} // an external body is never read on the claim path
		return nil
	case r.state == memInProgress && now < r.leaseUntil:
		*res = idemstore.ClaimResult{Status: idemstore.ClaimBusy, Attempt: int(r.attempt), Started: fromNanos(r.started), LeaseUntil: fromNanos(r.leaseUntil), Now: fromNanos(now)}
		return nil
	}
	// Failed, or in progress with a lapsed lease: take it over. (Its
	// deadline moves later: the index finds that when it comes to it.)
	s.bytes -= r.cost()
	r.state = memInProgress
	r.token = req.Token
	r.attempt++
	r.started = now
	r.leaseUntil = addDuration(now, req.Lease)
	r.expiresAt = max(r.expiresAt, addDuration(now, req.Window))
	r.updated = now
	r.mono = mono
	r.detail, r.cancelled = nil, false
	s.bytes += r.cost()
	t := fromNanos(now)
	*res = idemstore.ClaimResult{Status: idemstore.ClaimTakenOver, Attempt: int(r.attempt), Started: t, Now: t, Generation: r.generation, Handle: r}
	return nil
}

// Finish implements Store.
func (s *MemoryStore) Finish(ctx context.Context, req idemstore.FinishRequest) error {
	return s.finish(ctx, &req)
}

// finish is Finish with its request by pointer, for the Guard (see claim).
func (s *MemoryStore) finish(ctx context.Context, req *idemstore.FinishRequest) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	// The claim's record, handed back by the Guard, saves a lookup; a
	// record no longer in the map is memGone.
	r, ok := req.Handle.(*memRecord)
	if !ok {
		r = s.records[req.Key]
	}
	if r == nil || r.token != req.Token {
		return ErrLeaseLost
	}
	switch {
	case r.state == memSucceeded && req.Succeeded, r.state == memFailed && !req.Succeeded:
		return nil // this attempt's finish, repeated: already done
	case r.state != memInProgress:
		return ErrLeaseLost
	}
	if req.Now.IsZero() && r.mono > 0 {
		r.updated = r.started + int64(time.Since(memEpoch)) - r.mono
	} else {
		r.updated = memNow(req.Now)
	}
	s.bytes -= r.cost()
	deadline := r.deadline()
	if !req.Succeeded {
		r.state = memFailed
		r.setDetail(req.Error, r.note())
		s.bytes += r.cost()
		s.requeue(r, deadline)
		return nil
	}
	r.state = memSucceeded
	r.storage = req.Storage
	r.size = req.Size
	r.writeID, r.isError = req.Response.WriteID, req.Response.IsError
	r.body = nil
	if req.Storage != idemstore.StorageDropped {
		// Keep a private copy: the caller may reuse its buffer.
		r.body = append([]byte(nil), req.Response.Body...)
	}
	s.bytes += r.cost()
	s.requeue(r, deadline)
	return nil
}

// Extend implements Store.
func (s *MemoryStore) Extend(ctx context.Context, req idemstore.ExtendRequest) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	now := memNow(req.Now)
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.records[req.Key]
	if r == nil || r.token != req.Token || r.state != memInProgress {
		return ErrLeaseLost
	}
	deadline := r.deadline()
	r.leaseUntil = addDuration(now, req.Lease)
	r.expiresAt = max(r.expiresAt, r.leaseUntil)
	r.updated = now
	s.requeue(r, deadline) // a shorter lease than the last one
	if req.Note != "" {
		before := r.cost()
		r.setDetail(r.lastError(), req.Note)
		s.bytes += r.cost() - before
	}
	return nil
}

// Cancel implements Store.
func (s *MemoryStore) Cancel(ctx context.Context, req idemstore.CancelRequest) (idemstore.Record, error) {
	if err := ctx.Err(); err != nil {
		return idemstore.Record{}, err
	}
	now := memNow(req.Now)
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.records[req.Key]
	switch {
	case r == nil:
		return idemstore.Record{}, ErrNotFound
	case r.state != memInProgress:
		return r.record(req.Key, now), ErrNotInProgress
	case req.Abandoned && now < r.leaseUntil:
		return r.record(req.Key, now), ErrInProgress
	}
	before, deadline := r.cost(), r.deadline()
	r.state = memFailed
	r.token = 0 // no attempt holds token 0: the running one is fenced out
	r.setDetail(req.Reason, r.note())
	s.bytes += r.cost() - before
	s.requeue(r, deadline)
	r.cancelled = true
	r.updated = now
	return r.record(req.Key, now), nil
}

// Response implements Store. The memory store keeps every body in the
// record; external ones are returned from there.
func (s *MemoryStore) Response(ctx context.Context, key string) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.records[key]
	if r == nil || r.state != memSucceeded || r.storage != idemstore.StorageExternal {
		return nil, ErrNotFound
	}
	return append([]byte(nil), r.body...), nil
}

// Sweep implements Store. It deletes the expired records found through
// the expiry index (a record is found within 100 ms of its deadline), never
// scanning the others.
func (s *MemoryStore) Sweep(ctx context.Context, req idemstore.SweepRequest) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	now := memNow(req.Now)
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sweepDue(now, -1, req.Limit), nil
}

// Lookup implements Store.
func (s *MemoryStore) Lookup(ctx context.Context, req idemstore.LookupRequest) (idemstore.Record, error) {
	if err := ctx.Err(); err != nil {
		return idemstore.Record{}, err
	}
	now := memNow(req.Now)
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.records[req.Key]
	if r == nil {
		return idemstore.Record{}, ErrNotFound
	}
	rec := r.record(req.Key, now)
	if req.Body && r.state == memSucceeded && r.storage != idemstore.StorageDropped {
		rec.Body = append([]byte{}, r.body...)
	}
	return rec, nil
}

// List implements Store.
func (s *MemoryStore) List(ctx context.Context, req idemstore.ListRequest) ([]idemstore.Record, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := req.Validate(); err != nil {
		return nil, err
	}
	now := memNow(req.Now)
	limit := req.PageSize()
	s.mu.Lock()
	defer s.mu.Unlock()
	var keys []string
	for k, r := range s.records {
		if k <= req.After && req.After != "" ||
			!strings.HasPrefix(k, req.KeyPrefix) ||
			req.Tool != "" && r.tool != req.Tool ||
			req.State != 0 && r.recordState() != req.State {
			continue
		}
		keys = append(keys, k)
	}
	slices.Sort(keys)
	keys = keys[:min(len(keys), limit)]
	out := make([]idemstore.Record, len(keys))
	for i, k := range keys {
		out[i] = s.records[k].record(k, now)
	}
	return out, nil
}

func (r *memRecord) recordState() idemstore.RecordState {
	switch r.state {
	case memSucceeded:
		return idemstore.StateCompleted
	case memFailed:
		return idemstore.StateReleased
	}
	return idemstore.StateInProgress
}

// record returns r as a Record, without its body.
func (r *memRecord) record(key string, now int64) idemstore.Record {
	rec := idemstore.Record{
		Key:         key,
		Tool:        r.tool,
		Fingerprint: r.fingerprint,
		State:       r.recordState(),
		Attempt:     int(r.attempt),
		Generation:  r.generation,
		Started:     fromNanos(r.started),
		LeaseUntil:  fromNanos(r.leaseUntil),
		ExpiresAt:   fromNanos(r.expiresAt),
		Now:         fromNanos(now),
		Error:       r.lastError(),
		Note:        r.note(),
		Cancelled:   r.cancelled,
		Updated:     fromNanos(r.updated),
	}
	if r.state == memSucceeded {
		rec.WriteID = r.writeID
		rec.IsError = r.isError
		rec.Storage = r.storage
		rec.Size = r.size
	}
	return rec
}

// Len returns the number of records held, expired or not.
func (s *MemoryStore) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.records)
}

// bytesUsed returns the memory the records take as MaxBytes counts it.
func (s *MemoryStore) bytesUsed() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bytes
}

// validate checks the limits set on s.
func (s *MemoryStore) validate() error {
	switch {
	case s.MaxRecords < 0:
		return fmt.Errorf("idemkit: MemoryStore.MaxRecords must not be negative, got %d", s.MaxRecords)
	case s.MaxBytes < 0:
		return fmt.Errorf("idemkit: MemoryStore.MaxBytes must not be negative, got %d", s.MaxBytes)
	}
	return nil
}

func (s *MemoryStore) maxRecords() int {
	if s.MaxRecords > 0 {
		return s.MaxRecords
	}
	return defaultMemoryMaxRecords
}

func (s *MemoryStore) maxBytes() int64 {
	if s.MaxBytes > 0 {
		return s.MaxBytes
	}
	return defaultMemoryMaxBytes
}

// makeRoom returns nil when a record for req may be added: the store is
// below its limits, or is once every expired record due has been deleted.
// Otherwise it returns an *idemstore.StoreFullError, and nothing is evicted: every
// record left holds a window still open. s.mu must be held.
func (s *MemoryStore) makeRoom(now int64, req *idemstore.ClaimRequest) error {
	maxRecords, maxBytes := s.maxRecords(), s.maxBytes()
	need := int64(memRecordOverhead + len(req.Key) + len(req.Tool) + len(req.Fingerprint))
	if len(s.records) < maxRecords && s.bytes+need <= maxBytes {
		return nil
	}
	s.sweepDue(now, -1, 0)
	if len(s.records) < maxRecords && s.bytes+need <= maxBytes {
		return nil
	}
	e := &idemstore.StoreFullError{Records: len(s.records), MaxRecords: maxRecords, Bytes: s.bytes, MaxBytes: maxBytes}
	if len(s.queue.heap) > 0 && s.queue.next > now {
		e.RetryAfter = time.Duration(s.queue.next - now)
	}
	return e
}
