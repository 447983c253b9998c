package mcpgo

import (
	"context"
	"crypto/rand"
	"errors"
	"net/http"
	"strings"
	"sync"

	"github.com/mark3labs/mcp-go/server"

	"github.com/idemkit-mcp/idemkit/instrument"
	"github.com/idemkit-mcp/idemkit/internal/httplimit"
	"github.com/idemkit-mcp/idemkit/internal/mcpcall"
)

type httpInfoKey struct{}

// httpInfo is what HTTPHandler records of an HTTP request for its MCP
// requests' spans and scope.
type httpInfo struct {
	transport mcpcall.Transport
}

// NewStreamableHTTPHandler serves s over Streamable HTTP with mcp-go's
// StreamableHTTPServer, configured by opts and then with stateful sessions
// (a session manager of this package), wrapped by HTTPHandler, within the
// limits of instrument.HTTPLimits (their defaults, or those of a
// WithHTTPLimits among opts).
//
// Sessions are stateful: the server only accepts the session IDs it
// issued and answers 404 to a terminated, expired or unknown one (a GET
// too, which mcp-go alone does not check), so the instrumentation may
// scope the keys of calls without a subject by their session: a stranger
// who presents another client's session ID is refused before any tool
// runs, never replayed that client's results. A terminated session leaves
// nothing behind. Each session is bound to the subject the
// instrumentation's WithSubject function names for the HTTP request that
// initialized it (called with that request's context, where
// RequireBearerToken and other HTTP middleware put the caller; "none" when
// it names no one): a later request whose subject differs (a stolen
// session ID with another caller's token, a credential dropped or added)
// gets 404, as for an unknown session, before mcp-go sees it.
//
// The limits: at most MaxSessions sessions at once (a request that would
// open another gets HTTP 503 and a JSON-RPC error saying so), each ended
// once idle for SessionIdleTimeout, and request bodies of at most
// MaxBodyBytes (HTTP 413, a larger body is not read), checked before any
// other layer reads the body. Serve the handler with an http.Server that
// has read timeouts (instrument.NewHTTPServer). The notifications clients
// POST get their SERVER spans here (mcp-go shows them to no hook);
// HTTPHandler alone does not give them any.
func NewStreamableHTTPHandler(s *server.MCPServer, opts ...server.StreamableHTTPOption) http.Handler {
	cfg := &httpConfig{}
	var inner *server.StreamableHTTPServer
	all := make([]server.StreamableHTTPOption, 0, len(opts)+3)
	all = append(all, func(hs *server.StreamableHTTPServer) { building.Store(hs, cfg) })
	all = append(all, opts...)
	sessions := &sessionManager{}
	all = append(all, server.WithStateful(true), server.WithSessionIdManager(sessions))
	inner = server.NewStreamableHTTPServer(s, all...)
	building.Delete(inner)

	limits := httplimit.Resolve(cfg.limits.MaxSessions, cfg.limits.SessionIdleTimeout, cfg.limits.MaxBodyBytes)
	sessions.Sessions = httplimit.NewSessions(limits, func(id string) { endSession(inner, id) })
	return &httplimit.Handler{
		Next:      HTTPHandler(notificationLayer(s, taskLayer(s, inner)), true),
		Limits:    limits,
		Sessions:  sessions.Sessions,
		ReadsBody: true, // mcp-go reads any body whole
		StrictGET: true, // mcp-go opens a session for a GET without one, and serves a GET with any ID
		Subject: func(r *http.Request) string {
			// The WithSubject function, on the HTTP request's context (where
			// RequireBearerToken and other HTTP middleware put the caller).
			m := instrumentationOf(s)
			if m == nil || m.in.Config().Subject == nil {
				return ""
			}
			return m.in.Config().Subject(r.Context())
		},
	}
}

// httpConfig is what NewStreamableHTTPHandler's own options set.
type httpConfig struct {
	limits instrument.HTTPLimits
}

// building holds the configuration of the StreamableHTTPServers that
// NewStreamableHTTPHandler is building, for its options to find.
var building sync.Map // *server.StreamableHTTPServer -> *httpConfig

// WithHTTPLimits sets the limits of NewStreamableHTTPHandler (see
// instrument.HTTPLimits: zero fields take their defaults). It is an
// option of NewStreamableHTTPHandler only: given to
// server.NewStreamableHTTPServer, it does nothing.
func WithHTTPLimits(l instrument.HTTPLimits) server.StreamableHTTPOption {
	return func(hs *server.StreamableHTTPServer) {
		if cfg, ok := building.Load(hs); ok {
			cfg.(*httpConfig).limits = l
		}
	}
}

// sessionManager is mcp-go's session ID manager of NewStreamableHTTPHandler:
// it issues unguessable IDs, accepts only the ones it issued and has not
// ended, and keeps nothing of an ended session (mcp-go's own stateful
// manager keeps every terminated ID forever). Its sessions are those the
// limits count.
type sessionManager struct {
	*httplimit.Sessions
}

