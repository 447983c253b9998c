// Package mcpgo instruments a github.com/mark3labs/mcp-go (v1.2.1) server:
// one OpenTelemetry SERVER span per MCP request, the MCP server metrics,
// and claim-and-replay for the tools whose calls need it.
//
//	guard, err := idemkit.NewGuard(store, nil)
//	…
//	s := server.NewMCPServer("billing", "1.0.0",
//		mcpgo.ServerOptions(guard, instrument.WithSubject(mcpgo.TokenSubject))...)
//	s.AddTool(refundTool, refund) // unannotated: protected
//	s.AddTool(lookupTool, lookup) // readOnlyHint: traced, not protected
//	http.Handle("/mcp", mcpgo.RequireBearerToken(verify, nil)(mcpgo.NewStreamableHTTPHandler(s)))
//
// See package instrument for the spans, the metrics and the protection.
//
// # How it hooks into mcp-go
//
// ServerOptions returns options that work together and in any order among
// the server's other options:
//
//   - server.WithTracer and server.WithMetaPropagator with adapters that
//     open the request's span where mcp-go dispatches every request, parented
//     on the trace context in params._meta. (mcp-go's own span names are
//     not used; do not pass another server.WithTracer.)
//   - hooks, added to the server's Hooks: they record the JSON-RPC request
//     ID, the error code of an error response, the tool of a tools/call, and
//     the session start and end for mcp.server.session.duration, and they
//     advertise the optional idempotency_key argument in tools/list on the
//     tools whose calls the listing caller would get protected. When a later
//     server.WithHooks replaces the Hooks, the request hooks are added to the
//     new Hooks at the first request; the session hooks cannot be, safely,
//     so session durations are then not recorded (a warning says so): pass
//     ServerOptions after server.WithHooks to keep them.
//   - server.WithToolHandlerMiddleware: the claim-and-replay of tools/call.
//     Put ServerOptions before your own tool middleware so that the
//     protection covers it.
//
// The arguments of a protected call are validated against the tool's
// inputSchema (compiled once per registration) before its key is derived,
// so that a retry that types an argument differently ("100" for 100, 12.5
// for 12) is rejected, with nothing run or claimed, instead of running as a
// new call; other tools' arguments are left to mcp-go
// (server.WithInputSchemaValidation validates every tool's). The
// idempotency_key argument is removed from the arguments first, also before
// mcp-go's own validation, so that tools with strict schemas
// (additionalProperties false) accept it.
//
// Over Streamable HTTP, serve the server with NewStreamableHTTPHandler (or
// wrap your own handler with HTTPHandler): it records the transport
// attributes and, with stateful sessions, lets calls without a subject be
// scoped by their session. Without it such calls cannot be scoped and are
// refused by default (see instrument.WithSubject). It also bounds what
// clients may hold (sessions, idle sessions, request bodies: see
// instrument.HTTPLimits and WithHTTPLimits); serve it with an http.Server
// that has read timeouts (instrument.NewHTTPServer). Over stdio, serve it
// with ServeStdio (or read the input through StdioInput), so that the
// client's notifications get their spans too.
//
// # MCP tasks
//
// Task-augmented calls (MCP 2025-11-25) are traced and protected, and their
// tasks live in the Guard's store, when the server advertises tasks
// (server.WithTaskCapabilities) and is served with NewStreamableHTTPHandler:
//
//   - a task-augmented tools/call is a protected call whose answer is its
//     CreateTaskResult: a duplicate (same subject, tool and canonical
//     arguments, or the same explicit key) gets the first call's
//     CreateTaskResult back, replayed with spancontract.ReplayMetaKey, and the
//     task's work runs once, in the background, once that answer is
//     stored. Its tools/call span is the task-creating call's.
//   - tasks/get, tasks/result, tasks/cancel and tasks/list are answered
//     from the store, for the caller's scope only (its subject, else its
//     session), on every replica that shares it and after a restart; each
//     gets its SERVER span. A task whose worker died is reported failed
//     ("lost") once its lease (instrument.TasksConfig) has run out, and is
//     never run again by itself; tasks/cancel stops the work on any
//     replica.
//
// A tool supports tasks when its execution.taskSupport says "optional"
// (mcp.WithTaskSupport), or when it is added with AddTaskTool, the
// adapter's replacement for server.AddTaskTool: mcp-go runs the handlers
// of tools added with server.AddTaskTool without tool middleware, so idemkit
// can neither protect nor trace their work, and logs a warning. Over other
// transports (stdio, in-process) mcp-go's own task engine serves
// task-augmented calls, in memory, with the tool middleware protecting
// their work. Task status notifications (notifications/tasks/status) are
// not sent: clients poll tasks/get, as the specification asks them to.
package mcpgo

