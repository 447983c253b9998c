package mcpgo

import (
	"context"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/idemkit-mcp/idemkit/instrument/internal/jobtool"
	"github.com/idemkit-mcp/idemkit/instrument/jobs"
	"github.com/idemkit-mcp/idemkit/internal/mcpcall"
	"github.com/idemkit-mcp/idemkit/spancontract"
)

// AddJobTool registers tool on s in the job-and-poll shape, for work that
// may outlast a client's request timeout:
//
//   - tool itself starts work in a worker (see jobs.Runner) and answers at
//     once with the job ID, as text and as structuredContent {"job_id",
//     "state", "status_tool"}. Keep it unannotated (or add WithProtect): it is
//     then protected, its answer is stored, and a duplicate start call gets
//     the same job ID instead of starting the work twice. Its _meta names
//     its status tool (spancontract.StatusToolMetaKey), which the in-progress
//     answer to a concurrent duplicate then names.
//   - tool.Name+"_status" (read-only, so never protected) takes {"job_id"}
//     and answers with the work's own result once it has finished (plus an
//     spancontract.JobMetaKey marker), or with the job's state and progress
//     while it runs. Only the subject that started a job can read it.
//
// work runs with a context detached from the request's cancellation and
// cancelled by jobs.Close; instrument.Progress and instrument.RecordWrite
// work in it. Its result is what the status tool returns.
//
// A client that supports MCP tasks may call tool as a task instead
// (execution.taskSupport "optional"): served through NewStreamableHTTPHandler,
// the task is the work itself, durable in the Guard's store like a job, and
// tasks/get and tasks/result report it; no job is started. Job-and-poll
// stays the answer to every other client.
func AddJobTool(s *server.MCPServer, runner *jobs.Runner, tool mcp.Tool, work server.ToolHandlerFunc) {
	name := tool.Name
	status := jobtool.StatusToolName(name)
	tool.Description = jobtool.Description(tool.Description, name)
	tool.Execution = &mcp.ToolExecution{TaskSupport: mcp.TaskSupportOptional}
	meta := &mcp.Meta{AdditionalFields: map[string]any{}}
	if tool.Meta != nil {
		meta.ProgressToken = tool.Meta.ProgressToken
		for k, v := range tool.Meta.AdditionalFields {
			meta.AdditionalFields[k] = v
		}
	}
	meta.AdditionalFields[spancontract.StatusToolMetaKey] = status
	tool.Meta = meta
	s.AddTool(tool, func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		if mcpcall.InRun(ctx) {
			// A task-augmented call: the task runs the work itself.
			return work(ctx, req)
		}
		return jobtool.Start(ctx, runner, codec{}, name, func(ctx context.Context) (*mcp.CallToolResult, error) {
			return work(ctx, req)
		}), nil
	})
	s.AddTool(mcp.NewTool(status,
		mcp.WithDescription(jobtool.StatusDescription(name)),
		mcp.WithString("job_id", mcp.Required(), mcp.Description(jobtool.JobIDDescription(name))),
		mcp.WithReadOnlyHintAnnotation(true),
		mcp.WithIdempotentHintAnnotation(true),
		mcp.WithDestructiveHintAnnotation(false),
		mcp.WithOpenWorldHintAnnotation(false),
	), func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return jobtool.Status(ctx, runner, codec{}, name, req.GetString("job_id", "")), nil
	})
}
