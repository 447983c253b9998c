package mcpgo

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/idemkit/idemkit/idemkit"
	"github.com/idemkit/idemkit/instrument"
	"github.com/idemkit/idemkit/spancontract"
)

func TestConcurrentDuplicates_WaitingDuplicatesAllGetTheFirstResult(t *testing.T) {
	const n = 48
	h := newHarness(t, harnessConfig{guard: &idemkit.Config{Tools: map[string]idemkit.ToolConfig{"send": {Wait: 10 * time.Second}}}})
	var runs atomic.Int32
	h.srv.AddTool(mcp.NewTool("send", mcp.WithString("text")), func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		runs.Add(1)
		time.Sleep(50 * time.Millisecond)
		instrument.RecordWrite(ctx, "msg-1")
		return &mcp.CallToolResult{
			Content:           []mcp.Content{mcp.NewTextContent("sent"), mcp.NewTextContent("id msg-1")},
			StructuredContent: map[string]any{"id": "msg-1"},
		}, nil
	})
	c := h.client()
	results := make([]*mcp.CallToolResult, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			r, err := c.CallTool(context.Background(), callReq("send", map[string]any{"text": "hi"}))
			if err != nil {
				t.Error(err)
				return
			}
			results[i] = r
		})
	}
	close(start)
	wg.Wait()
	if got := runs.Load(); got != 1 {
		t.Fatalf("handler ran %d times under %d concurrent identical calls, want 1", got, n)
	}
	var first *mcp.CallToolResult
	replays := 0
	for _, r := range results {
		if r.Meta == nil {
			if first != nil {
				t.Fatal("two results without a replay marker")
			}
			first = r
			continue
		}
		replays++
	}
	if first == nil || replays != n-1 {
		t.Fatalf("first %v, %d replays", first != nil, replays)
	}
	want := toJSON(t, first)
	for _, r := range results {
		if r == first {
			continue
		}
		got := toJSON(t, r)
		marker := got["_meta"].(map[string]any)[instrument.ReplayMetaKey]
		if !reflect.DeepEqual(marker, map[string]any{"replayed": true, "attempt": float64(1), "write_id": "msg-1"}) {
			t.Errorf("marker %v", marker)
		}
		delete(got, "_meta")
		if !reflect.DeepEqual(got, want) {
			t.Errorf("replay %v differs from %v", got, want)
		}
	}
	calls := sumByAttrs(t, h.collect()[instrument.MetricToolCalls])
	wantCalls := map[string]int64{
		key(spancontract.GenAIToolName, "send", spancontract.Outcome, "executed"): 1,
		key(spancontract.GenAIToolName, "send", spancontract.Outcome, "replayed"): n - 1,
	}
	if !reflect.DeepEqual(calls, wantCalls) {
		t.Errorf("calls %v, want %v", calls, wantCalls)
	}
}

func TestConcurrentDuplicates_InProgressAnswerNamesTheStatusTool(t *testing.T) {
	const n = 32
	h := newHarness(t, harnessConfig{opts: []instrument.Option{instrument.WithStatusTool("send", "send_status")}})
	var runs atomic.Int32
	var answered sync.WaitGroup
	answered.Add(n - 1)
	released := make(chan struct{})
	go func() { answered.Wait(); close(released) }()
	h.srv.AddTool(mcp.NewTool("send"), func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		runs.Add(1)
		select { // hold the claim until every duplicate has been answered
		case <-released:
		case <-time.After(10 * time.Second):
			t.Error("duplicates were not all answered")
		}
		return mcp.NewToolResultText("sent"), nil
	})
	c := h.client()
	var inProgress atomic.Int32
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			r, err := c.CallTool(context.Background(), callReq("send", map[string]any{"to": "bob"}))
			if err != nil {
				t.Error(err)
				return
			}
			if r.IsError {
				inProgress.Add(1)
				text := resultText(r)
				if !strings.Contains(text, "already in progress") || !strings.Contains(text, "Do not call it again") || !strings.Contains(text, "Call send_status") {
					t.Errorf("in-progress text %q", text)
				}
				answered.Done()
			}
		})
	}
	wg.Wait()
	if runs.Load() != 1 || inProgress.Load() != n-1 {
		t.Fatalf("runs %d, in-progress answers %d", runs.Load(), inProgress.Load())
	}
	outcomes := map[any]int{}
	for _, s := range h.toolSpans("send") {
		a := attrMap(s)
		outcomes[a[spancontract.Outcome]]++
		if a[spancontract.Outcome] == "in_progress" && (a[spancontract.ErrorType] != "tool_error" || a[spancontract.Attempt] != int64(1)) {
			t.Errorf("in-progress span %v", sortedDump(a))
		}
	}
	if !reflect.DeepEqual(outcomes, map[any]int{"executed": 1, "in_progress": n - 1}) {
		t.Errorf("outcomes %v", outcomes)
	}
	ms := h.collect()
	if got := sumByAttrs(t, ms[instrument.MetricInProgress]); !reflect.DeepEqual(got, map[string]int64{key(spancontract.GenAIToolName, "send"): n - 1}) {
		t.Errorf("in_progress %v", got)
	}
}

