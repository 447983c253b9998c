package gateway

import (
	"context"
	"errors"
	"net/http"
)

// Upstream opens sessions on the MCP server behind the gateway. It is safe
// for concurrent use.
type Upstream interface {
	// Connect opens a new upstream session. For a Streamable HTTP upstream
	// the session is established by the initialize request sent on it; for
	// a stdio upstream it starts a process. ctx bounds the connection.
	Connect(ctx context.Context) (Conn, error)
	// Transport names the upstream transport ("http" or "stdio") for logs.
	Transport() string
}

// Conn is one upstream session. The gateway rewrites request IDs so that
// every request it sends on one Conn has a distinct ID. Its methods are
// safe for concurrent use.
type Conn interface {
	// Request sends a request and returns the stream of messages the server
	// sends for it: requests and notifications, then the response, which
	// is the last message. ctx bounds the request and its stream; h holds
	// the client's headers to forward (HTTP upstreams only).
	Request(ctx context.Context, req *Message, h http.Header) (Stream, error)
	// Send delivers a notification, or a response to a request the server
	// sent.
	Send(ctx context.Context, msg *Message, h http.Header) error
	// Listen returns the stream of messages the server sends outside any
	// request, or errNoListen when it offers none. ctx bounds the stream.
	Listen(ctx context.Context, h http.Header) (Stream, error)
	// Close ends the session (an HTTP DELETE, or the process's end).
	Close(ctx context.Context) error
	// Done is closed when the session ended on the server's side (the
	// process exited, or the server no longer knows the session).
	Done() <-chan struct{}
}

// Stream is the sequence of messages the server sends for one request (or
// outside any request, for Listen).
type Stream interface {
	// Next returns the next message, or an error: io.EOF when the stream
	// ended cleanly, ErrUpstreamGone or another error when it broke.
	Next() (*Message, error)
	// Close releases the stream; a Next in progress returns.
	Close() error
}

// Errors an upstream Conn returns.
var (
	// ErrUpstreamGone: the upstream session ended under a request: the
	// process exited, the connection broke, or the server no longer knows
	// the session (it restarted). Whether the request ran is unknown.
	ErrUpstreamGone = errors.New("the upstream MCP server went away")
	// ErrSessionLost: the upstream server answered that it does not know the
	// session (HTTP 404): it restarted or expired it. The request was not
	// processed.
	ErrSessionLost = errors.New("the upstream MCP server no longer knows this session")
	// errNoListen: the upstream offers no stream outside requests.
	errNoListen = errors.New("the upstream offers no stream outside requests")
)
