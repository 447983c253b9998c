package instrument

import (
	"net/http"
	"time"

	"github.com/idemkit-mcp/idemkit/internal/httplimit"
)

// HTTPLimits bounds what the clients of an MCP Streamable HTTP handler
// (mcpgo.NewStreamableHTTPHandler, gosdk.NewStreamableHTTPHandler) may hold
// on the server, so that no client, authenticated or not (an MCP
// initialize needs no token), can grow the server's memory without bound.
// Each zero field takes its default; a negative one lifts that limit (do
// not, on a server that untrusted clients reach).
//
// Every refusal is an HTTP error whose body is a JSON-RPC error
// (jsonrpc.id that of the request when it could be read) with data
// {"io.idemkit/refusal": {"reason": "…"}}; nothing was done for the
// request.
type HTTPLimits struct {
	// MaxSessions caps the sessions open at once. A request that would
	// open another (a POST without an Mcp-Session-Id, such as initialize)
	// is answered HTTP 503 with a Retry-After header and the JSON-RPC error
	// -32000 (reason "too_many_sessions"); sessions open already are served
	// as ever. Sessions end with a DELETE or when idle (SessionIdleTimeout).
	// Defaults to 10,000.
	MaxSessions int

	// SessionIdleTimeout ends a session that has had no request for this
	// long (a request in progress, such as an open SSE stream, keeps it):
	// a client that went away without a DELETE frees its place. The
	// session's next request gets 404, after which an MCP client
	// initializes a new one. It is checked every quarter of itself (at
	// most every minute). Keep it above Config.Window of the Guard when
	// calls are scoped by session: a client whose session ended retries in
	// a new scope. Defaults to 30 minutes.
	SessionIdleTimeout time.Duration

	// MaxBodyBytes caps a request body. A larger one is answered HTTP 413
	// (on mcp-go with the JSON-RPC error -32600, reason "body_too_large")
	// and is not read further: refused at once when its Content-Length
	// says so, after MaxBodyBytes+1 bytes otherwise. On the go-sdk it is
	// the SDK's StreamableHTTPOptions.MaxRequestBodyBytes, which, when set,
	// wins. Defaults to 4 MiB (the go-sdk's own
	// default).
	MaxBodyBytes int64
}

// NewHTTPServer returns an http.Server serving h with the timeouts an MCP
// server exposed to untrusted clients needs, which the zero http.Server
// lacks: a client must send its request headers within
// 10 seconds and its whole request, body included,
// within 30 seconds, so that a client trickling a body
// cannot hold a connection (and a goroutine, and a buffer) for long; an
// idle keep-alive connection is closed after 2 minutes;
// headers are capped at 64 KiB. It sets no
// WriteTimeout: an SSE stream (a long tool call, a GET stream) may last as
// long as the call does; the read deadline is lifted once the request has
// been read. Change the fields before serving, as with any http.Server:
//
//	srv := instrument.NewHTTPServer(mux)
//	srv.Addr = ":8080"
//	err := srv.ListenAndServe()
func NewHTTPServer(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: httplimit.ServerReadHeaderTimeout,
		ReadTimeout:       httplimit.ServerReadTimeout,
		IdleTimeout:       httplimit.ServerIdleTimeout,
		MaxHeaderBytes:    httplimit.ServerMaxHeaderBytes,
	}
}
