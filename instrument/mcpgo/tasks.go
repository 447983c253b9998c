package mcpgo

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"sync"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/idemkit-mcp/idemkit/idemkit"
	"github.com/idemkit-mcp/idemkit/instrument/internal/weakmap"
	"github.com/idemkit-mcp/idemkit/internal/mcpcall"
	"github.com/idemkit-mcp/idemkit/spancontract"
)

// How the adapter serves MCP tasks (2025-11-25) durably, in mcp-go's
// place. mcp-go keeps tasks in the memory of the process that created them
// and runs AddTaskTool handlers without tool middleware; its task methods
// cannot be pointed at another store. So the Streamable HTTP handler
// (NewStreamableHTTPHandler) gives every task-related request a slot in its
// context and its own response writer, and lets mcp-go dispatch it as
// usual (session validation, protocol checks, hooks, the request's span):
//
//   - a task-augmented tools/call: the beforeCallTool hook takes the task
//     parameter off the request, so that mcp-go runs the tool middleware at
//     once; the middleware serves the call through mcpcall.CreateTask and
//     puts the CreateTaskResult (or the JSON-RPC error) in the slot;
//   - tasks/get, tasks/result, tasks/cancel, tasks/list: a before hook
//     answers from the Guard's store (mcpcall.Tasks) into the slot.
//
// The handler then writes the slot's answer instead of mcp-go's.

// taskSlot is where the adapter leaves its answer to a task-related
// request that passed through the Streamable HTTP handler.
type taskSlot struct {
	id json.RawMessage // the request's JSON-RPC ID

	mu       sync.Mutex // protects the fields below
	task     bool       // a task-augmented tools/call taken from mcp-go
	answered bool
	result   json.RawMessage
	err      *mcpcall.RPCError
}

type taskSlotKey struct{}

// slotOf returns the slot of a request that came through the Streamable
// HTTP handler's task layer, without searching ctx while no such request is
// in flight (the common case: a search walks the whole context chain).
func (m *Instrumentation) slotOf(ctx context.Context) *taskSlot {
	if m.slots.Load() == 0 {
		return nil
	}
	return taskSlotFrom(ctx)
}

func taskSlotFrom(ctx context.Context) *taskSlot {
	s, _ := ctx.Value(taskSlotKey{}).(*taskSlot)
	return s
}

func (s *taskSlot) answer(result json.RawMessage, err *mcpcall.RPCError) {
	s.mu.Lock()
	s.answered, s.result, s.err = true, result, err
	s.mu.Unlock()
}

func (s *taskSlot) isAnswered() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.answered
}

func (s *taskSlot) takeTask() {
	s.mu.Lock()
	s.task = true
	s.mu.Unlock()
}

func (s *taskSlot) isTask() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.task
}

// servers finds the Instrumentation installed on a server, for the
// handlers built from the server alone, without keeping the server alive.
var servers weakmap.Map[server.MCPServer, *Instrumentation]

func instrumentationOf(s *server.MCPServer) *Instrumentation {
	m, _ := servers.Load(s)
	return m
}

// taskMethods are the request methods of MCP tasks.
var taskMethods = map[string]bool{
	spancontract.MethodTasksGet: true, spancontract.MethodTasksResult: true,
	spancontract.MethodTasksCancel: true, spancontract.MethodTasksList: true,
}

// maxTaskBody bounds the part of a request body the task layer reads to
// find task methods: the largest arguments a key is derived from
// (idemkit.DefaultMaxArgsBytes) and room for the JSON-RPC envelope. A
// larger body reaches mcp-go as it is: a protected call with such
// arguments is refused as invalid_arguments, whatever carries it.
const maxTaskBody = idemkit.DefaultMaxArgsBytes + 64<<10

