// Package gateway is the MCP proxy behind `idemkit gateway`: it serves MCP
// (Streamable HTTP, or stdio) in front of an unmodified MCP server (a
// Streamable HTTP URL, or a stdio command) and runs every request through
// the machinery idemkit's Go middleware runs (internal/mcpcall): one SERVER
// span and the MCP metrics per request, and claim-and-replay of the write
// tools' calls with the Guard.
//
// The gateway keeps its own MCP sessions, each mapped to one upstream
// session (for a stdio upstream, one process). Session IDs are random and
// only the IDs the gateway issued are accepted, so a session is something a
// caller has, not something it names. Request IDs are rewritten on the way
// up, so that the gateway's own requests (tools/list, to learn annotations)
// and a client's duplicates never collide on the upstream session, and
// restored on the way down. Messages the upstream sends before an answer
// (progress, logging, server requests) are passed to the client as they
// come; requests, notifications and responses the gateway does not need to
// understand are forwarded untouched.
//
// When the upstream goes away under a request (its process exits, the
// connection breaks, or it answers that it no longer knows the session),
// the client gets a JSON-RPC error that says so, never a replayed failure;
// a session the upstream lost is closed, so its next request gets HTTP 404
// and the client starts a new session, as the MCP transport prescribes.
package gateway

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemkit-mcp/idemkit/idemkit"
	"github.com/idemkit-mcp/idemkit/internal/mcpcall"
	"github.com/idemkit-mcp/idemkit/spancontract"
)

// Defaults of Config.
const (
	// DefaultSubjectHeader is the request header whose value identifies the
	// caller: the bearer token, hashed.
	DefaultSubjectHeader = "Authorization"
	// DefaultSessionIdleTimeout closes a session unused this long.
	DefaultSessionIdleTimeout = 30 * time.Minute
	// DefaultHeartbeatInterval is the least time between two lease
	// extensions of one call driven by its progress notifications.
	DefaultHeartbeatInterval = 500 * time.Millisecond
)

// maxMessageBytes bounds one JSON-RPC message read from a client or an
// upstream answer.
const maxMessageBytes = 16 << 20

// Config configures a Gateway.
type Config struct {
	// Upstream is the MCP server behind the gateway. Required.
	Upstream Upstream
	// Guard claims and replays the calls of the write tools. nil protects
	// nothing: every request is still traced and measured, and write
	// tools' spans carry the key hashes (bypass reason no_guard).
	Guard *idemkit.Guard
	// Instrumentation configures the spans, the metrics and which tools are
	// protected (providers, Protect overrides, Exclude, AdvertiseKey). Its
	// Subject, unscoped-call texts and (when nil) Logger are the gateway's
	// own. Defaults to mcpcall.DefaultConfig().
	Instrumentation *mcpcall.Config
	// SubjectHeader is the request header that identifies the caller. For
	// Authorization the subject is the SHA-256 of the bearer token (of the
	// whole value for another scheme), never the token itself; for another
	// header it is the header's value (an identity an authenticating proxy
	// set). Over HTTP, a protected call without it is refused. "-" disables
	// it: calls are then scoped by the gateway's own session, which only
	// the client it was issued to can present (a duplicate sent on a new
	// session after a reconnect then runs again). Defaults to
	// DefaultSubjectHeader.
	SubjectHeader string
	// SessionIdleTimeout closes sessions (and their upstream sessions or
	// processes) not used for this long. Defaults to
	// DefaultSessionIdleTimeout.
	SessionIdleTimeout time.Duration
	// HeartbeatInterval is the least time between two lease extensions of
	// one protected call driven by its progress notifications. Defaults to
	// DefaultHeartbeatInterval.
	HeartbeatInterval time.Duration
	// Logger receives the gateway's logs. Defaults to discarding them.
	Logger *slog.Logger
}

// Gateway serves MCP in front of an upstream MCP server. Build it with New;
// it is safe for concurrent use.
type Gateway struct {
	up        Upstream
	in        *mcpcall.Instrumenter
	subjectH  string
	idle      time.Duration
	beatEvery time.Duration
	log       *slog.Logger

	mu       sync.Mutex // protects sessions, closed
	sessions map[string]*session
	closed   bool

	stopReaper chan struct{}
	reaperDone chan struct{}

	streams     context.Context // cancelled by CloseStreams
	stopStreams context.CancelFunc
}

