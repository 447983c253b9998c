package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/idemkit-mcp/idemkit/internal/mcpcall"
	"github.com/idemkit-mcp/idemkit/spancontract"
)

// MCP tasks (specification 2025-11-25) of an upstream that advertises
// them. A task-augmented call of a protected tool is the gateway's own
// task, kept in the Guard's store exactly as the Go middleware keeps its
// tasks (mcpcall.CreateTask, mcpcall.Tasks): its CreateTaskResult is the
// call's stored answer, so a duplicate (on any session of the same caller,
// on any replica, after a restart) gets it back replayed, and tasks/get,
// tasks/result, tasks/cancel and tasks/list answer for it from the store,
// for that caller only. The task's work is the call forwarded upstream, as
// the client sent it: when the upstream answers with a task of its own,
// the gateway follows it on the upstream session (tasks/result) and keeps
// what it returns; the upstream's task ID never reaches the client. The
// upstream session stays open while the work runs (an idle session with a
// running task is not reaped).
//
// Tasks the gateway does not keep (an unprotected tool's, an upstream
// without the capability) are the upstream's, and their requests are
// forwarded; tasks/list lists the caller's gateway tasks first, then the
// upstream's tasks whose CreateTaskResult the client was given: never one
// that a gateway task follows (a request naming one of those is answered
// as for an unknown task). The upstream's notifications/tasks/status reach
// the client for the same tasks only (session.fromUpstream).

// upstreamCursorPrefix marks a tasks/list cursor that is the upstream's.
const upstreamCursorPrefix = "upstream:"

// taskCapabilities are what an initialize answer says of tasks.
type taskCapabilities struct {
	any      bool // the tasks capability
	toolCall bool // tasks.requests.tools.call
}

func parseTaskCapabilities(result json.RawMessage) taskCapabilities {
	var r struct {
		Capabilities struct {
			Tasks *struct {
				Requests *struct {
					Tools *struct {
						Call json.RawMessage `json:"call"`
					} `json:"tools"`
				} `json:"requests"`
			} `json:"tasks"`
		} `json:"capabilities"`
	}
	if json.Unmarshal(result, &r) != nil || r.Capabilities.Tasks == nil {
		return taskCapabilities{}
	}
	t := r.Capabilities.Tasks
	return taskCapabilities{any: true, toolCall: t.Requests != nil && t.Requests.Tools != nil && nonNull(t.Requests.Tools.Call)}
}

// keepsTasks reports whether the gateway keeps this session's task-augmented
// calls: it has tasks (a Guard) and the upstream serves task-augmented
// tools/call.
func (s *session) keepsTasks() bool {
	if s.g.tasks == nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.taskCaps.toolCall
}

// servesTasks reports whether the task methods may name the gateway's
// tasks on this session.
func (s *session) servesTasks() bool {
	if s.g.tasks == nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.taskCaps.any
}

// taskCall serves a task-augmented tools/call of a write tool as the
// gateway's own task; fwd is the request to forward (the key argument
// stripped).
func (s *session) taskCall(op *mcpcall.Op, req *Message, call *mcpcall.ToolCall, fwd *Message, h http.Header) (*Message, error) {
	tool := call.Tool
	// The work runs after this request: with its own copy of the headers,
	// and under an ID of its own upstream (none the client could cancel or
	// reuse).
	bg, hdr := fwd.withID(nil), h.Clone()
	res, rerr := mcpcall.CreateTask(op, s.g.tasks, call, mcpcall.RawCodec{}, func(ctx context.Context) (json.RawMessage, error) {
		s.active.Add(1)
		defer func() {
			s.touch()
			s.active.Add(-1)
		}()
		return s.runTask(ctx, tool, bg, hdr)
	})
	if rerr != nil {
		op.RecordError(rerr.Code, rerr.Message, nil)
		return &Message{JSONRPC: "2.0", ID: req.ID, Error: &RPCError{Code: int(rerr.Code), Message: rerr.Message, Data: marshalData(rerr.Data)}}, nil
	}
	if isReplay(res) {
		// From the records: only for a caller the upstream accepts now.
		if verr := s.verifyCaller(op, h); verr != nil {
			return nil, verr
		}
	}
	return newResponse(req.ID, res), nil
}

