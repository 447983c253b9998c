package gateway

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/idemkit-mcp/idemkit/internal/httplimit"
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
	if n := g.subjectHeaders(r.Header); n > 1 {
		writeJSONRPCError(w, http.StatusBadRequest, nil, codeInvalidRequest, fmt.Sprintf(
			"Bad Request: the %s header appears %d times in this request. The idemkit gateway identifies the caller by it and cannot tell which one counts "+
				"(a proxy that appends the header instead of replacing it sends it twice). Nothing was done: send it once.", g.subjectH, n))
		return
	}
	if !headersAcceptable(w, r) {
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

// headersAcceptable checks the headers MCP's Streamable HTTP transport
// prescribes, as the SDKs' own servers do: a POST carries one JSON-RPC
// message as application/json (else 415) and accepts both a JSON answer
// and an SSE stream (else 406); a GET accepts an SSE stream (else 406).
// It answers the client itself and returns false when they do not hold.
// (MCP-Protocol-Version is checked against the session, in
// protocolVersionOK.)
func headersAcceptable(w http.ResponseWriter, r *http.Request) bool {
	switch r.Method {
	case http.MethodPost:
		if ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); ct != "application/json" {
			writeJSONRPCError(w, http.StatusUnsupportedMediaType, nil, codeInvalidRequest,
				"Unsupported Media Type: a POST to an MCP endpoint carries one JSON-RPC message with Content-Type: application/json.")
			return false
		}
		if jsonOK, sseOK := accepts(r.Header.Values("Accept")); !jsonOK || !sseOK {
			writeJSONRPCError(w, http.StatusNotAcceptable, nil, codeInvalidRequest,
				"Not Acceptable: an MCP client must accept both application/json and text/event-stream (Accept: application/json, text/event-stream).")
			return false
		}
	case http.MethodGet:
		if _, sseOK := accepts(r.Header.Values("Accept")); !sseOK {
			writeJSONRPCError(w, http.StatusNotAcceptable, nil, codeInvalidRequest,
				"Not Acceptable: the stream of an MCP session is text/event-stream; send Accept: text/event-stream.")
			return false
		}
	}
	return true
}

// accepts reports whether Accept values admit a JSON answer and an SSE
// stream, wildcards and parameters included.
func accepts(values []string) (jsonOK, sseOK bool) {
	for _, v := range values {
		for _, part := range strings.Split(v, ",") {
			base, _, _ := strings.Cut(part, ";")
			switch strings.ToLower(strings.TrimSpace(base)) {
			case "application/json", "application/*":
				jsonOK = true
			case "text/event-stream", "text/*":
				sseOK = true
			case "*/*":
				jsonOK, sseOK = true, true
			}
		}
	}
	return jsonOK, sseOK
}

// knownProtocolVersions are the MCP versions whose name the gateway knows.
var knownProtocolVersions = []string{"2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25", "2026-07-28"}

// protocolVersionOK checks the request's MCP-Protocol-Version header: when
// present, it must name a version the gateway knows or the one the session
// s (nil for an initialize) negotiated with the upstream. It answers the
// client (400) and returns false when it does not.
func protocolVersionOK(w http.ResponseWriter, r *http.Request, s *session) bool {
	v := r.Header.Get("Mcp-Protocol-Version")
	if v == "" || slices.Contains(knownProtocolVersions, v) || (s != nil && v == s.protocolVersion()) {
		return true
	}
	supported := knownProtocolVersions
	if s != nil && s.protocolVersion() != "" {
		supported = []string{s.protocolVersion()}
	}
	writeJSONRPCError(w, http.StatusBadRequest, nil, codeInvalidRequest, fmt.Sprintf(
		"Bad Request: unsupported MCP-Protocol-Version %q (supported: %s). Send the version the initialize answer negotiated.",
		truncateVersion(v), strings.Join(supported, ", ")))
	return false
}

// truncateVersion cuts a caller's protocol version to 40 bytes, at a
// character boundary, for the error that echoes it.
func truncateVersion(v string) string {
	if len(v) <= 40 {
		return v
	}
	return strings.ToValidUTF8(v[:40], "") + "…"
}

