package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// HTTPUpstream is a Streamable HTTP MCP server at URL.
type HTTPUpstream struct {
	url    string
	client *http.Client
	maxMsg atomic.Int64 // the largest JSON answer read; set by New
}

func (u *HTTPUpstream) setMaxMessageBytes(n int) { u.maxMsg.Store(int64(n)) }

func (u *HTTPUpstream) maxMessageBytes() int64 {
	if n := u.maxMsg.Load(); n > 0 {
		return n
	}
	return DefaultMaxMessageBytes
}

// answerTooLargeError: the upstream answered a request with a JSON message
// over the gateway's limit. The request ran; its answer was not read
// whole.
type answerTooLargeError struct {
	limit int64
	buf   []byte // the limit+1 bytes read, for reuse
}

func (e *answerTooLargeError) Error() string {
	return fmt.Sprintf("the upstream MCP server answered with a message larger than %d bytes, the most the idemkit gateway reads (--max-message-bytes), "+
		"so the request ran but its answer cannot be passed on", e.limit)
}

// notKeptText is the answer to the first caller of a protected call whose
// answer was too large.
func (e *answerTooLargeError) notKeptText(tool string) string {
	return fmt.Sprintf("The %s call ran: the upstream MCP server answered it, but with more than the %d bytes the idemkit gateway passes on "+
		"(its --max-message-bytes), so the answer was neither passed on nor kept. Do not call %s again for this: the work is done, "+
		"and a retry is answered that its result was not kept. To see the result, ask the server's operator for a smaller one or a higher limit.",
		tool, e.limit, tool)
}

// NewHTTPUpstream returns the Streamable HTTP upstream at rawURL (http or
// https). client may be nil for a default one with pooled keep-alive
// connections.
func NewHTTPUpstream(rawURL string, client *http.Client) (*HTTPUpstream, error) {
	u, err := url.Parse(rawURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("the upstream %q is not an http:// or https:// URL (for example http://127.0.0.1:8080/mcp)", rawURL)
	}
	if client == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.MaxIdleConns = 256
		t.MaxIdleConnsPerHost = 256
		t.IdleConnTimeout = 90 * time.Second
		client = &http.Client{Transport: t}
	}
	return &HTTPUpstream{url: u.String(), client: client}, nil
}

// Transport implements Upstream.
func (u *HTTPUpstream) Transport() string { return "http" }

// Connect implements Upstream: the session starts with the initialize
// request sent on the returned Conn.
func (u *HTTPUpstream) Connect(context.Context) (Conn, error) {
	return &httpConn{up: u, done: make(chan struct{})}, nil
}

// httpConn is one session on a Streamable HTTP upstream.
type httpConn struct {
	up *HTTPUpstream

	mu  sync.RWMutex // protects sid
	sid string       // the upstream's Mcp-Session-Id, "" when it uses none

	doneOnce sync.Once
	done     chan struct{}
}

// Done implements Conn.
func (c *httpConn) Done() <-chan struct{} { return c.done }

func (c *httpConn) lost() { c.doneOnce.Do(func() { close(c.done) }) }

// forwardedHeaders are the client headers never sent upstream: hop-by-hop
// headers, and those the gateway sets itself.
var forwardedHeaders = map[string]bool{
	"Connection": true, "Keep-Alive": true, "Proxy-Connection": true, "Te": true, "Trailer": true,
	"Transfer-Encoding": true, "Upgrade": true, "Content-Length": true, "Host": true,
	"Accept": true, "Accept-Encoding": true, "Content-Type": true, "Mcp-Session-Id": true,
	"Last-Event-Id": true, "Proxy-Authorization": true,
}

func (c *httpConn) newRequest(ctx context.Context, method string, body []byte, h http.Header) (*http.Request, error) {
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.up.url, r)
	if err != nil {
		return nil, err
	}
	for k, v := range h {
		if !forwardedHeaders[k] {
			req.Header[k] = v
		}
	}
	switch method {
	case http.MethodPost:
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
	case http.MethodGet:
		req.Header.Set("Accept", "text/event-stream")
	}
	c.mu.RLock()
	if c.sid != "" {
		req.Header.Set("Mcp-Session-Id", c.sid)
	}
	c.mu.RUnlock()
	return req, nil
}

// do sends req and translates transport failures, a lost session and a
// refused caller.
func (c *httpConn) do(req *http.Request) (*http.Response, error) {
	resp, err := c.up.client.Do(req)
	if err != nil {
		if req.Context().Err() != nil {
			return nil, req.Context().Err()
		}
		return nil, fmt.Errorf("%w: %s %s: %v", ErrUpstreamGone, req.Method, c.up.url, err)
	}
	switch {
	case resp.StatusCode == http.StatusNotFound && req.Header.Get("Mcp-Session-Id") != "":
		drain(resp)
		c.lost()
		return nil, ErrSessionLost
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		return nil, newAuthError(resp)
	}
	return resp, nil
}