// taskLayer wraps the Streamable HTTP handler h of s: task-related requests
// get a slot and are answered from it.
func taskLayer(s *server.MCPServer, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m := instrumentationOf(s)
		if r.Method != http.MethodPost || m == nil || m.tasks == nil || r.Body == nil {
			h.ServeHTTP(w, r)
			return
		}
		var buf bytes.Buffer
		n, err := io.Copy(&buf, io.LimitReader(r.Body, maxTaskBody+1))
		if err != nil || n > maxTaskBody {
			// Pass on what was read, then the rest, unread here.
			r.Body = readCloser{io.MultiReader(&buf, r.Body), r.Body}
			h.ServeHTTP(w, r)
			return
		}
		_ = r.Body.Close()
		body := buf.Bytes()
		r.Body = io.NopCloser(bytes.NewReader(body))
		// Most requests mention no task: pass them on undecoded (a method
		// "tasks/…" or a "task" member both contain `"task`, also when a
		// name is written with escapes, which a \u in the body reveals).
		if !bytes.Contains(body, []byte(`"task`)) && !bytes.Contains(body, []byte(`\u`)) {
			h.ServeHTTP(w, r)
			return
		}
		var msg struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params struct {
				Task json.RawMessage `json:"task"`
			} `json:"params"`
		}
		if json.Unmarshal(body, &msg) != nil || len(msg.ID) == 0 ||
			!(taskMethods[msg.Method] || msg.Method == spancontract.MethodToolsCall && len(msg.Params.Task) > 0 && string(msg.Params.Task) != "null") {
			h.ServeHTTP(w, r)
			return
		}
		slot := &taskSlot{id: msg.ID}
		cw := &captureWriter{header: http.Header{}}
		m.slots.Add(1)
		h.ServeHTTP(cw, r.WithContext(context.WithValue(r.Context(), taskSlotKey{}, slot)))
		m.slots.Add(-1)
		slot.mu.Lock()
		answered, result, rerr := slot.answered, slot.result, slot.err
		slot.mu.Unlock()
		for k, v := range cw.header {
			w.Header()[k] = v
		}
		if !answered || cw.status != 0 && cw.status != http.StatusOK {
			// mcp-go answered itself: an invalid session, an unknown
			// tool, a tool without task support, tasks not advertised.
			if cw.status != 0 {
				w.WriteHeader(cw.status)
			}
			_, _ = w.Write(cw.body.Bytes())
			return
		}
		out := map[string]any{"jsonrpc": "2.0", "id": slot.id}
		if rerr != nil {
			e := map[string]any{"code": rerr.Code, "message": rerr.Message}
			if rerr.Data != nil {
				e["data"] = rerr.Data
			}
			out["error"] = e
		} else {
			out["result"] = result
		}
		b, err := json.Marshal(out)
		if err != nil {
			b = []byte(`{"jsonrpc":"2.0","id":` + string(slot.id) + `,"error":{"code":-32603,"message":"the answer could not be encoded"}}`)
		}
		w.Header().Del("Content-Length")
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(b)
	})
}

// readCloser reads from Reader and closes Closer.
type readCloser struct {
	io.Reader
	io.Closer
}

// captureWriter keeps mcp-go's response to a task-related request. It
// cannot flush, so mcp-go answers with plain JSON, never an event stream.
type captureWriter struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (c *captureWriter) Header() http.Header         { return c.header }
func (c *captureWriter) Write(p []byte) (int, error) { return c.body.Write(p) }
func (c *captureWriter) WriteHeader(status int) {
	if c.status == 0 {
		c.status = status
	}
}

// serveTaskMethod answers a task method from the Guard's store into the
// request's slot, when it came through the Streamable HTTP handler and the
// server advertises the method.
func (m *Instrumentation) serveTaskMethod(ctx context.Context, method string, params any) {
	slot := taskSlotFrom(ctx)
	op := mcpcall.FromContext(ctx)
	if slot == nil || op == nil || m.tasks == nil {
		return
	}
	if caps := m.taskCaps.Load(); caps != nil &&
		(method == spancontract.MethodTasksList && caps.List == nil || method == spancontract.MethodTasksCancel && caps.Cancel == nil) {
		err := &mcpcall.RPCError{Code: mcp.METHOD_NOT_FOUND, Message: "Method " + method + " not found: the server does not advertise it"}
		op.RecordError(err.Code, err.Message, nil)
		slot.answer(nil, err)
		return
	}
	raw, err := json.Marshal(params)
	if err != nil {
		raw = nil
	}
	slot.answer(m.tasks.Serve(op, method, raw))
}