// New returns a Gateway.
func New(cfg Config) (*Gateway, error) {
	if cfg.Upstream == nil {
		return nil, errors.New("gateway: Config.Upstream is required")
	}
	if cfg.SessionIdleTimeout < 0 || cfg.HeartbeatInterval < 0 {
		return nil, errors.New("gateway: Config.SessionIdleTimeout and HeartbeatInterval must not be negative")
	}
	g := &Gateway{
		up:         cfg.Upstream,
		subjectH:   cfg.SubjectHeader,
		idle:       cfg.SessionIdleTimeout,
		beatEvery:  cfg.HeartbeatInterval,
		log:        cfg.Logger,
		sessions:   map[string]*session{},
		stopReaper: make(chan struct{}),
		reaperDone: make(chan struct{}),
	}
	switch g.subjectH {
	case "":
		g.subjectH = DefaultSubjectHeader
	case "-":
		g.subjectH = ""
	default:
		g.subjectH = http.CanonicalHeaderKey(g.subjectH)
	}
	if g.idle == 0 {
		g.idle = DefaultSessionIdleTimeout
	}
	if g.beatEvery == 0 {
		g.beatEvery = DefaultHeartbeatInterval
	}
	if g.log == nil {
		g.log = slog.New(slog.DiscardHandler)
	}
	ic := mcpcall.DefaultConfig()
	if cfg.Instrumentation != nil {
		ic = *cfg.Instrumentation
	}
	if ic.Logger == nil {
		ic.Logger = g.log
	}
	ic.Subject = subjectFromContext
	ic.UnscopedAdvice = func(tool string) string {
		return "The idemkit gateway in front of this server needs to know the caller (by default the Authorization header's bearer token), " +
			"and this request had none. Send " + tool + " again with the caller's credentials."
	}
	ic.UnscopedFix = "send the caller's identity in the subject header (--subject-header, by default Authorization: Bearer …), " +
		"or --bypass the tool to forward its calls unprotected, " +
		"or run with --subject-header - to scope calls by the gateway's own sessions"
	g.in = mcpcall.New(cfg.Guard, ic)
	g.streams, g.stopStreams = context.WithCancel(context.Background())
	go g.reap()
	return g, nil
}

type subjectKey struct{}

// subjectFromContext is the Instrumenter's Subject function: the subject
// the gateway took from the request's header.
func subjectFromContext(ctx context.Context) string {
	s, _ := ctx.Value(subjectKey{}).(string)
	return s
}

// Close ends every session (and its upstream session or process) and stops
// accepting new ones. ctx bounds the upstream closes.
func (g *Gateway) Close(ctx context.Context) error {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return nil
	}
	g.closed = true
	sessions := make([]*session, 0, len(g.sessions))
	for _, s := range g.sessions {
		sessions = append(sessions, s)
	}
	g.sessions = map[string]*session{}
	g.mu.Unlock()
	close(g.stopReaper)
	<-g.reaperDone
	g.stopStreams()
	var wg sync.WaitGroup
	for _, s := range sessions {
		wg.Go(func() { _ = s.close(ctx, "") })
	}
	wg.Wait()
	return nil
}

// CloseStreams ends every open stream of messages outside requests (the
// GET streams), which never end by themselves, so that an HTTP server's
// graceful shutdown need not wait for them; requests in flight go on.
// Register it with http.Server.RegisterOnShutdown.
func (g *Gateway) CloseStreams() { g.stopStreams() }

// reap closes idle sessions.
func (g *Gateway) reap() {
	defer close(g.reaperDone)
	t := time.NewTicker(min(g.idle/4, time.Minute))
	defer t.Stop()
	for {
		select {
		case <-g.stopReaper:
			return
		case now := <-t.C:
			var idle []*session
			g.mu.Lock()
			for id, s := range g.sessions {
				if s.active.Load() == 0 && now.Sub(time.Unix(0, s.lastUsed.Load())) > g.idle {
					idle = append(idle, s)
					delete(g.sessions, id)
				}
			}
			g.mu.Unlock()
			for _, s := range idle {
				g.log.Info("closing an idle session", "session", s.logID(), "idle", g.idle)
				go func() { _ = s.close(context.Background(), "") }()
			}
		}
	}
}

