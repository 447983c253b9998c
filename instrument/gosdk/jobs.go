package gosdk

import (
	"context"
	"encoding/json"
	"maps"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idemkit-mcp/idemkit/instrument/internal/jobtool"
	"github.com/idemkit-mcp/idemkit/instrument/jobs"
	"github.com/idemkit-mcp/idemkit/spancontract"
)

// AddJobTool registers tool on s in the job-and-poll shape; see
// mcpgo.AddJobTool for the behaviour, which is the same: tool starts work in
// a worker and answers at once with {"job_id", "state", "status_tool"};
// tool.Name+"_status" (read-only) takes {"job_id"} and returns the work's
// own result once it has finished. work is a low-level mcp.ToolHandler: it
// reads its arguments from req.Params.Arguments.
func AddJobTool(s *mcp.Server, runner *jobs.Runner, tool *mcp.Tool, work mcp.ToolHandler) {
	name := tool.Name
	status := jobtool.StatusToolName(name)
	t := *tool
	t.Description = jobtool.Description(t.Description, name)
	if t.InputSchema == nil {
		t.InputSchema = map[string]any{"type": "object"}
	}
	t.Meta = maps.Clone(t.Meta)
	if t.Meta == nil {
		t.Meta = mcp.Meta{}
	}
	t.Meta[spancontract.StatusToolMetaKey] = status
	s.AddTool(&t, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return jobtool.Start(ctx, runner, codec{}, name, func(ctx context.Context) (*mcp.CallToolResult, error) {
			return work(ctx, req)
		}), nil
	})

	f := false
	s.AddTool(&mcp.Tool{
		Name:        status,
		Description: jobtool.StatusDescription(name),
		InputSchema: map[string]any{
			"type": "object",
			"properties": map[string]any{
				"job_id": map[string]any{"type": "string", "description": jobtool.JobIDDescription(name)},
			},
			"required": []string{"job_id"},
		},
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true, DestructiveHint: &f, OpenWorldHint: &f},
	}, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		var args struct {
			JobID string `json:"job_id"`
		}
		_ = json.Unmarshal(req.Params.Arguments, &args)
		return jobtool.Status(ctx, runner, codec{}, name, args.JobID), nil
	})
}
