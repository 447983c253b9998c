// Package mcpgo wires idemkit's instrumentation into a
// github.com/mark3labs/mcp-go (v1.2.1) server: one execute_tool span per
// tools/call with the five diagnostic fields, and claim-and-replay for the
// protected tools.
//
//	guard, _ := idemkit.NewGuard(&idemkit.MemoryStore{}, nil)
//	opts := mcpgo.ServerOptions(guard, instrument.WithSubject(userID))
//	s := server.NewMCPServer("billing", "1.0.0", opts...)
//	s.AddTool(refundTool, refund) // unannotated: protected
//	s.AddTool(lookupTool, lookup) // readOnlyHint: traced, not protected
//
// ServerOptions returns three pieces that only work together, which is why
// they come from one call: a BeforeCallTool hook that captures the JSON-RPC
// request ID (mcp-go hands it to hooks only), the tool-handler middleware
// that traces and protects the call, and an AfterListTools hook that adds
// the optional idempotency_key argument to protected tools' schemas. The
// hooks are added to the server's existing Hooks, so pass ServerOptions
// after any server.WithHooks option (which replaces the Hooks), or call
// Install on a server built already.
//
// Request-ID capture: mcp-go decodes a tools/call into a CallToolRequest,
// passes a pointer to it to the BeforeCallTool hooks, then hands a copy to
// the middleware chain. Pointers inside the request survive the copy, so
// the hook makes sure params._meta is non-nil (allocating an empty Meta when
// the client sent none) and records the formatted ID under that *mcp.Meta;
// the middleware finds it there. The entry is deleted by the AfterCallTool
// or OnError hook, or by the middleware itself when the handler panics. A
// handler therefore always sees a non-nil req.Params.Meta.
package mcpgo

import (
	"bytes"
	"context"
	"encoding/json"
	"maps"
	"strings"
	"sync"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/idemkit/idemkit/idemkit"
	"github.com/idemkit/idemkit/instrument"
)

// stdioSessionID is the session ID mcp-go reports for its stdio transport,
// which serves exactly one client.
const stdioSessionID = "stdio"

// Instrumentation connects an instrument.Instrumenter to mcp-go servers.
// Build it with New; it is safe for concurrent use, and one Instrumentation
// may serve several servers.
type Instrumentation struct {
	in  *instrument.Instrumenter
	ids sync.Map // *mcp.Meta -> string: request IDs captured by the hook
}

// New returns an Instrumentation that protects calls with guard (nil: spans
// and metrics only) configured by opts.
func New(guard *idemkit.Guard, opts ...instrument.Option) *Instrumentation {
	return &Instrumentation{in: instrument.New(guard, opts...)}
}

// ServerOptions is New(guard, opts...).ServerOptions(): everything to pass
// to server.NewMCPServer.
func ServerOptions(guard *idemkit.Guard, opts ...instrument.Option) []server.ServerOption {
	return New(guard, opts...).ServerOptions()
}

// Instrumenter returns the SDK-agnostic Instrumenter, for instrument.NewJobs.
func (m *Instrumentation) Instrumenter() *instrument.Instrumenter { return m.in }

// ServerOptions returns the options that install the instrumentation on a
// server: the hooks (added to the server's Hooks, created when it has none)
// and the tool-handler middleware. Pass them after any server.WithHooks.
// The middleware is added where the options appear among other
// WithToolHandlerMiddleware options; put them first so that the span covers
// the other middleware.
func (m *Instrumentation) ServerOptions() []server.ServerOption {
	return []server.ServerOption{
		m.installHooks,
		server.WithToolHandlerMiddleware(m.middleware),
	}
}

// Install applies ServerOptions to a server built already. Call it before
// the server serves requests.
func (m *Instrumentation) Install(s *server.MCPServer) {
	for _, o := range m.ServerOptions() {
		o(s)
	}
}

func (m *Instrumentation) installHooks(s *server.MCPServer) {
	h := s.GetHooks()
	if h == nil {
		h = &server.Hooks{}
		server.WithHooks(h)(s)
	}
	h.AddBeforeCallTool(m.beforeCallTool)
	h.AddAfterCallTool(m.afterCallTool)
	h.AddOnError(m.onError)
	h.AddAfterListTools(m.afterListTools)
}

func (m *Instrumentation) beforeCallTool(_ context.Context, id any, req *mcp.CallToolRequest) {
	if req == nil {
		return
	}
	if req.Params.Meta == nil {
		req.Params.Meta = &mcp.Meta{}
	}
	if s, ok := instrument.FormatRequestID(id); ok {
		m.ids.Store(req.Params.Meta, s)
	}
}

func (m *Instrumentation) afterCallTool(_ context.Context, _ any, req *mcp.CallToolRequest, _ any) {
	if req != nil && req.Params.Meta != nil {
		m.ids.Delete(req.Params.Meta)
	}
}

func (m *Instrumentation) onError(_ context.Context, _ any, method mcp.MCPMethod, message any, _ error) {
	if method != mcp.MethodToolsCall {
		return
	}
	if req, ok := message.(*mcp.CallToolRequest); ok && req.Params.Meta != nil {
		m.ids.Delete(req.Params.Meta)
	}
}

