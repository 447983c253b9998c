// Package gosdk instruments a server of the official MCP Go SDK,
// github.com/modelcontextprotocol/go-sdk (v1.8.0), through its receiving
// middleware: one OpenTelemetry SERVER span per MCP request, the MCP
// server metrics, and claim-and-replay for the tools whose calls need it.
//
//	guard, err := idemkit.NewGuard(store, nil)
//	…
//	s := mcp.NewServer(&mcp.Implementation{Name: "billing", Version: "1"}, nil)
//	gosdk.Instrument(s, guard, instrument.WithSubject(gosdk.TokenSubject))
//	mcp.AddTool(s, refundTool, refund) // unannotated: protected
//	mcp.AddTool(s, lookupTool, lookup) // ReadOnlyHint: traced, not protected
//	h := gosdk.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil)
//	http.Handle("/mcp", auth.RequireBearerToken(verify, nil)(h))
//
// See package instrument for the spans, the metrics and the protection.
//
// # What the SDK leaves to this package
//
//   - The JSON-RPC request ID. The SDK hands it to no middleware (open
//     proposal modelcontextprotocol/go-sdk#1264). Serve Streamable HTTP
//     through NewStreamableHTTPHandler (or wrap your handler with
//     HTTPHandler), and wrap other transports with Transport
//     (server.Run(ctx, gosdk.Transport(&mcp.StdioTransport{}))): each
//     request's jsonrpc.request.id is then recorded, as are the network.*
//     and client.* attributes. Without them the span leaves the ID off.
//   - Limits. The SDK's handler bounds request bodies but not sessions:
//     NewStreamableHTTPHandler caps the sessions open at once and closes
//     idle ones (instrument.HTTPLimits, WithHTTPLimits); serve it with an
//     http.Server that has read timeouts (instrument.NewHTTPServer).
//   - Which sessions are authentic. A stateful StreamableHTTPHandler only
//     accepts the session IDs it issued (404 otherwise); a stateless one
//     accepts any. NewStreamableHTTPHandler knows which it built; only then
//     may calls without a subject be scoped by their session. A request
//     without HTTP headers and without a session ID is taken to come from
//     a transport that serves one client (stdio, in-memory).
//   - Tool annotations. The middleware sees tools/call before the SDK looks
//     the tool up, and the SDK has no public tool lookup: annotations and
//     input schemas are learned from tools/list, from every listing that
//     passes through the middleware and, on a call of a tool it has not
//     seen, from one listing it requests itself (through the handlers below
//     this middleware). They are forgotten when the server sends
//     notifications/tools/list_changed. A call of a tool that is not listed
//     is passed on (the SDK answers it with an error).
//   - Validation before the key. The arguments of a protected call are
//     validated against the tool's inputSchema (with the SDK's own schema
//     library) before its key is derived; the SDK validates them again for
//     tools added with mcp.AddTool.
//
// # MCP tasks
//
// The go-sdk v1.8.0 has no MCP tasks (specification 2025-11-25), so this
// adapter serves none: a server never advertises the capability, a
// task-augmented tools/call runs as a plain call (the SDK ignores the task
// parameter, as the specification asks of a server without the
// capability), protected as any other call, and NewStreamableHTTPHandler
// answers tasks/get, tasks/result, tasks/cancel and tasks/list with the
// JSON-RPC error -32601 (the SDK's own handler refuses them with HTTP 400),
// each with its SERVER span. Nothing is half-served: no task is created
// that a later request could not find. For durable tasks, serve the tools
// with mcp-go (instrument/mcpgo); job-and-poll tools (AddJobTool) work on
// both SDKs.
//
// # Transactional tools
//
// AddTxTool registers a tool whose handler receives the database
// transaction of the Guard's store (a pgx.Tx, a *sql.Tx), in which the
// call's claim, the handler's writes and the outcome commit together.
package gosdk

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idemkit-mcp/idemkit/idemkit"
	"github.com/idemkit-mcp/idemkit/instrument"
	"github.com/idemkit-mcp/idemkit/internal/mcpcall"
	"github.com/idemkit-mcp/idemkit/spancontract"
)

