package jobs

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/idemkit-mcp/idemkit/idemkit"
	"github.com/idemkit-mcp/idemkit/internal/mcpcall"
	"github.com/idemkit-mcp/idemkit/internal/runs"
)

// State is the state of a background job.
type State string

// Job states.
const (
	// Running: a live worker runs the job.
	Running State = "running"
	// Succeeded: the job's result is stored.
	Succeeded State = "succeeded"
	// Failed: the job ended with an error result, or its work returned
	// an error, or it could not be started.
	Failed State = "failed"
	// Cancelled: Runner.Cancel stopped the job.
	Cancelled State = "cancelled"
	// Lost: the worker running the job stopped (its process died or
	// hung) before it finished; the work may or may not have done its
	// effect. A lost job is never run again by itself.
	Lost State = "lost"
)

// Job is a background job as its status tool reports it.
type Job struct {
	ID   string
	Tool string
	// State is the job's state.
	State State
	// Result is the wire JSON of the work's result (an MCP CallToolResult)
	// once it has one; IsError is its isError flag.
	Result  []byte
	IsError bool
	// Error is the text of a Go error (or panic) the work ended with, the
	// reason of a cancellation, or the explanation of a lost job.
	Error   string
	WriteID string
	// Progress, Total and Message are the last values the work reported
	// with Progress.
	Progress, Total float64
	Message         string
	// Created is when the job started, Updated when it last reported
	// (progress, a heartbeat, its end), Expires when its record may be
	// deleted (the start tool's window).
	Created, Updated, Expires time.Time
}

// ErrNotFound is returned for an unknown job ID, an expired job, or a job
// that belongs to another caller.
var ErrNotFound = errors.New("instrument: job not found")

// ErrEnded is returned by Runner.Cancel for a job that has ended already.
var ErrEnded = errors.New("instrument: the job has already ended")

// ErrClosed is returned by Runner.Start after Close.
var ErrClosed = errors.New("instrument: jobs are shutting down")

// Config configures Runner. A nil *Config means all defaults. A job
// is kept for its start tool's window (idemkit.Config.Window, or the tool's
// ToolConfig.Window) from its start, and at least a Lease after its last
// heartbeat: set the window above your longest job plus the time clients
// take to poll its result.
type Config struct {
	// Lease is how long a worker holds a job without a heartbeat before
	// the job is reported lost: after its process dies, its status tool
	// says so within Lease. Defaults to 30s.
	Lease time.Duration
	// Heartbeat is how often a worker renews its lease (and learns that
	// its job was cancelled on another replica). Defaults to a third of
	// Lease.
	Heartbeat time.Duration
	// Timeout bounds one job's work. Defaults to 0 (no bound but Close and
	// Cancel).
	Timeout time.Duration
}

// Work is a job's background work. It returns the wire JSON of its
// result and the result's isError flag (SDK adapters marshal their result
// type), or a Go error.
type Work func(ctx context.Context) (body []byte, isError bool, err error)

// Runner runs job-and-poll tools (see mcpgo.AddJobTool and gosdk.AddJobTool):
// a start call returns a job ID at once and the work runs in a worker that
// outlives the request, whose state a status tool reports.
//
// Runner live in the Guard's store, as its records: a job's execution is a
// claim, held by its worker with a lease its heartbeats keep, with the last
// progress as its note and the work's result as its stored outcome. So a
// job started on one replica is reported by every replica sharing the
// store, and after a restart: running, succeeded (with its result), failed,
// cancelled, or lost when its worker died (never "not found" while its
// start call's answer is replayed). The start tool is an ordinary
// protected tool: the Guard stores its answer, and a duplicate start call
// gets the same job ID instead of starting the work twice. The work starts
// only once that answer is stored, and runs at most once: a lost job is
// reported, never run again by itself.
//
// Build Runner with New and Close them on shutdown; they are safe for
// concurrent use.
type Runner struct {
	e *runs.Engine
}

