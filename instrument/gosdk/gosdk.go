// Package gosdk wires idemkit's instrumentation into a server of the
// official MCP Go SDK, github.com/modelcontextprotocol/go-sdk (v1.8.0),
// through its receiving middleware: one execute_tool span per tools/call
// and claim-and-replay for the protected tools.
//
//	guard, _ := idemkit.NewGuard(&idemkit.MemoryStore{}, nil)
//	s := mcp.NewServer(&mcp.Implementation{Name: "billing", Version: "1"}, nil)
//	gosdk.Instrument(s, guard, instrument.WithSubject(gosdk.TokenSubject))
//	mcp.AddTool(s, refundTool, refund) // unannotated: protected
//	mcp.AddTool(s, lookupTool, lookup) // ReadOnlyHint: traced, not protected
//
// Differences from the mcp-go wiring, all forced by the SDK:
//
//   - No jsonrpc.request.id. The SDK keeps the JSON-RPC request ID in an
//     unexported context key and exposes it nowhere (open proposal
//     modelcontextprotocol/go-sdk#1264), so the span leaves the attribute
//     off rather than invent one. The Collector then cannot tell a
//     transport retry (same request ID) from a harness retry for these
//     spans and reports "unknown" where that is the only evidence.
//   - No session ID on stdio and in-memory transports (Session.ID() is "");
//     a request without HTTP headers (req.Extra == nil) is treated as the
//     single local client.
//   - The middleware sees tools/call before the SDK looks the tool up, and
//     the SDK has no public tool lookup. Tool annotations are learned from
//     tools/list: from every listing that passes through the middleware and,
//     on a call of a tool it has not seen, from one listing it requests
//     itself (through the handlers below this middleware). They are
//     forgotten when the server sends notifications/tools/list_changed. A
//     call of a tool that is not listed is passed on untouched (the SDK
//     answers it with an error) and gets no span.
//   - Arguments arrive as raw JSON; the idempotency_key argument is removed
//     before the handler sees it (tools added with mcp.AddTool reject
//     unknown arguments), unless the tool's own schema declares it.
package gosdk

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idemkit/idemkit/idemkit"
	"github.com/idemkit/idemkit/instrument"
)

const (
	methodCallTool        = "tools/call"
	methodListTools       = "tools/list"
	notificationToolsList = "notifications/tools/list_changed"
)

// Instrumentation connects an instrument.Instrumenter to go-sdk servers.
// Build it with New or Instrument; it is safe for concurrent use.
type Instrumentation struct {
	in  *instrument.Instrumenter
	idx toolIndex
}

// New returns an Instrumentation that protects calls with guard (nil: spans
// and metrics only) configured by opts. Install it on a server.
func New(guard *idemkit.Guard, opts ...instrument.Option) *Instrumentation {
	return &Instrumentation{in: instrument.New(guard, opts...)}
}

// Instrument installs a new Instrumentation on s and returns it: the one
// call a server needs.
func Instrument(s *mcp.Server, guard *idemkit.Guard, opts ...instrument.Option) *Instrumentation {
	m := New(guard, opts...)
	m.Install(s)
	return m
}

// Install adds the receiving middleware (tracing and protection) and a
// sending middleware (which notices tool list changes) to s. Middleware
// added to s later runs outside it; add it last so that its span covers the
// other middleware. An Instrumentation serves one server.
func (m *Instrumentation) Install(s *mcp.Server) {
	s.AddReceivingMiddleware(m.receive)
	s.AddSendingMiddleware(m.send)
}

// Instrumenter returns the SDK-agnostic Instrumenter, for instrument.NewJobs.
func (m *Instrumentation) Instrumenter() *instrument.Instrumenter { return m.in }

type requestKey struct{}

// RequestFrom returns the tools/call request being handled in ctx, or nil.
// A WithSubject function can use it to read the request's Extra (auth token
// information, HTTP headers).
func RequestFrom(ctx context.Context) *mcp.CallToolRequest {
	r, _ := ctx.Value(requestKey{}).(*mcp.CallToolRequest)
	return r
}

