package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	sc "github.com/idemkit-mcp/idemkit/spancontract"
)

// Conn is one MCP session of the agent: an mcp-go client over Streamable
// HTTP, initialized with the last protocol version that has sessions
// (2025-11-25), so that the server hands out an Mcp-Session-Id.
type Conn struct {
	c        *client.Client
	tracer   trace.Tracer
	taskReqs int // task-augmented requests sent (their IDs)
}

// dial opens a new session with the server at url, through hc (whose
// transport is the agent's Proxy), authenticated with token.
func dial(ctx context.Context, url, token string, hc *http.Client, tracer trace.Tracer) (*Conn, error) {
	tr, err := transport.NewStreamableHTTP(url,
		transport.WithHTTPBasicClient(hc),
		transport.WithHTTPHeaders(map[string]string{"Authorization": "Bearer " + token}),
	)
	if err != nil {
		return nil, err
	}
	c := client.NewClient(tr,
		client.WithProtocolVersion(mcp.LATEST_LEGACY_PROTOCOL_VERSION),
		client.WithMetaPropagator(metaPropagator{}),
	)
	if err := c.Start(ctx); err != nil {
		return nil, fmt.Errorf("start MCP client: %w", err)
	}
	var init mcp.InitializeRequest
	init.Params.ProtocolVersion = mcp.LATEST_LEGACY_PROTOCOL_VERSION
	init.Params.ClientInfo = mcp.Implementation{Name: "dupgen", Version: "1.0.0"}
	if _, err := c.Initialize(ctx, init); err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("initialize %s: %w", url, err)
	}
	if c.GetSessionId() == "" {
		_ = c.Close()
		return nil, fmt.Errorf("%s handed out no Mcp-Session-Id: the demo needs a stateful Streamable HTTP server", url)
	}
	return &Conn{c: c, tracer: tracer}, nil
}

// SessionID returns the session's Mcp-Session-Id.
func (c *Conn) SessionID() string { return c.c.GetSessionId() }

// Close ends the session.
func (c *Conn) Close() error { return c.c.Close() }

// Result is what the agent got back from one tools/call.
type Result struct {
	Text       string         `json:"text,omitempty"`
	IsError    bool           `json:"is_error,omitempty"`
	Replayed   bool           `json:"replayed,omitempty"`
	Structured map[string]any `json:"structured,omitempty"`
}

// RefundID returns the refund_id of an issue_refund result, or "".
func (r *Result) RefundID() string {
	if r == nil {
		return ""
	}
	s, _ := r.Structured["refund_id"].(string)
	return s
}

// call sends one tools/call inside a CLIENT span "tools/call {tool}", whose
// context travels to the server in params._meta (traceparent). The span is
// deliberately not an execute_tool span: the dup processor tracks
// execute_tool spans of any kind, and the agent's view of a call must not
// be counted as a second tool execution.
func (c *Conn) call(ctx context.Context, tool string, args map[string]any) (*Result, error) {
	ctx, span := c.tracer.Start(ctx, "tools/call "+tool, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(
			attribute.String(sc.MCPMethodName, sc.MethodToolsCall),
			attribute.String(sc.GenAIToolName, tool),
			attribute.String(sc.MCPSessionID, c.SessionID()),
		))
	defer span.End()
	var req mcp.CallToolRequest
	req.Params.Name = tool
	req.Params.Arguments = args
	res, err := c.c.CallTool(ctx, req)
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
		return nil, err
	}
	out := &Result{IsError: res.IsError}
	for _, content := range res.Content {
		if t, ok := content.(mcp.TextContent); ok {
			out.Text += t.Text
		}
	}
	if res.StructuredContent != nil {
		b, _ := json.Marshal(res.StructuredContent)
		_ = json.Unmarshal(b, &out.Structured)
	}
	if res.Meta != nil {
		_, out.Replayed = res.Meta.AdditionalFields[sc.ReplayMetaKey]
	}
	if out.IsError {
		span.SetStatus(codes.Error, sc.ErrorTypeToolError)
		span.SetAttributes(attribute.String(sc.ErrorType, sc.ErrorTypeToolError))
	}
	return out, nil
}

