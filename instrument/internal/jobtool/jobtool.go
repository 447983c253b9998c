// Package jobtool builds the answers of the job-and-poll tools once for
// every SDK adapter: mcpgo.AddJobTool and gosdk.AddJobTool only register the
// two tools and hand each call to Start or Status with their Codec.
package jobtool

import (
	"context"
	"errors"
	"strconv"
	"strings"

	"github.com/idemkit-mcp/idemkit/instrument/jobs"
	"github.com/idemkit-mcp/idemkit/internal/mcpcall"
	"github.com/idemkit-mcp/idemkit/spancontract"
)

// StatusToolName returns the name of the status tool of a job tool: tool
// with "_status" appended.
func StatusToolName(tool string) string { return tool + "_status" }

// Description is the description of a job tool's start tool: its own
// description, then how to follow the job.
func Description(description, tool string) string {
	return strings.TrimSpace(description + "\n\nIt starts the work in the background and returns a job_id at once; call " +
		StatusToolName(tool) + " with that job_id to follow it and get the result.")
}

// StatusDescription is the description of tool's status tool.
func StatusDescription(tool string) string {
	return "Reports the state of a " + tool + " job started earlier and, once it has finished, returns its result."
}

// JobIDDescription describes the status tool's job_id argument.
func JobIDDescription(tool string) string { return "The job_id that " + tool + " returned." }

// Start starts work as a job of tool on jobs and returns the start call's
// answer: the job ID as text and as structuredContent {"job_id", "state",
// "status_tool"}, or an isError result when the job could not be started.
// The work's result is stored as codec.Marshal writes it.
func Start[R any](ctx context.Context, runner *jobs.Runner, codec mcpcall.Codec[R], tool string, work func(context.Context) (R, error)) R {
	status := StatusToolName(tool)
	job, err := runner.Start(ctx, tool, func(ctx context.Context) ([]byte, bool, error) {
		res, err := work(ctx)
		if err != nil {
			return nil, false, err
		}
		b, err := codec.Marshal(res)
		if err != nil {
			return nil, false, err
		}
		return b, codec.IsError(res), nil
	})
	if err != nil {
		return codec.ErrorResult("The " + tool + " job could not be started (" + err.Error() + "). Nothing was done; retry the same call shortly.")
	}
	return mcpcall.TextResult(codec, startedText(tool, status, job.ID), map[string]any{
		"job_id":      job.ID,
		"state":       string(job.State),
		"status_tool": status,
	}, false)
}

// Status returns the answer of tool's status tool for jobID: the work's own
// result once it has one, else the job's state and progress (isError when
// it failed or was abandoned), each with a JobMetaKey marker; an isError
// result for an unknown job or a store failure.
func Status[R any](ctx context.Context, runner *jobs.Runner, codec mcpcall.Codec[R], tool, jobID string) R {
	status := StatusToolName(tool)
	job, err := runner.Get(ctx, jobID)
	switch {
	case errors.Is(err, jobs.ErrNotFound):
		return codec.ErrorResult(notFoundText(jobID))
	case err != nil:
		return codec.ErrorResult("The state of job " + jobID + " could not be read (" + err.Error() + "). Call " + status + " again shortly.")
	}
	if job.Result != nil {
		if res, err := codec.Unmarshal(job.Result); err == nil {
			return codec.WithMeta(res, spancontract.JobMetaKey, jobMeta(job))
		}
	}
	res := mcpcall.TextResult(codec, statusText(job, status), map[string]any{
		"job_id":   job.ID,
		"state":    string(job.State),
		"progress": job.Progress,
		"total":    job.Total,
		"message":  job.Message,
	}, job.State != jobs.Running && job.State != jobs.Succeeded)
	return codec.WithMeta(res, spancontract.JobMetaKey, jobMeta(job))
}

func startedText(tool, statusTool, jobID string) string {
	return "Started job " + jobID + " for " + tool + ". The work runs in the background and has not finished yet. " +
		"Do not call " + tool + " again for this request: call " + statusTool + " with job_id \"" + jobID + "\" to check on it and get its result."
}

// statusText is the model-facing text of a job that has no result to
// return yet (running or abandoned), or that failed with a Go error.
func statusText(job *jobs.Job, statusTool string) string {
	var b strings.Builder
	b.WriteString("Job ")
	b.WriteString(job.ID)
	b.WriteString(" (")
	b.WriteString(job.Tool)
	b.WriteString(") ")
	switch job.State {
	case jobs.Running:
		b.WriteString("is still running")
		if job.Total > 0 {
			b.WriteString(": ")
			b.WriteString(strconv.FormatFloat(job.Progress, 'f', -1, 64))
			b.WriteString(" of ")
			b.WriteString(strconv.FormatFloat(job.Total, 'f', -1, 64))
		} else if job.Progress > 0 {
			b.WriteString(": progress ")
			b.WriteString(strconv.FormatFloat(job.Progress, 'f', -1, 64))
		}
		if job.Message != "" {
			b.WriteString(" (")
			b.WriteString(job.Message)
			b.WriteString(")")
		}
		b.WriteString(". It has not failed. Do not start it again; call ")
		b.WriteString(statusTool)
		b.WriteString(" again in a few seconds.")
	case jobs.Lost:
		b.WriteString("was lost: ")
		b.WriteString(job.Error)
		b.WriteString(". It will not run again by itself. Check whether its effect happened (with a read tool) before starting it again.")
	case jobs.Failed:
		b.WriteString("failed: ")
		b.WriteString(job.Error)
		b.WriteString(".")
	case jobs.Cancelled:
		b.WriteString("was cancelled (")
		b.WriteString(job.Error)
		b.WriteString("); it may have done part of its work.")
	case jobs.Succeeded:
		b.WriteString("succeeded.")
	}
	return b.String()
}

func notFoundText(jobID string) string {
	return "No job " + strconv.Quote(jobID) + " was found for this caller. Job IDs are returned by the tool that starts the job, " +
		"and a job is kept as long as its start call's answer (the start tool's window)."
}

func jobMeta(job *jobs.Job) map[string]any {
	return map[string]any{"job_id": job.ID, "state": string(job.State)}
}