// takeTask takes a task-augmented call away from mcp-go's own task engine
// when the adapter can answer it durably: it came through the Streamable
// HTTP handler and its tool supports tasks. mcp-go then runs the tool
// middleware at once, which creates the task (serve).
func (m *Instrumentation) takeTask(ctx context.Context, req *mcp.CallToolRequest) {
	if req.Params.Task == nil || m.tasks == nil {
		return
	}
	slot := taskSlotFrom(ctx)
	if slot == nil {
		return
	}
	t := findTool(ctx, req.Params.Name)
	if t == nil || t.Execution == nil || (t.Execution.TaskSupport != mcp.TaskSupportOptional && t.Execution.TaskSupport != mcp.TaskSupportRequired) {
		return // mcp-go answers: not a tool that supports tasks
	}
	if t.Execution.TaskSupport == mcp.TaskSupportRequired {
		// mcp-go would refuse the call without its task parameter: leave
		// it to mcp-go's engine (register the tool with AddTaskTool for
		// durable tasks).
		m.warnTaskTool(req.Params.Name)
		return
	}
	slot.takeTask()
	req.Params.Task = nil
}

// taskCapsOf returns the tasks capability of an initialize result.
func taskCapsOf(res *mcp.InitializeResult) *mcp.TasksCapability {
	if res == nil {
		return nil
	}
	return res.Capabilities.Tasks
}

// warnTaskTool logs, once per tool, that calls of tool are served by
// mcp-go's own task engine: kept in memory, without tool middleware.
func (m *Instrumentation) warnTaskTool(tool string) {
	if _, loaded := m.taskWarned.LoadOrStore(tool, true); loaded {
		return
	}
	m.in.Config().Logger.Warn("idemkit: mcp-go serves the tasks of this tool itself, in memory: they are lost on restart, "+
		"invisible to other replicas, and (for tools added with server.AddTaskTool) run without tool middleware, so idemkit neither protects nor traces their work",
		"tool", tool,
		"fix", "add the tool with mcpgo.AddTaskTool, and serve Streamable HTTP with mcpgo.NewStreamableHTTPHandler")
}

// AddTaskTool registers tool on s as a tool that runs as an MCP task (the
// adapter's replacement for server.AddTaskTool, with the same handler
// signature): a task-augmented call is traced and protected like any
// other call (a duplicate gets the first call's task back, replayed, and
// the work runs once), and the task lives in the Guard's store, so that
// every replica answers tasks/get, tasks/result, tasks/cancel and
// tasks/list for it, after a restart too. handler runs in the background;
// the Content, StructuredContent and IsError of the CreateTaskResult it
// returns are the task's result (what tasks/result returns). A call
// without task augmentation runs handler synchronously, and returns that
// result at once.
//
// tool.Execution.TaskSupport says how clients may call it: "required" (the
// default when unset), or "optional"; tools/list advertises it. (The tool
// is registered with mcp-go as "optional", so that mcp-go lets the adapter
// serve its task-augmented calls; a plain call of a "required" tool is
// served synchronously rather than refused.) Durable tasks need a Guard
// and the Streamable HTTP handler NewStreamableHTTPHandler; on other
// transports mcp-go's in-memory task engine runs the calls, through the
// tool middleware.
func AddTaskTool(s *server.MCPServer, tool mcp.Tool, handler server.TaskToolHandlerFunc) {
	declared := mcp.TaskSupportRequired
	if tool.Execution != nil && tool.Execution.TaskSupport == mcp.TaskSupportOptional {
		declared = mcp.TaskSupportOptional
	}
	registered := tool
	registered.Execution = &mcp.ToolExecution{TaskSupport: mcp.TaskSupportOptional}
	if m := instrumentationOf(s); m != nil {
		m.declared.Store(tool.Name, declared)
	}
	s.AddTool(registered, func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		res, err := handler(ctx, req)
		if err != nil || res == nil {
			return nil, err
		}
		out := &mcp.CallToolResult{Content: res.Content, StructuredContent: res.StructuredContent, IsError: res.IsError}
		out.Meta = res.Meta
		return out, nil
	})
}

// declaredTaskSupport returns the task support tools/list advertises for a
// tool added with AddTaskTool, and whether it was.
func (m *Instrumentation) declaredTaskSupport(tool string) (mcp.TaskSupport, bool) {
	v, ok := m.declared.Load(tool)
	if !ok {
		return "", false
	}
	return v.(mcp.TaskSupport), true
}

// Close stops the durable tasks this Instrumentation runs: it waits for
// the running ones until ctx is done, then cancels them (they fail: the
// server shut down), and returns ctx's error. Call it on shutdown, after
// the HTTP server stopped taking requests.
func (m *Instrumentation) Close(ctx context.Context) error {
	if m.tasks == nil {
		return nil
	}
	return m.tasks.Close(ctx)
}
