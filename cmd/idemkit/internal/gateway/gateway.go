// Package gateway is the MCP proxy behind `idemkit gateway`: it serves MCP
// (Streamable HTTP, or stdio) in front of an unmodified MCP server (a
// Streamable HTTP URL, or a stdio command), and hands every tools/call to a
// CallHandler, where claim-and-replay and telemetry run.
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

	"github.com/idemkit/idemkit/idemkit"
	"github.com/idemkit/idemkit/instrument"
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
	// Calls answers tools/call requests. Defaults to PassThrough.
	Calls CallHandler
	// SubjectHeader is the request header that identifies the caller. For
	// Authorization the subject is the SHA-256 of the bearer token (of the
	// whole value for another scheme), never the token itself; for another
	// header it is the header's value (an identity an authenticating proxy
	// set). "-" disables it. Defaults to DefaultSubjectHeader.
	SubjectHeader string
	// SessionIdleTimeout closes sessions (and their upstream sessions or
	// processes) not used for this long. Defaults to
	// DefaultSessionIdleTimeout.
	SessionIdleTimeout time.Duration
	// HeartbeatInterval is the least time between two lease extensions of
	// one protected call driven by its progress notifications. Defaults to
	// DefaultHeartbeatInterval.
	HeartbeatInterval time.Duration
	// NoKeyParameter stops the gateway from advertising the idempotency_key
	// argument in protected tools' schemas. Defaults to advertising it.
	NoKeyParameter bool
	// Logger receives the gateway's logs. Defaults to discarding them.
	Logger *slog.Logger
}

// Gateway serves MCP in front of an upstream MCP server. Build it with New;
// it is safe for concurrent use.
type Gateway struct {
	up        Upstream
	calls     CallHandler
	subjectH  string
	idle      time.Duration
	beatEvery time.Duration
	keyParam  bool
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
		calls:      cfg.Calls,
		subjectH:   cfg.SubjectHeader,
		idle:       cfg.SessionIdleTimeout,
		beatEvery:  cfg.HeartbeatInterval,
		keyParam:   !cfg.NoKeyParameter,
		log:        cfg.Logger,
		sessions:   map[string]*session{},
		stopReaper: make(chan struct{}),
		reaperDone: make(chan struct{}),
	}
	if g.calls == nil {
		g.calls = PassThrough{}
	}
	g.streams, g.stopStreams = context.WithCancel(context.Background())
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
	go g.reap()
	return g, nil
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
		wg.Go(func() { _ = s.conn.Close(ctx) })
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
				g.log.Info("closing an idle session", "session", s.id, "idle", g.idle)
				go func() { _ = s.conn.Close(context.Background()) }()
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
	g        *Gateway
	id       string // "" on stdio
	conn     Conn
	local    bool   // stdio: one client
	netTrans string // "tcp" or "pipe"

	nextID   atomic.Int64
	lastUsed atomic.Int64 // Unix ns
	active   atomic.Int32 // requests and streams in progress

	mu       sync.Mutex // protects protocol, inflight
	protocol string
	inflight map[string]json.RawMessage // client request ID (idKey) -> upstream ID

	tools toolIndex
}

