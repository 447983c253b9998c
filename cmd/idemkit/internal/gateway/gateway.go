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
// caller has, not something it names; a session is also bound to the
// subject that initialized it (or to none), and a request on it from
// another subject is answered as for an unknown session (HTTP 404), so
// that a stolen session ID serves no other caller. Request IDs are rewritten on the way
// up, so that the gateway's own requests (tools/list, to learn annotations)
// and a client's duplicates never collide on the upstream session, and
// restored on the way down. Messages the upstream sends before an answer
// (progress, logging, server requests) are passed to the client as they
// come; requests, notifications and responses the gateway does not need to
// understand are forwarded untouched. While a server request the gateway
// relayed is unanswered, the session's protected calls keep their leases
// (asking.go); a tool with a human gate (mcpcall.Config.Confirm) is asked
// about by the gateway itself before a call is forwarded (confirm.go).
// Every message read, on every transport, is bounded by MaxMessageBytes.
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
	// caller: the credential (a bearer token), hashed.
	DefaultSubjectHeader = "Authorization"
	// DefaultSessionIdleTimeout closes a session unused this long (no
	// request, no open stream): the TypeScript SDK's Client.close() ends
	// its session without an HTTP DELETE, so an idle close is how most
	// sessions, and their upstream processes, end.
	DefaultSessionIdleTimeout = 5 * time.Minute
	// DefaultReadTimeout bounds reading one request's body.
	DefaultReadTimeout = 10 * time.Second
	// DefaultHeartbeatInterval is the least time between two lease
	// extensions of one call driven by its progress notifications.
	DefaultHeartbeatInterval = 500 * time.Millisecond
	// DefaultConfirmTimeout bounds how long the gateway's own question (a
	// tool's confirm setting) waits for the client's answer.
	DefaultConfirmTimeout = 10 * time.Minute
)

// Defaults of Config.MaxUpstreams and MaxUpstreamsPerSubject, by the
// upstream's transport: a stdio upstream runs one process per session
// (tens of MiB each), a Streamable HTTP one costs the gateway little per
// session.
const (
	DefaultMaxStdioUpstreams           = 32
	DefaultMaxStdioUpstreamsPerSubject = 4
	DefaultMaxHTTPUpstreams            = 1024
	DefaultMaxHTTPUpstreamsPerSubject  = 64
)

// DefaultMaxMessageBytes is the default of Config.MaxMessageBytes: 16 MiB,
// idemkit.DefaultMaxResponse.
const DefaultMaxMessageBytes = idemkit.DefaultMaxResponse