import (
	"context"
	"encoding/json"
	"maps"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
	"github.com/mark3labs/mcp-go/tracing"

	"github.com/idemkit-mcp/idemkit/idemkit"
	"github.com/idemkit-mcp/idemkit/instrument"
	"github.com/idemkit-mcp/idemkit/internal/mcpcall"
	"github.com/idemkit-mcp/idemkit/spancontract"
)

// stdioSessionID is the session ID mcp-go reports for its stdio transport,
// which serves exactly one client.
const stdioSessionID = "stdio"

// Instrumentation instruments mcp-go servers. Build it with New; it is safe
// for concurrent use, and one Instrumentation may serve several servers.
type Instrumentation struct {
	in *mcpcall.Instrumenter

	installMu sync.Mutex // serialises hook installation
	hooked    sync.Map   // *server.Hooks -> hookSet: the hooks installed into it
	warned    atomic.Bool

	sessions sync.Map // session ID -> *sessionStart

	decorated  sync.Map // tool name -> *decoration
	validators sync.Map // tool name -> *validator

	tasks      *mcpcall.Tasks                      // nil without a Guard
	taskCaps   atomic.Pointer[mcp.TasksCapability] // as the server advertised it
	declared   sync.Map                            // tool name -> mcp.TaskSupport (AddTaskTool)
	taskWarned sync.Map                            // tool name -> true: warned once
	txTools    sync.Map                            // tool name -> mcpcall.TxRunner (AddTxTool)
	hasTx      atomic.Bool                         // txTools is not empty
	slots      atomic.Int32                        // task-layer requests in flight

	stdioProtocol atomic.Pointer[string] // negotiated by the stdio session's initialize (for StdioInput)
}

// hookSet says which of the Instrumentation's hooks a Hooks holds.
type hookSet struct{ session bool }

// sessionStart is what the session duration needs from a session's start.
type sessionStart struct {
	at        time.Time
	transport mcpcall.Transport
}

// New returns an Instrumentation that protects calls with guard (nil:
// spans and metrics only) configured by opts.
func New(guard *idemkit.Guard, opts ...instrument.Option) *Instrumentation {
	m := &Instrumentation{in: mcpcall.New(guard, mcpcall.ConfigFrom(opts))}
	if guard != nil {
		tasks, err := m.in.NewTasks(m.in.Config().Tasks)
		if err != nil {
			m.in.Config().Logger.Error("idemkit: durable MCP tasks are off: their configuration is invalid; mcp-go serves tasks itself, in memory",
				"err", err, "fix", "correct instrument.WithTasks")
		}
		m.tasks = tasks
	}
	return m
}

// ServerOptions is New(guard, opts...).ServerOptions(): everything to pass
// to server.NewMCPServer.
func ServerOptions(guard *idemkit.Guard, opts ...instrument.Option) []server.ServerOption {
	return New(guard, opts...).ServerOptions()
}

// ServerOptions returns the options that install the instrumentation on a
// server (see the package documentation).
func (m *Instrumentation) ServerOptions() []server.ServerOption {
	return []server.ServerOption{
		server.WithTracer(tracerAdapter{m}),
		server.WithMetaPropagator(metaPropagator{m}),
		m.installHooks,
		server.WithToolHandlerMiddleware(m.middleware),
		m.addCallStatusTool,
	}
}

// Install applies ServerOptions to a server built already. Call it before
// the server serves requests.
func (m *Instrumentation) Install(s *server.MCPServer) {
	for _, o := range m.ServerOptions() {
		o(s)
	}
}

