// Package dedupapi is a fake payment provider on net/http for tests: POST
// /refunds makes a refund, deduplicated by an idempotency-key header for a
// time to live (24 hours by default), as Stripe does. A request repeating
// a key inside that time gets the first request's answer back and moves
// no money; a request without the key is never deduplicated.
package dedupapi

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"
)

// DefaultTTL is how long a key deduplicates: Stripe's 24 hours.
const DefaultTTL = 24 * time.Hour

// Server is the provider. Set its fields before serving; it is safe for
// concurrent use.
type Server struct {
	// Header carries the key. Defaults to "Idempotency-Key".
	Header string
	// TTL is how long a key deduplicates. Defaults to DefaultTTL.
	TTL time.Duration
	// Now is the provider's clock. Defaults to time.Now.
	Now func() time.Time
	// DropFirstAnswer, when set, makes the provider close the connection
	// without answering after it made a new refund: the money moved, the
	// answer was lost (a proxy timeout, a reset). A client that retries
	// with the same key gets the refund back.
	DropFirstAnswer bool

	mu       sync.Mutex // protects the fields below
	seen     map[string]entry
	refunds  []Refund
	requests []Request
}

type entry struct {
	at   time.Time
	body []byte
}

// Refund is a refund the provider made: money that moved.
type Refund struct {
	ID   string `json:"id"`
	Key  string `json:"key,omitempty"`
	Body string `json:"body"`
}

// Request is a request the provider received.
type Request struct {
	Method, Path, Key string
	// Replayed says the answer was the first request's.
	Replayed bool
}

func (s *Server) header() string {
	if s.Header == "" {
		return "Idempotency-Key"
	}
	return s.Header
}

func (s *Server) now() time.Time {
	if s.Now == nil {
		return time.Now()
	}
	return s.Now()
}

// ServeHTTP implements http.Handler: POST /refunds makes (or replays) a
// refund and answers {"id":…,"key":…,"body":…}; anything else answers 200
// with no side effect (a health check that warms a connection).
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get(s.header())
	if r.Method != http.MethodPost || r.URL.Path != "/refunds" {
		s.mu.Lock()
		s.requests = append(s.requests, Request{Method: r.Method, Path: r.URL.Path, Key: key})
		s.mu.Unlock()
		w.WriteHeader(http.StatusOK)
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	if s.seen == nil {
		s.seen = map[string]entry{}
	}
	now := s.now()
	ttl := s.TTL
	if ttl == 0 {
		ttl = DefaultTTL
	}
	if e, ok := s.seen[key]; key != "" && ok && now.Sub(e.at) < ttl {
		s.requests = append(s.requests, Request{Method: r.Method, Path: r.URL.Path, Key: key, Replayed: true})
		s.mu.Unlock()
		w.Header().Set("Idempotent-Replayed", "true")
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(e.body)
		return
	}
	ref := Refund{ID: fmt.Sprintf("re_%d", len(s.refunds)+1), Key: key, Body: string(body)}
	out, _ := json.Marshal(ref)
	s.refunds = append(s.refunds, ref)
	s.requests = append(s.requests, Request{Method: r.Method, Path: r.URL.Path, Key: key})
	if key != "" {
		s.seen[key] = entry{at: now, body: out}
	}
	drop := s.DropFirstAnswer
	s.mu.Unlock()
	if drop {
		if hj, ok := w.(http.Hijacker); ok {
			if conn, _, err := hj.Hijack(); err == nil {
				conn.Close()
				return
			}
		}
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(out)
}

// Refunds returns the refunds made so far.
func (s *Server) Refunds() []Refund {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Refund(nil), s.refunds...)
}

// Requests returns the requests received so far.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}
