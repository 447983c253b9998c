package mcpgo

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/idemkit/idemkit/idemkit"
	"github.com/idemkit/idemkit/instrument"
	"github.com/idemkit/idemkit/spancontract"
)

const (
	metaTraceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	metaSpanID  = "00f067aa0ba902b7"
)

func TestTraceContext_FromMetaAndAmbient(t *testing.T) {
	h := newHarness(t, harnessConfig{noGuard: true})
	h.srv.AddTool(mcp.NewTool("echo"), func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return mcp.NewToolResultText("x"), nil
	})
	c := h.client()

	// An ambient span in the request context (as HTTP instrumentation would
	// leave it); the in-process transport hands the client's ctx over.
	otherTP := sdktrace.NewTracerProvider()
	defer func() { _ = otherTP.Shutdown(context.Background()) }()
	ambientCtx, ambient := otherTP.Tracer("test").Start(context.Background(), "http")
	defer ambient.End()

	withMeta := func() mcp.CallToolRequest {
		r := callReq("echo", nil)
		r.Params.Meta = &mcp.Meta{AdditionalFields: map[string]any{
			"traceparent": "00-" + metaTraceID + "-" + metaSpanID + "-01",
			"tracestate":  "vendor=abc",
		}}
		return r
	}
	for _, call := range []struct {
		ctx context.Context
		req mcp.CallToolRequest
	}{
		{context.Background(), withMeta()},
		{ambientCtx, callReq("echo", nil)},
		{ambientCtx, withMeta()},
		{context.Background(), callReq("echo", nil)},
	} {
		if _, err := c.CallTool(call.ctx, call.req); err != nil {
			t.Fatal(err)
		}
	}
	spans := h.toolSpans("echo")
	if len(spans) != 4 {
		t.Fatalf("%d spans", len(spans))
	}
	// 1: parent from _meta.
	p := spans[0].Parent()
	if p.TraceID().String() != metaTraceID || p.SpanID().String() != metaSpanID || !p.IsRemote() {
		t.Errorf("meta parent = %v", p)
	}
	if spans[0].SpanContext().TraceID().String() != metaTraceID || spans[0].SpanContext().TraceState().String() != "vendor=abc" {
		t.Errorf("span context %v", spans[0].SpanContext())
	}
	// 2: no _meta: the ambient span is the parent.
	if spans[1].Parent().SpanID() != ambient.SpanContext().SpanID() || spans[1].SpanContext().TraceID() != ambient.SpanContext().TraceID() {
		t.Errorf("ambient parent = %v, want %v", spans[1].Parent(), ambient.SpanContext())
	}
	// 3: both: _meta wins, the ambient span is linked.
	if spans[2].Parent().TraceID().String() != metaTraceID {
		t.Errorf("parent %v, want the _meta trace", spans[2].Parent())
	}
	if links := spans[2].Links(); len(links) != 1 || links[0].SpanContext.SpanID() != ambient.SpanContext().SpanID() {
		t.Errorf("links %v", links)
	}
	// 4: neither: a root span.
	if spans[3].Parent().IsValid() {
		t.Errorf("parent %v, want none", spans[3].Parent())
	}
	for _, s := range spans {
		if _, ok := attrMap(s)["traceparent"]; ok {
			t.Error("trace context leaked into attributes")
		}
	}
}