// installHooks adds every hook to the server's Hooks, creating them when
// the server has none.
func (m *Instrumentation) installHooks(s *server.MCPServer) {
	h := s.GetHooks()
	if h == nil {
		h = &server.Hooks{}
		server.WithHooks(h)(s)
	}
	servers.Store(s, m)
	m.installMu.Lock()
	defer m.installMu.Unlock()
	if set, ok := m.hooked.Load(h); ok && set.(hookSet).session {
		return
	}
	m.addRequestHooks(h)
	h.AddOnRegisterSession(m.sessionStarted)
	h.AddOnUnregisterSession(m.sessionEnded)
	m.hooked.Store(h, hookSet{session: true})
}

// ensureHooks makes sure the request hooks are in the Hooks the server
// uses, for a server whose Hooks were replaced after ServerOptions. Every
// request passes here before any hook it fires reads the fields written.
func (m *Instrumentation) ensureHooks(s *server.MCPServer) {
	h := s.GetHooks()
	if h == nil {
		return
	}
	if _, ok := m.hooked.Load(h); ok {
		return
	}
	m.installMu.Lock()
	defer m.installMu.Unlock()
	if _, ok := m.hooked.Load(h); ok {
		return
	}
	m.addRequestHooks(h)
	m.hooked.Store(h, hookSet{})
	m.in.Config().Logger.Warn("idemkit: server.WithHooks replaced the hooks mcpgo.ServerOptions installed; " +
		"the request hooks were added to the new Hooks, but mcp.server.session.duration is not recorded for this server. " +
		"Pass mcpgo.ServerOptions after server.WithHooks to record it.")
}

func (m *Instrumentation) addRequestHooks(h *server.Hooks) {
	h.AddBeforeAny(m.beforeAny)
	h.AddOnError(m.onError)
	h.AddBeforeCallTool(m.beforeCallTool)
	h.AddAfterCallTool(m.afterCallTool)
	h.AddAfterInitialize(m.afterInitialize)
	h.AddAfterListTools(m.afterListTools)
	h.AddBeforeGetPrompt(func(ctx context.Context, _ any, req *mcp.GetPromptRequest) {
		if op := mcpcall.FromContext(ctx); op != nil && req != nil {
			op.SetTarget(req.Params.Name)
		}
	})
	h.AddBeforeReadResource(func(ctx context.Context, _ any, req *mcp.ReadResourceRequest) {
		if op := mcpcall.FromContext(ctx); op != nil && req != nil {
			op.SetResourceURI(req.Params.URI)
		}
	})
	h.AddBeforeSubscribe(func(ctx context.Context, _ any, req *mcp.SubscribeRequest) {
		if op := mcpcall.FromContext(ctx); op != nil && req != nil {
			op.SetResourceURI(req.Params.URI)
		}
	})
	h.AddBeforeUnsubscribe(func(ctx context.Context, _ any, req *mcp.UnsubscribeRequest) {
		if op := mcpcall.FromContext(ctx); op != nil && req != nil {
			op.SetResourceURI(req.Params.URI)
		}
	})
	h.AddBeforeGetTask(func(ctx context.Context, _ any, req *mcp.GetTaskRequest) {
		if req != nil {
			m.serveTaskMethod(ctx, spancontract.MethodTasksGet, req.Params)
		}
	})
	h.AddBeforeTaskResult(func(ctx context.Context, _ any, req *mcp.TaskResultRequest) {
		if req != nil {
			m.serveTaskMethod(ctx, spancontract.MethodTasksResult, req.Params)
		}
	})
	h.AddBeforeCancelTask(func(ctx context.Context, _ any, req *mcp.CancelTaskRequest) {
		if req != nil {
			m.serveTaskMethod(ctx, spancontract.MethodTasksCancel, req.Params)
		}
	})
	h.AddBeforeListTasks(func(ctx context.Context, _ any, req *mcp.ListTasksRequest) {
		if req != nil {
			m.serveTaskMethod(ctx, spancontract.MethodTasksList, req.Params)
		}
	})
}