// subject returns the caller's subject from the request headers, or "".
func (g *Gateway) subject(h http.Header) string {
	if g.subjectH == "" || h == nil {
		return ""
	}
	v := strings.TrimSpace(h.Get(g.subjectH))
	if v == "" {
		return ""
	}
	if g.subjectH != "Authorization" {
		return v
	}
	prefix := "authorization:"
	if scheme, token, ok := strings.Cut(v, " "); ok && strings.EqualFold(scheme, "Bearer") {
		prefix, v = "bearer:", strings.TrimSpace(token)
		if v == "" {
			return ""
		}
	}
	sum := sha256.Sum256([]byte(v))
	return prefix + hex.EncodeToString(sum[:])
}

// session is one of the gateway's MCP sessions and its upstream session.
type session struct {
	g     *Gateway
	id    string // "" on stdio
	conn  Conn
	local bool // stdio: one client
	start time.Time

	nextID   atomic.Int64
	lastUsed atomic.Int64 // Unix ns
	active   atomic.Int32 // requests and streams in progress

	mu        sync.Mutex // protects the fields below
	protocol  string
	transport mcpcall.Transport          // of the request that started the session
	inflight  map[string]json.RawMessage // client request ID (idKey) -> upstream ID

	endOnce sync.Once

	tools toolIndex
}

func newSession(g *Gateway, conn Conn, local bool) *session {
	s := &session{g: g, conn: conn, local: local, inflight: map[string]json.RawMessage{}, start: time.Now()}
	if !local {
		s.id = newSessionID()
	}
	s.touch()
	return s
}

func newSessionID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func (s *session) touch() { s.lastUsed.Store(time.Now().UnixNano()) }

// logID is the session as the gateway's logs name it: the mcp.session.id
// its spans carry (a hash), never the ID, which grants the session.
func (s *session) logID() string { return s.g.in.SessionAttr(s.id) }

func (s *session) protocolVersion() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.protocol
}

// close closes the upstream side of the session and records the session's
// duration (mcp.server.session.duration) once; errType is "" when the
// client or the gateway ended it, spancontract.ErrorTypeOther when the
// upstream did.
func (s *session) close(ctx context.Context, errType string) error {
	s.endOnce.Do(func() {
		s.mu.Lock()
		protocol, t := s.protocol, s.transport
		s.mu.Unlock()
		s.g.in.RecordSession(context.WithoutCancel(ctx), s.start, protocol, &t, errType)
	})
	return s.conn.Close(ctx)
}

// sink receives the messages the upstream sends for a request before its
// answer. send's error means the client is gone; the request goes on.
type sink interface {
	send(m *Message) error
}

// roundTrip sends req upstream under a fresh ID and returns its answer with
// the client's ID restored, passing every message before the answer to
// onMsg (may be nil) and out (may be nil).
func (s *session) roundTrip(ctx context.Context, req *Message, h http.Header, out sink, onMsg func(*Message)) (*Message, error) {
	up := rawID(s.nextID.Add(1))
	if req.ID != nil {
		k := idKey(req.ID)
		s.mu.Lock()
		s.inflight[k] = up
		s.mu.Unlock()
		defer func() {
			s.mu.Lock()
			if bytes.Equal(s.inflight[k], up) {
				delete(s.inflight, k)
			}
			s.mu.Unlock()
		}()
	}
	st, err := s.conn.Request(ctx, req.withID(up), h)
	if err != nil {
		return nil, err
	}
	defer st.Close()
	for {
		m, err := st.Next()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil, fmt.Errorf("%w: it ended the stream without answering", ErrUpstreamGone)
			}
			return nil, err
		}
		if m.IsResponse() {
			if idKey(m.ID) != idKey(up) {
				continue // an answer to another request: not this stream's
			}
			if req.ID == nil {
				return m, nil
			}
			return m.withID(req.ID), nil
		}
		if m.Method == "notifications/tools/list_changed" {
			s.tools.invalidate()
		}
		if onMsg != nil {
			onMsg(m)
		}
		if out != nil {
			_ = out.send(m)
		}
	}
}

// requestParams are the members of a request's params the gateway reads.
type requestParams struct {
	Name           string          `json:"name"`
	URI            string          `json:"uri"`
	Arguments      json.RawMessage `json:"arguments"`
	Meta           map[string]any  `json:"_meta"`
	Cursor         json.RawMessage `json:"cursor"`
	RequestState   json.RawMessage `json:"requestState"`
	InputResponses json.RawMessage `json:"inputResponses"`
}

