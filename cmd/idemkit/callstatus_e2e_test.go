package main

import (
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/idemkit-mcp/idemkit/cmd/idemkit/internal/tsfixture"
	"github.com/idemkit-mcp/idemkit/internal/mcpcall"
	"github.com/idemkit-mcp/idemkit/spancontract"
)

// callStatusOf returns the call status marker of a result, or nil.
func callStatusOf(r toolResult) map[string]any {
	m, _ := r.Meta[spancontract.CallStatusMetaKey].(map[string]any)
	return m
}

// TestCallStatusTool_TypeScriptUpstreamAndClient: behind the gateway, a
// TypeScript server that has no status tool gets one. The TypeScript
// client finds it listed; a duplicate of a slow call is told to call it;
// it reports the call in progress with its progress, then completed with
// the stored result; another caller asking about the same call learns
// nothing; asking never runs the tool.
func TestCallStatusTool_TypeScriptUpstreamAndClient(t *testing.T) {
	t.Parallel()
	upstreams(t, []string{"--store", "memory"}, func(t *testing.T, gw *gatewayProc, log string) {
		c := tsfixture.StartClient(t)
		c.MustDo(map[string]any{"op": "connect", "conn": "a", "url": gw.URL, "token": "alice"})
		c.MustDo(map[string]any{"op": "connect", "conn": "b", "url": gw.URL, "token": "bob"})
		status := func(conn string, args map[string]any) toolResult {
			t.Helper()
			return decodeResult(t, call(c, conn, mcpcall.DefaultCallStatusTool, args))
		}
		tools := listTools(t, c, "a")
		st, ok := tools[mcpcall.DefaultCallStatusTool]
		if !ok || st.Annotations["readOnlyHint"] != true {
			t.Fatalf("the call status tool is not listed read-only: %+v", st)
		}
		if _, ok := st.InputSchema.Properties["tool"]; !ok {
			t.Errorf("its schema %+v", st.InputSchema)
		}

		args := map[string]any{"name": "q4", "steps": 8, "step_ms": 250}
		q := map[string]any{"tool": "export_report", "arguments": args}
		if r := status("a", q); callStatusOf(r)["state"] != "unknown" {
			t.Errorf("before the call: %+v", r)
		}
		first := make(chan tsfixture.Answer, 1)
		go func() {
			first <- c.Do(map[string]any{"op": "call", "conn": "a", "tool": "export_report", "args": args, "progress": true})
		}()
		// In progress, with the progress the server reported.
		var running toolResult
		for deadline := time.Now().Add(30 * time.Second); ; {
			running = status("a", q)
			note, _ := callStatusOf(running)["note"].(string)
			if strings.Contains(note, "of 8") || time.Now().After(deadline) {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		m := callStatusOf(running)
		if m["state"] != "in_progress" || m["attempt"] != float64(1) || running.IsError || !strings.Contains(running.text(), "Do not call export_report again") {
			t.Errorf("in progress: %+v", running)
		}
		if note, _ := m["note"].(string); !strings.HasPrefix(note, "step ") {
			t.Errorf("in progress: note %q, want the server's progress message", note)
		}
		dup := decodeResult(t, call(c, "a", "export_report", args))
		refusal, _ := dup.Meta[spancontract.RefusalMetaKey].(map[string]any)
		if refusal["reason"] != "in_progress" || refusal["status_tool"] != mcpcall.DefaultCallStatusTool ||
			!strings.Contains(dup.text(), "Call "+mcpcall.DefaultCallStatusTool) {
			t.Errorf("the duplicate's answer does not name the call status tool: %+v", dup)
		}
		if r := status("b", q); callStatusOf(r)["state"] != "unknown" {
			t.Errorf("bob sees alice's running call: %+v", r)
		}
		done := decodeResult(t, <-first)
		// Completed: the stored result, replayed.
		r := status("a", q)
		if replayMarker(r) == nil || !reflect.DeepEqual(r.StructuredContent, done.StructuredContent) || r.text() != done.text() {
			t.Errorf("completed: %+v, want %+v replayed", r, done)
		}
		if r := status("b", q); callStatusOf(r)["state"] != "unknown" || r.StructuredContent != nil {
			t.Errorf("bob read alice's result: %+v", r)
		}
		if n := countExecutions(t, log, "export_report"); n != 1 {
			t.Errorf("export_report ran %d times, want 1", n)
		}
	})
}

// TestCallStatusTool_SwitchedOff: --call-status-tool - lists and serves
// none, and in-progress answers name none.
func TestCallStatusTool_SwitchedOff(t *testing.T) {
	t.Parallel()
	srv := tsfixture.StartHTTPServer(t, tsfixture.ServerOptions{})
	gw := startGateway(t, "--upstream", srv.URL, "--store", "memory", "--call-status-tool", "-")
	c := tsfixture.StartClient(t)
	c.MustDo(map[string]any{"op": "connect", "conn": "a", "url": gw.URL, "token": "alice"})
	if _, ok := listTools(t, c, "a")[mcpcall.DefaultCallStatusTool]; ok {
		t.Error("listed, switched off")
	}
	// Forwarded to the server, which has no such tool.
	a := call(c, "a", mcpcall.DefaultCallStatusTool, map[string]any{"tool": "issue_refund", "arguments": map[string]any{}})
	if a.OK {
		if r := decodeResult(t, a); !r.IsError || callStatusOf(r) != nil {
			t.Errorf("switched off, answered: %+v", r)
		}
	}
}

// TestGateway_ExampleConfig: the shipped example configuration starts the
// real command, and its settings hold against the TypeScript server: a
// declined card is stored and replayed (failure_policy: store), an
// idempotent tool is protected (protect: true), a read-only one never is.
func TestGateway_ExampleConfig(t *testing.T) {
	t.Parallel()
	example, err := filepath.Abs(filepath.Join("testdata", "gateway.example.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	upstreams(t, []string{"--store", "memory", "--config", example}, func(t *testing.T, gw *gatewayProc, log string) {
		if !waitFor(gw, "per-tool settings loaded") {
			t.Errorf("the gateway did not log its configuration")
		}
		c := tsfixture.StartClient(t)
		c.MustDo(map[string]any{"op": "connect", "conn": "a", "url": gw.URL, "token": "alice"})
		first := decodeResult(t, call(c, "a", "charge_card", map[string]any{"card": "4242"}))
		second := decodeResult(t, call(c, "a", "charge_card", map[string]any{"card": "4242"}))
		if n := countExecutions(t, log, "charge_card"); n != 1 || !first.IsError || replayMarker(second) == nil {
			t.Errorf("charge_card: %d runs, second %+v: want the declined answer stored and replayed", n, second)
		}
		for range 2 {
			decodeResult(t, call(c, "a", "set_status", map[string]any{"order_id": "o-1", "status": "shipped"}))
		}
		if n := countExecutions(t, log, "set_status"); n != 1 {
			t.Errorf("set_status ran %d times: protect: true did not protect it", n)
		}
		tools := listTools(t, c, "a")
		if _, ok := tools["set_status"].InputSchema.Properties["idempotency_key"]; !ok {
			t.Errorf("set_status is not advertised as protected: %+v", tools["set_status"])
		}
		if _, ok := tools["lookup_order"].InputSchema.Properties["idempotency_key"]; ok {
			t.Errorf("lookup_order is advertised as protected")
		}
		// require_key: refused without a key, nothing run.
		r := decodeResult(t, call(c, "a", "poll_export", map[string]any{"name": "x"}))
		refusal, _ := r.Meta[spancontract.RefusalMetaKey].(map[string]any)
		if !r.IsError || refusal["reason"] != "missing_key" || countExecutions(t, log, "poll_export") != 0 {
			t.Errorf("poll_export without a key: %+v", r)
		}
	})
}