func newSession(g *Gateway, conn Conn, local bool) *session {
	s := &session{g: g, conn: conn, local: local, inflight: map[string]json.RawMessage{}, netTrans: "tcp"}
	if local {
		s.netTrans = "pipe"
	} else {
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

func (s *session) protocolVersion() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.protocol
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

// handle answers one client request. lost reports that the upstream no
// longer knows the session: the gateway session is then closed.
func (s *session) handle(ctx context.Context, req *Message, h http.Header, out sink) (resp *Message, lost bool) {
	s.active.Add(1)
	defer s.active.Add(-1)
	defer s.touch()
	var err error
	switch req.Method {
	case "tools/call":
		resp, err = s.toolsCall(ctx, req, h, out)
	case "tools/list":
		resp, err = s.toolsList(ctx, req, h, out)
	default:
		resp, err = s.roundTrip(ctx, req, h, out, nil)
	}
	if err != nil {
		return s.errorResponse(req, err), errors.Is(err, ErrSessionLost)
	}
	return resp, false
}

// errorResponse turns a failure into the JSON-RPC error the client gets.
func (s *session) errorResponse(req *Message, err error) *Message {
	var rpc *RPCError
	switch {
	case errors.As(err, &rpc):
		return &Message{JSONRPC: "2.0", ID: req.ID, Error: rpc}
	case errors.Is(err, ErrSessionLost):
		s.g.log.Warn("the upstream lost a session; closing it", "session", s.id, "method", req.Method)
		return newErrorResponse(req.ID, codeUpstream, "The upstream MCP server no longer knows this session (it restarted or expired it), so this "+req.Method+
			" request was not processed. Start a new session (initialize) and send it again.")
	case errors.Is(err, ErrUpstreamGone):
		s.g.log.Warn("the upstream went away under a request", "session", s.id, "method", req.Method, "error", err)
		return newErrorResponse(req.ID, codeUpstream, "The upstream MCP server went away before answering this "+req.Method+
			" request ("+strings.TrimPrefix(err.Error(), ErrUpstreamGone.Error()+": ")+"), so whether it ran is unknown. "+
			"The gateway recorded no result for it; a retry with the same arguments is checked again.")
	default:
		s.g.log.Warn("request failed", "session", s.id, "method", req.Method, "error", err)
		return newErrorResponse(req.ID, codeInternalError, "The idemkit gateway could not complete this "+req.Method+" request: "+err.Error())
	}
}

// toolsList forwards a tools/list, records the tools' annotations and
// advertises the idempotency_key argument on the protected ones.
func (s *session) toolsList(ctx context.Context, req *Message, h http.Header, out sink) (*Message, error) {
	resp, err := s.roundTrip(ctx, req, h, out, nil)
	if err != nil || resp.Error != nil || resp.Result == nil {
		return resp, err
	}
	s.tools.observe(listCursor(req.Params), resp.Result)
	if !s.g.keyParam || (!s.local && s.g.subject(h) == "" && s.g.subjectH != "") {
		// Calls without a subject are refused: claim no retry safety.
		return resp, nil
	}
	if r, changed := s.g.advertise(resp.Result); changed {
		resp = resp.withResult(r)
	}
	return resp, nil
}

// toolsCall runs a tools/call through the CallHandler.
func (s *session) toolsCall(ctx context.Context, req *Message, h http.Header, out sink) (*Message, error) {
	var p struct {
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
		Meta      json.RawMessage `json:"_meta"`
	}
	if err := json.Unmarshal(req.Params, &p); err != nil || p.Name == "" {
		return newErrorResponse(req.ID, -32602, "Invalid params: tools/call needs params.name (the tool) and params.arguments (an object)."), nil
	}
	info := s.tools.lookup(ctx, p.Name, func(ctx context.Context) error {
		err := s.fetchTools(ctx, h)
		if err != nil {
			s.g.log.Warn("listing the upstream's tools failed; the call is handled as a write tool's (MCP's default annotations)",
				"session", s.id, "tool", p.Name, "error", err)
		}
		return err
	})
	call := &ToolCall{
		Tool:            p.Name,
		Arguments:       p.Arguments,
		Meta:            p.Meta,
		SessionID:       s.id,
		RequestID:       formatID(req.ID),
		ProtocolVersion: s.protocolVersion(),
		Subject:         s.g.subject(h),
		Local:           s.local,
		Annotations:     info.ann,
		Transport:       s.netTrans,
	}
	fwd := req
	protected := s.g.calls.Protects(p.Name, info.ann)
	if protected && !info.declaresKey {
		if args, ok := stripKey(p.Arguments); ok {
			params, err := setMember(req.Params, "arguments", args)
			if err != nil {
				return nil, err
			}
			fwd = req.withParams(params)
		}
	}
	var lastBeat time.Time
	forward := func(fctx context.Context) (json.RawMessage, error) {
		resp, err := s.roundTrip(fctx, fwd, h, out, func(m *Message) {
			if progressOf(m) == nil {
				return
			}
			if c := idemkit.CallFromContext(fctx); c != nil && time.Since(lastBeat) >= s.g.beatEvery {
				lastBeat = time.Now()
				if err := c.Heartbeat(fctx); err != nil {
					s.g.log.Warn("extending a call's lease failed", "tool", p.Name, "error", err)
				}
			}
		})
		if err != nil {
			return nil, err
		}
		if resp.Error != nil {
			return nil, resp.Error
		}
		return resp.Result, nil
	}
	cctx := ctx
	if protected {
		// A protected call runs to its end and records its outcome even when
		// the client goes away: its retry will ask for that outcome.
		cctx = context.WithoutCancel(ctx)
	}
	res, err := s.g.calls.HandleCall(cctx, call, forward)
	if err != nil {
		return nil, err
	}
	return newResponse(req.ID, res), nil
}

// fetchTools lists every page of the upstream's tools into the index.
func (s *session) fetchTools(ctx context.Context, h http.Header) error {
	cursor := json.RawMessage(nil)
	for page := 0; page < 1000; page++ {
		params := json.RawMessage(`{}`)
		if cursor != nil {
			params, _ = json.Marshal(map[string]json.RawMessage{"cursor": cursor})
		}
		resp, err := s.roundTrip(ctx, &Message{JSONRPC: "2.0", ID: nil, Method: "tools/list", Params: params}, h, nil, nil)
		if err != nil {
			return err
		}
		if resp.Error != nil {
			return resp.Error
		}
		cursor = s.tools.observe(cursor, resp.Result)
		if cursor == nil {
			return nil
		}
	}
	return errors.New("the upstream's tools/list did not end after 1000 pages")
}

// stripKey removes the idempotency_key member from a call's arguments. ok
// is false when there was none.
func stripKey(args json.RawMessage) (json.RawMessage, bool) {
	if !bytes.Contains(args, []byte(`"`+instrument.KeyArgument+`"`)) {
		return nil, false
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(args, &m) != nil {
		return nil, false
	}
	if _, ok := m[instrument.KeyArgument]; !ok {
		return nil, false
	}
	delete(m, instrument.KeyArgument)
	b, err := json.Marshal(m)
	if err != nil {
		return nil, false
	}
	return b, true
}

// advertise adds the idempotency_key argument to the input schema of every
// protected tool in a tools/list result, and the retry-safety sentence to
// its description.
func (g *Gateway) advertise(result json.RawMessage) (json.RawMessage, bool) {
	var r map[string]json.RawMessage
	if json.Unmarshal(result, &r) != nil {
		return nil, false
	}
	var tools []map[string]json.RawMessage
	if json.Unmarshal(r["tools"], &tools) != nil {
		return nil, false
	}
	changed := false
	for _, t := range tools {
		var name string
		_ = json.Unmarshal(t["name"], &name)
		if !g.calls.Protects(name, annotationsOf(t["annotations"])) {
			continue
		}
		var schema map[string]json.RawMessage
		if json.Unmarshal(t["inputSchema"], &schema) != nil || schema == nil {
			schema = map[string]json.RawMessage{"type": json.RawMessage(`"object"`)}
		}
		var props map[string]json.RawMessage
		_ = json.Unmarshal(schema["properties"], &props)
		if props == nil {
			props = map[string]json.RawMessage{}
		}
		if _, ok := props[instrument.KeyArgument]; !ok {
			props[instrument.KeyArgument], _ = json.Marshal(instrument.KeyParameterSchema())
			schema["properties"], _ = json.Marshal(props)
			t["inputSchema"], _ = json.Marshal(schema)
			changed = true
		}
		var desc string
		_ = json.Unmarshal(t["description"], &desc)
		if !strings.Contains(desc, instrument.KeyDescription) {
			if desc = strings.TrimRight(desc, " \n"); desc != "" {
				desc += "\n\n"
			}
			t["description"], _ = json.Marshal(desc + instrument.KeyDescription)
			changed = true
		}
	}
	if !changed {
		return nil, false
	}
	r["tools"], _ = json.Marshal(tools)
	b, err := json.Marshal(r)
	if err != nil {
		return nil, false
	}
	return b, true
}

// listCursor returns params.cursor of a tools/list request, or nil.
func listCursor(params json.RawMessage) json.RawMessage {
	var p struct {
		Cursor json.RawMessage `json:"cursor"`
	}
	if json.Unmarshal(params, &p) != nil || string(p.Cursor) == "null" {
		return nil
	}
	return p.Cursor
}

func annotationsOf(raw json.RawMessage) Annotations {
	var a struct {
		ReadOnly   bool `json:"readOnlyHint"`
		Idempotent bool `json:"idempotentHint"`
	}
	_ = json.Unmarshal(raw, &a)
	return Annotations{ReadOnly: a.ReadOnly, Idempotent: a.Idempotent, Listed: true}
}

// toolInfo is what the gateway knows of one upstream tool.
type toolInfo struct {
	ann         Annotations
	declaresKey bool // its own input schema has an idempotency_key property
}

// toolIndex holds a session's upstream tools, learned from tools/list.
type toolIndex struct {
	fetch sync.Mutex // serialises the gateway's own tools/list fetches

	mu       sync.Mutex // protects the fields below
	tools    map[string]toolInfo
	complete bool
	building map[string]toolInfo // pages of a listing in progress
	gen      int                 // bumped by invalidate
}

// observe records one page of a tools/list result, listed from cursor (nil
// for the first page), and returns the next page's cursor, or nil.
func (x *toolIndex) observe(cursor, result json.RawMessage) json.RawMessage {
	var r struct {
		Tools []struct {
			Name        string          `json:"name"`
			Annotations json.RawMessage `json:"annotations"`
			InputSchema struct {
				Properties map[string]json.RawMessage `json:"properties"`
			} `json:"inputSchema"`
		} `json:"tools"`
		NextCursor json.RawMessage `json:"nextCursor"`
	}
	if json.Unmarshal(result, &r) != nil {
		return nil
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if cursor == nil || x.building == nil {
		x.building = map[string]toolInfo{}
	}
	for _, t := range r.Tools {
		_, declares := t.InputSchema.Properties[instrument.KeyArgument]
		x.building[t.Name] = toolInfo{ann: annotationsOf(t.Annotations), declaresKey: declares}
	}
	next := r.NextCursor
	if len(next) == 0 || string(next) == "null" || string(next) == `""` {
		x.tools, x.building, x.complete = x.building, nil, true
		return nil
	}
	// Tools seen so far count even before the last page.
	if x.tools == nil {
		x.tools = map[string]toolInfo{}
	}
	for k, v := range x.building {
		x.tools[k] = v
	}
	return next
}

func (x *toolIndex) invalidate() {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.tools, x.complete, x.building = nil, false, nil
	x.gen++
}

func (x *toolIndex) get(name string) (toolInfo, bool, bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	t, ok := x.tools[name]
	return t, ok, x.complete
}

// lookup returns what is known of a tool, listing the upstream's tools with
// fetch when the index has no complete listing that names it. A tool that
// stays unknown (or a listing that fails) gets MCP's default annotations:
// a write tool.
func (x *toolIndex) lookup(ctx context.Context, name string, fetch func(context.Context) error) toolInfo {
	if t, ok, complete := x.get(name); ok || complete {
		return t
	}
	x.fetch.Lock()
	defer x.fetch.Unlock()
	if t, ok, complete := x.get(name); ok || complete {
		return t
	}
	_ = fetch(ctx)
	t, _, _ := x.get(name)
	return t
}
