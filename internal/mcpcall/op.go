package mcpcall

import (
	"context"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemkit-mcp/idemkit/spancontract"
)

const schemaURL = semconv.SchemaURL

// Request is what a front end knows about an MCP request when it starts
// serving it.
type Request struct {
	// Method is params' method (mcp.method.name).
	Method string
	// ID is the JSON-RPC request ID formatted with FormatRequestID; HasID
	// is false when it is absent, null, or hidden by the SDK.
	ID    string
	HasID bool
	// Meta is params._meta, or nil. The trace context is extracted from it
	// unless Extract already did.
	Meta map[string]any
	// Target is the tool of tools/call or the prompt of prompts/get, when
	// known at the start.
	Target string
	// ResourceURI is the resource of resources/read, /subscribe and
	// /unsubscribe, or "".
	ResourceURI string
	// SessionID is the MCP session ID, or "" (no session, or a placeholder
	// such as mcp-go's "stdio").
	SessionID string
	// ProtocolVersion is the MCP protocol version in effect, or "".
	ProtocolVersion string
	// Transport is the connection the request arrived on.
	Transport Transport
}

// Response is how a request ended, as far as the front end saw it.
type Response struct {
	// Err is a Go error the request ended with, recorded as an exception
	// event. It makes the response a JSON-RPC error: set Code.
	Err error
	// HasCode and Code are the JSON-RPC error code of an error response;
	// Message is its message.
	HasCode bool
	Code    int64
	Message string
	// ToolError marks a tools/call answered with an isError result that
	// CallTool did not produce (an SDK's own argument validation).
	ToolError bool
	// Panicked marks a handler that panicked.
	Panicked bool
}

// Op is one MCP request being served: its SERVER span and the facts its end
// records. It is itself the context handed to the request's handlers. An
// Op is used by the request's goroutine; End may be called once.
type Op struct {
	context.Context // the request's context, with the span

	in    *Instrumenter
	start time.Time
	span  trace.Span
	ta    *targetAttrs // the request's target's attributes
	ta0   *targetAttrs // those the span started with

	req    Request
	errRes Response // RecordError

	call  callFacts // tools/call: what CallTool decided
	state callState // what handlers reach through the context

	// The flags side by side: an Op is allocated for every request, and
	// together they keep it in a smaller size class (768 bytes, not 896).
	rec       bool
	toolError bool // RecordToolError
	panicked  bool // RecordPanic
	errSet    bool // RecordError
	ended     bool
}

type opKeyCtx struct{}

// Value implements context.Context: the Op and its call state are found
// through it.
func (op *Op) Value(key any) any {
	switch key {
	case opKeyCtx{}:
		return op
	case stateKey{}:
		return &op.state
	}
	return op.Context.Value(key)
}

// FromContext returns the Op serving the request of ctx, or nil.
func FromContext(ctx context.Context) *Op {
	op, _ := ctx.Value(opKeyCtx{}).(*Op)
	return op
}

// linkKey carries, from Extract to Start, the ambient span context that a
// parent from params._meta replaced.
type linkKey struct{}

// Extract returns ctx with the trace context of meta (params._meta) as the
// parent. When it replaces a different ambient span context, Start links
// the ambient one. Front ends that see _meta before they can call Start use
// it, and pass a nil Request.Meta to Start.
func (in *Instrumenter) Extract(ctx context.Context, meta map[string]any) context.Context {
	if len(meta) == 0 {
		return ctx
	}
	ambient := trace.SpanContextFromContext(ctx)
	out := in.cfg.Propagator.Extract(ctx, metaCarrier(meta))
	remote := trace.SpanContextFromContext(out)
	if ambient.IsValid() && remote.IsValid() && !remote.Equal(ambient) {
		out = context.WithValue(out, linkKey{}, ambient)
	}
	return out
}