const (
	methodCallTool        = "tools/call"
	methodListTools       = "tools/list"
	methodInitialize      = "initialize"
	notificationToolsList = "notifications/tools/list_changed"
)

// Instrumentation instruments go-sdk servers. Build it with New or
// Instrument; it is safe for concurrent use. An Instrumentation serves one
// server (its tool index is that server's).
type Instrumentation struct {
	in  *mcpcall.Instrumenter
	idx toolIndex

	sessions sync.Map // *mcp.ServerSession -> struct{}: sessions whose end is awaited

	txTools sync.Map    // tool name -> mcpcall.TxRunner (AddTxTool)
	hasTx   atomic.Bool // txTools is not empty
}

// New returns an Instrumentation that protects calls with guard (nil: spans
// and metrics only) configured by opts. Install it on a server.
func New(guard *idemkit.Guard, opts ...instrument.Option) *Instrumentation {
	return &Instrumentation{in: mcpcall.New(guard, mcpcall.ConfigFrom(opts))}
}

// Instrument installs a new Instrumentation on s and returns it: the one
// call a server needs.
func Instrument(s *mcp.Server, guard *idemkit.Guard, opts ...instrument.Option) *Instrumentation {
	m := New(guard, opts...)
	m.Install(s)
	return m
}

// Install adds the receiving middleware (spans and protection) and a
// sending middleware (which notices tool list changes) to s. Middleware
// added to s later runs outside it; add it last so that its span covers the
// other middleware.
func (m *Instrumentation) Install(s *mcp.Server) {
	servers.Store(s, m)
	s.AddReceivingMiddleware(m.receive)
	s.AddSendingMiddleware(m.send)
	m.addCallStatusTool(s)
}

type requestKey struct{}

// RequestFrom returns the request being handled in ctx (a
// *mcp.CallToolRequest for tools/call), or nil. A WithSubject function can
// use it to read the request's Extra (auth token information, HTTP
// headers).
func RequestFrom(ctx context.Context) mcp.Request {
	r, _ := ctx.Value(requestKey{}).(mcp.Request)
	return r
}

// TokenSubject is an instrument.WithSubject function: the UserID of the
// bearer token the SDK's auth middleware (auth.RequireBearerToken) verified
// for the request, or "".
func TokenSubject(ctx context.Context) string {
	r := RequestFrom(ctx)
	if r == nil {
		return ""
	}
	if e := r.GetExtra(); e != nil && e.TokenInfo != nil {
		return e.TokenInfo.UserID
	}
	return ""
}

func (m *Instrumentation) send(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		switch method {
		case notificationToolsList:
			m.idx.invalidate()
		case "elicitation/create", "sampling/createMessage", "roots/list":
			// A request to the client, made by a protected call's handler:
			// the claim's lease is kept while the client (a human) answers.
			if c := idemkit.CallFromContext(ctx); c != nil {
				var res mcp.Result
				err := c.KeepAlive(ctx, func(ctx context.Context) error {
					var err error
					res, err = next(ctx, method, req)
					return err
				})
				return res, err
			}
		}
		return next(ctx, method, req)
	}
}

func (m *Instrumentation) receive(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (res mcp.Result, err error) {
		// Notifications too (notifications/initialized, …/cancelled):
		// each gets its SERVER span, named after its method.
		r := m.describe(method, req)
		// The Subject function reads the request (its token, its headers)
		// on every method: tools/list too decides on its caller.
		ctx = context.WithValue(ctx, requestKey{}, req)
		_, op := m.in.Start(ctx, &r) // op is the request's context
		ended := false
		defer func() {
			if !ended {
				op.End(mcpcall.Response{Panicked: true})
			}
		}()
		switch method {
		case methodCallTool:
			if ctr, ok := req.(*mcp.CallToolRequest); ok && ctr.Params != nil {
				res, err = m.callTool(op, next, ctr)
				break
			}
			res, err = next(op, method, req)
		case methodListTools:
			res, err = next(op, method, req)
			if lr, ok := res.(*mcp.ListToolsResult); ok && err == nil {
				m.idx.observe(lr.Tools)
				m.decorate(op, lr)
			}
		default:
			res, err = next(op, method, req)
			if ir, ok := res.(*mcp.InitializeResult); ok && err == nil {
				op.SetSession(op.SessionID(), ir.ProtocolVersion)
				m.awaitSessionEnd(op, req.GetSession(), ir.ProtocolVersion)
			}
		}
		ended = true
		op.End(response(err))
		return res, err
	}
}

