package gosdk

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"io"
	"net/http"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idemkit-mcp/idemkit/instrument"
	"github.com/idemkit-mcp/idemkit/internal/httplimit"
	"github.com/idemkit-mcp/idemkit/internal/mcpcall"
	"github.com/idemkit-mcp/idemkit/spancontract"
)

// requestInfo is what a wrapper recorded about one request before the SDK
// decoded it.
type requestInfo struct {
	known     bool // a wrapper recorded it
	id        string
	hasID     bool
	transport mcpcall.Transport
}

// The SDK carries, from the wire to the middleware, only a request's
// *mcp.RequestExtra (whose Header is the HTTP request's header). The
// wrappers record what the middleware needs under what it carries:
//
//   - byExtra: Transport gives every call read from its connection a
//     RequestExtra of its own, recorded until the middleware takes it or
//     the connection closes;
//   - byToken: HTTPHandler records each HTTP request, while it is served,
//     under a random token that it sets as the request's
//     requestTokenHeader (replacing any value the client sent).
var (
	byExtra sync.Map // *mcp.RequestExtra -> *extraInfo
	byToken sync.Map // token (string) -> *requestInfo
)

// requestTokenHeader is the header in which HTTPHandler hands a request's
// token to the middleware. Tool handlers see it among the request's
// headers (RequestExtra.Header); it means nothing outside the request.
const requestTokenHeader = "Idemkit-Request"

type extraInfo struct {
	info requestInfo
	conn *idConn
}

// lookupRequest returns what the wrappers recorded about the request whose
// Extra is extra.
func lookupRequest(extra *mcp.RequestExtra) requestInfo {
	if extra == nil {
		return requestInfo{}
	}
	if v, ok := byExtra.LoadAndDelete(extra); ok {
		e := v.(*extraInfo)
		e.conn.forget(extra)
		return e.info
	}
	if tok := extra.Header.Get(requestTokenHeader); tok != "" {
		if v, ok := byToken.Load(tok); ok {
			return *v.(*requestInfo)
		}
	}
	return requestInfo{}
}

// Transport wraps a transport that is not HTTP (mcp.StdioTransport,
// mcp.IOTransport, mcp.InMemoryTransport, or your own), so that the spans
// of the requests read from it carry their jsonrpc.request.id and, for
// stdio and IO transports, network.transport "pipe". Calls on a stdio or
// IO connection need no scope (the process serves one client); calls on
// any other wrapped connection are scoped by the connection when they have
// no subject:
//
//	err := s.Run(ctx, gosdk.Transport(&mcp.StdioTransport{}))
//
// Every call read from the connection gets a RequestExtra of its own (the
// SDK carries nothing else of a request to the middleware). The wrapped
// connection does not pass the SDK's session state to the inner one: with
// an IOTransport that only disables the SDK's rejection of JSON-RPC
// batches from clients that negotiated protocol 2025-06-18 or later.
func Transport(t mcp.Transport) mcp.Transport {
	return &idTransport{inner: t}
}

type idTransport struct {
	inner mcp.Transport
}

// Connect implements mcp.Transport. A stdio or IO connection serves one
// client for the process's life: its calls need no scope. Any other
// connection is its own client: its calls are scoped by the connection.
func (t *idTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	c, err := t.inner.Connect(ctx)
	if err != nil {
		return nil, err
	}
	var tr mcpcall.Transport
	switch t.inner.(type) {
	case *mcp.StdioTransport, *mcp.IOTransport:
		tr = mcpcall.Transport{Network: spancontract.TransportPipe, Local: true}
	default:
		tr = mcpcall.Transport{ConnectionID: rand.Text()}
	}
	return &idConn{Connection: c, transport: tr, pending: map[*mcp.RequestExtra]struct{}{}}, nil
}

// SupportsProtocolVersion forwards mcp.ProtocolVersionSupporter.
func (t *idTransport) SupportsProtocolVersion(version string) bool {
	if pvs, ok := t.inner.(mcp.ProtocolVersionSupporter); ok {
		return pvs.SupportsProtocolVersion(version)
	}
	return true
}