// Start opens the SERVER span of a request and returns the Op, which is
// also the context to serve the request with. r is copied.
func (in *Instrumenter) Start(ctx context.Context, r *Request) (context.Context, *Op) {
	op := &Op{in: in, start: time.Now(), req: *r}
	if len(r.Meta) > 0 {
		ctx = in.Extract(ctx, r.Meta)
	}
	op.ta = in.targetAttrs(r.Method, r.Target)
	op.ta0 = op.ta
	opts := op.ta.startOpts
	if link, ok := ctx.Value(linkKey{}).(trace.SpanContext); ok {
		opts = append(opts[:len(opts):len(opts)], trace.WithLinks(trace.Link{SpanContext: link}))
	}
	ctx, op.span = in.tracer.Start(ctx, op.ta.spanName, opts...)
	op.rec = op.span.IsRecording()
	op.Context = ctx
	return op, op
}

// Instrumenter returns the Instrumenter that started op.
func (op *Op) Instrumenter() *Instrumenter { return op.in }

// Method returns the request's method.
func (op *Op) Method() string { return op.req.Method }

// SetID records the JSON-RPC request ID, for front ends that learn it
// after Start.
func (op *Op) SetID(id any) {
	if s, ok := FormatRequestID(id); ok {
		op.req.ID, op.req.HasID = s, true
	}
}

// SetSession records the session ID and protocol version, for front ends
// that learn them after Start.
func (op *Op) SetSession(sessionID, protocolVersion string) {
	op.req.SessionID = sessionID
	if protocolVersion != "" {
		op.req.ProtocolVersion = protocolVersion
	}
}

// SetTransport records the transport, for front ends that learn it after
// Start.
func (op *Op) SetTransport(t Transport) { op.req.Transport = t }

// Transport returns the request's transport.
func (op *Op) Transport() *Transport { return &op.req.Transport }

// SessionID returns the request's session ID.
func (op *Op) SessionID() string { return op.req.SessionID }

// SetTarget records the tool or prompt a request is about, for front ends
// that learn it after Start: the span is renamed now and gets the target's
// attributes when it ends.
func (op *Op) SetTarget(target string) {
	if target == op.req.Target || op.ended {
		return
	}
	op.req.Target = target
	op.ta = op.in.targetAttrs(op.req.Method, target)
	if op.rec {
		op.span.SetName(op.ta.spanName)
	}
}

// SetResourceURI records the resource of a resources request.
func (op *Op) SetResourceURI(uri string) { op.req.ResourceURI = uri }

// RecordError records that the request ends with the JSON-RPC error code
// and message (err, when not nil, is recorded as an exception), for front
// ends that learn it before they call End. A Response passed to End that
// has a code wins.
func (op *Op) RecordError(code int64, message string, err error) {
	op.errSet = true
	op.errRes = Response{HasCode: true, Code: code, Message: message, Err: err}
}

// ErrorRecorded reports whether RecordError was called.
func (op *Op) ErrorRecorded() bool { return op.errSet }

// RecordPanic records that a handler of the request panicked, for front
// ends whose SDK ends the span itself while the panic unwinds.
func (op *Op) RecordPanic() { op.panicked = true }

// RecordToolError records that a tools/call ends with an isError result
// that CallTool did not produce (an SDK rejected the arguments).
func (op *Op) RecordToolError() { op.toolError = true }

// ToolCalled reports whether CallTool ran on op.
func (op *Op) ToolCalled() bool { return op.call.ran }

// Ended reports whether End was called.
func (op *Op) Ended() bool { return op.ended }

// Scope returns the scope of the request's caller (see ScopeOf).
func (op *Op) Scope() Scope {
	return op.in.ScopeOf(op, op.req.SessionID, &op.req.Transport)
}

// attrPool recycles the attribute buffers of End.
var attrPool = sync.Pool{New: func() any {
	b := make([]attribute.KeyValue, 0, 24)
	return &b
}}