// maxAuthBody bounds the body of a 401 or 403 the gateway passes on.
const maxAuthBody = 64 << 10

// authError is an upstream's HTTP 401 or 403: it does not accept the
// caller's credentials, or refuses the caller. The request was not
// processed. The HTTP front passes the status, the WWW-Authenticate
// challenges (which MCP's OAuth discovery reads) and the body on to the
// client as they are.
type authError struct {
	status      int
	challenges  []string // WWW-Authenticate values
	contentType string
	body        []byte
}

func newAuthError(resp *http.Response) *authError {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, maxAuthBody))
	resp.Body.Close()
	return &authError{
		status:      resp.StatusCode,
		challenges:  resp.Header.Values("WWW-Authenticate"),
		contentType: resp.Header.Get("Content-Type"),
		body:        b,
	}
}

func (e *authError) Error() string {
	what := "does not accept this request's credentials"
	if e.status == http.StatusForbidden {
		what = "refuses this caller"
	}
	return fmt.Sprintf("the upstream MCP server %s (HTTP %d): nothing was done", what, e.status)
}

// write answers the client with the upstream's refusal.
func (e *authError) write(w http.ResponseWriter, id json.RawMessage) {
	for _, c := range e.challenges {
		w.Header().Add("WWW-Authenticate", c)
	}
	if len(e.body) == 0 {
		writeJSONRPCError(w, e.status, id, codeInvalidRequest, strings.ToUpper(e.Error()[:1])+e.Error()[1:]+
			". Send the request again with credentials the server accepts.")
		return
	}
	if e.contentType != "" {
		w.Header().Set("Content-Type", e.contentType)
	}
	w.WriteHeader(e.status)
	_, _ = w.Write(e.body)
}

func drain(resp *http.Response) {
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
}

// statusError describes an unexpected HTTP answer by its status, content
// type and size, never its bytes: the body may be a tool's result, or echo
// the request's arguments, and the error reaches logs, the span's status
// and its exception event.
func statusError(resp *http.Response) error {
	n, _ := io.Copy(io.Discard, io.LimitReader(resp.Body, countedBytes+1))
	resp.Body.Close()
	ct := resp.Header.Get("Content-Type")
	if ct == "" {
		ct = "no content type"
	}
	return fmt.Errorf("the upstream answered HTTP %d (%s, %s)", resp.StatusCode, ct, sizeOf(n))
}

// countedBytes is how much of an unexpected answer statusError reads to
// say its size.
const countedBytes = DefaultMaxMessageBytes

// sizeOf says how long an upstream answer was ("212 bytes"), which is all
// an error about it may say of its bytes.
func sizeOf(n int64) string {
	if n > countedBytes {
		return fmt.Sprintf("over %d bytes", countedBytes)
	}
	return fmt.Sprintf("%d bytes", n)
}

// Request implements Conn.
func (c *httpConn) Request(ctx context.Context, msg *Message, h http.Header) (Stream, error) {
	req, err := c.newRequest(ctx, http.MethodPost, msg.Bytes(), h)
	if err != nil {
		return nil, err
	}
	resp, err := c.do(req)
	if err != nil {
		return nil, err
	}
	if msg.Method == "initialize" && resp.StatusCode == http.StatusOK {
		if sid := resp.Header.Get("Mcp-Session-Id"); sid != "" {
			c.mu.Lock()
			c.sid = sid
			c.mu.Unlock()
		}
	}
	ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	switch {
	case resp.StatusCode == http.StatusOK && ct == "text/event-stream":
		return &httpSSEStream{c: c, ctx: ctx, h: h, resp: resp, sse: newSSEReader(resp.Body), request: true}, nil
	case ct == "application/json":
		// A JSON answer, whatever the status: a JSON-RPC response (or an
		// error response to a rejected request).
		limit := c.up.maxMessageBytes()
		b, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
		resp.Body.Close()
		if err != nil {
			return nil, fmt.Errorf("%w: reading the answer: %v", ErrUpstreamGone, err)
		}
		if int64(len(b)) > limit {
			return nil, &answerTooLargeError{limit: limit, buf: b}
		}
		m, perr := parseMessage(b)
		if perr != nil || !m.IsResponse() {
			// Its size, never its bytes (see statusError).
			if resp.StatusCode != http.StatusOK {
				return nil, fmt.Errorf("the upstream answered HTTP %d with JSON that is not a JSON-RPC response (%s)", resp.StatusCode, sizeOf(int64(len(b))))
			}
			return nil, fmt.Errorf("the upstream's answer is not a JSON-RPC response (%s)", sizeOf(int64(len(b))))
		}
		return &oneStream{m: m}, nil
	default:
		return nil, statusError(resp)
	}
}