// tracerAdapter opens the span of every request mcp-go dispatches.
type tracerAdapter struct{ m *Instrumentation }

// Start implements tracing.Tracer. mcp-go names a request's span
// "mcp.{method}" (kind SERVER); its tool spans ("tool.{name}", INTERNAL)
// are not created: the request span is the tool call's span.
func (t tracerAdapter) Start(ctx context.Context, name string, kind tracing.SpanKind, _ ...tracing.Attribute) (context.Context, tracing.Span) {
	method, ok := strings.CutPrefix(name, "mcp.")
	if kind != tracing.SpanKindServer || !ok {
		return ctx, noSpan{}
	}
	m := t.m
	if s := server.ServerFromContext(ctx); s != nil {
		m.ensureHooks(s)
	}
	r := mcpcall.Request{Method: method, ProtocolVersion: server.RequestProtocolVersion(ctx)}
	session := server.ClientSessionFromContext(ctx)
	r.Transport = transportOf(ctx, session)
	r.SessionID = sessionIDOf(session)
	ctx, op := m.in.Start(ctx, &r)
	return ctx, opSpan{op}
}

// opSpan is the tracing.Span mcp-go ends when the request's response is
// ready. It holds one pointer, so that it is stored in the interface
// without an allocation of its own.
type opSpan struct {
	op *mcpcall.Op
}

func (opSpan) SetAttributes(...tracing.Attribute) {}
func (opSpan) RecordError(error)                  {}

// SetStatus receives the message of an error response. A response whose
// code no hook reported is mcp-go's answer to an unknown method.
func (s opSpan) SetStatus(code tracing.StatusCode, description string) {
	if slot := taskSlotFrom(s.op); slot != nil && slot.isAnswered() {
		return // the adapter's answer replaces mcp-go's
	}
	if code == tracing.StatusError && !s.op.ErrorRecorded() {
		s.op.RecordError(mcp.METHOD_NOT_FOUND, description, nil)
	}
}

func (s opSpan) End() { s.op.End(mcpcall.Response{}) }

type noSpan struct{}

func (noSpan) SetAttributes(...tracing.Attribute)   {}
func (noSpan) RecordError(error)                    {}
func (noSpan) SetStatus(tracing.StatusCode, string) {}
func (noSpan) End()                                 {}

// metaPropagator extracts the trace context of params._meta.
type metaPropagator struct{ m *Instrumentation }

func (p metaPropagator) InjectMeta(_ context.Context, meta *mcp.Meta) *mcp.Meta { return meta }

func (p metaPropagator) ExtractMeta(ctx context.Context, meta *mcp.Meta) context.Context {
	if meta == nil {
		return ctx
	}
	return p.m.in.Extract(ctx, meta.AdditionalFields)
}

// sessionIDOf returns the mcp.session.id of a session: none for mcp-go's
// stdio placeholder.
func sessionIDOf(session server.ClientSession) string {
	if session == nil {
		return ""
	}
	if id := session.SessionID(); id != stdioSessionID {
		return id
	}
	return ""
}

// transportOf describes the transport of a request: from HTTPHandler's
// record of the HTTP request, else from the session's kind.
func transportOf(ctx context.Context, session server.ClientSession) mcpcall.Transport {
	if hi, ok := ctx.Value(httpInfoKey{}).(*httpInfo); ok {
		return hi.transport
	}
	switch s := session.(type) {
	case nil:
	case *server.InProcessSession:
		// An in-process session cannot be presented by anyone else.
		return mcpcall.Transport{AuthenticSessions: true}
	default:
		if s.SessionID() == stdioSessionID {
			return mcpcall.Transport{Network: spancontract.TransportPipe, Local: true}
		}
	}
	return mcpcall.Transport{}
}

func (m *Instrumentation) beforeAny(ctx context.Context, id any, _ mcp.MCPMethod, _ any) {
	if op := mcpcall.FromContext(ctx); op != nil {
		op.SetID(id)
	}
}

// jsonrpcError is implemented by mcp-go's request errors.
type jsonrpcError interface {
	ToJSONRPCError() mcp.JSONRPCError
}