// isNetworkError reports an error of the connection (a reset, a refused
// connection) rather than of the call: the kind that makes an MCP client
// reconnect and re-send.
func isNetworkError(err error) bool {
	return errors.Is(err, ErrConnectionReset)
}

// metaPropagator writes the W3C trace context into params._meta, as the MCP
// conventions ask (mcp-go's client.WithMetaPropagator hook).
type metaPropagator struct{}

func (metaPropagator) InjectMeta(ctx context.Context, meta *mcp.Meta) *mcp.Meta {
	carrier := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, carrier)
	if len(carrier) == 0 {
		return meta
	}
	if meta == nil {
		meta = &mcp.Meta{}
	}
	if meta.AdditionalFields == nil {
		meta.AdditionalFields = map[string]any{}
	}
	for k, v := range carrier {
		meta.AdditionalFields[k] = v
	}
	return meta
}

func (metaPropagator) ExtractMeta(ctx context.Context, _ *mcp.Meta) context.Context { return ctx }

// callTask sends one task-augmented tools/call (MCP tasks, 2025-11-25)
// inside a CLIENT span, as call does, and returns the task it created (or,
// from idemkit, the first call's task, replayed). mcp-go's client has no
// method for it: the request goes through its transport as it is.
func (c *Conn) callTask(ctx context.Context, tool string, args map[string]any) (taskID string, replayed bool, err error) {
	ctx, span := c.tracer.Start(ctx, "tools/call "+tool, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(
			attribute.String(sc.MCPMethodName, sc.MethodToolsCall),
			attribute.String(sc.GenAIToolName, tool),
			attribute.String(sc.MCPSessionID, c.SessionID()),
		))
	defer span.End()
	meta := metaPropagator{}.InjectMeta(ctx, nil)
	params := map[string]any{"name": tool, "arguments": args, "task": map[string]any{"ttl": 600000}}
	if meta != nil {
		params["_meta"] = meta.AdditionalFields
	}
	c.taskReqs++
	resp, err := c.c.GetTransport().SendRequest(ctx, transport.JSONRPCRequest{
		JSONRPC: mcp.JSONRPC_VERSION, ID: mcp.NewRequestId(fmt.Sprintf("task-call-%d", c.taskReqs)), Method: "tools/call", Params: params,
	})
	if err == nil && resp.Error != nil {
		err = fmt.Errorf("tools/call as a task: %d %s", resp.Error.Code, resp.Error.Message)
	}
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
		return "", false, err
	}
	var created struct {
		Task struct {
			TaskID string `json:"taskId"`
		} `json:"task"`
		Meta map[string]any `json:"_meta"`
	}
	if err := json.Unmarshal(resp.Result, &created); err != nil || created.Task.TaskID == "" {
		return "", false, fmt.Errorf("tools/call as a task: no task in %s", resp.Result)
	}
	_, replayed = created.Meta[sc.ReplayMetaKey]
	return created.Task.TaskID, replayed, nil
}

// waitTask polls tasks/get until the task ends, then fetches its result
// with tasks/result.
func (c *Conn) waitTask(ctx context.Context, taskID string, poll time.Duration) (*Result, string, error) {
	for {
		var get mcp.GetTaskRequest
		get.Params.TaskId = taskID
		task, err := c.c.GetTask(ctx, get)
		if err != nil {
			return nil, "", fmt.Errorf("tasks/get %s: %w", taskID, err)
		}
		if task.Status.IsTerminal() {
			var req mcp.TaskResultRequest
			req.Params.TaskId = taskID
			res, err := c.c.TaskResult(ctx, req)
			if err != nil {
				return nil, string(task.Status), fmt.Errorf("tasks/result %s (%s): %w", taskID, task.Status, err)
			}
			out := &Result{IsError: res.IsError}
			for _, content := range res.Content {
				if t, ok := content.(mcp.TextContent); ok {
					out.Text += t.Text
				}
			}
			if res.StructuredContent != nil {
				b, _ := json.Marshal(res.StructuredContent)
				_ = json.Unmarshal(b, &out.Structured)
			}
			return out, string(task.Status), nil
		}
		select {
		case <-ctx.Done():
			return nil, string(task.Status), ctx.Err()
		case <-time.After(poll):
		}
	}
}
