package mcpgo

import (
	"context"
	"encoding/json"
	"errors"
	"strings"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/idemkit/idemkit/instrument"
)

// AddJobTool registers tool on s in the job-and-poll shape, for work that
// may outlast a client's request timeout:
//
//   - tool itself starts work in a worker (see instrument.Jobs) and answers at
//     once with the job ID, as text and as structuredContent {"job_id",
//     "state", "status_tool"}. Keep it unannotated (or add WithProtect): it is
//     then protected, its answer is stored, and a duplicate start call gets
//     the same job ID instead of starting the work twice.
//   - tool.Name+"_status" (read-only, so never protected) takes {"job_id"}
//     and answers with the work's own result once it has finished (plus an
//     instrument.JobMetaKey marker), or with the job's state and progress
//     while it runs. Only the subject that started a job can read it.
//
// work runs with a context detached from the request's cancellation and
// cancelled by jobs.Close; instrument.Progress and instrument.RecordWrite
// work in it. Its result is what the status tool returns.
func AddJobTool(s *server.MCPServer, jobs *instrument.Jobs, tool mcp.Tool, work server.ToolHandlerFunc) {
	status := instrument.StatusToolName(tool.Name)
	jobs.Instrumenter().SetStatusTool(tool.Name, status)
	sentence := "It starts the work in the background and returns a job_id at once; call " + status + " with that job_id to follow it and get the result."
	tool.Description = strings.TrimSpace(tool.Description + "\n\n" + sentence)
	name := tool.Name

	s.AddTool(tool, func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		job, err := jobs.Start(ctx, name, func(ctx context.Context) ([]byte, bool, error) {
			res, err := work(ctx, req)
			if err != nil {
				return nil, false, err
			}
			if res == nil {
				return nil, false, errNoResult
			}
			b, err := json.Marshal(res)
			return b, res.IsError, err
		})
		if err != nil {
			return mcp.NewToolResultError("The " + name + " job could not be started (" + err.Error() + "). Nothing was done; retry the same call shortly."), nil
		}
		return &mcp.CallToolResult{
			Content: []mcp.Content{mcp.NewTextContent(instrument.StartedText(name, status, job.ID))},
			StructuredContent: map[string]any{
				"job_id":      job.ID,
				"state":       string(job.State),
				"status_tool": status,
			},
		}, nil
	})

	statusTool := mcp.NewTool(status,
		mcp.WithDescription("Reports the state of a "+name+" job started earlier and, once it has finished, returns its result."),
		mcp.WithString("job_id", mcp.Required(), mcp.Description("The job_id that "+name+" returned.")),
		mcp.WithReadOnlyHintAnnotation(true),
		mcp.WithIdempotentHintAnnotation(true),
		mcp.WithDestructiveHintAnnotation(false),
		mcp.WithOpenWorldHintAnnotation(false),
	)
	s.AddTool(statusTool, func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		id := req.GetString("job_id", "")
		job, err := jobs.Get(ctx, id)
		switch {
		case errors.Is(err, instrument.ErrJobNotFound):
			return mcp.NewToolResultError(instrument.NotFoundText(id)), nil
		case err != nil:
			return mcp.NewToolResultError("The state of job " + id + " could not be read (" + err.Error() + "). Call " + status + " again shortly."), nil
		}
		if job.Result != nil {
			res, err := codec{}.Unmarshal(job.Result)
			if err == nil {
				return codec{}.WithMeta(res, instrument.JobMetaKey, instrument.JobMeta(job)), nil
			}
		}
		res := &mcp.CallToolResult{
			Content: []mcp.Content{mcp.NewTextContent(instrument.StatusText(job, status))},
			StructuredContent: map[string]any{
				"job_id":   job.ID,
				"state":    string(job.State),
				"progress": job.Progress,
				"total":    job.Total,
				"message":  job.Message,
			},
			IsError: job.State == instrument.JobFailed || job.State == instrument.JobAbandoned,
		}
		return codec{}.WithMeta(res, instrument.JobMetaKey, instrument.JobMeta(job)), nil
	})
}
