package gateway

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"

	"github.com/idemkit-mcp/idemkit/internal/mcpcall"
	"github.com/idemkit-mcp/idemkit/spancontract"
)

// ServeHTTP serves MCP's Streamable HTTP transport: POST a message, GET the
// stream of messages outside requests, DELETE a session. Mount it at the
// MCP endpoint (the idemkit command uses /mcp).
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !originAllowed(r) {
		http.Error(w, "Forbidden: the Origin header names another site (DNS rebinding protection); MCP clients send no Origin or their own", http.StatusForbidden)
		return
	}
	switch r.Method {
	case http.MethodPost:
		g.post(w, r)
	case http.MethodGet:
		g.get(w, r)
	case http.MethodDelete:
		g.delete(w, r)
	default:
		w.Header().Set("Allow", "GET, POST, DELETE")
		http.Error(w, "Method Not Allowed: MCP's Streamable HTTP transport uses POST, GET and DELETE", http.StatusMethodNotAllowed)
	}
}

// originAllowed accepts requests without an Origin (non-browser clients),
// from the gateway's own host, or from a loopback host.
func originAllowed(r *http.Request) bool {
	o := r.Header.Get("Origin")
	if o == "" {
		return true
	}
	u, err := url.Parse(o)
	if err != nil {
		return false
	}
	if u.Host == r.Host {
		return true
	}
	host := u.Hostname()
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// writeJSONRPCError answers with a JSON-RPC error and an HTTP status.
func writeJSONRPCError(w http.ResponseWriter, status int, id json.RawMessage, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(newErrorResponse(id, code, msg).Bytes())
}

// lookup finds the session a request names. It answers the client itself
// (400 or 404) and returns nil when there is none.
func (g *Gateway) lookup(w http.ResponseWriter, r *http.Request) *session {
	sid := r.Header.Get("Mcp-Session-Id")
	if sid == "" {
		writeJSONRPCError(w, http.StatusBadRequest, nil, codeInvalidRequest,
			"Bad Request: no Mcp-Session-Id header. Start a session with an initialize request and send the session ID it returns on every later request.")
		return nil
	}
	g.mu.Lock()
	s := g.sessions[sid]
	g.mu.Unlock()
	if s == nil {
		writeJSONRPCError(w, http.StatusNotFound, nil, codeInvalidRequest,
			"Session not found: it ended, expired or was never issued by this gateway. Start a new session with an initialize request.")
		return nil
	}
	return s
}

func (g *Gateway) post(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxMessageBytes))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			writeJSONRPCError(w, http.StatusRequestEntityTooLarge, nil, codeInvalidRequest, fmt.Sprintf("Request Entity Too Large: a message may be at most %d bytes.", maxMessageBytes))
			return
		}
		return // the client went away
	}
	if t := bytes.TrimSpace(body); len(t) > 0 && t[0] == '[' {
		writeJSONRPCError(w, http.StatusBadRequest, nil, codeInvalidRequest,
			"JSON-RPC batches are not supported: send one message per POST (MCP 2025-06-18 and later).")
		return
	}
	msg, err := parseMessage(body)
	if err != nil {
		code := codeParseError
		if errors.Is(err, errNotJSONRPC) {
			code = codeInvalidRequest
		}
		writeJSONRPCError(w, http.StatusBadRequest, nil, code, "The body is not a JSON-RPC 2.0 message: "+err.Error())
		return
	}
	if msg.IsRequest() && msg.Method == "initialize" {
		g.initializeHTTP(w, r, msg)
		return
	}
	s := g.lookup(w, r)
	if s == nil {
		return
	}
	if !msg.IsRequest() {
		if err := s.send(r.Context(), msg, r.Header); err != nil {
			if errors.Is(err, ErrSessionLost) {
				g.drop(s)
				writeJSONRPCError(w, http.StatusNotFound, nil, codeUpstream, "The upstream MCP server no longer knows this session. Start a new session with an initialize request.")
				return
			}
			writeJSONRPCError(w, http.StatusBadGateway, nil, codeUpstream, "The upstream MCP server did not accept the message: "+err.Error())
			return
		}
		w.WriteHeader(http.StatusAccepted)
		return
	}
	out := &httpSink{w: w, acceptsSSE: acceptsSSE(r)}
	t := g.httpTransport(r)
	resp, lost := s.handle(r.Context(), msg, r.Header, &t, out)
	if lost {
		g.drop(s)
		if !out.started {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write(resp.Bytes())
			return
		}
	}
	out.final(resp)
}

// acceptsSSE reports whether the client accepts an SSE answer (MCP clients
// must; a client that does not gets only the final answer).
func acceptsSSE(r *http.Request) bool {
	a := r.Header.Get("Accept")
	return a == "" || strings.Contains(a, "text/event-stream") || strings.Contains(a, "*/*")
}

