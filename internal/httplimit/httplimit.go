// Package httplimit bounds what the clients of an MCP Streamable HTTP
// handler may hold: the sessions open at once, how long an idle session
// lives, and the size of a request body. The SDK adapters'
// NewStreamableHTTPHandler put a Handler in front of the SDK's own (see
// instrument.HTTPLimits for the limits as users set them).
package httplimit

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// SessionHeader is the Streamable HTTP session header.
const SessionHeader = "Mcp-Session-Id"

// RefusalMetaKey names the data member of the JSON-RPC errors a Handler
// answers with, as idemkit's tool refusals do: {"reason": "…"}.
const RefusalMetaKey = "io.idemkit/refusal"

// Reasons of the refusals a Handler answers with.
const (
	// ReasonTooManySessions: the server has MaxSessions sessions open.
	ReasonTooManySessions = "too_many_sessions"
	// ReasonBodyTooLarge: the request body is over MaxBodyBytes.
	ReasonBodyTooLarge = "body_too_large"
)

// Defaults of the limits (instrument.HTTPLimits documents them).
const (
	DefaultMaxSessions  = 10_000
	DefaultIdleTimeout  = 30 * time.Minute
	DefaultMaxBodyBytes = 4 << 20
)

// Defaults of instrument.NewHTTPServer (which documents them).
const (
	ServerReadHeaderTimeout = 10 * time.Second
	ServerReadTimeout       = 30 * time.Second
	ServerIdleTimeout       = 2 * time.Minute
	ServerMaxHeaderBytes    = 64 << 10
)

// Limits are the limits of a Handler. A field at zero or below disables
// its limit (Resolve gives the defaults).
type Limits struct {
	MaxSessions  int
	IdleTimeout  time.Duration
	MaxBodyBytes int64
}

// Resolve returns the limits of an instrument.HTTPLimits: a zero field
// takes its default, a negative one means no limit (zero).
func Resolve(maxSessions int, idle time.Duration, maxBody int64) Limits {
	pick := func(v, def int64) int64 {
		switch {
		case v == 0:
			return def
		case v < 0:
			return 0
		}
		return v
	}
	return Limits{
		MaxSessions:  int(pick(int64(maxSessions), DefaultMaxSessions)),
		IdleTimeout:  time.Duration(pick(int64(idle), int64(DefaultIdleTimeout))),
		MaxBodyBytes: pick(maxBody, DefaultMaxBodyBytes),
	}
}

// Sessions counts the sessions of one handler, and ends those idle for
// longer than the idle timeout. It is safe for concurrent use. The idle
// check runs on a timer armed while sessions exist (no goroutine waits in
// between).
type Sessions struct {
	max  int
	idle time.Duration
	end  func(id string) // ends a session found idle that has no end of its own

	mu       sync.Mutex // protects the fields below
	live     map[string]*session
	reserved int         // requests that may open a session, being served
	timer    *time.Timer // the idle check; nil when not armed
}

type session struct {
	refs  int       // requests of the session being served
	last  time.Time // when the last one ended (or the session opened)
	end   func()    // ends it; nil: Sessions.end
	owner [sha256.Size]byte
	bound bool // owner is set (Handler.Subject)
}

// NewSessions returns a session count under l's MaxSessions and
// IdleTimeout; end ends a session found idle (its own end, given to Add,
// comes first).
func NewSessions(l Limits, end func(id string)) *Sessions {
	return &Sessions{max: l.MaxSessions, idle: l.IdleTimeout, end: end, live: map[string]*session{}}
}

// Reserve reserves room for a session that the request about to be served
// may open, and reports whether there was room. Release it once the
// request is served (after Add, when it opened one).
func (s *Sessions) Reserve() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.max > 0 && len(s.live)+s.reserved >= s.max {
		return false
	}
	s.reserved++
	return true
}

// Release releases a reservation.
func (s *Sessions) Release() {
	s.mu.Lock()
	s.reserved--
	s.mu.Unlock()
}

// Add records the session id, opened now; end (nil: the Sessions' own)
// ends it once idle.
func (s *Sessions) Add(id string, end func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ss := s.live[id]; ss != nil {
		ss.end = end // bound before it was added: keep its owner
	} else {
		s.live[id] = &session{last: time.Now(), end: end}
	}
	s.armLocked()
}