func (m *Instrumentation) onError(ctx context.Context, id any, _ mcp.MCPMethod, _ any, err error) {
	op := mcpcall.FromContext(ctx)
	if op == nil {
		return
	}
	op.SetID(id)
	if slot := m.slotOf(ctx); slot != nil && slot.isAnswered() {
		return // mcp-go's own task engine did not know the task: the adapter answered
	}
	if je, ok := err.(jsonrpcError); ok {
		e := je.ToJSONRPCError()
		op.RecordError(int64(e.Error.Code), e.Error.Message, err)
		return
	}
	op.RecordError(mcp.INTERNAL_ERROR, err.Error(), err)
}

func (m *Instrumentation) afterInitialize(ctx context.Context, _ any, _ *mcp.InitializeRequest, res *mcp.InitializeResult) {
	if op := mcpcall.FromContext(ctx); op != nil && res != nil {
		op.SetSession(op.SessionID(), res.ProtocolVersion)
	}
	if session := server.ClientSessionFromContext(ctx); res != nil && session != nil && session.SessionID() == stdioSessionID {
		v := res.ProtocolVersion
		m.stdioProtocol.Store(&v)
	}
	m.taskCaps.Store(taskCapsOf(res))
}

// beforeCallTool names the request's tool and, for a tool whose calls
// are protected, removes the idempotency_key argument from the decoded
// arguments before mcp-go validates them against the tool's schema (the
// raw arguments keep it: the middleware derives the key from them).
func (m *Instrumentation) beforeCallTool(ctx context.Context, _ any, req *mcp.CallToolRequest) {
	if req == nil {
		return
	}
	if op := mcpcall.FromContext(ctx); op != nil {
		op.SetTarget(req.Params.Name)
	}
	m.takeTask(ctx, req)
	args, ok := req.Params.Arguments.(map[string]any)
	if !ok {
		return
	}
	if _, ok := args[spancontract.KeyArgument]; !ok {
		return
	}
	if info := lookupTool(ctx, req.Params.Name); !m.in.StripsKey(req.Params.Name, info) {
		return
	}
	c := maps.Clone(args)
	delete(c, spancontract.KeyArgument)
	req.Params.Arguments = c
}

// afterCallTool records an isError result that the middleware did not
// produce: mcp-go's own argument validation, which answers before the tool
// middleware runs.
func (m *Instrumentation) afterCallTool(ctx context.Context, _ any, _ *mcp.CallToolRequest, result any) {
	op := mcpcall.FromContext(ctx)
	if op == nil || op.ToolCalled() {
		return
	}
	if r, ok := result.(*mcp.CallToolResult); ok && r != nil && r.IsError {
		op.RecordToolError()
	}
}

func (m *Instrumentation) sessionStarted(ctx context.Context, session server.ClientSession) {
	if session == nil {
		return
	}
	m.sessions.Store(session.SessionID(), &sessionStart{at: time.Now(), transport: transportOf(ctx, session)})
}

func (m *Instrumentation) sessionEnded(ctx context.Context, session server.ClientSession) {
	if session == nil {
		return
	}
	v, ok := m.sessions.LoadAndDelete(session.SessionID())
	if !ok {
		return
	}
	st := v.(*sessionStart)
	protocol := ""
	if vs, ok := session.(server.SessionWithProtocolVersion); ok {
		protocol = vs.ProtocolVersion()
	}
	m.in.RecordSession(context.WithoutCancel(ctx), st.at, protocol, &st.transport, "")
}

// toolInfoOf is what the instrumentation needs to know about a tool.
func toolInfoOf(t *mcp.Tool) mcpcall.ToolInfo {
	info := mcpcall.ToolInfo{
		ReadOnlyHint:   t.Annotations.ReadOnlyHint != nil && *t.Annotations.ReadOnlyHint,
		IdempotentHint: t.Annotations.IdempotentHint != nil && *t.Annotations.IdempotentHint,
	}
	if t.RawInputSchema != nil {
		info.DeclaresKey = mcpcall.RawSchemaDeclaresKey(t.RawInputSchema)
	} else {
		info.DeclaresKey = mcpcall.PropertiesDeclareKey(t.InputSchema.Properties)
	}
	if t.Meta != nil {
		info.StatusTool, _ = t.Meta.AdditionalFields[spancontract.StatusToolMetaKey].(string)
	}
	return info
}