// initializeHTTP starts a session: an upstream session, then the client's
// initialize request on it.
func (g *Gateway) initializeHTTP(w http.ResponseWriter, r *http.Request, msg *Message) {
	s, err := g.open(r.Context(), false)
	if err != nil {
		writeJSONRPCError(w, http.StatusBadGateway, msg.ID, codeUpstream, "The idemkit gateway could not reach the upstream MCP server: "+err.Error())
		return
	}
	// The header goes out with the first byte of the answer, which may be
	// an SSE stream's.
	w.Header().Set("Mcp-Session-Id", s.id)
	out := &httpSink{w: w, acceptsSSE: acceptsSSE(r)}
	t := g.httpTransport(r)
	resp, _ := s.handle(r.Context(), msg, r.Header, &t, out)
	if resp.Error != nil {
		_ = s.conn.Close(context.WithoutCancel(r.Context()))
		if !out.started {
			w.Header().Del("Mcp-Session-Id")
		}
		out.final(resp)
		return
	}
	if !g.register(s) {
		_ = s.close(context.WithoutCancel(r.Context()), "")
		if !out.started {
			w.Header().Del("Mcp-Session-Id")
		}
		out.final(newErrorResponse(msg.ID, codeInternalError, "The idemkit gateway is shutting down."))
		return
	}
	out.final(resp)
}

// open connects a new upstream session.
func (g *Gateway) open(ctx context.Context, local bool) (*session, error) {
	conn, err := g.up.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return newSession(g, conn, local), nil
}

// initialized records what the initialize answer negotiated, and the
// transport the session started on.
func (s *session) initialized(resp *Message, t *mcpcall.Transport) {
	var r struct {
		ProtocolVersion string `json:"protocolVersion"`
	}
	_ = json.Unmarshal(resp.Result, &r)
	s.mu.Lock()
	s.protocol, s.transport = r.ProtocolVersion, *t
	s.mu.Unlock()
}

// httpTransport describes the HTTP request r arrived on for its spans and
// its scope. The gateway's sessions are authentic (it issues random IDs and
// accepts only those), but they scope calls only when no subject header is
// configured: with one, a call without the header is refused.
func (g *Gateway) httpTransport(r *http.Request) mcpcall.Transport {
	return mcpcall.HTTPTransport(r, g.subjectH == "")
}

// stdioTransport is the transport of a client served over stdio: one
// client per gateway process.
var stdioTransport = mcpcall.Transport{Network: spancontract.TransportPipe, Local: true}

// register adds s to the sessions and closes it when the upstream ends it.
func (g *Gateway) register(s *session) bool {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return false
	}
	g.sessions[s.id] = s
	g.mu.Unlock()
	go func() {
		<-s.conn.Done()
		g.mu.Lock()
		mine := g.sessions[s.id] == s
		if mine {
			delete(g.sessions, s.id)
		}
		g.mu.Unlock()
		if mine {
			g.log.Info("the upstream ended a session", "session", s.logID(), "upstream", g.up.Transport())
			_ = s.close(context.Background(), spancontract.ErrorTypeOther)
		}
	}()
	return true
}

// drop forgets a session the upstream lost and closes its upstream side.
func (g *Gateway) drop(s *session) {
	g.mu.Lock()
	if g.sessions[s.id] == s {
		delete(g.sessions, s.id)
	}
	g.mu.Unlock()
	go func() { _ = s.close(context.Background(), spancontract.ErrorTypeOther) }()
}

// send forwards a notification or a response from the client. A
// cancellation names the upstream ID of the request it cancels.
func (s *session) send(ctx context.Context, msg *Message, h http.Header) error {
	s.touch()
	if id := cancelledRequest(msg); id != nil {
		s.mu.Lock()
		up, ok := s.inflight[idKey(id)]
		s.mu.Unlock()
		if !ok {
			return nil // not in flight (any more): nothing to cancel
		}
		params, err := setMember(msg.Params, "requestId", up)
		if err != nil {
			return err
		}
		msg = msg.withParams(params)
	}
	return s.conn.Send(ctx, msg, h)
}

