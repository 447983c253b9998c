package mcpgo

import (
	"context"
	"encoding/json"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/idemkit-mcp/idemkit/internal/mcpcall"
)

// addCallStatusTool registers the call status tool
// (instrument.WithCallStatusTool) on s, when it is configured and there is
// a Guard.
func (m *Instrumentation) addCallStatusTool(s *server.MCPServer) {
	name := m.in.CallStatusTool()
	if name == "" {
		return
	}
	schema, _ := json.Marshal(mcpcall.CallStatusSchema())
	tool := mcp.NewToolWithRawSchema(name, mcpcall.CallStatusDescription, schema)
	t, f := true, false
	tool.Annotations = mcp.ToolAnnotation{ReadOnlyHint: &t, IdempotentHint: &t, DestructiveHint: &f, OpenWorldHint: &f}
	s.AddTool(tool, func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		op := mcpcall.FromContext(ctx)
		if op == nil || op.Ended() {
			return mcp.NewToolResultError(name + " needs idemkit's request instrumentation, which another server.WithTracer replaced."), nil
		}
		args := req.Params.RawArguments
		if len(args) == 0 && req.Params.Arguments != nil {
			args, _ = json.Marshal(req.Params.Arguments)
		}
		return mcpcall.CallStatus(op, codec{}, args, func(tool string) (mcpcall.ToolInfo, bool) {
			t := findTool(op, tool)
			if t == nil {
				return mcpcall.ToolInfo{}, false
			}
			return toolInfoOf(t), true
		}), nil
	})
}