// Owner is what a session records of the subject of the request that
// opened it, and what every later request's must match: the SHA-256 of
// the subject, or of "none" without one (a subject is prefixed, so that
// none can be taken for "none").
func Owner(subject string) [sha256.Size]byte {
	if subject == "" {
		return sha256.Sum256([]byte("none"))
	}
	return sha256.Sum256([]byte("subject:" + subject))
}

// bind records owner as the owner of the session id, adding it when it is
// not known yet (its Add comes later).
func (s *Sessions) bind(id string, owner [sha256.Size]byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ss := s.live[id]
	if ss == nil {
		ss = &session{last: time.Now()}
		s.live[id] = ss
		s.armLocked()
	}
	ss.owner, ss.bound = owner, true
}

// settle releases a reservation whose request opened the session id, once
// the session counts among those open, and reports whether it did.
func (s *Sessions) settle(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.live[id]; !ok {
		return false
	}
	s.reserved--
	return true
}

// owner returns the owner of the session id and whether it is bound.
func (s *Sessions) owner(id string) (owner [sha256.Size]byte, bound bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ss := s.live[id]; ss != nil && ss.bound {
		return ss.owner, true
	}
	return owner, false
}

// MayUse reports whether a request with method and subject may use a
// session that owner owns (Owner of the subject of the request that
// opened it), comparing in constant time. The one exception to a match: a
// DELETE without any credential (subject "") may end any session,
// because mcp-go's client (v1.2.1) sends its closing DELETE without the
// headers it sends on every other request; ending a session reveals
// nothing and runs nothing, and without it every such client's session
// would hold its slot until the idle timeout. The idemkit gateway applies
// the same rule.
func MayUse(owner [sha256.Size]byte, method, subject string) bool {
	if subject == "" && method == http.MethodDelete {
		return true
	}
	o := Owner(subject)
	return subtle.ConstantTimeCompare(o[:], owner[:]) == 1
}

// Remove forgets the session id (it ended), and reports whether it was
// known.
func (s *Sessions) Remove(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.live[id]
	delete(s.live, id)
	return ok
}

// Has reports whether the session id is open.
func (s *Sessions) Has(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.live[id]
	return ok
}

// Len returns the number of sessions open.
func (s *Sessions) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.live)
}

// begin marks a request of the session id as being served (the session is
// not idle meanwhile), and reports whether the session is known.
func (s *Sessions) begin(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ss := s.live[id]; ss != nil {
		ss.refs++
		return true
	}
	return false
}

// done ends what begin started.
func (s *Sessions) done(id string) {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if ss := s.live[id]; ss != nil {
		ss.refs--
		ss.last = now
	}
}

// period is how often the idle check runs: a session is ended between
// IdleTimeout and IdleTimeout+period after its last request.
func (s *Sessions) period() time.Duration {
	return min(max(s.idle/4, 10*time.Millisecond), time.Minute)
}

func (s *Sessions) armLocked() {
	if s.idle <= 0 || s.timer != nil || len(s.live) == 0 {
		return
	}
	s.timer = time.AfterFunc(s.period(), s.reap)
}

