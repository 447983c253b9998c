package gateway

import (
	"context"
	"encoding/json"
)

// Annotations are the MCP tool annotations that decide protection.
type Annotations struct {
	// ReadOnly is annotations.readOnlyHint.
	ReadOnly bool
	// Idempotent is annotations.idempotentHint.
	Idempotent bool
	// Listed reports that the upstream's tools/list named the tool; an
	// unlisted tool has MCP's default annotations (a write tool).
	Listed bool
}

// ToolCall is one tools/call request as the gateway received it.
type ToolCall struct {
	// Tool is params.name.
	Tool string
	// Arguments is params.arguments as received (with any idempotency_key).
	Arguments json.RawMessage
	// Meta is params._meta, or nil.
	Meta json.RawMessage
	// SessionID is the gateway's own MCP session ID ("" on stdio).
	SessionID string
	// RequestID is the JSON-RPC request ID, formatted as the span contract
	// writes it ("" when absent).
	RequestID string
	// ProtocolVersion is the MCP protocol version the session negotiated.
	ProtocolVersion string
	// Subject identifies the caller (see Config.SubjectHeader), or "".
	Subject string
	// Local reports the stdio transport: one client per gateway process.
	Local bool
	// Annotations are the tool's annotations from the upstream's tools/list.
	Annotations Annotations
	// Transport is "tcp" for Streamable HTTP, "pipe" for stdio.
	Transport string
}

// Forward sends the call to the upstream and returns the result JSON, or
// an error: an *RPCError when the upstream answered with a JSON-RPC error,
// ErrUpstreamGone or ErrSessionLost (wrapped) when it went away. It passes
// the messages the upstream sends before its answer (progress, logging,
// server requests) to the client as they come; progress also calls
// heartbeat. ctx bounds the upstream request.
type Forward func(ctx context.Context) (json.RawMessage, error)

// CallHandler runs tools/call requests: the seam where claim-and-replay and
// the tool-call telemetry plug in. Its methods are safe for concurrent use.
type CallHandler interface {
	// Protects reports whether calls of tool are claimed and replayed. The
	// gateway advertises the idempotency_key argument in the tools/list
	// entries of the tools it protects, and strips that argument before
	// forwarding their calls.
	Protects(tool string, a Annotations) bool
	// HandleCall answers call, running forward at most as often as its
	// policy allows. It returns the result to send (a CallToolResult, maybe
	// a replayed one) or an error: an *RPCError is sent as it is, any other
	// error as a JSON-RPC internal error with its text.
	HandleCall(ctx context.Context, call *ToolCall, forward Forward) (json.RawMessage, error)
}

// PassThrough is the CallHandler that protects nothing: every call is
// forwarded as it is.
type PassThrough struct{}

// Protects implements CallHandler: never.
func (PassThrough) Protects(string, Annotations) bool { return false }

// HandleCall implements CallHandler: it forwards the call.
func (PassThrough) HandleCall(ctx context.Context, _ *ToolCall, forward Forward) (json.RawMessage, error) {
	return forward(ctx)
}