// lookupTool finds the tool a call is for, as mcp-go does: the session's
// tools first, then the server's. An unknown tool (mcp-go rejects its calls
// before the middleware) gets the MCP defaults.
func lookupTool(ctx context.Context, name string) mcpcall.ToolInfo {
	if t := findTool(ctx, name); t != nil {
		return toolInfoOf(t)
	}
	return mcpcall.ToolInfo{}
}

func findTool(ctx context.Context, name string) *mcp.Tool {
	session := server.ClientSessionFromContext(ctx)
	if st, ok := session.(server.SessionWithTools); ok {
		if t, ok := st.GetSessionTools()[name]; ok {
			return &t.Tool
		}
	}
	if s := server.ServerFromContext(ctx); s != nil {
		if t := s.GetTool(name); t != nil {
			return &t.Tool
		}
	}
	return nil
}

// validator is a tool's compiled input schema.
type validator struct {
	schemaID uintptr
	v        *mcpcall.SchemaValidator // nil: the schema does not compile
}

// validatorOf returns the compiled input schema of tool, compiled once per
// registration, or nil when it has none that compiles.
func (m *Instrumentation) validatorOf(tool *mcp.Tool) *mcpcall.SchemaValidator {
	id := schemaID(tool)
	if v, ok := m.validators.Load(tool.Name); ok && v.(*validator).schemaID == id {
		return v.(*validator).v
	}
	var schema json.RawMessage
	if len(tool.RawInputSchema) > 0 {
		schema = tool.RawInputSchema
	} else if b, err := json.Marshal(tool.InputSchema); err == nil {
		schema = b
	}
	v, _ := mcpcall.NewSchemaValidator(schema)
	m.validators.Store(tool.Name, &validator{schemaID: id, v: v})
	return v
}

func (m *Instrumentation) middleware(next server.ToolHandlerFunc) server.ToolHandlerFunc {
	return func(ctx context.Context, req mcp.CallToolRequest) (res *mcp.CallToolResult, err error) {
		op := mcpcall.FromContext(ctx)
		if op == nil || op.Ended() || op.Method() != spancontract.MethodToolsCall {
			// No request span: another server.WithTracer replaced idemkit's,
			// or the call runs after its request ended (mcp-go runs a
			// task-augmented call in the background, on the request's
			// context, cancelled by then). The call gets a span of its own.
			if op != nil && op.Ended() {
				ctx = context.WithoutCancel(ctx)
			}
			return m.serveDetached(ctx, req, next)
		}
		// mcp-go ends the request's span itself, also while a panic
		// unwinds (without server.WithRecovery): mark it, without
		// recovering.
		returned := false
		defer func() {
			if !returned {
				op.RecordPanic()
			}
		}()
		res, err = m.serve(op, req, next)
		returned = true
		return res, err
	}
}