// Config configures a Gateway.
type Config struct {
	// Upstream is the MCP server behind the gateway. Required.
	Upstream Upstream
	// Guard claims and replays the calls of the write tools. nil protects
	// nothing: every request is still traced and measured, and write
	// tools' spans carry the key hashes (bypass reason no_guard).
	Guard *idemkit.Guard
	// Instrumentation configures the spans, the metrics and which tools are
	// protected (providers, Protect overrides, Exclude, AdvertiseKey), and
	// the call status tool the gateway serves itself (CallStatusTool; off
	// when "", and without a Guard). Its
	// Subject, unscoped-call texts and (when nil) Logger are the gateway's
	// own. Defaults to mcpcall.DefaultConfig().
	Instrumentation *mcpcall.Config
	// SubjectHeader is the request header that identifies the caller. For
	// Authorization the subject is the scheme and the SHA-256 of the
	// credential after it ("bearer:<hex>"), never the credential itself, and
	// a value with no credential (empty, white space, a scheme alone such as
	// "Bearer") names no one; for another header it is the header's value
	// (an identity an authenticating proxy set). Over HTTP, a protected call
	// without a subject is refused, and a request that carries the header
	// more than once gets HTTP 400. "-" disables it: calls are then scoped
	// by the gateway's own session, which only the client it was issued to
	// can present (a duplicate sent on a new session after a reconnect then
	// runs again). Defaults to DefaultSubjectHeader.
	SubjectHeader string
	// SessionIdleTimeout closes sessions (and their upstream sessions or
	// processes) not used for this long: no request in progress, no open
	// stream. Defaults to DefaultSessionIdleTimeout.
	SessionIdleTimeout time.Duration
	// MaxUpstreams bounds the upstream sessions open at once over HTTP (for
	// a stdio upstream, its processes; for a SharedStdioUpstream, its
	// processes, one per subject with a session): an initialize beyond it
	// gets HTTP 503 and starts nothing. Defaults to DefaultMaxStdioUpstreams
	// or DefaultMaxHTTPUpstreams, by the upstream's transport.
	MaxUpstreams int
	// MaxUpstreamsPerSubject bounds the upstream sessions of one subject
	// (the callers without one, over an HTTP upstream, count as one): an
	// initialize beyond it gets HTTP 429. It does not apply when
	// SubjectHeader is "-". Defaults to DefaultMaxStdioUpstreamsPerSubject,
	// or DefaultMaxHTTPUpstreamsPerSubject for an HTTP upstream and for a
	// SharedStdioUpstream (whose sessions share one process).
	MaxUpstreamsPerSubject int
	// ReadTimeout bounds reading one request's body: a client slower than
	// that gets HTTP 408 and its connection is closed (the http.Server's
	// ReadHeaderTimeout bounds the headers). Defaults to DefaultReadTimeout.
	ReadTimeout time.Duration
	// HeartbeatInterval is the least time between two lease extensions of
	// one protected call driven by its progress notifications. Defaults to
	// DefaultHeartbeatInterval.
	HeartbeatInterval time.Duration
	// MaxMessageBytes bounds one JSON-RPC message the gateway reads, on
	// every transport: a client's POST (a larger one gets HTTP 413) or
	// stdio line (a longer one is dropped unread and answered with a
	// JSON-RPC error), and a Streamable HTTP upstream's JSON answer or SSE
	// event (and its lines). A tools/call answer over it was run but can be
	// neither passed on nor kept: a protected call is recorded as done
	// with its result not kept (the first caller and every retry are
	// answered response_not_kept; nothing runs again), which needs the
	// Guard's Config.MaxResponseBytes to be at most this (the idemkit
	// command sets both from --max-message-bytes); on a request's SSE
	// stream any event over it before the answer is taken for the answer.
	// A stdio upstream's line over it cannot be told apart from an answer,
	// nor skipped safely: the process is stopped and its requests in flight
	// fail as when it crashes (whether they ran is unknown). Defaults to
	// DefaultMaxMessageBytes.
	MaxMessageBytes int
	// ConfirmTimeout bounds how long the gateway's own question before a
	// gated call (mcpcall.Config.Confirm) waits for the client's answer,
	// the claim held meanwhile: without an answer in time the call is
	// refused (confirmation_unavailable, "no answer within …"), nothing is
	// forwarded, and the claim is released. Defaults to
	// DefaultConfirmTimeout.
	ConfirmTimeout time.Duration
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
	askFor    time.Duration // ConfirmTimeout
	maxMsg    int
	readWait  time.Duration
	maxUp     int
	maxUpSubj int  // 0: no per-subject bound
	stdio     bool // the upstream runs a process per session
	shared    bool // ... or per subject (SharedStdioUpstream)
	log       *slog.Logger
	tasks     *mcpcall.Tasks // the gateway's own tasks; nil without a Guard

	mu        sync.Mutex // protects the fields below
	sessions  map[string]*session
	closed    bool
	upstreams int            // upstream sessions open or opening over HTTP
	bySubject map[string]int // the same, by subject

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
	if cfg.MaxMessageBytes < 0 || cfg.MaxUpstreams < 0 || cfg.MaxUpstreamsPerSubject < 0 || cfg.ReadTimeout < 0 || cfg.ConfirmTimeout < 0 {
		return nil, errors.New("gateway: Config.MaxMessageBytes, MaxUpstreams, MaxUpstreamsPerSubject, ReadTimeout and ConfirmTimeout must not be negative")
	}
	g := &Gateway{
		up:         cfg.Upstream,
		subjectH:   cfg.SubjectHeader,
		idle:       cfg.SessionIdleTimeout,
		beatEvery:  cfg.HeartbeatInterval,
		askFor:     cfg.ConfirmTimeout,
		maxMsg:     cfg.MaxMessageBytes,
		readWait:   cfg.ReadTimeout,
		maxUp:      cfg.MaxUpstreams,
		maxUpSubj:  cfg.MaxUpstreamsPerSubject,
		stdio:      cfg.Upstream.Transport() == "stdio",
		shared:     isShared(cfg.Upstream),
		bySubject:  map[string]int{},
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
	if g.maxMsg == 0 {
		g.maxMsg = DefaultMaxMessageBytes
	}
	if g.readWait == 0 {
		g.readWait = DefaultReadTimeout
	}
	if g.askFor == 0 {
		g.askFor = DefaultConfirmTimeout
	}
	if g.maxUp == 0 {
		g.maxUp = DefaultMaxHTTPUpstreams
		if g.stdio {
			g.maxUp = DefaultMaxStdioUpstreams
		}
	}
	if g.shared && g.subjectH == "" {
		return nil, errors.New("gateway: an upstream shared by subject needs a SubjectHeader: without one every caller would share one process")
	}
	switch {
	case g.subjectH == "":
		g.maxUpSubj = 0 // every caller is anonymous: only the total counts
	case g.maxUpSubj == 0 && g.shared:
		g.maxUpSubj = DefaultMaxHTTPUpstreamsPerSubject // sessions of one process: cheap
	case g.maxUpSubj == 0 && g.stdio:
		g.maxUpSubj = DefaultMaxStdioUpstreamsPerSubject
	case g.maxUpSubj == 0:
		g.maxUpSubj = DefaultMaxHTTPUpstreamsPerSubject
	}
	if u, ok := g.up.(interface{ setMaxMessageBytes(int) }); ok {
		u.setMaxMessageBytes(g.maxMsg)
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
	if cfg.Guard != nil {
		tasks, err := g.in.NewTasks(ic.Tasks)
		if err != nil {
			return nil, fmt.Errorf("gateway: Config.Instrumentation.Tasks: %w", err)
		}
		g.tasks = tasks
	}
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
	if g.tasks != nil {
		// Running tasks finish within ctx, or are cancelled (and reported
		// failed): their upstream sessions close next.
		_ = g.tasks.Close(ctx)
	}
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

// subject returns the caller's subject from the request headers, or ""
// when they name none: no subject header, a value of only white space, or
// (for Authorization) a value that carries no credential.
func (g *Gateway) subject(h http.Header) string {
	if g.subjectH == "" || h == nil {
		return ""
	}
	vs := h.Values(g.subjectH)
	if len(vs) != 1 {
		// None, or more than one (which the HTTP front refuses before it
		// gets here): no subject either way.
		return ""
	}
	v := strings.TrimSpace(vs[0])
	if v == "" {
		return ""
	}
	if g.subjectH != "Authorization" {
		return v
	}
	return authorizationSubject(v)
}

// authorizationSubject returns the subject of an Authorization value:
// the scheme, lower-cased, a colon and the hex SHA-256 of the credential
// that follows it ("bearer:<sha256 of the token>", "basic:<sha256 of the
// base64 user:password>"), never the credential itself. A value without a
// credential after its scheme ("Bearer", which is what "Bearer " with an
// unset token reaches a Go server as; "Basic"; one word of any kind) names
// no one and returns "": RFC 9110 §11.4 makes the first word of the value
// the scheme, and a scheme alone is not a credential. Two callers with such
// a value must not share one scope, so their protected calls are refused
// as unscoped, exactly like calls without the header.
//
// The scheme is part of the subject, so the same bytes sent under two
// schemes are two callers; the scheme's case is not (schemes are
// case-insensitive), the credential's is. The gateway does not verify the
// credential: the upstream does, and a caller it rejects gets its 401.
func authorizationSubject(v string) string {
	i := strings.IndexAny(v, " \t")
	if i < 0 {
		return "" // a scheme alone
	}
	scheme, cred := v[:i], strings.TrimSpace(v[i+1:])
	if cred == "" {
		return ""
	}
	sum := sha256.Sum256([]byte(cred))
	return strings.ToLower(scheme) + ":" + hex.EncodeToString(sum[:])
}

// session is one of the gateway's MCP sessions and its upstream session.
type session struct {
	g     *Gateway
	id    string // "" on stdio
	conn  Conn
	local bool // stdio: one client
	start time.Time
	owner [sha256.Size]byte // httplimit.Owner of the initializing caller's subject (HTTP); with SubjectHeader "-" every request has none, and the session ID alone grants the session

	nextID   atomic.Int64
	lastUsed atomic.Int64 // Unix ns
	active   atomic.Int32 // requests and streams in progress

	mu        sync.Mutex // protects the fields below
	protocol  string
	transport mcpcall.Transport          // of the request that started the session
	inflight  map[string]json.RawMessage // client request ID (idKey) -> upstream ID
	taskCaps  taskCapabilities           // the upstream's, from its initialize answer
	followed  taskIDs                    // the upstream's tasks behind gateway tasks
	relayed   taskIDs                    // the upstream's tasks whose CreateTaskResult the client got

	asking    asking        // server-to-client requests relayed and not answered
	confirms  confirmations // the gateway's own questions to the client
	canElicit bool          // the client declared elicitation (under mu)

	endOnce sync.Once

	release     func() // gives back the session's upstream slot, or nil
	releaseOnce sync.Once

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
	return s.closeUpstream(ctx)
}

// closeUpstream closes the upstream side (for a stdio upstream, the
// process, which may take a few seconds) and then gives back its slot.
func (s *session) closeUpstream(ctx context.Context) error {
	err := s.conn.Close(ctx)
	if s.release != nil {
		s.releaseOnce.Do(s.release)
	}
	return err
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
			if out != nil && req.Method == spancontract.MethodToolsCall {
				if id := createdTaskID(m.Result); id != "" {
					// The upstream's task, the client's to know.
					s.mu.Lock()
					s.relayed.add(id)
					s.mu.Unlock()
				}
			}
			if req.ID == nil {
				return m, nil
			}
			return m.withID(req.ID), nil
		}
		if !s.fromUpstream(m) {
			continue
		}
		if m.IsRequest() {
			// Relayed on this request's stream: when the request ends, the
			// upstream no longer waits for its answer.
			defer s.asking.answered(idKey(m.ID))
		}
		if onMsg != nil {
			onMsg(m)
		}
		if out != nil {
			_ = out.send(m)
		}
	}
}

// fromUpstream notes what a message the upstream sends to the client
// changes: the tools (list_changed), the server-to-client requests open
// (a request, or the upstream's cancellation of one); and reports whether
// the client may see it. A task's status notification reaches the client
// only for a task of the upstream's that the client was given (mcp-go
// sends every task's status to every session, another caller's included;
// a task behind a gateway task is known to the client by the gateway's ID).
func (s *session) fromUpstream(m *Message) bool {
	if m.Method == mcpcall.NotificationTasksStatus && !m.IsRequest() {
		var p struct {
			TaskID string `json:"taskId"`
		}
		if json.Unmarshal(m.Params, &p) != nil || p.TaskID == "" {
			return false
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.relayed.has(p.TaskID) && !s.followed.has(p.TaskID)
	}
	switch {
	case m.Method == "notifications/tools/list_changed":
		s.tools.invalidate()
	case m.IsRequest():
		s.asking.relayed(idKey(m.ID))
	case cancelledRequest(m) != nil:
		s.asking.answered(idKey(cancelledRequest(m)))
	}
	return true
}

// handle answers one client request, which arrived on transport t, in its
// own SERVER span. err is why the request failed, when it did (resp is
// then the JSON-RPC error that says so): matching ErrSessionLost, the
// upstream no longer knows the session and the gateway session is to be
// closed; an *authError, the upstream refused the caller, which the HTTP
// front passes on.
func (s *session) handle(ctx context.Context, req *Message, h http.Header, t *mcpcall.Transport, out sink) (resp *Message, err error) {
	s.active.Add(1)
	defer s.active.Add(-1)
	defer s.touch()

	p, perr := decodeParams(req.Params, req.Method == spancontract.MethodToolsCall)
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

	switch {
	case req.Method == spancontract.MethodToolsCall:
		if envErr, ok := errors.AsType[*envelopeError](perr); ok {
			// Nothing is claimed or forwarded: the upstream might run
			// other arguments (or another tool) than the key would name.
			resp = newErrorResponse(req.ID, codeInvalidParams, "Invalid params: "+envErr.Error()+
				". MCP servers disagree on which member counts (one written in Go reads any case, the last one winning; one in JavaScript or Python only the exact name), "+
				"so the idemkit gateway refused this tools/call and nothing was run. Send name, arguments and _meta once each, spelled exactly so.")
			break
		}
		if perr != nil || p.Name == "" {
			resp = newErrorResponse(req.ID, codeInvalidParams, "Invalid params: tools/call needs params.name (the tool) and params.arguments (an object).")
			break
		}
		if name := s.g.in.CallStatusTool(); name != "" && p.Name == name {
			resp, err = s.callStatus(op, req, &p, h)
			break
		}
		resp, err = s.toolsCall(op, req, &p, h, out)
	case req.Method == spancontract.MethodToolsList:
		resp, err = s.toolsList(op, req, h, out)
	case isTaskMethod(req.Method) && s.servesTasks():
		resp, err = s.taskRequest(op, req, &p, h, out)
	default:
		resp, err = s.roundTrip(op, req, h, out, nil)
		if err == nil && req.Method == spancontract.MethodInitialize && resp.Error == nil {
			s.initialized(resp, t)
			s.mu.Lock()
			s.canElicit = clientCanElicit(req.Params)
			s.mu.Unlock()
			op.SetSession(s.id, s.protocolVersion())
		}
	}
	if err != nil {
		resp = s.errorResponse(req, err)
		end.Err = err
	}
	if e := resp.Error; e != nil {
		end.HasCode, end.Code, end.Message = true, int64(e.Code), e.Message
		if end.Err == nil {
			end.Err = e
		}
	}
	return resp, err
}

// errorResponse turns a failure into the JSON-RPC error the client gets.
func (s *session) errorResponse(req *Message, err error) *Message {
	var rpc *RPCError
	switch {
	case errors.As(err, &rpc):
		return &Message{JSONRPC: "2.0", ID: req.ID, Error: rpc}
	case errors.As(err, new(*authError)):
		return newErrorResponse(req.ID, codeInvalidRequest, strings.ToUpper(err.Error()[:1])+err.Error()[1:]+".")
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
	if name := s.g.in.CallStatusTool(); name != "" {
		result = s.withCallStatusTool(result, name)
	}
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
	tool := s.tools.lookup(op, p.Name, s.fetchFor(h, p.Name))
	call := &mcpcall.ToolCall{
		Tool:         p.Name,
		Arguments:    p.Arguments,
		Meta:         p.Meta,
		Info:         tool.info,
		Continuation: nonNull(p.RequestState) || nonNull(p.InputResponses),
	}
	if in.Gates(p.Name) && out != nil {
		call.Elicit = &elicitor{s: s, out: out}
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
		if nonNull(p.Task) && s.keepsTasks() {
			return s.taskCall(op, req, call, fwd, h)
		}
	}
	var (
		tooLarge *answerTooLargeError
		ran      bool
	)
	res, err := mcpcall.CallTool(op, call, mcpcall.RawCodec{}, func(ctx context.Context) (json.RawMessage, error) {
		ran = true
		c := idemkit.CallFromContext(ctx)
		if c != nil {
			// A protected call runs to its end and records its outcome even
			// when the client goes away: its retry will ask for that
			// outcome.
			ctx = context.WithoutCancel(ctx)
		}
		if c != nil {
			// While the upstream waits on the client (a question to the
			// user, a sampling, the roots), the claim is kept.
			defer s.keepLeaseWhileAsking(ctx, c, p.Name)()
		}
		var lastBeat time.Time
		resp, err := s.roundTrip(ctx, fwd, h, out, func(m *Message) {
			if c == nil || progressOf(m) == nil || time.Since(lastBeat) < s.g.beatEvery {
				return
			}
			lastBeat = time.Now()
			if err := c.HeartbeatNote(ctx, progressNote(m)); err != nil {
				s.g.log.Warn("extending a call's lease failed", "tool", p.Name, "error", err)
			}
		})
		switch {
		case c != nil && errors.As(err, &tooLarge):
			// The upstream answered: the call ran. Its answer is gone, but
			// the Guard must record the call as done with its result not
			// kept, which it does for a result over its limit: hand it the
			// buffer the answer was read into, cleared (no flag of a
			// result is read from it), which is longer than that limit.
			standIn := tooLarge.buf
			tooLarge.buf = nil
			clear(standIn)
			return standIn, nil
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
	if !ran {
		// The answer comes from the gateway's records (a replay, or an
		// in-progress, mismatch or not-kept answer), not from the upstream,
		// which never saw the caller's credentials for it: give it only to
		// a caller the upstream accepts now (a token it has revoked since
		// the first call must not keep getting that call's result).
		if verr := s.verifyCaller(op, h); verr != nil {
			return nil, verr
		}
	}
	if tooLarge != nil {
		// The first caller gets what a retry gets, said for the first
		// time; the stand-in result is not for anyone.
		s.g.log.Warn("the upstream's answer to a protected call is over the message limit: the call is recorded as done, its result not kept",
			"session", s.id, "tool", p.Name, "limit", s.g.maxMsg)
		res = mcpcall.RawCodec{}.WithMeta(mcpcall.RawCodec{}.ErrorResult(tooLarge.notKeptText(p.Name)),
			spancontract.RefusalMetaKey, map[string]any{"reason": spancontract.RefusalResponseNotKept})
	}
	return newResponse(req.ID, res), nil
}

// verifyTimeout bounds the ping of verifyCaller.
const verifyTimeout = 10 * time.Second

// verifyCaller asks a Streamable HTTP upstream whether it accepts the
// caller's credentials now: a ping on the caller's upstream session, with
// the caller's headers. It returns nil when the upstream answers (with a
// result or a JSON-RPC error alike: the request was admitted), the
// upstream's *authError when it answers 401 or 403, and otherwise an error
// that says the answer was withheld. A stdio upstream sees no credentials;
// there is nothing to ask.
func (s *session) verifyCaller(ctx context.Context, h http.Header) error {
	if s.g.up.Transport() != "http" || h == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, verifyTimeout)
	defer cancel()
	_, err := s.roundTrip(ctx, &Message{JSONRPC: "2.0", Method: "ping"}, h, nil, nil)
	switch {
	case err == nil:
		return nil
	case errors.As(err, new(*authError)), errors.Is(err, ErrSessionLost):
		return err
	}
	s.g.log.Warn("confirming a caller with the upstream before answering from the records failed; the answer is withheld", "session", s.id, "error", err)
	return &RPCError{Code: codeUpstream, Message: "The idemkit gateway answers this call from its records, but only to a caller the upstream MCP server accepts, " +
		"and the upstream could not be asked (" + err.Error() + "). Nothing was run. Send the same call again."}
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