// End closes the request's span with res and records its duration. Later
// calls do nothing.
func (op *Op) End(res Response) {
	if op.ended {
		return
	}
	op.ended = true
	in := op.in
	c := &op.call
	res.Panicked = res.Panicked || op.panicked
	if !res.HasCode && op.errSet {
		res.HasCode, res.Code, res.Message = true, op.errRes.Code, op.errRes.Message
		if res.Err == nil {
			res.Err = op.errRes.Err
		}
	}

	// error.type, rpc.response.status_code, status: a JSON-RPC error wins,
	// then an isError result.
	var (
		errType string
		isCode  bool
		status  string
	)
	switch {
	case res.HasCode:
		errType, isCode, status = codeString(res.Code), true, res.Message
	case res.Panicked:
		errType, status = spancontract.ErrorTypeOther, "panic"
	case c.isError || res.ToolError || op.toolError:
		errType = spancontract.ErrorTypeToolError
		status = spancontract.ErrorTypeToolError
		if c.refusal != "" {
			status = c.refusal
		}
	}

	if op.rec {
		buf := attrPool.Get().(*[]attribute.KeyValue)
		attrs := (*buf)[:0]
		if op.ta != op.ta0 || op.ta0.deferred {
			// The target's attributes the span did not start with.
			start := op.ta0.start
			for i, kv := range op.ta.base {
				if i >= len(start) || kv != start[i] {
					attrs = append(attrs, kv)
				}
			}
		}
		attrs = op.requestAttributes(attrs)
		if c.ran {
			attrs = op.callAttributes(attrs)
		}
		if errType != "" {
			attrs = append(attrs, attribute.String(spancontract.ErrorType, errType))
			if isCode {
				attrs = append(attrs, attribute.String(spancontract.RPCResponseStatusCode, errType))
			}
		}
		op.span.SetAttributes(attrs...)
		clear(attrs)
		*buf = attrs[:0]
		attrPool.Put(buf)
		if res.Err != nil {
			op.span.RecordError(res.Err)
		}
		if c.finishErr != nil {
			op.span.RecordError(c.finishErr)
		}
		if errType != "" {
			op.span.SetStatus(codes.Error, status)
		}
	}
	op.span.End()

	if c.ran {
		op.recordCallMetrics()
	}
	t := &op.req.Transport
	in.m.op.Record(op, time.Since(op.start).Seconds(), op.ta.opOptions(opKey{
		errType: errType, code: isCode, protocol: op.req.ProtocolVersion,
		network: t.Network, protoName: t.ProtocolName, protoVersion: t.ProtocolVersion,
	})...)
}

// requestAttributes appends the attributes every request span gets at its
// end.
func (op *Op) requestAttributes(attrs []attribute.KeyValue) []attribute.KeyValue {
	r := &op.req
	if r.HasID {
		attrs = append(attrs, attribute.String(spancontract.JSONRPCRequestID, r.ID))
	}
	if r.SessionID != "" {
		attrs = append(attrs, attribute.String(spancontract.MCPSessionID, op.in.SessionAttr(r.SessionID)))
	}
	attrs = appendNonEmpty(attrs, spancontract.MCPProtocolVersion, r.ProtocolVersion)
	attrs = appendNonEmpty(attrs, spancontract.MCPResourceURI, r.ResourceURI)
	t := &r.Transport
	attrs = appendNonEmpty(attrs, spancontract.NetworkTransport, t.Network)
	attrs = appendNonEmpty(attrs, spancontract.NetworkProtocolName, t.ProtocolName)
	attrs = appendNonEmpty(attrs, spancontract.NetworkProtocolVersion, t.ProtocolVersion)
	if t.ClientAddress != "" {
		attrs = append(attrs, attribute.String(spancontract.ClientAddress, t.ClientAddress))
		if t.ClientPort > 0 {
			attrs = append(attrs, attribute.Int(spancontract.ClientPort, t.ClientPort))
		}
	}
	return attrs
}