// TokenSubject is a WithSubject function: the UserID of the bearer token
// the SDK's auth middleware verified for the request, or "".
func TokenSubject(ctx context.Context) string {
	r := RequestFrom(ctx)
	if r == nil || r.Extra == nil || r.Extra.TokenInfo == nil {
		return ""
	}
	return r.Extra.TokenInfo.UserID
}

func (m *Instrumentation) send(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if method == notificationToolsList {
			m.idx.invalidate()
		}
		return next(ctx, method, req)
	}
}

func (m *Instrumentation) receive(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		switch method {
		case methodCallTool:
			if r, ok := req.(*mcp.CallToolRequest); ok && r.Params != nil {
				return m.callTool(ctx, next, r)
			}
		case methodListTools:
			res, err := next(ctx, method, req)
			if lr, ok := res.(*mcp.ListToolsResult); ok && err == nil {
				m.idx.observe(lr.Tools)
				m.decorate(lr)
			}
			return res, err
		}
		return next(ctx, method, req)
	}
}

func (m *Instrumentation) callTool(ctx context.Context, next mcp.MethodHandler, r *mcp.CallToolRequest) (mcp.Result, error) {
	name := r.Params.Name
	info, ok := m.idx.get(name)
	if !ok && m.idx.mayRefresh() {
		m.refresh(ctx, next, r.Session)
		info, ok = m.idx.get(name)
	}
	if !ok {
		return next(ctx, methodCallTool, r)
	}
	call := instrument.ToolCall{
		Tool:            name,
		Arguments:       r.Params.Arguments,
		Meta:            r.Params.Meta,
		ProtocolVersion: r.ProtocolVersion(),
		Local:           r.Extra == nil || r.Extra.Header == nil,
		ReadOnlyHint:    info.readOnly,
		IdempotentHint:  info.idempotent,
	}
	if r.Session != nil {
		call.SessionID = r.Session.ID()
		if tok := r.Params.GetProgressToken(); tok != nil {
			call.Progress = progressSender{session: r.Session, token: tok}
		}
	}
	pass := r
	if !info.declaresKey && m.in.StripsKey() {
		pass = stripKeyArgument(r)
	}
	res, err := instrument.Handle(context.WithValue(ctx, requestKey{}, r), m.in, &call, codec{},
		func(ctx context.Context) (*mcp.CallToolResult, error) {
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

// stripKeyArgument returns r, or a copy without the KeyArgument.
func stripKeyArgument(r *mcp.CallToolRequest) *mcp.CallToolRequest {
	args := r.Params.Arguments
	if !bytes.Contains(args, []byte(instrument.KeyArgument)) {
		return r
	}
	var fields map[string]json.RawMessage
	if json.Unmarshal(args, &fields) != nil {
		return r
	}
	if _, ok := fields[instrument.KeyArgument]; !ok {
		return r
	}
	delete(fields, instrument.KeyArgument)
	b, err := json.Marshal(fields)
	if err != nil {
		return r
	}
	params := *r.Params
	params.Arguments = b
	c := *r
	c.Params = &params
	return &c
}

// refresh lists the server's tools through the handlers below this
// middleware and replaces the index with them.
func (m *Instrumentation) refresh(ctx context.Context, next mcp.MethodHandler, session *mcp.ServerSession) {
	tools := make(map[string]toolInfo)
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
				tools[t.Name] = infoOf(t)
			}
		}
		if lr.NextCursor == "" {
			break
		}
		cursor = lr.NextCursor
	}
	m.idx.replace(tools)
}

// decorate advertises the KeyArgument on the protected tools of a listing,
// on copies of the tools.
func (m *Instrumentation) decorate(lr *mcp.ListToolsResult) {
	if !m.in.AdvertisesKey() {
		return
	}
	var out []*mcp.Tool
	for i, t := range lr.Tools {
		if t == nil {
			continue
		}
		info := infoOf(t)
		if info.declaresKey || !m.in.Protects(t.Name, info.readOnly, info.idempotent) {
			continue
		}
		if out == nil {
			out = append([]*mcp.Tool(nil), lr.Tools...)
		}
		out[i] = KeyParameter(t)
	}
	if out != nil {
		lr.Tools = out
	}
}

