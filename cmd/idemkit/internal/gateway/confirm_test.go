package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/idemkit-mcp/idemkit/cmd/idemkit/internal/gatewayconfig"
	"github.com/idemkit-mcp/idemkit/cmd/idemkit/internal/tsfixture"
	"github.com/idemkit-mcp/idemkit/internal/mcpcall"
	"github.com/idemkit-mcp/idemkit/spancontract"
)

// Item 5 of issue 19 in the gateway: a tool's confirm setting makes the
// gateway ask the client's user itself (elicitation/create) before it
// forwards a protected call, inside the claim.

const gateConfig = `
tools:
  refund:
    confirm:
      question: "Refund {amount_cents} cents on {order_id}?"
      above: {field: amount_cents, value: 10}
`

// gatedInstrumentation is the instrumentation of a gateway with src's
// settings, recording into tel.
func gatedInstrumentation(t testing.TB, tel *telemetryPair, src string) *mcpcall.Config {
	t.Helper()
	f, err := gatewayconfig.Parse("g.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	c := tel.config()
	f.ApplyInstrumentation(c)
	return c
}

// recordingHuman answers every question with action after delay, and keeps
// the questions.
type recordingHuman struct {
	*slowHuman
	delay     time.Duration
	questions chan string
}

func newHuman(action mcp.ElicitationResponseAction, delay time.Duration) *recordingHuman {
	h := &recordingHuman{slowHuman: newSlowHuman(), delay: delay, questions: make(chan string, 16)}
	h.ans = action
	return h
}

func (h *recordingHuman) Elicit(ctx context.Context, req mcp.ElicitationRequest) (*mcp.ElicitationResult, error) {
	h.asked.Add(1)
	h.questions <- req.Params.Message
	h.once.Do(func() { close(h.first) })
	select {
	case <-time.After(h.delay):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return &mcp.ElicitationResult{ElicitationResponse: mcp.ElicitationResponse{Action: h.ans}}, nil
}

func lastSpan(t *testing.T, tel *telemetryPair, tool string) map[string]any {
	t.Helper()
	spans := tel.toolSpans(tool)
	if len(spans) == 0 {
		t.Fatalf("no tools/call %s span", tool)
	}
	return spans[len(spans)-1]
}

// TestGateway_ConfirmAsksOnceInsideTheClaim: accept forwards once; the
// retry sent while the question is open (past the 500 ms lease) is
// answered in progress and is never asked; the span records accept.
func TestGateway_ConfirmAsksOnceInsideTheClaim(t *testing.T) {
	for _, front := range []string{"http", "stdio"} {
		t.Run(front, func(t *testing.T) {
			up := newRefundUpstream(t)
			tel := newTelemetryPair()
			cfg := Config{Guard: leaseGuard(t), Instrumentation: gatedInstrumentation(t, tel, gateConfig)}
			h := newHuman(mcp.ElicitationResponseActionAccept, askAnswer)
			args := map[string]any{"order_id": "ord_1001", "amount_cents": 25}
			var firstRes, retryRes *mcp.CallToolResult
			if front == "http" {
				_, gw := newGatewayServer(t, up.URL, cfg)
				a, b := elicitingClient(t, gw, "tok", h), elicitingClient(t, gw, "tok", h)
				firstRes, retryRes = askedDuringRetry(t, "refund", args, a, b, h.slowHuman)
			} else {
				u, err := NewHTTPUpstream(up.URL, nil)
				if err != nil {
					t.Fatal(err)
				}
				cfg.Upstream = u
				g, err := New(cfg)
				if err != nil {
					t.Fatal(err)
				}
				defer g.Close(context.Background())
				c := mcpStdioClient(t, g, h)
				firstRes, retryRes = askedDuringRetry(t, "refund", args, c, c, h.slowHuman)
			}
			if got := <-h.questions; got != "Refund 25 cents on ord_1001?" {
				t.Errorf("question %q", got)
			}
			if n := len(up.made()); n != 1 || h.asked.Load() != 1 {
				t.Fatalf("refunds %v, asked %d times; want 1 and 1", up.made(), h.asked.Load())
			}
			if firstRes.IsError || text(firstRes) != "refunded ord_1001" {
				t.Errorf("first call: %q", text(firstRes))
			}
			if got := refusalReason(retryRes); got != spancontract.RefusalInProgress {
				t.Errorf("retry: %q (%q), want in_progress", got, text(retryRes))
			}
			var accepted int
			for _, sp := range tel.toolSpans("refund") {
				if sp[mcpcall.ConfirmationAttr] == "accept" && sp[spancontract.Outcome] == spancontract.OutcomeExecuted {
					accepted++
				}
			}
			if accepted != 1 {
				t.Errorf("spans %v: want one executed with idemkit.confirmation accept", tel.toolSpans("refund"))
			}
		})
	}
}

// TestGateway_ConfirmDeclineRunsNothingAndReleases: a decline forwards
// nothing, tells the model, records it on the span, and releases the claim
// (the next call asks again).
func TestGateway_ConfirmDeclineRunsNothingAndReleases(t *testing.T) {
	up := newRefundUpstream(t)
	tel := newTelemetryPair()
	_, gw := newGatewayServer(t, up.URL, Config{Guard: newGuard(t), Instrumentation: gatedInstrumentation(t, tel, gateConfig)})
	h := newHuman(mcp.ElicitationResponseActionDecline, 0)
	c := elicitingClient(t, gw, "tok", h)
	args := map[string]any{"order_id": "ord_1002", "amount_cents": 30}
	for i := 1; i <= 2; i++ {
		res := callTool(t, c, "refund", args)
		if got := refusalReason(res); got != spancontract.RefusalDeclined || !res.IsError {
			t.Fatalf("call %d: %q (%q), want declined", i, got, text(res))
		}
		if sp := lastSpan(t, tel, "refund"); sp[mcpcall.ConfirmationAttr] != "decline" || sp[spancontract.RefusalReason] != spancontract.RefusalDeclined {
			t.Errorf("call %d: span %v", i, sp)
		}
	}
	if len(up.made()) != 0 || h.asked.Load() != 2 {
		t.Fatalf("refunds %v, asked %d; want none, asked twice (the claim released)", up.made(), h.asked.Load())
	}
	// Under the threshold: no question, the call runs.
	if res := callTool(t, c, "refund", map[string]any{"order_id": "ord_1003", "amount_cents": 5}); res.IsError || len(up.made()) != 1 || h.asked.Load() != 2 {
		t.Errorf("under the threshold: %q, refunds %v, asked %d", text(res), up.made(), h.asked.Load())
	}
}

// TestGateway_ConfirmFailsClosedWithoutElicitation: a client that did not
// declare elicitation is refused (nothing forwarded) unless the tool says
// unasked: true.
func TestGateway_ConfirmFailsClosedWithoutElicitation(t *testing.T) {
	up := newRefundUpstream(t)
	tel := newTelemetryPair()
	_, gw := newGatewayServer(t, up.URL, Config{Guard: newGuard(t), Instrumentation: gatedInstrumentation(t, tel, gateConfig)})
	c := elicitingClient(t, gw, "tok", nil)
	res := callTool(t, c, "refund", map[string]any{"order_id": "ord_1004", "amount_cents": 30})
	if got := refusalReason(res); got != spancontract.RefusalConfirmationUnavailable || len(up.made()) != 0 {
		t.Fatalf("%q (%q), refunds %v; want confirmation_unavailable, none", got, text(res), up.made())
	}
	if sp := lastSpan(t, tel, "refund"); sp[mcpcall.ConfirmationAttr] != "unavailable" {
		t.Errorf("span %v", sp)
	}

	up2 := newRefundUpstream(t)
	tel2 := newTelemetryPair()
	_, gw2 := newGatewayServer(t, up2.URL, Config{Guard: newGuard(t), Instrumentation: gatedInstrumentation(t, tel2,
		"tools:\n  refund:\n    confirm:\n      question: Refund {amount_cents}?\n      unasked: true\n")})
	c2 := elicitingClient(t, gw2, "tok", nil)
	if res := callTool(t, c2, "refund", map[string]any{"order_id": "ord_1005", "amount_cents": 30}); res.IsError || len(up2.made()) != 1 {
		t.Fatalf("unasked: %q, refunds %v", text(res), up2.made())
	}
	if sp := lastSpan(t, tel2, "refund"); sp[mcpcall.ConfirmationAttr] != "unasked" {
		t.Errorf("span %v", sp)
	}
}

// TestGateway_ConfirmWithTheTypeScriptClient: the official TypeScript SDK
// client (@modelcontextprotocol/sdk from npm) answers the gateway's
// question over Streamable HTTP: the POST's answer becomes an SSE stream
// that carries elicitation/create, the answer comes on a new POST. A
// retry while the question is open (past the lease) gets the in-progress
// answer and no question; a decline forwards nothing.
func TestGateway_ConfirmWithTheTypeScriptClient(t *testing.T) {
	up := newRefundUpstream(t)
	tel := newTelemetryPair()
	_, gw := newGatewayServer(t, up.URL, Config{Guard: leaseGuard(t), Instrumentation: gatedInstrumentation(t, tel, gateConfig)})
	c := tsfixture.StartClient(t)
	c.MustDo(map[string]any{"op": "connect", "conn": "a", "url": gw, "token": "tok", "elicit": map[string]any{"action": "accept", "delayMs": askAnswer.Milliseconds()}})
	c.MustDo(map[string]any{"op": "connect", "conn": "b", "url": gw, "token": "tok", "elicit": map[string]any{"action": "accept"}})
	args := map[string]any{"order_id": "ord_1101", "amount_cents": 40}
	first := make(chan tsfixture.Answer, 1)
	go func() { first <- c.Do(map[string]any{"op": "call", "conn": "a", "tool": "refund", "args": args}) }()
	asked := func(conn string) []string {
		var qs []string
		if err := json.Unmarshal(c.MustDo(map[string]any{"op": "asked", "conn": conn}).Result, &qs); err != nil {
			t.Fatal(err)
		}
		return qs
	}
	if !eventually(func() bool { return len(asked("a")) == 1 }) {
		t.Fatal("the TypeScript client was never asked")
	}
	time.Sleep(2 * askLease)
	retry := c.MustDo(map[string]any{"op": "call", "conn": "b", "tool": "refund", "args": args})
	firstAns := <-first
	if !firstAns.OK {
		t.Fatalf("first call: %s", firstAns.Error)
	}
	var firstRes, retryRes mcp.CallToolResult
	if err := json.Unmarshal(firstAns.Result, &firstRes); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(retry.Result, &retryRes); err != nil {
		t.Fatal(err)
	}
	if got := asked("a"); len(got) != 1 || got[0] != "Refund 40 cents on ord_1101?" || len(asked("b")) != 0 {
		t.Errorf("asked a %q, b %q", got, asked("b"))
	}
	if n := len(up.made()); n != 1 || firstRes.IsError || refusalReason(&retryRes) != spancontract.RefusalInProgress {
		t.Errorf("refunds %v, first %q, retry %q (%s)", up.made(), text(&firstRes), text(&retryRes), refusalReason(&retryRes))
	}

	c.MustDo(map[string]any{"op": "connect", "conn": "d", "url": gw, "token": "tok", "elicit": map[string]any{"action": "decline"}})
	var declined mcp.CallToolResult
	if err := json.Unmarshal(c.MustDo(map[string]any{"op": "call", "conn": "d", "tool": "refund", "args": map[string]any{"order_id": "ord_1102", "amount_cents": 40}}).Result, &declined); err != nil {
		t.Fatal(err)
	}
	if refusalReason(&declined) != spancontract.RefusalDeclined || len(up.made()) != 1 || len(asked("d")) != 1 {
		t.Errorf("declined: %q (%s), refunds %v", text(&declined), refusalReason(&declined), up.made())
	}
}

// TestGateway_ConfirmTimeout: a question unanswered within ConfirmTimeout
// is refused (nothing forwarded) and the claim released: the claim is not
// held forever by a client that never answers.
func TestGateway_ConfirmTimeout(t *testing.T) {
	up := newRefundUpstream(t)
	tel := newTelemetryPair()
	_, gw := newGatewayServer(t, up.URL, Config{Guard: newGuard(t), ConfirmTimeout: 100 * time.Millisecond,
		Instrumentation: gatedInstrumentation(t, tel, gateConfig)})
	h := newHuman(mcp.ElicitationResponseActionAccept, askAnswer)
	c := elicitingClient(t, gw, "tok", h)
	args := map[string]any{"order_id": "ord_1201", "amount_cents": 30}
	for i := 1; i <= 2; i++ {
		res := callTool(t, c, "refund", args)
		if got := refusalReason(res); got != spancontract.RefusalConfirmationUnavailable || !strings.Contains(text(res), "no answer within 100ms") {
			t.Fatalf("call %d: %q (%q)", i, got, text(res))
		}
	}
	if len(up.made()) != 0 || h.asked.Load() != 2 {
		t.Errorf("refunds %v, asked %d; want none, asked twice", up.made(), h.asked.Load())
	}
}

// TestGateway_ConfirmOfATaskAugmentedCall: the question comes before the
// task is created; a client that cannot be asked gets the refusal as the
// JSON-RPC error (its marker in the data), and no task runs.
func TestGateway_ConfirmOfATaskAugmentedCall(t *testing.T) {
	up := newTaskUpstream(t)
	close(up.release)
	tel := newTelemetryPair()
	_, gw := newGatewayServer(t, up.URL, Config{Guard: newGuard(t),
		Instrumentation: gatedInstrumentation(t, tel, "tools:\n  export:\n    confirm:\n      question: Export {what}?\n")})
	c := taskClient(t, gw, "alice")
	a := c.rpc("tools/call", map[string]any{"name": "export", "arguments": map[string]any{"what": "orders"}, "task": map[string]any{"ttl": 60000}})
	e := a.rpcError()
	if e == nil || !strings.Contains(fmt.Sprint(e["data"]), spancontract.RefusalConfirmationUnavailable) || !strings.Contains(fmt.Sprint(e["message"]), "needs the user's confirmation") {
		t.Fatalf("a task-augmented call without elicitation: %s", a.body)
	}
	if n := up.runs.Load(); n != 0 {
		t.Errorf("the upstream ran %d times", n)
	}
}

// TestGateway_ConfirmOfATaskAugmentedCall_Accept: a client that can be
// asked is asked once, before the task is created; accepted, the task runs
// the upstream once and its result is the upstream's; a duplicate of the
// call gets the same task, unasked; the span records accept.
func TestGateway_ConfirmOfATaskAugmentedCall_Accept(t *testing.T) {
	up := newTaskUpstream(t)
	close(up.release)
	tel := newTelemetryPair()
	g, gw := newGatewayServer(t, up.URL, Config{Guard: newGuard(t),
		Instrumentation: gatedInstrumentation(t, tel, "tools:\n  export:\n    confirm:\n      question: Export {what}?\n")})
	h := newHuman(mcp.ElicitationResponseActionAccept, 0)
	c := elicitingClient(t, gw, "alice", h)
	ctx := context.Background()
	ttl := int64(60000)
	var params mcp.CallToolParams
	params.Name = "export"
	params.Arguments = map[string]any{"what": "orders"}
	params.Task = &mcp.TaskParams{TTL: &ttl}
	// The client's CallTool parses a CallToolResult: the CreateTaskResult
	// goes through its transport (which answers the question with h).
	call := func(id int64) string {
		t.Helper()
		resp, err := c.GetTransport().SendRequest(ctx, transport.JSONRPCRequest{JSONRPC: mcp.JSONRPC_VERSION, ID: mcp.NewRequestId(id), Method: "tools/call", Params: params})
		if err != nil || resp.Error != nil {
			t.Fatalf("the task-augmented call: %v %+v", err, resp)
		}
		var created struct {
			Task struct {
				TaskID string `json:"taskId"`
			} `json:"task"`
		}
		if err := json.Unmarshal(resp.Result, &created); err != nil || created.Task.TaskID == "" {
			t.Fatalf("the answer %s is not a CreateTaskResult", resp.Result)
		}
		return created.Task.TaskID
	}
	first := call(100)
	if got := <-h.questions; got != "Export orders?" {
		t.Errorf("question %q", got)
	}
	tasks, err := c.ListTasks(ctx, mcp.ListTasksRequest{})
	if err != nil || len(tasks.Tasks) != 1 {
		t.Fatalf("tasks/list: %v %v, want the one task", tasks, err)
	}
	id := tasks.Tasks[0].TaskId
	res, err := c.TaskResult(ctx, mcp.TaskResultRequest{Params: mcp.TaskResultParams{TaskId: id}})
	if err != nil {
		t.Fatalf("tasks/result: %v", err)
	}
	if b, _ := json.Marshal(res); !strings.Contains(string(b), "exported orders (run 1)") {
		t.Errorf("tasks/result %s, want the upstream's result", b)
	}
	if id != first {
		t.Errorf("tasks/list has task %s, the call created %s", id, first)
	}
	// The upstream's own task behind it is the gateway's to know: a
	// request naming it is answered as for an unknown task.
	var behind []string
	g.mu.Lock()
	for _, ss := range g.sessions {
		ss.mu.Lock()
		behind = append(behind, ss.followed.order...)
		ss.mu.Unlock()
	}
	g.mu.Unlock()
	if len(behind) != 1 {
		t.Fatalf("the gateway follows upstream tasks %v, want one", behind)
	}
	if _, err := c.GetTask(ctx, mcp.GetTaskRequest{Params: mcp.GetTaskParams{TaskId: behind[0]}}); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Errorf("tasks/get of the upstream's task %s: %v, want not found", behind[0], err)
	}
	// The duplicate: the same task, and no second question.
	if dup := call(101); dup != first {
		t.Errorf("the duplicate got task %s, want %s", dup, first)
	}
	if tasks, err := c.ListTasks(ctx, mcp.ListTasksRequest{}); err != nil || len(tasks.Tasks) != 1 || tasks.Tasks[0].TaskId != id {
		t.Errorf("tasks/list after the duplicate: %v %v, want task %s alone", tasks, err, id)
	}
	if n, asked := up.runs.Load(), h.asked.Load(); n != 1 || asked != 1 {
		t.Errorf("the upstream ran %d times, the user was asked %d times; want 1 and 1", n, asked)
	}
	if sp := tel.toolSpans("export"); len(sp) == 0 || sp[0][mcpcall.ConfirmationAttr] != "accept" {
		t.Errorf("spans %v: want the first with idemkit.confirmation accept", sp)
	}
}