// callAttributes appends what CallTool decided.
func (op *Op) callAttributes(attrs []attribute.KeyValue) []attribute.KeyValue {
	c := &op.call
	in := op.in
	if in.cfg.ArgumentsCap > 0 && len(c.args) > 0 {
		attrs = append(attrs, attribute.String(spancontract.GenAIToolCallArguments, capture(c.args, in.cfg.ArgumentsCap)))
	}
	if c.resultAttr != "" {
		attrs = append(attrs, attribute.String(spancontract.GenAIToolCallResult, c.resultAttr))
	}
	if !c.key.IsZero() {
		attrs = append(attrs,
			attribute.String(spancontract.ArgsHash, in.hasher.ArgsHash(c.key.ArgsHash())),
			attribute.String(spancontract.KeyHash, in.hasher.KeyHash(c.key.ID())),
			attribute.String(spancontract.KeySource, c.key.Source()),
		)
		if c.scope.Value != "" {
			attrs = append(attrs, attribute.String(spancontract.SubjectHash, in.hashSubject(c.scope.Value)))
			if in.cfg.RawSubject && c.scope.Kind == ScopeSubject {
				attrs = append(attrs, attribute.String(spancontract.Subject, c.scope.Value))
			}
		}
	}
	if c.outcome != outcomeNone {
		attrs = append(attrs, outcomeAttrs[c.outcome])
	}
	if c.bypass != "" {
		attrs = append(attrs, attribute.String(spancontract.BypassReason, c.bypass))
	}
	if c.refusal != "" {
		attrs = append(attrs, attribute.String(spancontract.RefusalReason, c.refusal))
	}
	if c.attempt > 0 {
		attrs = append(attrs, attribute.Int(spancontract.Attempt, c.attempt))
	}
	attrs = appendNonEmpty(attrs, spancontract.WriteID, c.writeID)
	if c.finishReason != "" {
		attrs = append(attrs, attribute.String(spancontract.FinishError, c.finishReason))
	}
	attrs = appendNonEmpty(attrs, ConfirmationAttr, c.confirm)
	if c.inputRequested {
		attrs = append(attrs, attribute.Bool(spancontract.InputRequested, true))
	}
	if c.continuation {
		attrs = append(attrs, attribute.Bool(spancontract.InputContinuation, true))
	}
	return attrs
}

// recordCallMetrics records idemkit's own tool-call metrics.
func (op *Op) recordCallMetrics() {
	c := &op.call
	ta := op.ta
	m := &op.in.m
	addOpts := ta.callOpts[c.outcome]
	switch {
	case c.refusal != "":
		if i := indexOf(refusalReasons[:], c.refusal); i >= 0 {
			addOpts = ta.refuseOpts[i]
		}
	case c.bypass != "":
		if i := indexOf(bypassReasons[:], c.bypass); i >= 0 {
			addOpts = ta.bypassOpts[i]
		}
	}
	m.calls.Add(op, 1, addOpts...)
	if c.claimed {
		m.claim.Record(op, c.claimTime.Seconds(), ta.toolRecord...)
	}
	switch c.outcome {
	case outcomeReplayed:
		if c.refusal == "" {
			m.replays.Add(op, 1, ta.toolAdd...)
		}
	case outcomeInProgress:
		m.inProgress.Add(op, 1, ta.toolAdd...)
	}
	if c.finishReason != "" {
		m.finishErrs.Add(op, 1, ta.finishOptions(c.finishReason)...)
	}
}

// RecordSession records mcp.server.session.duration for a session that
// started at start and ended now, on transport t with protocol version
// protocol; errType is "" for a clean end.
func (in *Instrumenter) RecordSession(ctx context.Context, start time.Time, protocol string, t *Transport, errType string) {
	kvs := make([]attribute.KeyValue, 0, 5)
	kvs = appendNonEmpty(kvs, spancontract.MCPProtocolVersion, protocol)
	kvs = appendNonEmpty(kvs, spancontract.NetworkTransport, t.Network)
	kvs = appendNonEmpty(kvs, spancontract.NetworkProtocolName, t.ProtocolName)
	kvs = appendNonEmpty(kvs, spancontract.NetworkProtocolVersion, t.ProtocolVersion)
	kvs = appendNonEmpty(kvs, spancontract.ErrorType, errType)
	in.m.session.Record(ctx, time.Since(start).Seconds(), metricAttrs(kvs)...)
}