func marshalData(v any) json.RawMessage {
	if v == nil {
		return nil
	}
	b, _ := json.Marshal(v)
	return b
}

// isReplay reports whether a result carries the replay marker.
func isReplay(res json.RawMessage) bool {
	if !bytes.Contains(res, []byte(spancontract.ReplayMetaKey)) {
		return false
	}
	var r struct {
		Meta map[string]json.RawMessage `json:"_meta"`
	}
	_ = json.Unmarshal(res, &r)
	_, ok := r.Meta[spancontract.ReplayMetaKey]
	return ok
}

// runTask is a gateway task's work: the call, forwarded on the session's
// upstream, and when the upstream made a task of it, that task followed to
// its end. It returns the CallToolResult to keep.
func (s *session) runTask(ctx context.Context, tool string, fwd *Message, h http.Header) (json.RawMessage, error) {
	var lastBeat time.Time
	onMsg := func(m *Message) {
		switch {
		case m.IsRequest():
			// Nobody to relay a server request to: the client's request
			// was answered with the task. Answer it, so that the upstream
			// does not wait.
			_ = s.conn.Send(context.WithoutCancel(ctx), newErrorResponse(m.ID, codeInvalidRequest,
				"The idemkit gateway runs this "+tool+" call as a task in the background and cannot relay requests to the client."), h)
		case progressOf(m) != nil && time.Since(lastBeat) >= s.g.beatEvery:
			lastBeat = time.Now()
			var p struct {
				Progress float64 `json:"progress"`
				Total    float64 `json:"total"`
				Message  string  `json:"message"`
			}
			_ = json.Unmarshal(m.Params, &p)
			_ = mcpcall.Progress(ctx, p.Progress, p.Total, p.Message)
		}
	}
	resp, err := s.roundTrip(ctx, fwd, h, nil, onMsg)
	switch {
	case err != nil:
		return nil, err
	case resp.Error != nil:
		return nil, upstreamError(resp.Error)
	}
	upTask := createdTaskID(resp.Result)
	if upTask == "" {
		if len(resp.Result) == 0 || string(resp.Result) == "null" {
			return nil, errNoResult
		}
		return resp.Result, nil
	}
	// The upstream made a task of it: follow it to its end. Its ID is
	// the gateway's to know: kept out of the client's tasks/list, and a
	// request naming it is answered as for an unknown task.
	s.mu.Lock()
	s.followed.add(upTask)
	s.mu.Unlock()
	params, _ := json.Marshal(map[string]string{"taskId": upTask})
	stop := context.AfterFunc(ctx, func() {
		// Cancelled (tasks/cancel, or the gateway shutting down): cancel
		// the upstream's task too.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if _, err := s.roundTrip(cctx, &Message{JSONRPC: "2.0", Method: spancontract.MethodTasksCancel, Params: params}, h, nil, nil); err != nil {
			s.g.log.Warn("cancelling the upstream's task failed", "session", s.logID(), "tool", tool, "error", err)
		}
	})
	defer stop()
	for {
		resp, err = s.roundTrip(ctx, &Message{JSONRPC: "2.0", Method: spancontract.MethodTasksResult, Params: params}, h, nil, onMsg)
		switch {
		case err != nil:
			return nil, err
		case resp.Error != nil && resp.Error.Code == codeRequestTimeout && ctx.Err() == nil:
			continue // the upstream stopped waiting; the task goes on
		case resp.Error != nil:
			return nil, upstreamError(resp.Error)
		}
		return stripRelatedTask(resp.Result), nil
	}
}

// upstreamError is the task's failure when the upstream answered with a
// JSON-RPC error: its message, for tasks/get's statusMessage and
// tasks/result's error.
func upstreamError(e *RPCError) error {
	return fmt.Errorf("the upstream MCP server answered with an error (%d): %s", e.Code, e.Message)
}

