package mcpcall

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/idemkit-mcp/idemkit/idemkit"
	"github.com/idemkit-mcp/idemkit/internal/runs"
	"github.com/idemkit-mcp/idemkit/spancontract"
)

// Names the MCP tasks specification (2025-11-25) gives to _meta entries.
const (
	// RelatedTaskMetaKey associates a message with a task: {"taskId": "…"}.
	RelatedTaskMetaKey = "io.modelcontextprotocol/related-task"
	// ModelImmediateResponseMetaKey is the CreateTaskResult _meta entry a
	// host may pass to the model while the task runs.
	ModelImmediateResponseMetaKey = "io.modelcontextprotocol/model-immediate-response"
)

// JSON-RPC error codes the task methods answer with.
const (
	codeInvalidRequest = -32600
	codeInvalidParams  = -32602
	codeInternal       = -32603
)

// RPCError is a JSON-RPC error to answer a request with.
type RPCError struct {
	Code    int64
	Message string
	// Data is the error's data member, or nil.
	Data any
}

func (e *RPCError) Error() string { return e.Message }

// Defaults of TasksConfig.
const (
	DefaultTaskPollInterval = time.Second
	DefaultTaskLease        = runs.DefaultLease
)

// TasksConfig configures Tasks.
type TasksConfig struct {
	// Lease is how long a task's worker holds it without a heartbeat before
	// the task is reported failed (its worker was lost). Defaults to
	// DefaultTaskLease (30s).
	Lease time.Duration
	// Heartbeat is how often a worker renews its lease (and learns of a
	// cancellation on another replica). Defaults to a third of Lease.
	Heartbeat time.Duration
	// Timeout bounds one task's work. Defaults to 0 (none).
	Timeout time.Duration
	// PollInterval is the pollInterval tasks suggest to clients. Defaults
	// to DefaultTaskPollInterval (1s).
	PollInterval time.Duration
}

// Tasks serves MCP tasks (specification 2025-11-25) on the Guard's
// records. A task-augmented tools/call (CreateTask) is a protected call
// whose answer is the CreateTaskResult: a duplicate gets the first call's
// task back, replayed with ReplayMetaKey, and the task's work runs at most
// once. The task's execution is a run (internal/runs) in the caller's
// namespace, so tasks/get, tasks/result, tasks/cancel and tasks/list
// (Serve) answer on every replica sharing the store, and after a restart.
// Build Tasks with Instrumenter.NewTasks; they are safe for concurrent use.
type Tasks struct {
	in   *Instrumenter
	e    *runs.Engine
	poll time.Duration
}

// NewTasks returns the Tasks of in, whose Guard keeps them. It fails
// without a Guard.
func (in *Instrumenter) NewTasks(cfg TasksConfig) (*Tasks, error) {
	if in.guard == nil {
		return nil, errors.New("mcpcall: tasks need a Guard: their state lives in its store")
	}
	e, err := runs.New(in.guard, runs.Config{Kind: "task", IDPrefix: "task-", Lease: cfg.Lease, Heartbeat: cfg.Heartbeat, Timeout: cfg.Timeout})
	if err != nil {
		return nil, err
	}
	poll := cfg.PollInterval
	if poll <= 0 {
		poll = DefaultTaskPollInterval
	}
	return &Tasks{in: in, e: e, poll: poll}, nil
}

// Close stops accepting tasks and waits for the running ones until ctx is
// done, then cancels them (they fail: the server shut down).
func (t *Tasks) Close(ctx context.Context) error { return t.e.Close(ctx) }

// taskJSON is the Task object of the specification.
type taskJSON struct {
	TaskID        string `json:"taskId"`
	Status        string `json:"status"`
	StatusMessage string `json:"statusMessage,omitempty"`
	CreatedAt     string `json:"createdAt"`
	LastUpdatedAt string `json:"lastUpdatedAt"`
	TTL           *int64 `json:"ttl"`
	PollInterval  *int64 `json:"pollInterval,omitempty"`
}

