package gosdk

import (
	"context"
	"encoding/json"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idemkit-mcp/idemkit/internal/mcpcall"
)

// addCallStatusTool registers the call status tool
// (instrument.WithCallStatusTool) on s, when it is configured and there is
// a Guard.
func (m *Instrumentation) addCallStatusTool(s *mcp.Server) {
	name := m.in.CallStatusTool()
	if name == "" {
		return
	}
	f := false
	s.AddTool(&mcp.Tool{
		Name:        name,
		Description: mcpcall.CallStatusDescription,
		InputSchema: mcpcall.CallStatusSchema(),
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true, DestructiveHint: &f, OpenWorldHint: &f},
	}, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		op := mcpcall.FromContext(ctx)
		if op == nil || op.Ended() {
			return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: name + " needs idemkit's receiving middleware (gosdk.Instrument)."}}}, nil
		}
		return mcpcall.CallStatus(op, codec{}, req.Params.Arguments, func(tool string) (mcpcall.ToolInfo, bool) {
			e, ok := m.idx.get(tool)
			if !ok {
				return mcpcall.ToolInfo{}, false
			}
			return e.info, true
		}), nil
	})
}

// prepareCallStatus makes sure, before a call of the call status tool, that
// the tool it asks about is in the index (listing the tools once when it
// is not), since its handler has no way to list them.
func (m *Instrumentation) prepareCallStatus(ctx context.Context, next mcp.MethodHandler, r *mcp.CallToolRequest) {
	var a struct {
		Tool string `json:"tool"`
	}
	if json.Unmarshal(r.Params.Arguments, &a) != nil || a.Tool == "" {
		return
	}
	if _, ok := m.idx.get(a.Tool); !ok && m.idx.mayRefresh() {
		m.refresh(ctx, next, r.Session)
	}
}