// Generate implements server.SessionIdManager.
func (m *sessionManager) Generate() string {
	id := "mcp-session-" + rand.Text()
	m.Add(id, nil)
	return id
}

// Validate implements server.SessionIdManager.
func (m *sessionManager) Validate(id string) (isTerminated bool, err error) {
	if m.Has(id) {
		return false, nil
	}
	return false, errors.New("session not found")
}

// Terminate implements server.SessionIdManager.
func (m *sessionManager) Terminate(id string) (isNotAllowed bool, err error) {
	m.Remove(id)
	return false, nil
}

// endSession ends an idle session as a client's DELETE would: the session
// manager forgets it and mcp-go drops the session's state.
func endSession(h *server.StreamableHTTPServer, id string) {
	r, err := http.NewRequestWithContext(context.Background(), http.MethodDelete, "/", http.NoBody)
	if err != nil {
		return
	}
	r.Header.Set(httplimit.SessionHeader, id)
	h.ServeHTTP(discard{}, r)
}

// discard is a ResponseWriter that keeps nothing.
type discard struct{}

func (discard) Header() http.Header         { return http.Header{} }
func (discard) Write(b []byte) (int, error) { return len(b), nil }
func (discard) WriteHeader(int)             {}

// HTTPHandler returns h, an MCP HTTP handler of an instrumented server
// (Streamable HTTP or SSE), with what each of its requests' spans records
// of the HTTP request: network.transport, network.protocol.name and
// version, client.address and client.port. validatedSessions vouches that
// h accepts only session IDs it issued and rejects terminated ones (a
// stateful session manager, or one that verifies signed IDs); only then
// may a session scope the keys of calls without a subject. Pass false for
// a stateless server or one whose session manager accepts any well-formed
// ID. It applies none of the limits of NewStreamableHTTPHandler (sessions,
// bodies): a handler of your own needs its own.
func HTTPHandler(h http.Handler, validatedSessions bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hi := &httpInfo{transport: mcpcall.HTTPTransport(r, validatedSessions)}
		h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), httpInfoKey{}, hi)))
	})
}

// TokenVerifier verifies a bearer token and returns the subject it names
// (the token's sub claim, a user ID). An error matching ErrInvalidToken
// makes RequireBearerToken answer 401; any other error 500.
type TokenVerifier func(ctx context.Context, token string, r *http.Request) (subject string, err error)

// ErrInvalidToken is the error a TokenVerifier returns for a token it
// does not accept (unknown, expired, badly signed).
var ErrInvalidToken = errors.New("mcpgo: invalid bearer token")

// BearerOptions configures RequireBearerToken. A nil *BearerOptions means
// all defaults.
type BearerOptions struct {
	// Optional lets a request without an Authorization header through,
	// without a subject (its calls are then scoped by their session when
	// the server validates sessions, and refused otherwise). A request with
	// an invalid token is refused either way. Defaults to false.
	Optional bool
	// Realm is the realm of the WWW-Authenticate challenge. Defaults to
	// "mcp".
	Realm string
}

type subjectKey struct{}

// RequireBearerToken returns HTTP middleware that verifies the request's
// "Authorization: Bearer <token>" with verify and hands the subject it
// names to TokenSubject. A request without a valid token gets 401 with a
// WWW-Authenticate challenge (a missing one is let through when
// opts.Optional). It is mcp-go's counterpart of the official SDK's
// auth.RequireBearerToken.
func RequireBearerToken(verify TokenVerifier, opts *BearerOptions) func(http.Handler) http.Handler {
	var o BearerOptions
	if opts != nil {
		o = *opts
	}
	if o.Realm == "" {
		o.Realm = "mcp"
	}
	challenge := `Bearer realm="` + o.Realm + `"`
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			h := r.Header.Get("Authorization")
			if h == "" && o.Optional {
				next.ServeHTTP(w, r)
				return
			}
			token, ok := strings.CutPrefix(h, "Bearer ")
			if !ok {
				token, ok = strings.CutPrefix(h, "bearer ")
			}
			token = strings.TrimSpace(token)
			if !ok || token == "" {
				w.Header().Set("WWW-Authenticate", challenge)
				http.Error(w, "missing bearer token", http.StatusUnauthorized)
				return
			}
			subject, err := verify(r.Context(), token, r)
			switch {
			case errors.Is(err, ErrInvalidToken) || (err == nil && subject == ""):
				w.Header().Set("WWW-Authenticate", challenge+`, error="invalid_token"`)
				http.Error(w, "invalid bearer token", http.StatusUnauthorized)
				return
			case err != nil:
				http.Error(w, "the bearer token could not be verified", http.StatusInternalServerError)
				return
			}
			next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), subjectKey{}, subject)))
		})
	}
}

// TokenSubject is an instrument.WithSubject function: the subject of the
// bearer token RequireBearerToken verified for the request, or "".
func TokenSubject(ctx context.Context) string {
	s, _ := ctx.Value(subjectKey{}).(string)
	return s
}
