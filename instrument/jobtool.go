package instrument

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
)

// The job-and-poll tools' answers, built once for every SDK: the SDK
// packages (mcpgo.AddJobTool, gosdk.AddJobTool) only register the two tools
// and hand each call to StartJob or JobStatus with their Codec.

// JobToolDescription is the description of a job tool's start tool: its own
// description, then how to follow the job.
func JobToolDescription(description, tool string) string {
	return strings.TrimSpace(description + "\n\nIt starts the work in the background and returns a job_id at once; call " +
		StatusToolName(tool) + " with that job_id to follow it and get the result.")
}

// StatusToolDescription is the description of tool's status tool.
func StatusToolDescription(tool string) string {
	return "Reports the state of a " + tool + " job started earlier and, once it has finished, returns its result."
}

// JobIDDescription describes the status tool's job_id argument.
func JobIDDescription(tool string) string { return "The job_id that " + tool + " returned." }

// StartJob starts work as a job of tool on jobs and returns the start
// call's answer: the job ID as text and as structuredContent {"job_id",
// "state", "status_tool"}, or an isError result when the job could not be
// started. The work's result is stored as codec.Marshal writes it.
func StartJob[R any](ctx context.Context, jobs *Jobs, codec Codec[R], tool string, work func(context.Context) (R, error)) R {
	status := StatusToolName(tool)
	job, err := jobs.Start(ctx, tool, func(ctx context.Context) ([]byte, bool, error) {
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
	return textResult(codec, StartedText(tool, status, job.ID), map[string]any{
		"job_id":      job.ID,
		"state":       string(job.State),
		"status_tool": status,
	}, false)
}

// JobStatus returns the answer of tool's status tool for jobID: the work's
// own result once it has one, else the job's state and progress (isError
// when it failed or was abandoned), each with a JobMetaKey marker; an
// isError result for an unknown job or a store failure.
func JobStatus[R any](ctx context.Context, jobs *Jobs, codec Codec[R], tool, jobID string) R {
	status := StatusToolName(tool)
	job, err := jobs.Get(ctx, jobID)
	switch {
	case errors.Is(err, ErrJobNotFound):
		return codec.ErrorResult(NotFoundText(jobID))
	case err != nil:
		return codec.ErrorResult("The state of job " + jobID + " could not be read (" + err.Error() + "). Call " + status + " again shortly.")
	}
	if job.Result != nil {
		if res, err := codec.Unmarshal(job.Result); err == nil {
			return codec.WithMeta(res, JobMetaKey, JobMeta(job))
		}
	}
	res := textResult(codec, StatusText(job, status), map[string]any{
		"job_id":   job.ID,
		"state":    string(job.State),
		"progress": job.Progress,
		"total":    job.Total,
		"message":  job.Message,
	}, job.State == JobFailed || job.State == JobAbandoned)
	return codec.WithMeta(res, JobMetaKey, JobMeta(job))
}

// textResult builds, through codec, the result whose content is text and
// whose structuredContent is structured: both SDKs read the same wire JSON.
func textResult[R any](codec Codec[R], text string, structured map[string]any, isError bool) R {
	b, err := json.Marshal(struct {
		Content           [1]textContent `json:"content"`
		StructuredContent map[string]any `json:"structuredContent"`
		IsError           bool           `json:"isError,omitempty"`
	}{[1]textContent{{Type: "text", Text: text}}, structured, isError})
	if err == nil {
		if res, err := codec.Unmarshal(b); err == nil {
			return res
		}
	}
	return codec.ErrorResult(text) // unreachable with a working codec
}

type textContent struct {
	Type string `json:"type"`
	Text string `json:"text"`
}