// toolInfo is what the middleware needs to know about a registered tool.
type toolInfo struct {
	readOnly, idempotent bool
	declaresKey          bool // the tool's own schema has the KeyArgument
}

func infoOf(t *mcp.Tool) toolInfo {
	info := toolInfo{
		readOnly:   t.Annotations.ReadOnlyHint != nil && *t.Annotations.ReadOnlyHint,
		idempotent: t.Annotations.IdempotentHint != nil && *t.Annotations.IdempotentHint,
	}
	if t.RawInputSchema != nil {
		info.declaresKey = bytes.Contains(t.RawInputSchema, []byte(`"`+instrument.KeyArgument+`"`))
	} else {
		_, info.declaresKey = t.InputSchema.Properties[instrument.KeyArgument]
	}
	return info
}

// lookupTool finds the tool a call is for, as mcp-go does: the session's
// tools first, then the server's. Unknown tools (never reached: mcp-go
// rejects them before the middleware) get the MCP defaults.
func lookupTool(ctx context.Context, name string) toolInfo {
	session := server.ClientSessionFromContext(ctx)
	if st, ok := session.(server.SessionWithTools); ok {
		if t, ok := st.GetSessionTools()[name]; ok {
			return infoOf(&t.Tool)
		}
	}
	if s := server.ServerFromContext(ctx); s != nil {
		if t := s.GetTool(name); t != nil {
			return infoOf(&t.Tool)
		}
	}
	return toolInfo{}
}

func (m *Instrumentation) middleware(next server.ToolHandlerFunc) server.ToolHandlerFunc {
	return func(ctx context.Context, req mcp.CallToolRequest) (res *mcp.CallToolResult, err error) {
		meta := req.Params.Meta
		call := instrument.ToolCall{Tool: req.Params.Name}
		if meta == nil {
			return m.serve(ctx, &call, &req, next)
		}
		call.Meta = meta.AdditionalFields
		if meta.ProgressToken != nil {
			if s := server.ServerFromContext(ctx); s != nil {
				call.Progress = progressSender{srv: s, token: meta.ProgressToken}
			}
		}
		v, ok := m.ids.Load(meta)
		if !ok {
			return m.serve(ctx, &call, &req, next)
		}
		call.RequestID = v.(string)
		returned := false
		defer func() {
			if !returned { // the handler panicked: the hooks will not run
				m.ids.Delete(meta)
			}
		}()
		res, err = m.serve(ctx, &call, &req, next)
		returned = true
		return res, err
	}
}

// serve completes call from the request and runs it through the
// Instrumenter.
func (m *Instrumentation) serve(ctx context.Context, call *instrument.ToolCall, req *mcp.CallToolRequest, next server.ToolHandlerFunc) (*mcp.CallToolResult, error) {
	if session := server.ClientSessionFromContext(ctx); session != nil {
		call.SessionID = session.SessionID()
		call.Local = call.SessionID == stdioSessionID
	}
	call.ProtocolVersion = server.RequestProtocolVersion(ctx)
	info := lookupTool(ctx, call.Tool)
	call.ReadOnlyHint, call.IdempotentHint = info.readOnly, info.idempotent

	call.Arguments = req.Params.RawArguments
	if len(call.Arguments) == 0 && req.Params.Arguments != nil {
		call.Arguments, _ = json.Marshal(req.Params.Arguments)
	}
	r := *req
	if !info.declaresKey && m.in.StripsKey() {
		stripKeyArgument(&r)
	}
	return instrument.Handle(ctx, m.in, call, codec{}, func(ctx context.Context) (*mcp.CallToolResult, error) {
		return next(ctx, r)
	})
}