// response describes how a request ended: a Go error becomes the JSON-RPC
// error the SDK sends (a *jsonrpc.Error's code, or 0, as the SDK encodes
// other errors).
func response(err error) mcpcall.Response {
	if err == nil {
		return mcpcall.Response{}
	}
	var we *jsonrpc.Error
	code := int64(0)
	if errors.As(err, &we) {
		code = we.Code
	}
	return mcpcall.Response{HasCode: true, Code: code, Message: err.Error(), Err: err}
}

// describe builds the Request of a receiving method call.
func (m *Instrumentation) describe(method string, req mcp.Request) mcpcall.Request {
	r := mcpcall.Request{Method: method}
	if p := req.GetParams(); p != nil && !isNilParams(p) {
		r.Meta = p.GetMeta()
		switch p := p.(type) {
		case *mcp.CallToolParamsRaw:
			r.Target = p.Name
		case *mcp.GetPromptParams:
			r.Target = p.Name
		case *mcp.ReadResourceParams:
			r.ResourceURI = p.URI
		case *mcp.SubscribeParams:
			r.ResourceURI = p.URI
		case *mcp.UnsubscribeParams:
			r.ResourceURI = p.URI
		case *mcp.InitializeParams:
			r.ProtocolVersion = p.ProtocolVersion
		}
	}
	extra := req.GetExtra()
	info := lookupRequest(extra)
	r.ID, r.HasID = info.id, info.hasID
	r.Transport = info.transport
	if ss, ok := req.GetSession().(*mcp.ServerSession); ok && ss != nil {
		r.SessionID = ss.ID()
		if r.ProtocolVersion == "" {
			if ip := ss.InitializeParams(); ip != nil {
				r.ProtocolVersion = ip.ProtocolVersion
			}
		}
	}
	if !info.known {
		// No wrapper recorded the transport: HTTP headers mean HTTP, whose
		// sessions are not known to be validated; no headers and no
		// session mean a transport that serves one client.
		switch {
		case extra != nil && extra.Header != nil:
			r.Transport = mcpcall.Transport{Network: spancontract.TransportTCP, ProtocolName: "http"}
		case r.SessionID == "":
			r.Transport = mcpcall.Transport{Local: true}
		}
	}
	return r
}

// isNilParams reports a typed-nil Params (the SDK passes them for requests
// without params).
func isNilParams(p mcp.Params) bool {
	v := reflect.ValueOf(p)
	return v.Kind() == reflect.Pointer && v.IsNil()
}

// awaitSessionEnd records mcp.server.session.duration when an initialized
// session ends.
func (m *Instrumentation) awaitSessionEnd(op *mcpcall.Op, s mcp.Session, protocol string) {
	ss, ok := s.(*mcp.ServerSession)
	if !ok || ss == nil {
		return
	}
	if _, loaded := m.sessions.LoadOrStore(ss, struct{}{}); loaded {
		return
	}
	start, t := time.Now(), *op.Transport()
	go func() {
		_ = ss.Wait()
		m.sessions.Delete(ss)
		m.in.RecordSession(context.Background(), start, protocol, &t, "")
	}()
}