// idConn records the ID of every call it reads.
type idConn struct {
	mcp.Connection
	transport mcpcall.Transport

	mu      sync.Mutex // protects pending
	pending map[*mcp.RequestExtra]struct{}
}

// maxPending bounds the calls recorded on one connection that the
// middleware never took (the SDK rejects some before the middleware).
const maxPending = 1024

func (c *idConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	msg, err := c.Connection.Read(ctx)
	req, ok := msg.(*jsonrpc.Request)
	if err != nil || !ok || !req.IsCall() {
		return msg, err
	}
	extra := &mcp.RequestExtra{}
	if e, ok := req.Extra.(*mcp.RequestExtra); ok && e != nil {
		*extra = *e
	}
	req.Extra = extra
	info := &extraInfo{conn: c, info: requestInfo{known: true, transport: c.transport}}
	info.info.id, info.info.hasID = mcpcall.FormatRequestID(req.ID.Raw())
	c.mu.Lock()
	if len(c.pending) >= maxPending {
		for e := range c.pending {
			byExtra.Delete(e)
			delete(c.pending, e)
			break
		}
	}
	c.pending[extra] = struct{}{}
	c.mu.Unlock()
	byExtra.Store(extra, info)
	return msg, nil
}

func (c *idConn) forget(extra *mcp.RequestExtra) {
	c.mu.Lock()
	delete(c.pending, extra)
	c.mu.Unlock()
}

// Close forgets the calls the middleware never took.
func (c *idConn) Close() error {
	c.mu.Lock()
	for e := range c.pending {
		byExtra.Delete(e)
	}
	clear(c.pending)
	c.mu.Unlock()
	return c.Connection.Close()
}

// NewStreamableHTTPHandler returns the SDK's mcp.NewStreamableHTTPHandler
// wrapped by HTTPHandler, within the limits of instrument.HTTPLimits
// (their defaults, or those of a WithHTTPLimits among hopts). Unless
// opts.Stateless, the SDK only accepts the session IDs it issued (404 for
// an unknown or terminated one), so calls without a subject may be scoped
// by their session: a stranger presenting another client's session ID is
// refused before any tool runs. Each session is also bound to the subject
// the instrumentation's WithSubject function names for the HTTP request
// that initialized it (called with a request whose Extra carries that HTTP
// request's verified token and headers; "none" when it names no one): a
// later request whose subject differs gets 404, as for an unknown session,
// before the SDK sees it (the SDK's own check, 403 "session user mismatch",
// covers only a session initialized with a token). For this getServer is
// called on every request of a session too, to find its instrumentation:
// it should return its server cheaply.
//
// The limits: at most MaxSessions sessions at once (a request that would
// open another gets HTTP 503 and a JSON-RPC error saying so), each closed
// once idle for SessionIdleTimeout, and request bodies of at most
// MaxBodyBytes (the SDK's MaxRequestBodyBytes, which wins when opts sets
// it: HTTP 413). Serve the handler with an http.Server that has read
// timeouts (instrument.NewHTTPServer).
func NewStreamableHTTPHandler(getServer func(*http.Request) *mcp.Server, opts *mcp.StreamableHTTPOptions, hopts ...HTTPOption) http.Handler {
	var cfg httpConfig
	for _, o := range hopts {
		if o != nil {
			o(&cfg)
		}
	}
	limits := httplimit.Resolve(cfg.limits.MaxSessions, cfg.limits.SessionIdleTimeout, cfg.limits.MaxBodyBytes)
	var o mcp.StreamableHTTPOptions
	if opts != nil {
		o = *opts
	}
	if o.MaxRequestBodyBytes == 0 {
		o.MaxRequestBodyBytes = limits.MaxBodyBytes
		if o.MaxRequestBodyBytes == 0 {
			o.MaxRequestBodyBytes = -1 // lifted
		}
	}
	validated := !o.Stateless
	h := HTTPHandler(refuseTasks(getServer, mcp.NewStreamableHTTPHandler(getServer, &o)), validated)
	if o.Stateless {
		return h // no sessions to count
	}
	return &httplimit.Handler{
		Next:     h,
		Limits:   limits,
		Sessions: httplimit.NewSessions(limits, nil),
		Opened: func(r *http.Request, id string) func() {
			// The session the SDK opened, if it lasts (the SDK closes one
			// whose initialize failed before the response ends).
			s := getServer(r)
			if s == nil {
				return nil
			}
			for ss := range s.Sessions() {
				if ss.ID() == id {
					return func() { _ = ss.Close() }
				}
			}
			return nil
		},
		WatchDelete: true,
		Subject: func(r *http.Request) string {
			return httpSubject(getServer, r)
		},
	}
}