// serve runs a tools/call through the protection.
func (m *Instrumentation) serve(op *mcpcall.Op, req mcp.CallToolRequest, next server.ToolHandlerFunc) (*mcp.CallToolResult, error) {
	name := req.Params.Name
	tool := findTool(op, name)
	var info mcpcall.ToolInfo
	if tool != nil {
		info = toolInfoOf(tool)
	}
	call := mcpcall.ToolCall{
		Tool:         name,
		Arguments:    req.Params.RawArguments,
		Info:         info,
		Continuation: req.Params.RequestState != "" || len(req.Params.InputResponses) > 0,
	}
	if len(call.Arguments) == 0 && req.Params.Arguments != nil {
		call.Arguments, _ = json.Marshal(req.Params.Arguments)
	}
	if m.in.Gates(name) {
		call.Elicit = elicitor{op}
	}
	if meta := req.Params.Meta; meta != nil {
		call.Meta = meta.AdditionalFields
		if meta.ProgressToken != nil {
			if s := server.ServerFromContext(op); s != nil {
				call.Progress = progressSender{srv: s, token: meta.ProgressToken}
			}
		}
	}
	r := req
	if m.in.StripsKey(name, info) {
		stripKeyArgument(&r)
	}
	if tool != nil && m.in.WriteTool(name, info) {
		// Validate what the handler will receive (decoded by mcp-go
		// already); CallTool does so only for a protected call.
		call.Validator = m.validatorOf(tool)
		call.ValidatedArguments = r.Params.RawArguments
		if args, ok := r.Params.Arguments.(map[string]any); ok {
			call.Decoded = args
		}
	}
	if m.hasTx.Load() {
		if v, ok := m.txTools.Load(name); ok {
			call.Tx = v.(mcpcall.TxRunner)
		}
	}
	handler := func(ctx context.Context) (*mcp.CallToolResult, error) {
		res, err := next(ctx, r)
		if err == nil && res == nil {
			err = errNoResult
		}
		return res, err
	}
	if slot := m.slotOf(op); slot != nil && slot.isTask() {
		// A task-augmented call the adapter took from mcp-go's engine:
		// its answer, the CreateTaskResult, goes to the slot.
		tc := call // CreateTask keeps it; a copy keeps call on the stack
		result, rerr := mcpcall.CreateTask(op, m.tasks, &tc, codec{}, handler)
		if rerr != nil {
			op.RecordError(rerr.Code, rerr.Message, nil)
		}
		slot.answer(result, rerr)
		return &mcp.CallToolResult{}, nil
	}
	return mcpcall.CallTool(op, &call, codec{}, handler)
}

// serveDetached serves a tools/call that has no request span, with a span
// of its own.
func (m *Instrumentation) serveDetached(ctx context.Context, req mcp.CallToolRequest, next server.ToolHandlerFunc) (res *mcp.CallToolResult, err error) {
	if m.warned.CompareAndSwap(false, true) {
		if op := mcpcall.FromContext(ctx); op == nil {
			m.in.Config().Logger.Warn("idemkit: mcp-go dispatched a tools/call without idemkit's request span: " +
				"another server.WithTracer replaced the one mcpgo.ServerOptions installed. " +
				"Tool calls are still traced and protected; other requests are not traced.")
		}
	}
	r := mcpcall.Request{Method: spancontract.MethodToolsCall, Target: req.Params.Name, ProtocolVersion: server.RequestProtocolVersion(ctx)}
	if req.Params.Meta != nil {
		r.Meta = req.Params.Meta.AdditionalFields
	}
	session := server.ClientSessionFromContext(ctx)
	r.Transport, r.SessionID = transportOf(ctx, session), sessionIDOf(session)
	_, op := m.in.Start(ctx, &r)
	ended := false
	defer func() {
		if !ended {
			op.End(mcpcall.Response{Panicked: true})
		}
	}()
	res, err = m.serve(op, req, next)
	ended = true
	if err != nil {
		op.End(mcpcall.Response{HasCode: true, Code: mcp.INTERNAL_ERROR, Message: err.Error(), Err: err})
	} else {
		op.End(mcpcall.Response{})
	}
	return res, err
}

// stripKeyArgument removes the idempotency_key argument from the request's
// arguments, in copies: the request's maps are shared with the hooks' view
// of it.
func stripKeyArgument(req *mcp.CallToolRequest) {
	if args, ok := req.Params.Arguments.(map[string]any); ok {
		if _, ok := args[spancontract.KeyArgument]; ok {
			c := maps.Clone(args)
			delete(c, spancontract.KeyArgument)
			req.Params.Arguments = c
		}
	}
	if raw, key := mcpcall.StripKeyArgument(req.Params.RawArguments); key != nil {
		req.Params.RawArguments = raw
	}
}

type progressSender struct {
	srv   *server.MCPServer
	token mcp.ProgressToken
}