// subjectHeaders returns how many times the subject header appears in h
// (0 when none is configured).
func (g *Gateway) subjectHeaders(h http.Header) int {
	if g.subjectH == "" {
		return 0
	}
	return len(h.Values(g.subjectH))
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
// (400 or 404) and returns nil when there is none, or when the request's
// subject is not the one that initialized the session (session
// hijacking: a stolen or guessed session ID, a credential dropped or
// added, another caller's credential). That request gets the very answer
// an unknown session gets, so a prober learns nothing of which IDs exist,
// and nothing of it reaches the session: it is not forwarded, not
// attached to the session's streams, and its answer to a question (the
// upstream's or the gateway's own) is not delivered. The one exception is
// a DELETE without any credential, which may end the session (the
// README's "Session binding").
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
	if s != nil {
		// A DELETE without any credential may end the session
		// (httplimit.MayUse: mcp-go's client sends its closing DELETE
		// without the headers of its other requests).
		if !httplimit.MayUse(s.owner, r.Method, g.subject(r.Header)) {
			g.log.Warn("refused a request on a session that another subject initialized (answered as an unknown session)",
				"session", s.logID(), "method", r.Method)
			s = nil
		}
	}
	if s == nil {
		writeJSONRPCError(w, http.StatusNotFound, nil, codeInvalidRequest,
			"Session not found: it ended, expired or was never issued by this gateway. Start a new session with an initialize request.")
		return nil
	}
	return s
}

