package idemkit

import (
	"context"
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
	fingerprint string
	response    Response
	token       int64
	size        int64
	started     int64
	leaseUntil  int64
	expiresAt   int64
	attempt     int32
	state       memState
	storage     Storage
}

func memNow(t time.Time) int64 {
	if t.IsZero() {
		return time.Now().UnixNano()
	}
	return t.UnixNano()
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
	now := memNow(req.Now)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.records == nil {
		s.records = make(map[string]*memRecord)
	}
	r := s.records[req.Key]
	if r == nil || r.expired(now) {
		s.records[req.Key] = &memRecord{
			fingerprint: req.Fingerprint,
			state:       memInProgress,
			token:       req.Token,
			attempt:     1,
			started:     now,
			leaseUntil:  now + int64(req.Lease),
			expiresAt:   now + int64(req.Window),
		}
		t := fromNanos(now)
		return ClaimResult{Status: ClaimAcquired, Attempt: 1, Started: t, Now: t}, nil
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
	r.leaseUntil = now + int64(req.Lease)
	r.expiresAt = max(r.expiresAt, now+int64(req.Window))
	t := fromNanos(now)
	return ClaimResult{Status: ClaimTakenOver, Attempt: int(r.attempt), Started: t, Now: t}, nil
}

// Finish implements Store.
func (s *MemoryStore) Finish(ctx context.Context, req FinishRequest) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.records[req.Key]
	if r == nil || r.token != req.Token || r.state != memInProgress {
		return ErrLeaseLost
	}
	if !req.Succeeded {
		r.state = memFailed
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
	r.leaseUntil = now + int64(req.Lease)
	r.expiresAt = max(r.expiresAt, r.leaseUntil)
	return nil
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
			n++
		}
	}
	return n, nil
}

// Len returns the number of records held, expired or not.
func (s *MemoryStore) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.records)
}