// codeRequestTimeout is the JSON-RPC error of a request the server stopped
// waiting for (the TypeScript SDK's RequestTimeout).
const codeRequestTimeout = -32001

// createdTaskID returns the taskId of a CreateTaskResult, or "" for any
// other result.
func createdTaskID(result json.RawMessage) string {
	if !bytes.Contains(result, []byte(`"task"`)) {
		return ""
	}
	var r struct {
		Task *struct {
			TaskID string `json:"taskId"`
		} `json:"task"`
		Content json.RawMessage `json:"content"`
	}
	if json.Unmarshal(result, &r) != nil || r.Task == nil || nonNull(r.Content) {
		return ""
	}
	return r.Task.TaskID
}

// stripRelatedTask removes the upstream's related-task _meta entry from a
// result: it names the upstream's task, which the client does not know.
func stripRelatedTask(result json.RawMessage) json.RawMessage {
	if !bytes.Contains(result, []byte(mcpcall.RelatedTaskMetaKey)) {
		return result
	}
	var members map[string]json.RawMessage
	if json.Unmarshal(result, &members) != nil {
		return result
	}
	var meta map[string]json.RawMessage
	if json.Unmarshal(members["_meta"], &meta) != nil {
		return result
	}
	delete(meta, mcpcall.RelatedTaskMetaKey)
	if len(meta) == 0 {
		delete(members, "_meta")
	} else {
		members["_meta"], _ = json.Marshal(meta)
	}
	out, err := json.Marshal(members)
	if err != nil {
		return result
	}
	return out
}

// taskRequest serves tasks/get, tasks/result, tasks/cancel and tasks/list:
// the caller's gateway tasks from the store, any other task upstream.
func (s *session) taskRequest(op *mcpcall.Op, req *Message, p *requestParams, h http.Header, out sink) (*Message, error) {
	if req.Method == spancontract.MethodTasksList {
		return s.taskList(op, req, p, h, out)
	}
	owns, err := s.g.tasks.Owns(op, p.TaskID)
	if err != nil {
		return nil, &RPCError{Code: codeInternalError, Message: "The task's state could not be read (" + err.Error() + "); retry shortly."}
	}
	if !owns {
		if s.follows(p.TaskID) {
			return newErrorResponse(req.ID, codeInvalidParams, "Failed to retrieve task: Task not found"), nil
		}
		return s.roundTrip(op, req, h, out, nil)
	}
	if verr := s.verifyCaller(op, h); verr != nil {
		return nil, verr
	}
	res, rerr := s.g.tasks.Serve(op, req.Method, req.Params)
	if rerr != nil {
		return &Message{JSONRPC: "2.0", ID: req.ID, Error: &RPCError{Code: int(rerr.Code), Message: rerr.Message, Data: marshalData(rerr.Data)}}, nil
	}
	return newResponse(req.ID, res), nil
}

// taskList lists the caller's gateway tasks, then, once they are all
// listed, the upstream's (whose cursors carry upstreamCursorPrefix).
func (s *session) taskList(op *mcpcall.Op, req *Message, p *requestParams, h http.Header, out sink) (*Message, error) {
	var cursor string
	if nonNull(p.Cursor) {
		if err := json.Unmarshal(p.Cursor, &cursor); err != nil {
			return newErrorResponse(req.ID, codeInvalidParams, "Invalid params: cursor must be a string."), nil
		}
	}
	if up, ok := strings.CutPrefix(cursor, upstreamCursorPrefix); ok {
		return s.upstreamTaskList(op, req, up, h, out, nil)
	}
	sc := op.Scope()
	if sc.Kind == mcpcall.ScopeNone {
		return s.roundTrip(op, req, h, out, nil) // no gateway task is this caller's
	}
	if verr := s.verifyCaller(op, h); verr != nil {
		return nil, verr
	}
	res, rerr := s.g.tasks.Serve(op, req.Method, req.Params)
	if rerr != nil {
		return &Message{JSONRPC: "2.0", ID: req.ID, Error: &RPCError{Code: int(rerr.Code), Message: rerr.Message, Data: marshalData(rerr.Data)}}, nil
	}
	var page struct {
		Tasks      []json.RawMessage `json:"tasks"`
		NextCursor string            `json:"nextCursor,omitempty"`
	}
	if err := json.Unmarshal(res, &page); err != nil {
		return nil, err
	}
	if page.NextCursor != "" {
		return newResponse(req.ID, res), nil
	}
	return s.upstreamTaskList(op, req, "", h, out, page.Tasks)
}