func TestProgress_NotifiesTheClientAndKeepsTheClaim(t *testing.T) {
	for _, tc := range []struct {
		name     string
		progress bool
		runs     int
		outcome  string
	}{
		{"with progress the duplicate is told in progress", true, 1, "in_progress"},
		// Control: without heartbeats the lease runs out and the duplicate
		// takes the call over, which shows the test can see the difference.
		{"without progress the lease lapses", false, 2, "takeover"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const lease = 300 * time.Millisecond
			h := newHarness(t, harnessConfig{guard: &idemkit.Config{Tools: map[string]idemkit.ToolConfig{"export": {Lease: lease}}}})
			var runs counter
			var heartbeatErr error
			h.srv.AddTool(mcp.NewTool("export"), func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				runs.inc("x")
				for i := 1; i <= 20; i++ {
					select {
					case <-time.After(50 * time.Millisecond):
					case <-ctx.Done():
						return nil, ctx.Err()
					}
					if tc.progress {
						if err := instrument.Progress(ctx, float64(i), 20, "rows"); err != nil && heartbeatErr == nil {
							heartbeatErr = err
						}
					}
				}
				return mcp.NewToolResultText("exported"), nil
			})
			c := h.client()
			var mu sync.Mutex
			var notes []map[string]any
			c.OnNotification(func(n mcp.JSONRPCNotification) {
				if n.Method == string(mcp.MethodNotificationProgress) {
					mu.Lock()
					notes = append(notes, n.Params.AdditionalFields)
					mu.Unlock()
				}
			})
			req := callReq("export", map[string]any{"table": "orders"})
			req.Params.Meta = &mcp.Meta{ProgressToken: "tok-1"}
			done := make(chan *mcp.CallToolResult, 1)
			go func() {
				r, err := c.CallTool(context.Background(), req)
				if err != nil {
					t.Error(err)
				}
				done <- r
			}()
			time.Sleep(2 * lease) // well past the lease
			dup, err := c.CallTool(context.Background(), callReq("export", map[string]any{"table": "orders"}))
			if err != nil {
				t.Fatal(err)
			}
			first := <-done
			if resultText(first) != "exported" {
				t.Errorf("first result %q", resultText(first))
			}
			if n := runs.get("x"); n != tc.runs {
				t.Errorf("handler ran %d times, want %d", n, tc.runs)
			}
			spans := h.toolSpans("export")
			var dupSpan sdktrace.ReadOnlySpan
			for _, s := range spans {
				if attrMap(s)[spancontract.JSONRPCRequestID] == "3" {
					dupSpan = s
				}
			}
			if dupSpan == nil || attrMap(dupSpan)[spancontract.Outcome] != tc.outcome {
				t.Fatalf("duplicate's outcome: %v", dupSpan)
			}
			if !tc.progress {
				return
			}
			if heartbeatErr != nil {
				t.Errorf("heartbeat: %v", heartbeatErr)
			}
			if !dup.IsError || !strings.Contains(resultText(dup), "already in progress") {
				t.Errorf("duplicate got %q", resultText(dup))
			}
			deadline := time.Now().Add(5 * time.Second)
			for {
				mu.Lock()
				got := len(notes)
				mu.Unlock()
				if got >= 20 || time.Now().After(deadline) {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(notes) != 20 {
				t.Fatalf("%d progress notifications, want 20", len(notes))
			}
			for i, n := range notes {
				if n["progressToken"] != "tok-1" || n["total"] != float64(20) || n["message"] != "rows" {
					t.Errorf("notification %d: %v", i, n)
				}
			}
			if notes[19]["progress"] != float64(20) {
				t.Errorf("last progress %v", notes[19]["progress"])
			}
		})
	}
}

func TestProgress_OutsideACallOnlyHeartbeats(t *testing.T) {
	if err := instrument.Progress(context.Background(), 1, 2, "x"); err != nil {
		t.Errorf("Progress outside a call: %v", err)
	}
	instrument.RecordWrite(context.Background(), "ignored") // must not panic
}

func TestProgress_ReportsALostLease(t *testing.T) {
	const lease = 100 * time.Millisecond
	h := newHarness(t, harnessConfig{guard: &idemkit.Config{Tools: map[string]idemkit.ToolConfig{"slow": {Lease: lease}}}})
	lost := make(chan error, 1)
	var calls counter
	h.srv.AddTool(mcp.NewTool("slow"), func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		if calls.inc("x") == 1 {
			time.Sleep(3 * lease) // no heartbeat: the duplicate takes over
			lost <- instrument.Progress(ctx, 1, 1, "")
		}
		return mcp.NewToolResultText("ok"), nil
	})
	c := h.client()
	firstDone := make(chan struct{})
	go func() {
		defer close(firstDone)
		_, _ = c.CallTool(context.Background(), callReq("slow", nil))
	}()
	time.Sleep(2 * lease)
	if _, err := c.CallTool(context.Background(), callReq("slow", nil)); err != nil {
		t.Fatal(err)
	}
	if err := <-lost; !errors.Is(err, idemkit.ErrLeaseLost) {
		t.Errorf("Progress after a takeover = %v, want ErrLeaseLost", err)
	}
	<-firstDone
	// The stale first attempt's finish is fenced off: its span records it.
	first := h.toolSpans("slow")[1]
	if a := attrMap(first); a[spancontract.Outcome] != "executed" || first.Status().Code != codes.Error {
		t.Errorf("stale attempt span: %v %v", sortedDump(a), first.Status())
	}
}
