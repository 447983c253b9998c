package idemkit

import (
	"context"
	"math"
	"slices"
	"strings"
	"sync"
	"time"
)

// MemoryStore is a Store that keeps records in process memory. Its zero
// value is ready to use and it is safe for concurrent use. It forgets
// everything when the process exits, and is shared only by the Guards of one
// process: use it for tests, single-process servers that accept losing
// protection on restart, and as the reference implementation of Store.
// Records are deleted by Sweep (Guard.RunSweeper); nothing else bounds its
// size.
type MemoryStore struct {
	mu      sync.Mutex            // protects records
	records map[string]*memRecord // by key ID; nil until the first Claim
}

var _ Store = (*MemoryStore)(nil)

func (*MemoryStore) inProcess() {}

type memState uint8

const (
	memInProgress memState = iota + 1
	memSucceeded
	memFailed
)

// memRecord is one claim. Times are Unix nanoseconds: compact, and no
// pointers for the garbage collector to chase.
type memRecord struct {
	tool        string
	fingerprint string
	lastError   string
	note        string
	response    Response
	token       int64
	size        int64
	started     int64
	leaseUntil  int64
	expiresAt   int64
	updated     int64
	attempt     int32
	state       memState
	storage     Storage
	cancelled   bool
	// mono is the current attempt's claim time on the monotonic clock
	// (since memEpoch), when the store's clock took it; 0 when the request
	// brought its own Now. A finish then takes its time as started plus
	// the monotonic time elapsed since: one clock reading, not time.Now's
	// two.
	mono int64
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
func (s *MemoryStore) Claim(ctx context.Context, req ClaimRequest) (ClaimResult, error) {
	if err := ctx.Err(); err != nil {
		return ClaimResult{}, err
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
		s.records = make(map[string]*memRecord)
	}
	r := s.records[req.Key]
	if r == nil || r.expired(now) {
		if r != nil {
			r.state = memGone
		}
		r = &memRecord{
			tool:        req.Tool,
			fingerprint: req.Fingerprint,
			state:       memInProgress,
			token:       req.Token,
			attempt:     1,
			started:     now,
			leaseUntil:  addDuration(now, req.Lease),
			expiresAt:   addDuration(now, req.Window),
			updated:     now,
			mono:        mono,
		}
		s.records[req.Key] = r
		t := fromNanos(now)
		return ClaimResult{Status: ClaimAcquired, Attempt: 1, Started: t, Now: t, handle: r}, nil
	}
	if r.fingerprint != req.Fingerprint {
		return ClaimResult{Status: ClaimMismatch, Attempt: int(r.attempt), Started: fromNanos(r.started), Now: fromNanos(now)}, nil
	}
	switch {
	case r.state == memSucceeded:
		res := ClaimResult{
			Status: ClaimCompleted, Attempt: int(r.attempt), Started: fromNanos(r.started), Now: fromNanos(now),
			Response: r.response, Storage: r.storage, Size: r.size,
		}
		if r.storage == StorageInline {
			res.Response.Body = append([]byte(nil), r.response.Body...)
		} else {
			res.Response.Body = nil // never read on the claim path
		}
		return res, nil
	case r.state == memInProgress && now < r.leaseUntil:
		return ClaimResult{Status: ClaimBusy, Attempt: int(r.attempt), Started: fromNanos(r.started), LeaseUntil: fromNanos(r.leaseUntil), Now: fromNanos(now)}, nil
	}
	// Failed, or in progress with a lapsed lease: take it over.
	r.state = memInProgress
	r.token = req.Token
	r.attempt++
	r.started = now
	r.leaseUntil = addDuration(now, req.Lease)
	r.expiresAt = max(r.expiresAt, addDuration(now, req.Window))
	r.updated = now
	r.mono = mono
	r.lastError, r.note, r.cancelled = "", "", false
	t := fromNanos(now)
	return ClaimResult{Status: ClaimTakenOver, Attempt: int(r.attempt), Started: t, Now: t, handle: r}, nil
}

// Finish implements Store.
func (s *MemoryStore) Finish(ctx context.Context, req FinishRequest) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	// The claim's record, handed back by the Guard, saves a lookup; a
	// record no longer in the map is memGone.
	r, ok := req.handle.(*memRecord)
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
	if !req.Succeeded {
		r.state = memFailed
		r.lastError = req.Error
		return nil
	}
	r.state = memSucceeded
	r.storage = req.Storage
	r.size = req.Size
	r.response = req.Response
	if req.Storage == StorageDropped {
		r.response.Body = nil
	} else {
		// Keep a private copy: the caller may reuse its buffer.
		r.response.Body = append([]byte(nil), req.Response.Body...)
	}
	return nil
}