// upstreamTaskList forwards tasks/list with the upstream's cursor (""
// for its first page), and answers with mine (the gateway's last page)
// followed by the upstream's tasks. An upstream that cannot list its tasks
// leaves mine alone.
func (s *session) upstreamTaskList(op *mcpcall.Op, req *Message, cursor string, h http.Header, out sink, mine []json.RawMessage) (*Message, error) {
	params := json.RawMessage(`{}`)
	if cursor != "" {
		params, _ = json.Marshal(map[string]string{"cursor": cursor})
	}
	fwd := req.withParams(params)
	resp, err := s.roundTrip(op, fwd, h, out, nil)
	if err != nil || resp.Error != nil {
		if mine != nil || cursor == "" {
			b, _ := json.Marshal(map[string]any{"tasks": nonNilTasks(mine)})
			return newResponse(req.ID, b), nil
		}
		return resp, err
	}
	var page struct {
		Tasks      []json.RawMessage `json:"tasks"`
		NextCursor string            `json:"nextCursor"`
	}
	if json.Unmarshal(resp.Result, &page) != nil {
		return resp, nil
	}
	// Only the upstream's tasks the client was given: not those behind
	// gateway tasks, which the client knows by the gateway's IDs (one the
	// upstream created a moment ago may not be recorded as such yet), nor
	// another session's on an upstream shared by subject.
	theirs := page.Tasks[:0:0]
	s.mu.Lock()
	for _, t := range page.Tasks {
		var task struct {
			TaskID string `json:"taskId"`
		}
		if json.Unmarshal(t, &task) == nil && s.relayed.has(task.TaskID) && !s.followed.has(task.TaskID) {
			theirs = append(theirs, t)
		}
	}
	s.mu.Unlock()
	result := map[string]any{"tasks": nonNilTasks(append(mine, theirs...))}
	if page.NextCursor != "" {
		result["nextCursor"] = upstreamCursorPrefix + page.NextCursor
	}
	b, err := json.Marshal(result)
	if err != nil {
		return nil, err
	}
	return newResponse(req.ID, b), nil
}

func nonNilTasks(t []json.RawMessage) []json.RawMessage {
	if t == nil {
		return []json.RawMessage{}
	}
	return t
}

// isTaskMethod reports the methods that name a task, or list them.
func isTaskMethod(method string) bool {
	switch method {
	case spancontract.MethodTasksGet, spancontract.MethodTasksResult, spancontract.MethodTasksCancel, spancontract.MethodTasksList:
		return true
	}
	return false
}

// maxTaskIDs bounds the upstream task IDs a session remembers of each
// kind (taskIDs); past it the oldest is forgotten: one behind a gateway
// task may then show in tasks/list if the upstream still lists it, and a
// status notification of one the client was given no longer reaches it.
const maxTaskIDs = 10_000

// taskIDs are IDs of the upstream's tasks that a session remembers,
// oldest first (under the session's mu).
type taskIDs struct {
	ids   map[string]struct{}
	order []string
}

func (f *taskIDs) has(id string) bool {
	_, ok := f.ids[id]
	return ok
}

func (f *taskIDs) add(id string) {
	if f.ids == nil {
		f.ids = make(map[string]struct{})
	}
	if _, ok := f.ids[id]; ok {
		return
	}
	if len(f.order) >= maxTaskIDs {
		delete(f.ids, f.order[0])
		f.order = f.order[1:]
	}
	f.ids[id] = struct{}{}
	f.order = append(f.order, id)
}

// follows reports whether the upstream's task id is behind one of the
// session's gateway tasks.
func (s *session) follows(id string) bool {
	if id == "" {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.followed.has(id)
}