// KeyParameter returns a copy of tool with the optional idempotency_key
// argument added to its input schema and a sentence about it appended to
// its description; a tool that declares the argument already is returned as
// it is. The middleware does this to protected tools in tools/list answers
// by itself.
func KeyParameter(tool *mcp.Tool) *mcp.Tool {
	if schemaHasKey(tool.InputSchema) {
		return tool
	}
	schema := schemaMap(tool.InputSchema)
	props, _ := schema["properties"].(map[string]any)
	props = maps.Clone(props)
	if props == nil {
		props = make(map[string]any, 1)
	}
	props[instrument.KeyArgument] = instrument.KeyParameterSchema()
	schema["properties"] = props
	if _, ok := schema["type"]; !ok {
		schema["type"] = "object"
	}
	c := *tool
	c.InputSchema = schema
	if c.Description == "" {
		c.Description = instrument.KeyDescription
	} else if !strings.Contains(c.Description, instrument.KeyDescription) {
		c.Description = strings.TrimRight(c.Description, " \n") + "\n\n" + instrument.KeyDescription
	}
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

func schemaHasKey(schema any) bool {
	if schema == nil {
		return false
	}
	props, _ := schemaMap(schema)["properties"].(map[string]any)
	_, ok := props[instrument.KeyArgument]
	return ok
}

// toolInfo is what the middleware needs to know about a listed tool.
type toolInfo struct {
	readOnly, idempotent bool
	declaresKey          bool
}

func infoOf(t *mcp.Tool) toolInfo {
	info := toolInfo{declaresKey: schemaHasKey(t.InputSchema)}
	if a := t.Annotations; a != nil {
		info.readOnly, info.idempotent = a.ReadOnlyHint, a.IdempotentHint
	}
	return info
}

// minRefreshInterval bounds how often calls of unlisted tools make the
// middleware list the tools again.
const minRefreshInterval = time.Second

// toolIndex holds the tools learned from listings.
type toolIndex struct {
	mu          sync.RWMutex // protects the fields below
	tools       map[string]toolInfo
	fresh       bool // tools holds a full listing made since the last change
	lastRefresh time.Time
}

func (x *toolIndex) get(name string) (toolInfo, bool) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	info, ok := x.tools[name]
	return info, ok
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

func (x *toolIndex) replace(tools map[string]toolInfo) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.tools = tools
	x.fresh = true
}

func (x *toolIndex) observe(tools []*mcp.Tool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.tools == nil {
		x.tools = make(map[string]toolInfo, len(tools))
	}
	for _, t := range tools {
		if t != nil {
			x.tools[t.Name] = infoOf(t)
		}
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

// codec is instrument.Codec for go-sdk results, in the SDK's own JSON form.
type codec struct{}

var errNoResult = errors.New("gosdk: the tool handler returned neither a result nor an error")

func (codec) Marshal(r *mcp.CallToolResult) ([]byte, error) {
	if r == nil {
		return nil, errNoResult
	}
	return json.Marshal(r)
}

func (codec) Unmarshal(b []byte) (*mcp.CallToolResult, error) {
	var r mcp.CallToolResult
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, err
	}
	if r.Content == nil {
		r.Content = []mcp.Content{} // the SDK never sends "content": null
	}
	return &r, nil
}

func (codec) IsError(r *mcp.CallToolResult) bool    { return r != nil && r.IsError }
func (codec) NeedsInput(r *mcp.CallToolResult) bool { return r != nil && r.NeedsInput() }

func (codec) ErrorResult(text string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}, IsError: true}
}

func (codec) WithMeta(r *mcp.CallToolResult, key string, value any) *mcp.CallToolResult {
	var c mcp.CallToolResult
	if r != nil {
		c = *r
	}
	meta := maps.Clone(c.Meta)
	if meta == nil {
		meta = make(mcp.Meta, 1)
	}
	meta[key] = value
	c.Meta = meta
	return &c
}