// Send implements Conn.
func (c *httpConn) Send(ctx context.Context, msg *Message, h http.Header) error {
	req, err := c.newRequest(ctx, http.MethodPost, msg.Bytes(), h)
	if err != nil {
		return err
	}
	resp, err := c.do(req)
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		return statusError(resp)
	}
	drain(resp)
	return nil
}

// Listen implements Conn: a GET stream.
func (c *httpConn) Listen(ctx context.Context, h http.Header) (Stream, error) {
	req, err := c.newRequest(ctx, http.MethodGet, nil, h)
	if err != nil {
		return nil, err
	}
	resp, err := c.do(req)
	if err != nil {
		return nil, err
	}
	ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if resp.StatusCode == http.StatusOK && ct == "text/event-stream" {
		return &httpSSEStream{c: c, ctx: ctx, h: h, resp: resp, sse: newSSEReader(resp.Body)}, nil
	}
	if resp.StatusCode == http.StatusMethodNotAllowed {
		drain(resp)
		return nil, errNoListen
	}
	return nil, statusError(resp)
}

// Close implements Conn: a DELETE of the session, when there is one.
func (c *httpConn) Close(ctx context.Context) error {
	defer c.lost()
	c.mu.RLock()
	sid := c.sid
	c.mu.RUnlock()
	if sid == "" {
		return nil
	}
	req, err := c.newRequest(ctx, http.MethodDelete, nil, nil)
	if err != nil {
		return err
	}
	resp, err := c.up.client.Do(req)
	if err != nil {
		return err
	}
	drain(resp)
	return nil
}

// maxResumes bounds how often one request's stream is resumed.
const maxResumes = 5

// httpSSEStream reads the messages of an SSE response. The stream of a
// request that ends (or breaks) before its answer, after the server gave
// its events IDs, is resumed with a GET carrying Last-Event-ID, as MCP's
// Streamable HTTP transport prescribes: a server may close a long call's
// stream on purpose and expect the client to come back for the rest.
type httpSSEStream struct {
	c       *httpConn
	ctx     context.Context
	h       http.Header
	request bool // the stream of a request (not a Listen stream)

	mu       sync.Mutex // protects resp, so that Close may run beside Next
	resp     *http.Response
	closed   bool
	sse      *sseReader
	answered bool
	resumes  int
}

func (s *httpSSEStream) Next() (*Message, error) {
	for {
		data, err := s.sse.next()
		if err != nil {
			if ctxErr := s.ctx.Err(); ctxErr != nil {
				return nil, ctxErr
			}
			if s.request && !s.answered && s.sse.lastID != "" && s.resumes < maxResumes {
				if rerr := s.resume(); rerr != nil {
					return nil, fmt.Errorf("%w: its stream ended before the answer and could not be resumed: %v", ErrUpstreamGone, rerr)
				}
				continue
			}
			if errors.Is(err, io.EOF) {
				return nil, io.EOF
			}
			return nil, fmt.Errorf("%w: the stream broke: %v", ErrUpstreamGone, err)
		}
		m, err := parseMessage(data)
		if err != nil {
			continue // not a JSON-RPC message: nothing to forward
		}
		if m.IsResponse() {
			s.answered = true
		}
		return m, nil
	}
}

// resume reopens the stream after its last event.
func (s *httpSSEStream) resume() error {
	s.resumes++
	wait := time.Duration(s.sse.retry) * time.Millisecond
	if wait <= 0 {
		wait = 100 * time.Millisecond
	}
	if err := sleepCtx(s.ctx, min(wait, 5*time.Second)); err != nil {
		return err
	}
	req, err := s.c.newRequest(s.ctx, http.MethodGet, nil, s.h)
	if err != nil {
		return err
	}
	req.Header.Set("Last-Event-ID", s.sse.lastID)
	// Not c.do: a 404 here says nothing about whether the request ran.
	resp, err := s.c.up.client.Do(req)
	if err != nil {
		return err
	}
	ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if resp.StatusCode != http.StatusOK || ct != "text/event-stream" {
		return statusError(resp)
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		resp.Body.Close()
		return errors.New("the stream was closed")
	}
	s.resp.Body.Close()
	s.resp = resp
	s.mu.Unlock()
	last, retry := s.sse.lastID, s.sse.retry
	s.sse = newSSEReader(resp.Body)
	s.sse.lastID, s.sse.retry = last, retry
	return nil
}

func (s *httpSSEStream) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closed {
		s.closed = true
		s.resp.Body.Close()
	}
	return nil
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// oneStream is a stream of one message.
type oneStream struct {
	m    *Message
	read bool
}

func (s *oneStream) Next() (*Message, error) {
	if s.read {
		return nil, io.EOF
	}
	s.read = true
	return s.m, nil
}

func (s *oneStream) Close() error { return nil }