func (g *Gateway) get(w http.ResponseWriter, r *http.Request) {
	s := g.lookup(w, r)
	if s == nil {
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	defer context.AfterFunc(g.streams, cancel)()
	st, err := s.conn.Listen(ctx, r.Header)
	switch {
	case errors.Is(err, errNoListen):
		w.Header().Set("Allow", "POST, DELETE")
		http.Error(w, "Method Not Allowed: the upstream MCP server offers no stream outside requests", http.StatusMethodNotAllowed)
		return
	case errors.Is(err, ErrSessionLost):
		g.drop(s)
		writeJSONRPCError(w, http.StatusNotFound, nil, codeUpstream, "The upstream MCP server no longer knows this session. Start a new session with an initialize request.")
		return
	case err != nil:
		writeJSONRPCError(w, http.StatusBadGateway, nil, codeUpstream, "The upstream MCP server refused the stream: "+err.Error())
		return
	}
	defer st.Close()
	s.active.Add(1)
	defer s.active.Add(-1)
	sse := newSSEWriter(w)
	if sse.start() != nil {
		return
	}
	for {
		m, err := st.Next()
		if err != nil {
			return
		}
		if m.Method == "notifications/tools/list_changed" {
			s.tools.invalidate()
		}
		if sse.write(m.Bytes()) != nil {
			return
		}
	}
}

func (g *Gateway) delete(w http.ResponseWriter, r *http.Request) {
	s := g.lookup(w, r)
	if s == nil {
		return
	}
	g.mu.Lock()
	delete(g.sessions, s.id)
	g.mu.Unlock()
	_ = s.close(r.Context(), "")
	w.WriteHeader(http.StatusOK)
}

// httpSink answers one POST: with JSON when the answer is the only
// message, with an SSE stream as soon as a message comes before it.
type httpSink struct {
	w          http.ResponseWriter
	acceptsSSE bool

	mu      sync.Mutex // protects the fields below and writes to w
	sse     *sseWriter
	started bool
	gone    bool // a write failed: the client is gone
}

func (k *httpSink) send(m *Message) error {
	if !k.acceptsSSE {
		return nil
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.gone {
		return errClientGone
	}
	if !k.started {
		k.sse = newSSEWriter(k.w)
		k.started = true
		if k.sse.start() != nil {
			k.gone = true
			return errClientGone
		}
	}
	if k.sse.write(m.Bytes()) != nil {
		k.gone = true
		return errClientGone
	}
	return nil
}

func (k *httpSink) final(m *Message) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.gone {
		return
	}
	if k.started {
		_ = k.sse.write(m.Bytes())
		return
	}
	k.w.Header().Set("Content-Type", "application/json")
	k.w.WriteHeader(http.StatusOK)
	_, _ = k.w.Write(m.Bytes())
}

var errClientGone = errors.New("the client went away")

// ServeStdio serves one MCP client over stdio (newline-delimited JSON-RPC
// on in and out) in front of one upstream session. It returns when in ends
// (the client closed it: the upstream session is then closed) or when the
// upstream ends the session (an error saying so). ctx bounds the session.
func (g *Gateway) ServeStdio(ctx context.Context, in io.Reader, out io.Writer) error {
	s, err := g.open(ctx, true)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w := &lineWriter{w: out}
	var wg sync.WaitGroup
	s.mu.Lock()
	s.transport = stdioTransport
	s.mu.Unlock()
	defer func() {
		cancel()
		_ = s.close(context.Background(), "")
		wg.Wait()
	}()

	// Messages outside requests: server requests and notifications.
	if st, err := s.conn.Listen(ctx, nil); err == nil {
		wg.Go(func() {
			defer st.Close()
			for {
				m, err := st.Next()
				if err != nil {
					return
				}
				if m.Method == "notifications/tools/list_changed" {
					s.tools.invalidate()
				}
				_ = w.send(m)
			}
		})
	}

	lines := make(chan []byte)
	readErr := make(chan error, 1)
	go func() {
		r := bufio.NewReaderSize(in, 64<<10)
		for {
			line, err := r.ReadBytes('\n')
			if len(bytes.TrimSpace(line)) > 0 {
				select {
				case lines <- line:
				case <-ctx.Done():
					return
				}
			}
			if err != nil {
				readErr <- err
				return
			}
		}
	}()
	for {
		select {
		case <-s.conn.Done():
			return errors.New("the upstream MCP server process ended")
		case <-ctx.Done():
			return ctx.Err()
		case err := <-readErr:
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		case line := <-lines:
			msg, err := parseMessage(line)
			if err != nil {
				_ = w.send(newErrorResponse(nil, codeParseError, "The line is not a JSON-RPC 2.0 message: "+err.Error()))
				continue
			}
			if !msg.IsRequest() {
				if err := s.send(ctx, msg, nil); err != nil {
					g.log.Warn("forwarding a message to the upstream failed", "method", msg.Method, "error", err)
				}
				continue
			}
			wg.Go(func() {
				t := stdioTransport
				resp, _ := s.handle(ctx, msg, nil, &t, w)
				_ = w.send(resp)
			})
		}
	}
}

// lineWriter writes newline-delimited messages, one at a time.
type lineWriter struct {
	mu sync.Mutex // serialises writes to w
	w  io.Writer
}

func (l *lineWriter) send(m *Message) error {
	b := m.Bytes()
	l.mu.Lock()
	defer l.mu.Unlock()
	_, err := l.w.Write(append(b[:len(b):len(b)], '\n'))
	return err
}
