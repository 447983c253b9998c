package gosdk

import (
	"context"
	"encoding/json"
	"errors"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idemkit/idemkit/instrument"
)

// AddJobTool registers tool on s in the job-and-poll shape; see
// mcpgo.AddJobTool for the behaviour, which is the same: tool starts work in
// a worker and answers at once with {"job_id", "state", "status_tool"};
// tool.Name+"_status" (read-only) takes {"job_id"} and returns the work's
// own result once it has finished. work is a low-level mcp.ToolHandler: it
// reads its arguments from req.Params.Arguments.
func AddJobTool(s *mcp.Server, jobs *instrument.Jobs, tool *mcp.Tool, work mcp.ToolHandler) {
	status := instrument.StatusToolName(tool.Name)
	jobs.Instrumenter().SetStatusTool(tool.Name, status)
	t := *tool
	t.Description = strings.TrimSpace(t.Description + "\n\nIt starts the work in the background and returns a job_id at once; call " +
		status + " with that job_id to follow it and get the result.")
	if t.InputSchema == nil {
		t.InputSchema = map[string]any{"type": "object"}
	}
	name := t.Name

	s.AddTool(&t, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
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
			return codec{}.ErrorResult("The " + name + " job could not be started (" + err.Error() + "). Nothing was done; retry the same call shortly."), nil
		}
		return &mcp.CallToolResult{
			Content: []mcp.Content{&mcp.TextContent{Text: instrument.StartedText(name, status, job.ID)}},
			StructuredContent: map[string]any{
				"job_id":      job.ID,
				"state":       string(job.State),
				"status_tool": status,
			},
		}, nil
	})

	f := false
	s.AddTool(&mcp.Tool{
		Name:        status,
		Description: "Reports the state of a " + name + " job started earlier and, once it has finished, returns its result.",
		InputSchema: map[string]any{
			"type": "object",
			"properties": map[string]any{
				"job_id": map[string]any{"type": "string", "description": "The job_id that " + name + " returned."},
			},
			"required": []string{"job_id"},
		},
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true, DestructiveHint: &f, OpenWorldHint: &f},
	}, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		var args struct {
			JobID string `json:"job_id"`
		}
		_ = json.Unmarshal(req.Params.Arguments, &args)
		job, err := jobs.Get(ctx, args.JobID)
		switch {
		case errors.Is(err, instrument.ErrJobNotFound):
			return codec{}.ErrorResult(instrument.NotFoundText(args.JobID)), nil
		case err != nil:
			return codec{}.ErrorResult("The state of job " + args.JobID + " could not be read (" + err.Error() + "). Call " + status + " again shortly."), nil
		}
		if job.Result != nil {
			if res, err := (codec{}).Unmarshal(job.Result); err == nil {
				return codec{}.WithMeta(res, instrument.JobMetaKey, instrument.JobMeta(job)), nil
			}
		}
		res := &mcp.CallToolResult{
			Content: []mcp.Content{&mcp.TextContent{Text: instrument.StatusText(job, status)}},
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
