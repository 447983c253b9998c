package mcpgo

import (
	"context"
	"errors"
	"net/http"
	"strings"

	"github.com/mark3labs/mcp-go/server"

	"github.com/idemkit-mcp/idemkit/internal/mcpcall"
)

type httpInfoKey struct{}

// httpInfo is what HTTPHandler records of an HTTP request for its MCP
// requests' spans and scope.
type httpInfo struct {
	transport mcpcall.Transport
}

// NewStreamableHTTPHandler serves s over Streamable HTTP with mcp-go's
// StreamableHTTPServer, configured by opts and then server.WithStateful(true),
// wrapped by HTTPHandler. With stateful sessions the server only accepts
// the session IDs it issued and answers 404 to a terminated or unknown
// one, so the instrumentation may scope the keys of calls without a
// subject by their session: a stranger who presents another client's
// session ID is refused before any tool runs, never replayed that client's
// results. The notifications clients POST get their SERVER spans here
// (mcp-go shows them to no hook); HTTPHandler alone does not give them
// any.
func NewStreamableHTTPHandler(s *server.MCPServer, opts ...server.StreamableHTTPOption) http.Handler {
	opts = append(opts[:len(opts):len(opts)], server.WithStateful(true))
	return HTTPHandler(notificationLayer(s, taskLayer(s, server.NewStreamableHTTPServer(s, opts...))), true)
}

// HTTPHandler returns h, an MCP HTTP handler of an instrumented server
// (Streamable HTTP or SSE), with what each of its requests' spans records
// of the HTTP request: network.transport, network.protocol.name and
// version, client.address and client.port. validatedSessions vouches that
// h accepts only session IDs it issued and rejects terminated ones (a
// stateful session manager, or one that verifies signed IDs); only then
// may a session scope the keys of calls without a subject. Pass false for
// a stateless server or one whose session manager accepts any well-formed
// ID.
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
