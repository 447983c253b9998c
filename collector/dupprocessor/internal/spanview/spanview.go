// Package spanview recognises the spans the dup processor and the dup
// connector care about: tool executions and inference (chat) calls. Both
// components use it, so they agree on what a tool span is.
package spanview // import "github.com/idemkit-mcp/idemkit/collector/dupprocessor/internal/spanview"

import (
	"math"
	"strconv"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"

	sc "github.com/idemkit-mcp/idemkit/spancontract"
)

// Kind is what a span is to the dup components.
type Kind uint8

const (
	// Other is any span that is neither a tool execution nor an inference call.
	Other Kind = iota
	// Tool is a tool execution: an MCP server span with
	// mcp.method.name=tools/call (the `tools/call {tool}` SERVER span of the
	// MCP conventions), or a span with gen_ai.operation.name=execute_tool
	// of any kind (idemkit's older INTERNAL `execute_tool {tool}` span, an
	// agent framework's tool span).
	Tool
	// Chat is an inference call (gen_ai.operation.name chat,
	// text_completion or generate_content): evidence that the model spoke.
	Chat
)

// Classify returns what s is. A span of another MCP method (mcp.method.name
// tools/list, initialize, ...) is not a tool execution: only tools/call
// spans carry gen_ai.operation.name=execute_tool. It reads at most two
// attributes and never panics, whatever their types.
func Classify(s ptrace.Span) Kind {
	attrs := s.Attributes()
	if v, ok := attrs.Get(sc.GenAIOperationName); ok && v.Type() == pcommon.ValueTypeStr {
		switch v.Str() {
		case sc.OperationExecuteTool:
			return Tool
		case sc.OperationChat, sc.OperationTextCompletion, sc.OperationGenerateContent:
			return Chat
		}
	}
	if s.Kind() == ptrace.SpanKindServer {
		if v, ok := attrs.Get(sc.MCPMethodName); ok && v.Type() == pcommon.ValueTypeStr && v.Str() == sc.MethodToolsCall {
			return Tool
		}
	}
	return Other
}

// Scalar returns a string, int, double or bool value as a string, a number
// in decimal without an exponent (the contract's form of a JSON-RPC ID); ""
// for a map, slice, bytes, empty value, NaN or infinity.
func Scalar(v pcommon.Value) string {
	switch v.Type() {
	case pcommon.ValueTypeStr:
		return v.Str()
	case pcommon.ValueTypeInt, pcommon.ValueTypeBool:
		return v.AsString()
	case pcommon.ValueTypeDouble:
		f := v.Double()
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return ""
		}
		return strconv.FormatFloat(f, 'f', -1, 64)
	}
	return ""
}