func timestamp(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z") }

// task returns in as the specification's Task.
func (t *Tasks) task(in runs.Info) taskJSON {
	ttl := in.Expires.Sub(in.Created).Milliseconds()
	poll := t.poll.Milliseconds()
	tj := taskJSON{TaskID: in.ID, CreatedAt: timestamp(in.Created), LastUpdatedAt: timestamp(in.Updated), TTL: &ttl}
	switch in.Status {
	case runs.Running:
		tj.Status, tj.StatusMessage, tj.PollInterval = "working", DecodeRunNote(in.Note).Text(), &poll
	case runs.Succeeded:
		tj.Status = "completed"
	case runs.Failed:
		tj.Status = "failed"
		tj.StatusMessage = in.Error
		if in.IsError {
			tj.StatusMessage = "The " + in.Tool + " call ended with an error result; tasks/result returns it."
		}
	case runs.Cancelled:
		tj.Status, tj.StatusMessage = "cancelled", in.Error
	case runs.Lost:
		tj.Status = "failed"
		tj.StatusMessage = "The task was lost: " + in.Error + ". It will not run again by itself: check whether its effect happened before calling " + in.Tool + " again."
	}
	return tj
}

// CreateTask serves a task-augmented tools/call of op: the call goes
// through CallTool (protection, scope, key, validation, span, metrics),
// and its work there is to create the task, whose CreateTaskResult is the
// answer the Guard stores. A duplicate is answered with the first call's
// CreateTaskResult plus ReplayMetaKey, and starts nothing. The task's work,
// next, runs in the background once the answer is stored, with a context
// detached from the request (Progress and RecordWrite work in it); its
// result, marshalled by codec, is what tasks/result returns.
//
// It returns the CreateTaskResult's JSON, or the JSON-RPC error to answer
// with when the call was refused (invalid or mismatched input, an
// unidentified caller, the store unreachable: the refusal's text, with
// RefusalMetaKey's marker as the error's data). A duplicate that arrives
// while the first call is still creating the task waits for it.
func CreateTask[R any](op *Op, t *Tasks, call *ToolCall, codec Codec[R], next func(context.Context) (R, error)) (json.RawMessage, *RPCError) {
	tool, tx := call.Tool, call.Tx
	// Creating the task is not the tool's transactional work: its claim is
	// an ordinary one. The work runs in the tool's transaction later.
	start := *call
	start.Tx = nil
	create := func(ctx context.Context) (json.RawMessage, error) {
		owner, _ := CallerScope(ctx)
		r, err := t.e.Create(ctx, ctx, owner, tool)
		if err != nil {
			return nil, err
		}
		progress := call.Progress
		taskID := r.Info().ID
		OnRecorded(ctx, func(recorded bool) {
			if !recorded {
				r.Abort("the task was not started: the answer of the call that created it could not be recorded, so nothing was done")
				return
			}
			r.Launch(func(rctx context.Context) (resp idemkit.Response, err error) {
				// The execution's span carries the write the work records.
				rctx, span := t.in.startTaskRun(rctx, tool, taskID)
				defer func() { endTaskRun(span, rctx, resp, err) }()
				wctx, written := RunContext(rctx, ctx, NoteReporter(progress), progress)
				var res R
				if tx != nil {
					err = tx.Run(wctx, func(c context.Context) error {
						var herr error
						res, herr = next(c)
						return herr
					})
				} else {
					res, err = next(wctx)
				}
				if err != nil {
					return idemkit.Response{}, err
				}
				if codec.NeedsInput(res) {
					return idemkit.Response{}, fmt.Errorf("the %s tool asked the client for more input, which a task-augmented call cannot relay", tool)
				}
				body, err := codec.Marshal(res)
				if err != nil {
					return idemkit.Response{}, fmt.Errorf("the %s tool's result could not be encoded: %w", tool, err)
				}
				return idemkit.Response{Body: body, WriteID: written(), IsError: codec.IsError(res)}, nil
			})
		})
		in := r.Info()
		return json.Marshal(struct {
			Task taskJSON       `json:"task"`
			Meta map[string]any `json:"_meta"`
		}{t.task(in), map[string]any{
			ModelImmediateResponseMetaKey: "The " + tool + " call was accepted and runs in the background as task " + in.ID +
				". It has not failed; do not call " + tool + " again for this request.",
		}})
	}
	backoff := 10 * time.Millisecond
	deadline := time.Now().Add(5 * time.Second)
	for {
		res, err := CallTool(op, &start, RawCodec{}, create)
		if err != nil {
			return nil, &RPCError{Code: codeInternal, Message: "The " + tool + " task could not be created (" + err.Error() + "). Nothing was done; retry the same call shortly."}
		}
		reason := op.call.refusal
		if reason == "" {
			return res, nil
		}
		// A duplicate that arrives while the first call is creating the
		// task (milliseconds): wait, then replay its answer.
		if reason == spancontract.RefusalInProgress && time.Now().Before(deadline) {
			if sleep(op, backoff) == nil {
				backoff = min(2*backoff, 250*time.Millisecond)
				continue
			}
		}
		return nil, refusalError(res, reason)
	}
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// refusalError turns a refusal result into the JSON-RPC error a
// task-augmented call is answered with.
func refusalError(res json.RawMessage, reason string) *RPCError {
	var r struct {
		Content []TextContent              `json:"content"`
		Meta    map[string]json.RawMessage `json:"_meta"`
	}
	_ = json.Unmarshal(res, &r)
	e := &RPCError{Code: codeInternal, Message: reason}
	if len(r.Content) > 0 {
		e.Message = r.Content[0].Text
	}
	if m, ok := r.Meta[spancontract.RefusalMetaKey]; ok {
		e.Data = map[string]json.RawMessage{spancontract.RefusalMetaKey: m}
	}
	switch reason {
	case spancontract.RefusalInvalidArguments, spancontract.RefusalInvalidKey, spancontract.RefusalMismatch:
		e.Code = codeInvalidParams
	}
	return e
}

// Serve answers tasks/get, tasks/result, tasks/cancel and tasks/list
// (params is the request's raw params) for op's caller, from the Guard's
// store: a caller sees only the tasks created in its own scope (see
// ScopeOf). It returns the result's JSON, or the JSON-RPC error to answer
// with, which it also records on op. tasks/result waits, bounded by op,
// until the task has ended.
func (t *Tasks) Serve(op *Op, method string, params json.RawMessage) (json.RawMessage, *RPCError) {
	res, rerr := t.serve(op, method, params)
	if rerr != nil {
		op.RecordError(rerr.Code, rerr.Message, nil)
	}
	return res, rerr
}

func (t *Tasks) serve(op *Op, method string, params json.RawMessage) (json.RawMessage, *RPCError) {
	sc := op.Scope()
	if sc.Kind == ScopeNone && t.in.cfg.Unscoped != UnscopedShare {
		return nil, &RPCError{Code: codeInvalidRequest, Message: "This server cannot tell which caller sent this request, so it cannot show any task to it. " +
			"Tasks need caller authentication or an authenticated session."}
	}
	owner := sc.Value
	var p struct {
		TaskID string `json:"taskId"`
		Cursor string `json:"cursor"`
	}
	if len(params) > 0 && string(params) != "null" {
		if err := json.Unmarshal(params, &p); err != nil {
			return nil, &RPCError{Code: codeInvalidParams, Message: "Invalid params: " + err.Error()}
		}
	}
	notFound := &RPCError{Code: codeInvalidParams, Message: "Failed to retrieve task: Task not found"}
	switch method {
	case spancontract.MethodTasksGet:
		in, err := t.e.Get(op, owner, p.TaskID, false)
		if err != nil {
			return nil, runError(err, notFound)
		}
		return marshal(t.task(in))
	case spancontract.MethodTasksResult:
		in, err := t.e.Wait(op, owner, p.TaskID)
		if err != nil {
			return nil, runError(err, notFound)
		}
		return t.result(in)
	case spancontract.MethodTasksCancel:
		in, err := t.e.Cancel(op, owner, p.TaskID, "The task was cancelled by request.")
		switch {
		case errors.Is(err, runs.ErrTerminal):
			return nil, &RPCError{Code: codeInvalidParams, Message: "Cannot cancel task: already in terminal status '" + t.task(in).Status + "'"}
		case err != nil:
			return nil, runError(err, notFound)
		}
		return marshal(t.task(in))
	case spancontract.MethodTasksList:
		list, next, err := t.e.List(op, owner, p.Cursor, 0)
		if errors.Is(err, runs.ErrBadCursor) {
			return nil, &RPCError{Code: codeInvalidParams, Message: "Invalid cursor: " + strconv.Quote(p.Cursor)}
		}
		if err != nil {
			return nil, runError(err, notFound)
		}
		out := struct {
			Tasks      []taskJSON `json:"tasks"`
			NextCursor string     `json:"nextCursor,omitempty"`
		}{Tasks: make([]taskJSON, 0, len(list)), NextCursor: next}
		for _, in := range list {
			out.Tasks = append(out.Tasks, t.task(in))
		}
		return marshal(out)
	}
	return nil, &RPCError{Code: -32601, Message: "Method not found: " + method}
}

// result returns what tasks/result answers for an ended task: exactly
// what the tools/call would have returned (its result, or its error),
// with RelatedTaskMetaKey.
func (t *Tasks) result(in runs.Info) (json.RawMessage, *RPCError) {
	switch in.Status {
	case runs.Succeeded, runs.Failed:
		if in.Body != nil {
			return RawCodec{}.WithMeta(in.Body, RelatedTaskMetaKey, map[string]string{"taskId": in.ID}), nil
		}
		if in.Status == runs.Succeeded {
			return nil, &RPCError{Code: codeInternal, Message: "The task completed, but its result was too large to keep. Do not call " + in.Tool + " again: the work is done."}
		}
		return nil, &RPCError{Code: codeInternal, Message: in.Error}
	case runs.Cancelled:
		return nil, &RPCError{Code: codeInternal, Message: "The task was cancelled before it completed (" + in.Error + "); it may have done part of its work."}
	}
	return nil, &RPCError{Code: codeInternal, Message: t.task(in).StatusMessage}
}

func runError(err error, notFound *RPCError) *RPCError {
	switch {
	case errors.Is(err, runs.ErrNotFound):
		return notFound
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return &RPCError{Code: codeInternal, Message: "The request ended before the task did: " + err.Error()}
	}
	return &RPCError{Code: codeInternal, Message: "The task's state could not be read (" + err.Error() + "); retry shortly."}
}

func marshal(v any) (json.RawMessage, *RPCError) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, &RPCError{Code: codeInternal, Message: err.Error()}
	}
	return b, nil
}