// stripKeyArgument removes the KeyArgument from the request's arguments, in
// a copy: the request's maps are shared with the hooks' view of it.
func stripKeyArgument(req *mcp.CallToolRequest) {
	raw := req.Params.RawArguments
	args, isMap := req.Params.Arguments.(map[string]any)
	if isMap {
		if _, ok := args[instrument.KeyArgument]; !ok {
			return
		}
		c := maps.Clone(args)
		delete(c, instrument.KeyArgument)
		req.Params.Arguments = c
	} else if !bytes.Contains(raw, []byte(instrument.KeyArgument)) {
		return
	}
	if len(raw) > 0 {
		var fields map[string]json.RawMessage
		if json.Unmarshal(raw, &fields) == nil {
			if _, ok := fields[instrument.KeyArgument]; ok {
				delete(fields, instrument.KeyArgument)
				if b, err := json.Marshal(fields); err == nil {
					req.Params.RawArguments = b
				}
			}
		}
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

// codec is instrument.Codec for mcp-go results. It writes the JSON that
// mcp-go's CallToolResult.MarshalJSON writes (members in another order),
// through a struct rather than a map, which is cheaper on the hot path; it
// reads with mcp-go's UnmarshalJSON.
type codec struct{}

// wireResult mirrors CallToolResult.MarshalJSON's output.
type wireResult struct {
	Meta              *mcp.Meta         `json:"_meta,omitempty"`
	ResultType        mcp.ResultType    `json:"resultType,omitempty"`
	Content           []mcp.Content     `json:"content"`
	StructuredContent any               `json:"structuredContent,omitempty"`
	IsError           bool              `json:"isError,omitempty"`
	InputRequests     mcp.InputRequests `json:"inputRequests,omitempty"`
	RequestState      string            `json:"requestState,omitempty"`
}

var emptyContent = []mcp.Content{}

func (codec) Marshal(r *mcp.CallToolResult) ([]byte, error) {
	if r == nil {
		return nil, errNoResult
	}
	w := wireResult{
		Meta:              r.Meta,
		ResultType:        r.ResultType,
		Content:           r.Content,
		StructuredContent: r.StructuredContent,
		IsError:           r.IsError,
		InputRequests:     r.InputRequests,
		RequestState:      r.RequestState,
	}
	if w.Content == nil {
		w.Content = emptyContent
	}
	if len(r.RawStructuredContent) > 0 {
		w.StructuredContent = json.RawMessage(r.RawStructuredContent)
	}
	return json.Marshal(&w)
}

func (codec) Unmarshal(b []byte) (*mcp.CallToolResult, error) {
	var r mcp.CallToolResult
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

func (codec) IsError(r *mcp.CallToolResult) bool    { return r != nil && r.IsError }
func (codec) NeedsInput(r *mcp.CallToolResult) bool { return r != nil && r.NeedsInput() }

func (codec) ErrorResult(text string) *mcp.CallToolResult { return mcp.NewToolResultError(text) }

func (codec) WithMeta(r *mcp.CallToolResult, key string, value any) *mcp.CallToolResult {
	var c mcp.CallToolResult
	if r != nil {
		c = *r
	}
	meta := &mcp.Meta{}
	if c.Meta != nil {
		meta.ProgressToken = c.Meta.ProgressToken
		meta.AdditionalFields = maps.Clone(c.Meta.AdditionalFields)
	}
	if meta.AdditionalFields == nil {
		meta.AdditionalFields = make(map[string]any, 1)
	}
	meta.AdditionalFields[key] = value
	c.Meta = meta
	return &c
}

type constError string

func (e constError) Error() string { return string(e) }

const errNoResult = constError("mcpgo: the tool handler returned neither a result nor an error")

// afterListTools advertises the KeyArgument on protected tools.
func (m *Instrumentation) afterListTools(_ context.Context, _ any, _ *mcp.ListToolsRequest, res *mcp.ListToolsResult) {
	if res == nil || !m.in.AdvertisesKey() {
		return
	}
	for i := range res.Tools {
		t := &res.Tools[i]
		info := infoOf(t)
		if info.declaresKey || !m.in.Protects(t.Name, info.readOnly, info.idempotent) {
			continue
		}
		res.Tools[i] = KeyParameter(*t)
	}
}

// KeyParameter returns tool with the optional idempotency_key argument added
// to its input schema and a sentence about it appended to its description;
// a tool that already declares the argument is returned unchanged. The
// instrumentation does this to protected tools in tools/list answers by
// itself; register a tool through KeyParameter only when the server
// validates arguments strictly (server.WithInputSchemaValidation with
// additionalProperties false), so that a call carrying the key passes
// validation. The tool's maps are copied, never modified.
func KeyParameter(tool mcp.Tool) mcp.Tool {
	if infoOf(&tool).declaresKey {
		return tool
	}
	if tool.RawInputSchema != nil {
		var schema map[string]any
		if err := json.Unmarshal(tool.RawInputSchema, &schema); err != nil || schema == nil {
			return tool
		}
		props, _ := schema["properties"].(map[string]any)
		if props == nil {
			props = make(map[string]any, 1)
		}
		props[instrument.KeyArgument] = instrument.KeyParameterSchema()
		schema["properties"] = props
		b, err := json.Marshal(schema)
		if err != nil {
			return tool
		}
		tool.RawInputSchema = b
	} else {
		props := maps.Clone(tool.InputSchema.Properties)
		if props == nil {
			props = make(map[string]any, 1)
		}
		props[instrument.KeyArgument] = instrument.KeyParameterSchema()
		tool.InputSchema.Properties = props
		if tool.InputSchema.PropertyOrder != nil {
			tool.InputSchema.PropertyOrder = append(tool.InputSchema.PropertyOrder[:len(tool.InputSchema.PropertyOrder):len(tool.InputSchema.PropertyOrder)], instrument.KeyArgument)
		}
		if tool.InputSchema.Type == "" {
			tool.InputSchema.Type = "object"
		}
	}
	if tool.Description == "" {
		tool.Description = instrument.KeyDescription
	} else if !strings.Contains(tool.Description, instrument.KeyDescription) {
		tool.Description = strings.TrimRight(tool.Description, " \n") + "\n\n" + instrument.KeyDescription
	}
	return tool
}