func (p progressSender) SendProgress(ctx context.Context, progress, total float64, message string) error {
	params := map[string]any{"progressToken": p.token, "progress": progress}
	if total > 0 {
		params["total"] = total
	}
	if message != "" {
		params["message"] = message
	}
	return p.srv.SendNotificationToClient(ctx, string(mcp.MethodNotificationProgress), params)
}

// decoration caches the tools/list form of a tool whose calls are
// protected: it is rebuilt only when the tool's description or schema
// changes. Its input schema is pre-encoded (RawInputSchema, the bytes
// mcp-go writes for the structured one), so a hook that runs after
// idemkit's sees a decorated tool's schema there.
type decoration struct {
	description string
	schemaID    uintptr // identity of the input schema's maps or bytes
	tool        mcp.Tool
}

// afterListTools advertises the idempotency_key argument in a tools/list
// answer on the tools whose calls the listing caller would get protected,
// replacing them with decorated copies.
func (m *Instrumentation) afterListTools(ctx context.Context, _ any, _ *mcp.ListToolsRequest, res *mcp.ListToolsResult) {
	if res == nil {
		return
	}
	var sc mcpcall.Scope
	if op := mcpcall.FromContext(ctx); op != nil {
		sc = op.Scope()
	} else {
		session := server.ClientSessionFromContext(ctx)
		t := transportOf(ctx, session)
		sc = m.in.ScopeOf(ctx, sessionIDOf(session), &t)
	}
	for i := range res.Tools {
		t := &res.Tools[i]
		if m.in.AdvertisesKey(t.Name, toolInfoOf(t), sc) {
			res.Tools[i] = m.decorate(t)
		}
		if declared, ok := m.declaredTaskSupport(t.Name); ok {
			res.Tools[i].Execution = &mcp.ToolExecution{TaskSupport: declared}
		} else if t.Execution != nil && t.Execution.TaskSupport != "" && t.Execution.TaskSupport != mcp.TaskSupportForbidden &&
			findTool(ctx, t.Name) == nil {
			// Listed but not a regular tool: added with server.AddTaskTool.
			m.warnTaskTool(t.Name)
		}
	}
}

func (m *Instrumentation) decorate(t *mcp.Tool) mcp.Tool {
	id := schemaID(t)
	if v, ok := m.decorated.Load(t.Name); ok {
		if d := v.(*decoration); d.description == t.Description && d.schemaID == id {
			return d.tool
		}
	}
	d := &decoration{description: t.Description, schemaID: id, tool: preEncoded(withKeyParameter(*t))}
	m.decorated.Store(t.Name, d)
	return d.tool
}

// preEncoded returns tool with its structured input schema replaced by
// the bytes mcp-go would write for it, so that every tools/list answer
// writes them as they are instead of encoding the schema's maps again. A
// schema that does not encode is left as it is (mcp-go then reports it).
func preEncoded(tool mcp.Tool) mcp.Tool {
	if tool.RawInputSchema != nil {
		return tool
	}
	b, err := tool.InputSchema.MarshalJSON()
	if err != nil {
		return tool
	}
	tool.RawInputSchema, tool.InputSchema = b, mcp.ToolInputSchema{}
	return tool
}

// withKeyParameter returns tool with the optional idempotency_key argument
// added to its input schema and a sentence about it appended to its
// description. The tool's maps are copied, never modified.
func withKeyParameter(tool mcp.Tool) mcp.Tool {
	if tool.RawInputSchema != nil {
		if b, ok := mcpcall.RawSchemaWithKey(tool.RawInputSchema); ok {
			tool.RawInputSchema = b
		} else {
			return tool
		}
	} else {
		props := maps.Clone(tool.InputSchema.Properties)
		if props == nil {
			props = make(map[string]any, 1)
		}
		props[spancontract.KeyArgument] = mcpcall.KeyParameterSchema()
		tool.InputSchema.Properties = props
		if order := tool.InputSchema.PropertyOrder; order != nil {
			tool.InputSchema.PropertyOrder = append(order[:len(order):len(order)], spancontract.KeyArgument)
		}
		if tool.InputSchema.Type == "" {
			tool.InputSchema.Type = "object"
		}
	}
	tool.Description = mcpcall.DescribeKey(tool.Description)
	return tool
}