// Extend implements Store.
func (s *MemoryStore) Extend(ctx context.Context, req ExtendRequest) error {
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
	r.leaseUntil = addDuration(now, req.Lease)
	r.expiresAt = max(r.expiresAt, r.leaseUntil)
	r.updated = now
	if req.Note != "" {
		r.note = req.Note
	}
	return nil
}

// Cancel implements Store.
func (s *MemoryStore) Cancel(ctx context.Context, req CancelRequest) (Record, error) {
	if err := ctx.Err(); err != nil {
		return Record{}, err
	}
	now := memNow(req.Now)
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.records[req.Key]
	switch {
	case r == nil:
		return Record{}, ErrNotFound
	case r.state != memInProgress:
		return r.record(req.Key, now), ErrNotInProgress
	case req.Abandoned && now < r.leaseUntil:
		return r.record(req.Key, now), ErrInProgress
	}
	r.state = memFailed
	r.token = 0 // no attempt holds token 0: the running one is fenced out
	r.lastError = req.Reason
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
	if r == nil || r.state != memSucceeded || r.storage != StorageExternal {
		return nil, ErrNotFound
	}
	return append([]byte(nil), r.response.Body...), nil
}

// Sweep implements Store.
func (s *MemoryStore) Sweep(ctx context.Context, req SweepRequest) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	now := memNow(req.Now)
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for k, r := range s.records {
		if req.Limit > 0 && n >= req.Limit {
			break
		}
		if r.expired(now) {
			delete(s.records, k)
			r.state = memGone
			n++
		}
	}
	return n, nil
}

// Lookup implements Store.
func (s *MemoryStore) Lookup(ctx context.Context, req LookupRequest) (Record, error) {
	if err := ctx.Err(); err != nil {
		return Record{}, err
	}
	now := memNow(req.Now)
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.records[req.Key]
	if r == nil {
		return Record{}, ErrNotFound
	}
	rec := r.record(req.Key, now)
	if req.Body && r.state == memSucceeded && r.storage != StorageDropped {
		rec.Body = append([]byte{}, r.response.Body...)
	}
	return rec, nil
}

// List implements Store.
func (s *MemoryStore) List(ctx context.Context, req ListRequest) ([]Record, error) {
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
	out := make([]Record, len(keys))
	for i, k := range keys {
		out[i] = s.records[k].record(k, now)
	}
	return out, nil
}

func (r *memRecord) recordState() RecordState {
	switch r.state {
	case memSucceeded:
		return StateCompleted
	case memFailed:
		return StateReleased
	}
	return StateInProgress
}

// record returns r as a Record, without its body.
func (r *memRecord) record(key string, now int64) Record {
	rec := Record{
		Key:         key,
		Tool:        r.tool,
		Fingerprint: r.fingerprint,
		State:       r.recordState(),
		Attempt:     int(r.attempt),
		Started:     fromNanos(r.started),
		LeaseUntil:  fromNanos(r.leaseUntil),
		ExpiresAt:   fromNanos(r.expiresAt),
		Now:         fromNanos(now),
		Error:       r.lastError,
		Note:        r.note,
		Cancelled:   r.cancelled,
		Updated:     fromNanos(r.updated),
	}
	if r.state == memSucceeded {
		rec.WriteID = r.response.WriteID
		rec.IsError = r.response.IsError
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