// reap ends the sessions idle for longer than the idle timeout. They count
// until they have ended (their state is freed), and no other check runs
// meanwhile (s.timer stays set).
func (s *Sessions) reap() {
	now := time.Now()
	type idle struct {
		id  string
		end func()
	}
	var ended []idle
	s.mu.Lock()
	for id, ss := range s.live {
		if ss.refs == 0 && now.Sub(ss.last) >= s.idle {
			ended = append(ended, idle{id, ss.end})
		}
	}
	s.mu.Unlock()
	for _, e := range ended {
		switch {
		case e.end != nil:
			e.end()
		case s.end != nil:
			s.end(e.id)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range ended {
		delete(s.live, e.id)
	}
	s.timer = nil
	s.armLocked()
}

// Handler bounds the requests to Next. Build it with its fields set and do
// not change them afterwards.
type Handler struct {
	Next     http.Handler
	Limits   Limits
	Sessions *Sessions
	// ReadsBody makes the Handler enforce Limits.MaxBodyBytes itself (for
	// an SDK that reads any body whole); otherwise Next does.
	ReadsBody bool
	// Opened, when set, is called after a POST without a session was
	// served, with the session ID its response carried (if any): it
	// returns how to end that session when it is open, or nil when the
	// request opened none that lasts. When nil, the SDK's session manager
	// adds and removes sessions itself (Sessions.Add, Remove).
	Opened func(r *http.Request, id string) (end func())
	// WatchDelete makes the Handler forget a session its DELETE ended
	// (when the SDK's session manager does not tell it).
	WatchDelete bool
	// StrictGET answers a GET without a known session with 400 or 404
	// before Next sees it (for an SDK that opens a session for such a GET
	// without validating it).
	StrictGET bool
	// Subject, when set, binds each session to the subject of the request
	// that opened it (Owner, recorded before the first byte of its answer):
	// a later request on it whose subject differs (a stolen or guessed
	// session ID, a credential dropped or added) gets the SDK's 404 for an
	// unknown session and never reaches Next. One exception (MayUse): a
	// DELETE that carries no credential at all (Subject returns "") may
	// end any session; a DELETE with another caller's credential is
	// refused.
	Subject func(r *http.Request) string
}

// mayUse reports whether r may use the session id under Subject's binding
// (MayUse); a session not bound yet is no one's.
func (h *Handler) mayUse(r *http.Request, id string) bool {
	owner, bound := h.Sessions.owner(id)
	if !bound {
		owner = [sha256.Size]byte{} // no subject's Owner
	}
	return MayUse(owner, r.Method, h.Subject(r))
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodPost && h.ReadsBody && h.Limits.MaxBodyBytes > 0 && !h.boundBody(w, r) {
		return
	}
	id := r.Header.Get(SessionHeader)
	switch {
	case id != "":
		if !h.Sessions.begin(id) {
			if h.StrictGET && r.Method == http.MethodGet {
				http.Error(w, "session not found: initialize a new session", http.StatusNotFound)
				return
			}
			h.Next.ServeHTTP(w, r) // the SDK answers an unknown session (404)
			return
		}
		defer h.Sessions.done(id)
		if h.Subject != nil && !h.mayUse(r, id) {
			// As for an unknown session: a prober learns nothing.
			http.Error(w, "session not found", http.StatusNotFound)
			return
		}
		if r.Method == http.MethodDelete && h.WatchDelete {
			sw := &StatusWriter{ResponseWriter: w}
			h.Next.ServeHTTP(sw, r)
			if sw.Status/100 == 2 {
				h.Sessions.Remove(id)
			}
			return
		}
	case r.Method == http.MethodPost:
		if !h.Sessions.Reserve() {
			h.refuseSession(w, r)
			return
		}
		// The reservation ends when the session it made room for is open
		// (its ID in the response's headers, before the client can see
		// it: from then on the session itself counts) or, when none
		// opened, once the request is served.
		bw := &bindingWriter{StatusWriter: StatusWriter{ResponseWriter: w}, sessions: h.Sessions}
		if h.Subject != nil {
			bw.owner, bw.binds = Owner(h.Subject(r)), true
		}
		defer func() {
			if !bw.settled {
				h.Sessions.Release()
			}
		}()
		h.Next.ServeHTTP(bw, r)
		if h.Opened != nil {
			if id := w.Header().Get(SessionHeader); id != "" {
				if end := h.Opened(r, id); end != nil {
					h.Sessions.Add(id, end)
				} else if bw.bound {
					h.Sessions.Remove(id) // bound, but it did not last
				}
			}
		}
		return
	case r.Method == http.MethodGet && h.StrictGET:
		http.Error(w, "a GET needs the Mcp-Session-Id of an initialized session", http.StatusBadRequest)
		return
	}
	h.Next.ServeHTTP(w, r)
}

// boundBody answers a POST whose body is over the limit with 413 and
// reports false; otherwise it leaves the body readable (buffered when its
// length was not declared) and reports true.
func (h *Handler) boundBody(w http.ResponseWriter, r *http.Request) bool {
	limit := h.Limits.MaxBodyBytes
	switch {
	case r.ContentLength > limit:
		// Refused unread: its declared length is over the limit.
		writeBodyTooLarge(w, limit)
		return false
	case r.ContentLength >= 0 || r.Body == nil || r.Body == http.NoBody:
		return true // the server reads no more than the declared length
	}
	b, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
	switch {
	case int64(len(b)) > limit:
		writeBodyTooLarge(w, limit)
		return false
	case err != nil:
		http.Error(w, "reading the request body failed: "+err.Error(), http.StatusBadRequest)
		return false
	}
	_ = r.Body.Close()
	r.Body = io.NopCloser(bytes.NewReader(b))
	r.ContentLength = int64(len(b))
	return true
}

func writeBodyTooLarge(w http.ResponseWriter, limit int64) {
	w.Header().Set("Connection", "close") // the rest of the body is not read
	WriteError(w, http.StatusRequestEntityTooLarge, nil, -32600,
		fmt.Sprintf("The request body is over this server's limit of %d bytes, so it was not read and nothing was done. Send a smaller request.", limit),
		ReasonBodyTooLarge, nil)
}

// refuseSession answers a request that would open a session over the cap.
func (h *Handler) refuseSession(w http.ResponseWriter, r *http.Request) {
	var id json.RawMessage
	if r.Body != nil {
		// The request's ID, for the error (bounded: the body may be large).
		b, _ := io.ReadAll(io.LimitReader(r.Body, 64<<10))
		var msg struct {
			ID json.RawMessage `json:"id"`
		}
		if json.Unmarshal(b, &msg) == nil {
			id = msg.ID
		}
	}
	retry := time.Minute
	if h.Limits.IdleTimeout > 0 {
		retry = h.Sessions.period()
	}
	w.Header().Set("Retry-After", strconv.Itoa(max(1, int(retry.Round(time.Second)/time.Second))))
	WriteError(w, http.StatusServiceUnavailable, id, -32000,
		fmt.Sprintf("This server has as many open MCP sessions as it allows (%d), so no session was opened and nothing was done. "+
			"Retry in a minute or more; a client that holds sessions it no longer uses should close them.", h.Limits.MaxSessions),
		ReasonTooManySessions, map[string]any{"max_sessions": h.Limits.MaxSessions})
}

// WriteError writes a JSON-RPC error response with HTTP status, whose data
// carries the refusal marker {"reason": reason} (plus extra).
func WriteError(w http.ResponseWriter, status int, id json.RawMessage, code int, message, reason string, extra map[string]any) {
	if len(id) == 0 {
		id = json.RawMessage("null")
	}
	marker := map[string]any{"reason": reason}
	for k, v := range extra {
		marker[k] = v
	}
	b, _ := json.Marshal(map[string]any{
		"jsonrpc": "2.0",
		"id":      id,
		"error":   map[string]any{"code": code, "message": message, "data": map[string]any{RefusalMetaKey: marker}},
	})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// StatusWriter records the status of a response (Status, 0 until the
// handler writes), for the layers that act on it; it passes Flush and
// Unwrap (http.ResponseController) through.
type StatusWriter struct {
	http.ResponseWriter
	Status int
}

func (w *StatusWriter) WriteHeader(code int) {
	if w.Status == 0 {
		w.Status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *StatusWriter) Write(b []byte) (int, error) {
	if w.Status == 0 {
		w.Status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *StatusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the connection.
func (w *StatusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// bindingWriter sees the session a response opens before the first byte
// of the response leaves: it binds the session to owner (when binds), so
// that no request on it (the client's next, or anyone's) comes before its
// owner is known, and it settles the request's reservation once the
// session counts among those open, so that a session whose request is
// still being served (the SDK finishing up, an SSE stream) is not counted
// twice.
type bindingWriter struct {
	StatusWriter
	sessions *Sessions
	owner    [sha256.Size]byte
	binds    bool // bind the session to owner
	bound    bool // it was bound
	settled  bool // the reservation was released, the session counting instead
}

func (w *bindingWriter) bind() {
	if w.Status != 0 || w.bound || w.settled {
		return
	}
	if id := w.Header().Get(SessionHeader); id != "" {
		if w.binds {
			w.sessions.bind(id, w.owner)
			w.bound = true
		}
		w.settled = w.sessions.settle(id)
	}
}

func (w *bindingWriter) WriteHeader(code int) {
	w.bind()
	w.StatusWriter.WriteHeader(code)
}

func (w *bindingWriter) Write(b []byte) (int, error) {
	w.bind()
	return w.StatusWriter.Write(b)
}

func (w *bindingWriter) Flush() {
	w.bind()
	w.StatusWriter.Flush()
}