func (g *Gateway) post(w http.ResponseWriter, r *http.Request) {
	// A client that sends its body slowly holds a connection and a
	// goroutine: bound the read (the HTTP server's ReadHeaderTimeout
	// bounds the headers), then lift the deadline for the answer.
	rc := http.NewResponseController(w)
	deadline := rc.SetReadDeadline(time.Now().Add(g.readWait)) == nil
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, int64(g.maxMsg)))
	if deadline {
		_ = rc.SetReadDeadline(time.Time{})
	}
	if err != nil {
		var tooLarge *http.MaxBytesError
		switch {
		case errors.As(err, &tooLarge):
			writeJSONRPCError(w, http.StatusRequestEntityTooLarge, nil, codeInvalidRequest, fmt.Sprintf("Request Entity Too Large: a message may be at most %d bytes (the gateway's --max-message-bytes).", g.maxMsg))
		case errors.Is(err, os.ErrDeadlineExceeded):
			w.Header().Set("Connection", "close")
			writeJSONRPCError(w, http.StatusRequestTimeout, nil, codeInvalidRequest, fmt.Sprintf("Request Timeout: the body did not arrive within %s (the gateway's --read-timeout). Nothing was done.", g.readWait))
		}
		return // otherwise the client went away
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
		if protocolVersionOK(w, r, nil) {
			g.initializeHTTP(w, r, msg)
		}
		return
	}
	s := g.lookup(w, r)
	if s == nil || !protocolVersionOK(w, r, s) {
		return
	}
	if !msg.IsRequest() {
		if err := s.send(r.Context(), msg, r.Header); err != nil {
			if auth, ok := errors.AsType[*authError](err); ok {
				auth.write(w, nil)
				return
			}
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
	out := &httpSink{w: w}
	t := g.httpTransport(r)
	resp, err := s.handle(r.Context(), msg, r.Header, &t, out)
	if auth, ok := errors.AsType[*authError](err); ok && !out.started {
		auth.write(w, msg.ID)
		return
	}
	if errors.Is(err, ErrSessionLost) {
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

// initializeHTTP starts a session: an upstream session, then the client's
// initialize request on it. A stdio upstream's process is started only for
// an identified caller (when a subject header is configured), and only
// within the upstream caps.
func (g *Gateway) initializeHTTP(w http.ResponseWriter, r *http.Request, msg *Message) {
	subject := g.subject(r.Header)
	if g.stdio && g.subjectH != "" && subject == "" {
		if g.subjectH == "Authorization" {
			w.Header().Set("WWW-Authenticate", `Bearer realm="idemkit-gateway"`)
		}
		writeJSONRPCError(w, http.StatusUnauthorized, msg.ID, codeInvalidRequest, fmt.Sprintf(
			"Unauthorized: the idemkit gateway starts a server process for a session only for an identified caller, and this initialize had no %s credential. "+
				"Nothing was started. Send initialize again with the caller's %s header.", g.subjectH, g.subjectH))
		return
	}
	release, capErr := g.reserve(subject)
	if capErr != nil {
		w.Header().Set("Retry-After", fmt.Sprint(int(min(g.idle, 10*time.Minute).Seconds())))
		writeJSONRPCError(w, capErr.status, msg.ID, codeUpstream, capErr.Error())
		return
	}
	// The subject picks the process of an upstream shared by subject.
	s, err := g.open(context.WithValue(r.Context(), subjectKey{}, subject), false)
	if err != nil {
		release()
		writeJSONRPCError(w, http.StatusBadGateway, msg.ID, codeUpstream, "The idemkit gateway could not reach the upstream MCP server: "+err.Error())
		return
	}
	s.release = release
	s.owner = httplimit.Owner(subject)
	// The header goes out with the first byte of the answer, which may be
	// an SSE stream's.
	w.Header().Set("Mcp-Session-Id", s.id)
	out := &httpSink{w: w}
	t := g.httpTransport(r)
	resp, err := s.handle(r.Context(), msg, r.Header, &t, out)
	if resp.Error != nil {
		_ = s.closeUpstream(context.WithoutCancel(r.Context()))
		if !out.started {
			w.Header().Del("Mcp-Session-Id")
			if auth, ok := errors.AsType[*authError](err); ok {
				// The upstream's 401, with its challenge: how an MCP client
				// learns that it must authorize (OAuth discovery).
				auth.write(w, msg.ID)
				return
			}
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

// capError is an initialize refused because an upstream cap is reached.
type capError struct {
	status int // 503 for the total, 429 for a subject's
	msg    string
}

func (e *capError) Error() string { return e.msg }

// reserve takes a slot for a new upstream session of subject, and returns
// the function that gives it back, or the cap it would exceed.
func (g *Gateway) reserve(subject string) (release func(), err *capError) {
	each := ""
	switch {
	case g.shared:
		each = "; they share one server process"
	case g.stdio:
		each = "; each is a server process"
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case g.shared && g.bySubject[subject] == 0 && len(g.bySubject) >= g.maxUp:
		// Shared by subject: the cap counts processes, one per caller
		// with a session.
		return nil, &capError{http.StatusServiceUnavailable, fmt.Sprintf(
			"Service Unavailable: the idemkit gateway runs as many server processes as it may (--max-upstreams %d, one per caller). Nothing was started. "+
				"Retry later: sessions unused for %s close, and a caller's process with its last one.", g.maxUp, g.idle)}
	case !g.shared && g.upstreams >= g.maxUp:
		return nil, &capError{http.StatusServiceUnavailable, fmt.Sprintf(
			"Service Unavailable: the idemkit gateway has as many upstream sessions open as it may run (--max-upstreams %d%s). Nothing was started. "+
				"Retry later: sessions unused for %s close (and clients that are done should end theirs with HTTP DELETE).", g.maxUp, each, g.idle)}
	case g.maxUpSubj > 0 && g.bySubject[subject] >= g.maxUpSubj:
		return nil, &capError{http.StatusTooManyRequests, fmt.Sprintf(
			"Too Many Requests: this caller has as many sessions open as one caller may (--max-upstreams-per-subject %d%s). Nothing was started. "+
				"End sessions you no longer use with HTTP DELETE, or retry after %s, when unused sessions close.", g.maxUpSubj, each, g.idle)}
	}
	g.upstreams++
	g.bySubject[subject]++
	return func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		g.upstreams--
		if g.bySubject[subject]--; g.bySubject[subject] <= 0 {
			delete(g.bySubject, subject)
		}
	}, nil
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
	caps := parseTaskCapabilities(resp.Result)
	s.mu.Lock()
	s.protocol, s.transport, s.taskCaps = r.ProtocolVersion, *t, caps
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
	if msg.IsResponse() && s.confirms.deliver(msg) {
		return nil // the answer to the gateway's own question
	}
	if msg.IsResponse() {
		// The client's answer to a server-to-client request: once it is
		// relayed (or could not be), the upstream no longer waits on the
		// client for it.
		defer s.asking.answered(idKey(msg.ID))
	}
	return s.conn.Send(ctx, msg, h)
}

func (g *Gateway) get(w http.ResponseWriter, r *http.Request) {
	s := g.lookup(w, r)
	if s == nil || !protocolVersionOK(w, r, s) {
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	defer context.AfterFunc(g.streams, cancel)()
	st, err := s.conn.Listen(ctx, r.Header)
	var auth *authError
	switch {
	case errors.As(err, &auth):
		auth.write(w, nil)
		return
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
		if !s.fromUpstream(m) {
			continue
		}
		if sse.write(m.Bytes()) != nil {
			return
		}
	}
}

func (g *Gateway) delete(w http.ResponseWriter, r *http.Request) {
	s := g.lookup(w, r)
	if s == nil || !protocolVersionOK(w, r, s) {
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
	w http.ResponseWriter

	mu      sync.Mutex // protects the fields below and writes to w
	sse     *sseWriter
	started bool
	gone    bool // a write failed: the client is gone
}

func (k *httpSink) send(m *Message) error {
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
				if s.fromUpstream(m) {
					_ = w.send(m)
				}
			}
		})
	}

	lines := make(chan []byte)
	readErr := make(chan error, 1)
	go func() {
		r := bufio.NewReaderSize(in, 64<<10)
		for {
			line, tooLong, err := readLine(r, g.maxMsg)
			if tooLong {
				// Dropped unread: its ID is unknown, so the error names none.
				g.log.Warn("the stdio client sent a line over the message limit; dropped", "limit", g.maxMsg)
				_ = w.send(newErrorResponse(nil, codeInvalidRequest, fmt.Sprintf(
					"A line of over %d bytes (the gateway's --max-message-bytes) was dropped unread; nothing was done. Send smaller messages.", g.maxMsg)))
			}
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