// idTransport is the in-process transport with request IDs of the test's
// choosing: strings, and integers that float64 holds exactly but that
// strconv.FormatFloat(v, 'g', ...) would write in exponent form.
type idTransport struct {
	*transport.InProcessTransport
	mu   sync.Mutex
	want map[int]string // argument n -> the ID sent, formatted
}

func (t *idTransport) SendRequest(ctx context.Context, req transport.JSONRPCRequest) (*transport.JSONRPCResponse, error) {
	if req.Method == string(mcp.MethodToolsCall) {
		b, _ := json.Marshal(req.Params)
		var p struct {
			Arguments struct{ N int } `json:"arguments"`
		}
		if err := json.Unmarshal(b, &p); err != nil {
			return nil, err
		}
		n := p.Arguments.N
		var id any
		var want string
		switch n % 3 {
		case 0:
			want = "req-" + strconv.Itoa(n)
			id = want
		case 1:
			v := int64(1e15) + int64(n)*1000 // 1e+15 in %g form
			want, id = strconv.FormatInt(v, 10), v
		case 2:
			v := int64(1)<<53 - int64(n)
			want, id = strconv.FormatInt(v, 10), v
		}
		req.ID = mcp.NewRequestId(id)
		t.mu.Lock()
		t.want[n] = want
		t.mu.Unlock()
	}
	return t.InProcessTransport.SendRequest(ctx, req)
}

func TestRequestIDs_EachSpanCarriesItsOwnCallsIDUnderConcurrency(t *testing.T) {
	const n = 64
	h := newHarness(t, harnessConfig{})
	h.srv.AddTool(mcp.NewTool("echo", mcp.WithNumber("n")), func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		time.Sleep(time.Duration(req.GetInt("n", 0)%4) * time.Millisecond) // interleave
		return mcp.NewToolResultText(strconv.Itoa(req.GetInt("n", -1))), nil
	})
	// A hook after ours that stalls a little, so that many calls sit between
	// the ID capture and the middleware at once: a capture keyed by anything
	// but the call itself would hand spans the wrong IDs.
	h.srv.GetHooks().AddBeforeCallTool(func(_ context.Context, _ any, req *mcp.CallToolRequest) {
		time.Sleep(time.Duration(req.GetInt("n", 0)%5) * time.Millisecond)
	})
	tr := &idTransport{InProcessTransport: transport.NewInProcessTransport(h.srv), want: map[int]string{}}
	c := h.clientOn(tr)
	hashToN := map[string]int{}
	var wg sync.WaitGroup
	for i := range n {
		hashToN[argsHash(t, "echo", map[string]any{"n": i})] = i
		wg.Go(func() {
			r, err := c.CallTool(context.Background(), callReq("echo", map[string]any{"n": i}))
			if err != nil || resultText(r) != strconv.Itoa(i) {
				t.Errorf("call %d: %v %q", i, err, resultText(r))
			}
		})
	}
	wg.Wait()
	spans := h.toolSpans("echo")
	if len(spans) != n {
		t.Fatalf("%d spans, want %d", len(spans), n)
	}
	seen := map[int]bool{}
	for _, s := range spans {
		a := attrMap(s)
		i, ok := hashToN[a[spancontract.ArgsHash].(string)]
		if !ok {
			t.Fatalf("span with unknown args hash %v", a[spancontract.ArgsHash])
		}
		seen[i] = true
		if got, want := a[spancontract.JSONRPCRequestID], tr.want[i]; got != want {
			t.Errorf("call %d: jsonrpc.request.id %v, want %q", i, got, want)
		}
	}
	if len(seen) != n {
		t.Errorf("%d distinct calls seen", len(seen))
	}
	left := 0
	h.inst.ids.Range(func(any, any) bool { left++; return true })
	if left != 0 {
		t.Errorf("%d captured request IDs left behind", left)
	}
}

func TestRequestIDs_NoLeakWhenTheMiddlewareNeverRuns(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	h.srv.AddTool(mcp.NewTool("echo"), func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return mcp.NewToolResultText("x"), nil
	})
	c := h.client()
	if _, err := c.CallTool(context.Background(), callReq("missing", nil)); err == nil {
		t.Fatal("unknown tool accepted")
	}
	left := 0
	h.inst.ids.Range(func(any, any) bool { left++; return true })
	if left != 0 {
		t.Errorf("%d captured request IDs left behind", left)
	}
	if len(h.toolSpans("missing")) != 0 {
		t.Error("span for an unknown tool")
	}
}

func TestFormatRequestIDs_ThroughTheWire(t *testing.T) {
	h := newHarness(t, harnessConfig{noGuard: true})
	h.srv.AddTool(mcp.NewTool("echo"), func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return mcp.NewToolResultText("x"), nil
	})
	ids := []string{`1e21`, `123456789012`, `"abc"`, `-5`, `1.5`}
	want := []string{"1000000000000000000000", "123456789012", "abc", "-5", "1.5"}
	for _, id := range ids {
		msg := fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"method":"tools/call","params":{"name":"echo"}}`, id)
		h.srv.HandleMessage(context.Background(), json.RawMessage(msg))
	}
	for i, s := range h.toolSpans("echo") {
		if got := attrMap(s)[spancontract.JSONRPCRequestID]; got != want[i] {
			t.Errorf("id %s: %v, want %s", ids[i], got, want[i])
		}
	}
}