// handle answers one client request, which arrived on transport t, in its
// own SERVER span. lost reports that the upstream no longer knows the
// session: the gateway session is then closed.
func (s *session) handle(ctx context.Context, req *Message, h http.Header, t *mcpcall.Transport, out sink) (resp *Message, lost bool) {
	s.active.Add(1)
	defer s.active.Add(-1)
	defer s.touch()

	var p requestParams
	perr := error(nil)
	if len(req.Params) > 0 {
		perr = json.Unmarshal(req.Params, &p)
	}
	r := mcpcall.Request{Method: req.Method, Meta: p.Meta, SessionID: s.id, ProtocolVersion: s.protocolVersion(), Transport: *t}
	r.ID, r.HasID = mcpcall.FormatRawRequestID(req.ID)
	switch req.Method {
	case spancontract.MethodToolsCall, spancontract.MethodPromptsGet:
		r.Target = p.Name
	case spancontract.MethodResourcesRead, spancontract.MethodResourcesSubscribe, spancontract.MethodResourcesUnsubscribe:
		r.ResourceURI = p.URI
	}
	ctx = context.WithValue(ctx, subjectKey{}, s.g.subject(h))
	_, op := s.g.in.Start(ctx, &r)
	// op ends however the request ends, a panic included (which the HTTP
	// server recovers): a request never leaves its span open.
	var end mcpcall.Response
	defer func() {
		if p := recover(); p != nil {
			op.End(mcpcall.Response{Panicked: true})
			panic(p)
		}
		op.End(end)
	}()

	var err error
	switch {
	case req.Method == spancontract.MethodToolsCall:
		if perr != nil || p.Name == "" {
			resp = newErrorResponse(req.ID, codeInvalidParams, "Invalid params: tools/call needs params.name (the tool) and params.arguments (an object).")
			break
		}
		resp, err = s.toolsCall(op, req, &p, h, out)
	case req.Method == spancontract.MethodToolsList:
		resp, err = s.toolsList(op, req, h, out)
	default:
		resp, err = s.roundTrip(op, req, h, out, nil)
		if err == nil && req.Method == spancontract.MethodInitialize && resp.Error == nil {
			s.initialized(resp, t)
			op.SetSession(s.id, s.protocolVersion())
		}
	}
	if err != nil {
		resp, lost = s.errorResponse(req, err), errors.Is(err, ErrSessionLost)
		end.Err = err
	}
	if e := resp.Error; e != nil {
		end.HasCode, end.Code, end.Message = true, int64(e.Code), e.Message
		if end.Err == nil {
			end.Err = e
		}
	}
	return resp, lost
}

// errorResponse turns a failure into the JSON-RPC error the client gets.
func (s *session) errorResponse(req *Message, err error) *Message {
	var rpc *RPCError
	switch {
	case errors.As(err, &rpc):
		return &Message{JSONRPC: "2.0", ID: req.ID, Error: rpc}
	case errors.Is(err, ErrSessionLost):
		s.g.log.Warn("the upstream lost a session; closing it", "session", s.logID(), "method", req.Method)
		return newErrorResponse(req.ID, codeUpstream, "The upstream MCP server no longer knows this session (it restarted or expired it), so this "+req.Method+
			" request was not processed. Start a new session (initialize) and send it again.")
	case errors.Is(err, ErrUpstreamGone):
		s.g.log.Warn("the upstream went away under a request", "session", s.logID(), "method", req.Method, "error", err)
		return newErrorResponse(req.ID, codeUpstream, "The upstream MCP server went away before answering this "+req.Method+
			" request ("+strings.TrimPrefix(err.Error(), ErrUpstreamGone.Error()+": ")+"), so whether it ran is unknown. "+
			"The gateway recorded no result for it; a retry with the same arguments is checked again.")
	default:
		s.g.log.Warn("request failed", "session", s.logID(), "method", req.Method, "error", err)
		return newErrorResponse(req.ID, codeInternalError, "The idemkit gateway could not complete this "+req.Method+" request: "+err.Error())
	}
}