// httpSubject is the subject of an HTTP request as the instrumentation's
// WithSubject function names it, for binding sessions to it: the function
// is called with a request whose Extra carries what the SDK gives a
// request of this HTTP request (its verified token, its headers). A
// function that names no one there (it reads another part of a request)
// names no one on every request, which binds nothing.
func httpSubject(getServer func(*http.Request) *mcp.Server, r *http.Request) string {
	s := getServer(r)
	if s == nil {
		return ""
	}
	m, ok := servers.Load(s)
	if !ok {
		return ""
	}
	subject := m.in.Config().Subject
	if subject == nil {
		return ""
	}
	req := &mcp.ServerRequest[*mcp.InitializeParams]{Extra: &mcp.RequestExtra{TokenInfo: auth.TokenInfoFromContext(r.Context()), Header: r.Header}}
	return subject(context.WithValue(r.Context(), requestKey{}, mcp.Request(req)))
}

// HTTPOption configures NewStreamableHTTPHandler beyond the SDK's own
// options.
type HTTPOption func(*httpConfig)

type httpConfig struct {
	limits instrument.HTTPLimits
}

// WithHTTPLimits sets the limits of NewStreamableHTTPHandler (see
// instrument.HTTPLimits: zero fields take their defaults).
func WithHTTPLimits(l instrument.HTTPLimits) HTTPOption {
	return func(c *httpConfig) { c.limits = l }
}

// maxParsedBody bounds the request bodies HTTPHandler reads for a request
// ID; a larger body is passed on unread, and its span lacks the ID.
const maxParsedBody = 1 << 20

// HTTPHandler returns h, an MCP HTTP handler of an instrumented server,
// recording for its requests' spans the JSON-RPC request ID (of a POST that
// carries one request), network.transport, network.protocol.name and
// version, client.address and client.port. validatedSessions vouches that
// h accepts only the session IDs it issued (a stateful
// StreamableHTTPHandler); only then may a session scope the keys of calls
// without a subject. It applies none of the limits of
// NewStreamableHTTPHandler (sessions): a handler of your own needs its own.
func HTTPHandler(h http.Handler, validatedSessions bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		info := &requestInfo{known: true, transport: mcpcall.HTTPTransport(r, validatedSessions)}
		if r.Method == http.MethodPost && r.Body != nil {
			info.id, info.hasID = requestID(r)
		}
		if r.Header == nil {
			r.Header = http.Header{}
		}
		token := rand.Text()
		r.Header.Set(requestTokenHeader, token)
		byToken.Store(token, info)
		defer byToken.Delete(token)
		h.ServeHTTP(w, r)
	})
}

// requestID reads the JSON-RPC ID of a POST body that holds one request,
// and puts the body back.
func requestID(r *http.Request) (string, bool) {
	var buf bytes.Buffer
	n, err := io.Copy(&buf, io.LimitReader(r.Body, maxParsedBody+1))
	if err != nil || n > maxParsedBody {
		r.Body = readCloser{io.MultiReader(&buf, r.Body), r.Body}
		return "", false
	}
	_ = r.Body.Close()
	r.Body = io.NopCloser(bytes.NewReader(buf.Bytes()))
	var msg struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
	}
	if b := bytes.TrimSpace(buf.Bytes()); len(b) == 0 || b[0] != '{' || json.Unmarshal(b, &msg) != nil || msg.Method == "" {
		return "", false
	}
	return mcpcall.FormatRawRequestID(msg.ID)
}

type readCloser struct {
	io.Reader
	io.Closer
}