func (m *Instrumentation) callTool(op *mcpcall.Op, next mcp.MethodHandler, r *mcp.CallToolRequest) (mcp.Result, error) {
	name := r.Params.Name
	tool, ok := m.idx.get(name)
	if !ok && m.idx.mayRefresh() {
		m.refresh(op, next, r.Session)
		tool, ok = m.idx.get(name)
	}
	if !ok {
		return next(op, methodCallTool, r)
	}
	if name == m.in.CallStatusTool() {
		m.prepareCallStatus(op, next, r)
	}
	call := mcpcall.ToolCall{
		Tool:         name,
		Arguments:    r.Params.Arguments,
		Meta:         r.Params.Meta,
		Info:         tool.info,
		Continuation: r.Params.RequestState != "" || len(r.Params.InputResponses) > 0,
	}
	if r.Session != nil {
		if tok := r.Params.GetProgressToken(); tok != nil {
			call.Progress = progressSender{session: r.Session, token: tok}
		}
		if m.in.Gates(name) {
			call.Elicit = elicitor{r.Session}
		}
	}
	if m.hasTx.Load() {
		if v, ok := m.txTools.Load(name); ok {
			call.Tx = v.(mcpcall.TxRunner)
		}
	}
	pass := r
	if m.in.StripsKey(name, tool.info) {
		pass = stripKeyArgument(r)
	}
	if m.in.WriteTool(name, tool.info) {
		// Validate what the handler will receive; CallTool does so only for
		// a protected call.
		call.Validator = tool.validator()
		call.ValidatedArguments = pass.Params.Arguments
	}
	res, err := mcpcall.CallTool(op, &call, codec{}, func(ctx context.Context) (*mcp.CallToolResult, error) {
		out, err := next(ctx, methodCallTool, pass)
		if err != nil {
			return nil, err
		}
		ctr, ok := out.(*mcp.CallToolResult)
		if !ok || ctr == nil {
			return nil, fmt.Errorf("gosdk: tools/call returned %T, not a *mcp.CallToolResult", out)
		}
		return ctr, nil
	})
	if err != nil {
		return nil, err
	}
	if res == nil {
		return nil, errNoResult
	}
	return res, nil
}

// stripKeyArgument returns r, or a copy without the idempotency_key
// argument.
func stripKeyArgument(r *mcp.CallToolRequest) *mcp.CallToolRequest {
	args, key := mcpcall.StripKeyArgument(r.Params.Arguments)
	if key == nil {
		return r
	}
	params := *r.Params
	params.Arguments = args
	c := *r
	c.Params = &params
	return &c
}

// refresh lists the server's tools through the handlers below this
// middleware and replaces the index with them.
func (m *Instrumentation) refresh(ctx context.Context, next mcp.MethodHandler, session *mcp.ServerSession) {
	tools := make(map[string]*toolEntry)
	cursor := ""
	for range 1000 { // pages; bounded against a cursor that never ends
		res, err := next(ctx, methodListTools, &mcp.ListToolsRequest{Session: session, Params: &mcp.ListToolsParams{Cursor: cursor}})
		if err != nil {
			return
		}
		lr, ok := res.(*mcp.ListToolsResult)
		if !ok {
			return
		}
		for _, t := range lr.Tools {
			if t != nil {
				tools[t.Name] = newToolEntry(t)
			}
		}
		if lr.NextCursor == "" {
			break
		}
		cursor = lr.NextCursor
	}
	m.idx.replace(tools)
}

// decorate advertises the idempotency_key argument, in a listing, on the
// tools whose calls the listing caller would get protected, on copies of
// the tools.
func (m *Instrumentation) decorate(op *mcpcall.Op, lr *mcp.ListToolsResult) {
	sc := op.Scope()
	var out []*mcp.Tool
	for i, t := range lr.Tools {
		if t == nil || !m.in.AdvertisesKey(t.Name, toolInfoOf(t), sc) {
			continue
		}
		if out == nil {
			out = append([]*mcp.Tool(nil), lr.Tools...)
		}
		out[i] = m.idx.decorated(t)
	}
	if out != nil {
		lr.Tools = out
	}
}

// withKeyParameter returns a copy of tool with the optional idempotency_key
// argument added to its input schema and a sentence about it appended to
// its description.
func withKeyParameter(tool *mcp.Tool) *mcp.Tool {
	c := *tool
	c.InputSchema = mcpcall.SchemaWithKey(schemaMap(tool.InputSchema))
	c.Description = mcpcall.DescribeKey(c.Description)
	return &c
}

// schemaMap returns a fresh generic copy of a schema value.
func schemaMap(schema any) map[string]any {
	var m map[string]any
	if b, err := json.Marshal(schema); err == nil {
		_ = json.Unmarshal(b, &m)
	}
	if m == nil {
		m = make(map[string]any)
	}
	return m
}