// New returns Runner that keep their records in guard's store, with its
// clock and per-tool windows (a job is reported for its start tool's
// window). cfg may be nil.
func New(guard *idemkit.Guard, cfg *Config) (*Runner, error) {
	var c Config
	if cfg != nil {
		c = *cfg
	}
	e, err := runs.New(guard, runs.Config{Kind: "job", IDPrefix: "job_", Lease: c.Lease, Heartbeat: c.Heartbeat, Timeout: c.Timeout})
	if err != nil {
		return nil, fmt.Errorf("instrument: New: %w", err)
	}
	return &Runner{e: e}, nil
}

// Start records a new running job of tool, owned by the caller of the tool
// call running in ctx (its scope: see WithSubject), and returns it. The
// work runs in a new goroutine once that call's answer is stored (at once
// outside an instrumented call); if it cannot be stored, the job fails
// without running. The work's ctx keeps ctx's values (such as the trace)
// but not its cancellation; it is cancelled by Cancel, Close or the
// configured Timeout. Progress and RecordWrite called with it update the
// job. ctx bounds the record's creation.
func (j *Runner) Start(ctx context.Context, tool string, work Work) (*Job, error) {
	owner, _ := mcpcall.CallerScope(ctx)
	r, err := j.e.Create(ctx, ctx, owner, tool)
	if errors.Is(err, runs.ErrClosed) {
		return nil, ErrClosed
	}
	if err != nil {
		return nil, err
	}
	parent := ctx
	mcpcall.OnRecorded(ctx, func(recorded bool) {
		if !recorded {
			r.Abort("the job was not started: the answer of the call that started it could not be recorded, so nothing was done")
			return
		}
		r.Launch(func(rctx context.Context) (idemkit.Response, error) {
			wctx, written := mcpcall.RunContext(rctx, parent, mcpcall.NoteReporter(nil), nil)
			body, isError, err := work(wctx)
			if err != nil {
				return idemkit.Response{}, err
			}
			return idemkit.Response{Body: body, WriteID: written(), IsError: isError}, nil
		})
	})
	return jobOf(r.Info()), nil
}

// Get returns the job with id as its status tool reports it. A running job
// whose worker stopped heartbeating is settled as lost first. It returns
// ErrNotFound when the job does not exist, expired, or was started by
// another caller than ctx's.
func (j *Runner) Get(ctx context.Context, id string) (*Job, error) {
	owner, _ := mcpcall.CallerScope(ctx)
	in, err := j.e.Get(ctx, owner, id, true)
	if errors.Is(err, runs.ErrNotFound) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	return jobOf(in), nil
}

// Cancel cancels the running job with id, started by ctx's caller, with
// reason: it is reported cancelled at once, on every replica, and its work
// is stopped (at once on this replica, at its next heartbeat on another).
// It returns ErrEnded (with the job) for a job that has ended already,
// and ErrNotFound for an unknown one.
func (j *Runner) Cancel(ctx context.Context, id, reason string) (*Job, error) {
	owner, _ := mcpcall.CallerScope(ctx)
	in, err := j.e.Cancel(ctx, owner, id, reason)
	switch {
	case errors.Is(err, runs.ErrNotFound):
		return nil, ErrNotFound
	case errors.Is(err, runs.ErrTerminal):
		return jobOf(in), ErrEnded
	case err != nil:
		return nil, err
	}
	return jobOf(in), nil
}

// Close stops accepting jobs and waits for the running ones to finish until
// ctx is done; it then cancels the rest (they fail: the server shut down),
// waits for them to return, and returns ctx's error. Work must honour its
// ctx for Close to return.
func (j *Runner) Close(ctx context.Context) error { return j.e.Close(ctx) }

func jobOf(in runs.Info) *Job {
	n := mcpcall.DecodeRunNote(in.Note)
	job := &Job{
		ID: in.ID, Tool: in.Tool, Result: in.Body, IsError: in.IsError, Error: in.Error, WriteID: in.WriteID,
		Progress: n.Progress, Total: n.Total, Message: n.Message,
		Created: in.Created, Updated: in.Updated, Expires: in.Expires,
	}
	switch in.Status {
	case runs.Running:
		job.State = Running
	case runs.Succeeded:
		job.State = Succeeded
	case runs.Failed:
		job.State = Failed
	case runs.Cancelled:
		job.State = Cancelled
	case runs.Lost:
		job.State = Lost
	}
	return job
}