// toolsList forwards a tools/list, records the tools' annotations and
// advertises the idempotency_key argument on the tools whose calls the
// listing caller gets protected.
func (s *session) toolsList(op *mcpcall.Op, req *Message, h http.Header, out sink) (*Message, error) {
	resp, err := s.roundTrip(op, req, h, out, nil)
	if err != nil || resp.Error != nil || resp.Result == nil {
		return resp, err
	}
	result, tools, derr := s.g.in.DecorateRawToolsList(resp.Result, op.Scope())
	if derr != nil {
		s.g.log.Warn("the upstream's tools/list answer could not be read; passed on as it is, and its tools' calls are handled as write tools'",
			"session", s.logID(), "error", derr)
		return resp, nil
	}
	s.tools.observe(listCursor(req.Params), tools, nextCursor(resp.Result))
	if !bytes.Equal(result, resp.Result) {
		resp = resp.withResult(result)
	}
	return resp, nil
}

// toolsCall runs a tools/call through the machinery (mcpcall.CallTool):
// the call's protection, scope, key and outcome are decided there, and
// forward runs at most once per key while a result is kept.
func (s *session) toolsCall(op *mcpcall.Op, req *Message, p *requestParams, h http.Header, out sink) (*Message, error) {
	in := s.g.in
	tool := s.tools.lookup(op, p.Name, func(ctx context.Context) error {
		err := s.fetchTools(ctx, h)
		if err != nil {
			s.g.log.Warn("listing the upstream's tools failed; the call is handled as a write tool's (MCP's default annotations)",
				"session", s.logID(), "tool", p.Name, "error", err)
		}
		return err
	})
	call := &mcpcall.ToolCall{
		Tool:         p.Name,
		Arguments:    p.Arguments,
		Meta:         p.Meta,
		Info:         tool.info,
		Continuation: nonNull(p.RequestState) || nonNull(p.InputResponses),
	}
	fwd := req
	if in.StripsKey(p.Name, tool.info) {
		if args, key := mcpcall.StripKeyArgument(p.Arguments); key != nil {
			params, err := setMember(req.Params, "arguments", args)
			if err != nil {
				return nil, err
			}
			call.Arguments, call.StrippedKey, fwd = args, key, req.withParams(params)
		}
	}
	if in.WriteTool(p.Name, tool.info) {
		call.Validator = tool.validator()
	}
	res, err := mcpcall.CallTool(op, call, mcpcall.RawCodec{}, func(ctx context.Context) (json.RawMessage, error) {
		c := idemkit.CallFromContext(ctx)
		if c != nil {
			// A protected call runs to its end and records its outcome even
			// when the client goes away: its retry will ask for that
			// outcome.
			ctx = context.WithoutCancel(ctx)
		}
		var lastBeat time.Time
		resp, err := s.roundTrip(ctx, fwd, h, out, func(m *Message) {
			if c == nil || progressOf(m) == nil || time.Since(lastBeat) < s.g.beatEvery {
				return
			}
			lastBeat = time.Now()
			if err := c.Heartbeat(ctx); err != nil {
				s.g.log.Warn("extending a call's lease failed", "tool", p.Name, "error", err)
			}
		})
		switch {
		case err != nil:
			return nil, err
		case resp.Error != nil:
			return nil, resp.Error
		case len(resp.Result) == 0 || string(resp.Result) == "null":
			return nil, errNoResult
		}
		return resp.Result, nil
	})
	if err != nil {
		return nil, err
	}
	return newResponse(req.ID, res), nil
}

var errNoResult = &RPCError{Code: codeInternalError, Message: "the upstream MCP server answered tools/call without a result"}

func nonNull(raw json.RawMessage) bool {
	t := bytes.TrimSpace(raw)
	return len(t) > 0 && string(t) != "null"
}

// fetchTools lists every page of the upstream's tools into the index.
func (s *session) fetchTools(ctx context.Context, h http.Header) error {
	cursor := json.RawMessage(nil)
	for page := 0; page < 1000; page++ {
		params := json.RawMessage(`{}`)
		if cursor != nil {
			params, _ = json.Marshal(map[string]json.RawMessage{"cursor": cursor})
		}
		resp, err := s.roundTrip(ctx, &Message{JSONRPC: "2.0", ID: nil, Method: spancontract.MethodToolsList, Params: params}, h, nil, nil)
		if err != nil {
			return err
		}
		if resp.Error != nil {
			return resp.Error
		}
		tools, err := parseTools(resp.Result)
		if err != nil {
			return err
		}
		next := nextCursor(resp.Result)
		s.tools.observe(cursor, tools, next)
		if next == nil {
			return nil
		}
		cursor = next
	}
	return errors.New("the upstream's tools/list did not end after 1000 pages")
}