func toolInfoOf(t *mcp.Tool) mcpcall.ToolInfo {
	info := mcpcall.ToolInfo{}
	if t.InputSchema != nil {
		info.DeclaresKey = mcpcall.SchemaDeclaresKey(schemaMap(t.InputSchema))
	}
	if a := t.Annotations; a != nil {
		info.ReadOnlyHint, info.IdempotentHint = a.ReadOnlyHint, a.IdempotentHint
	}
	info.StatusTool, _ = t.Meta[spancontract.StatusToolMetaKey].(string)
	return info
}

// toolEntry is what the middleware knows about a listed tool.
type toolEntry struct {
	tool *mcp.Tool
	info mcpcall.ToolInfo

	once sync.Once // builds v
	v    *mcpcall.SchemaValidator

	decoOnce sync.Once // builds deco
	deco     *mcp.Tool
}

func newToolEntry(t *mcp.Tool) *toolEntry {
	return &toolEntry{tool: t, info: toolInfoOf(t)}
}

// validator returns the tool's input schema validator, or nil when the
// tool has no schema the SDK's schema library compiles.
func (e *toolEntry) validator() *mcpcall.SchemaValidator {
	e.once.Do(func() {
		if e.tool.InputSchema != nil {
			e.v, _ = mcpcall.NewSchemaValidator(e.tool.InputSchema)
		}
	})
	return e.v
}

// minRefreshInterval bounds how often calls of unlisted tools make the
// middleware list the tools again.
const minRefreshInterval = time.Second

// toolIndex holds the tools learned from listings.
type toolIndex struct {
	mu          sync.RWMutex // protects the fields below
	tools       map[string]*toolEntry
	fresh       bool // tools holds a full listing made since the last change
	lastRefresh time.Time
}

func (x *toolIndex) get(name string) (*toolEntry, bool) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	e, ok := x.tools[name]
	return e, ok
}

// decorated returns the listing form of t, built once per listed tool.
func (x *toolIndex) decorated(t *mcp.Tool) *mcp.Tool {
	x.mu.RLock()
	e, ok := x.tools[t.Name]
	x.mu.RUnlock()
	if !ok || e.tool != t {
		return withKeyParameter(t)
	}
	e.decoOnce.Do(func() { e.deco = withKeyParameter(t) })
	return e.deco
}

// mayRefresh reports whether a listing may be requested now, and if so
// records that one is.
func (x *toolIndex) mayRefresh() bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.fresh && time.Since(x.lastRefresh) < minRefreshInterval {
		return false
	}
	x.lastRefresh = time.Now()
	return true
}

func (x *toolIndex) replace(tools map[string]*toolEntry) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.tools = tools
	x.fresh = true
}

func (x *toolIndex) observe(tools []*mcp.Tool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.tools == nil {
		x.tools = make(map[string]*toolEntry, len(tools))
	}
	for _, t := range tools {
		if t == nil {
			continue
		}
		if e, ok := x.tools[t.Name]; ok && e.tool == t {
			continue
		}
		x.tools[t.Name] = newToolEntry(t)
	}
}

func (x *toolIndex) invalidate() {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.tools = nil
	x.fresh = false
}

type progressSender struct {
	session *mcp.ServerSession
	token   any
}

func (p progressSender) SendProgress(ctx context.Context, progress, total float64, message string) error {
	return p.session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{
		ProgressToken: p.token, Progress: progress, Total: total, Message: message,
	})
}

// elicitor asks the user of a session (a human gate's question); the
// sending middleware keeps the call's lease while it is open.
type elicitor struct{ session *mcp.ServerSession }

// CanElicit reports whether the client declared the elicitation capability.
func (e elicitor) CanElicit() bool {
	ip := e.session.InitializeParams()
	return ip != nil && ip.Capabilities != nil && ip.Capabilities.Elicitation != nil
}

func (e elicitor) Confirm(ctx context.Context, message string) (string, error) {
	res, err := e.session.Elicit(ctx, &mcp.ElicitParams{Message: message, RequestedSchema: map[string]any{"type": "object", "properties": map[string]any{}}})
	if err != nil {
		return "", err
	}
	return res.Action, nil
}
