package adaptertest

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/idemkit-mcp/idemkit/instrument"
	"github.com/idemkit-mcp/idemkit/internal/mcpcall"
	sc "github.com/idemkit-mcp/idemkit/spancontract"
)

// callStatus calls the call status tool and returns its answer and the
// state its marker reports ("" without one).
func callStatus(t *testing.T, c Client, args map[string]any) (map[string]any, string) {
	t.Helper()
	res := call(t, c, mcpcall.DefaultCallStatusTool, args, nil)
	state, _ := marker(res, sc.CallStatusMetaKey)["state"].(string)
	return res, state
}

// The call status tool (instrument.WithCallStatusTool) answers a caller's
// own record of a call, found by the call's tool and arguments or its
// explicit key, without claiming anything: unknown before the call, in
// progress (with the progress note, and named by the in-progress answer
// of a duplicate), completed (the stored result, replayed), released after
// a failure; never another caller's record.
func testCallStatus(t *testing.T, h Harness) {
	var runs, slowRuns, brokenRuns counter
	release := make(chan struct{})
	reported := make(chan struct{})
	var once sync.Once
	slow := Tool{Name: "export", Schema: map[string]any{"type": "object", "properties": map[string]any{"what": map[string]any{"type": "string"}}},
		Run: func(ctx context.Context, args map[string]any) (Result, error) {
			slowRuns.inc()
			if err := instrument.Progress(ctx, 1, 4, "copying"); err != nil {
				return Result{}, err
			}
			once.Do(func() { close(reported) })
			<-release
			return Result{Text: []string{"exported"}, Structured: map[string]any{"rows": 3}}, nil
		}}
	broken := Tool{Name: "broken", Run: func(ctx context.Context, args map[string]any) (Result, error) {
		brokenRuns.inc()
		return Result{}, errors.New("the database is down")
	}}
	lookup := Tool{Name: "lookup", ReadOnly: true, Run: func(ctx context.Context, args map[string]any) (Result, error) {
		return Result{Text: []string{"paid"}}, nil
	}}
	r := start(t, h, setup{transport: HTTP, bearer: true, tools: []Tool{refundTool(&runs), slow, broken, lookup},
		opts: []instrument.Option{instrument.WithCallStatusTool("")}})
	alice := r.connect(ClientConfig{Token: "token-alice", Protocol: LegacyProtocol})
	bob := r.connect(ClientConfig{Token: "token-bob", Protocol: LegacyProtocol})

	// Listed, read-only, with no key argument advertised on it.
	tools, err := alice.ListTools(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var listed map[string]any
	for _, tl := range tools {
		if tl["name"] == mcpcall.DefaultCallStatusTool {
			listed = tl
		}
	}
	if ann, _ := listed["annotations"].(map[string]any); ann["readOnlyHint"] != true {
		t.Fatalf("the call status tool's listing %v: want it listed, readOnlyHint", listed)
	}
	if d, _ := listed["description"].(string); strings.Contains(d, "Retries are safe") {
		t.Errorf("the call status tool's description advertises retry safety: %q", d)
	}

	// Unknown before the call; asking does not claim it.
	args := map[string]any{"order_id": "o-1", "amount_cents": 100}
	if res, state := callStatus(t, alice, map[string]any{"tool": "refund", "arguments": args}); state != "unknown" || isError(res) {
		t.Errorf("before the call: %v", res)
	}
	first := call(t, alice, "refund", args, nil)
	if runs.get() != 1 || marker(first, sc.ReplayMetaKey) != nil {
		t.Fatalf("the call after asking its status: %v (runs %d): want it executed", first, runs.get())
	}

	// Completed: the stored result, replayed, as a duplicate would get it.
	done, state := callStatus(t, alice, map[string]any{"tool": "refund", "arguments": args})
	if state != "" || !reflect.DeepEqual(marker(done, sc.ReplayMetaKey), map[string]any{"replayed": true, "attempt": float64(1), "write_id": "re_1"}) {
		t.Errorf("completed: %v", done)
	}
	if got := withoutMarker(done, sc.ReplayMetaKey); !reflect.DeepEqual(got, first) {
		t.Errorf("the status answer minus its marker differs from the result:\n result %v\n status %v", first, got)
	}
	// Another caller asking with the same arguments finds nothing of
	// alice's.
	if res, state := callStatus(t, bob, map[string]any{"tool": "refund", "arguments": args}); state != "unknown" || strings.Contains(text(res), "Refunded") {
		t.Errorf("bob read alice's record: %v", res)
	}

	// An explicit key: alone, or with the call's arguments; with other
	// arguments it is a mismatch.
	keyed := map[string]any{"order_id": "o-2", "amount_cents": 200, "idempotency_key": "k-2"}
	call(t, alice, "refund", keyed, nil)
	if res, _ := callStatus(t, alice, map[string]any{"tool": "refund", "key": "k-2"}); marker(res, sc.ReplayMetaKey) == nil {
		t.Errorf("by the key alone: %v", res)
	}
	if res, _ := callStatus(t, alice, map[string]any{"tool": "refund", "arguments": keyed}); marker(res, sc.ReplayMetaKey) == nil {
		t.Errorf("by the arguments with the key: %v", res)
	}
	if res, state := callStatus(t, alice, map[string]any{"tool": "refund", "key": "k-2", "arguments": map[string]any{"order_id": "o-3"}}); state != "mismatch" {
		t.Errorf("the key with other arguments: %v", res)
	}
	if res, state := callStatus(t, bob, map[string]any{"tool": "refund", "key": "k-2"}); state != "unknown" {
		t.Errorf("bob read alice's keyed record: %v", res)
	}

	// In progress: the duplicate's answer names the call status tool, and
	// the status reports the attempt and the progress note.
	exp := map[string]any{"what": "orders"}
	running := make(chan map[string]any, 1)
	go func() { running <- call(t, alice, "export", exp, nil) }()
	<-reported
	dup := call(t, alice, "export", exp, nil)
	m := marker(dup, sc.RefusalMetaKey)
	if m["reason"] != sc.RefusalInProgress || m["status_tool"] != mcpcall.DefaultCallStatusTool ||
		!strings.Contains(text(dup), "Call "+mcpcall.DefaultCallStatusTool) || !strings.Contains(text(dup), `"tool": "export"`) {
		t.Errorf("the in-progress answer %v: want it to name %s and how to call it", dup, mcpcall.DefaultCallStatusTool)
	}
	prog, state := callStatus(t, alice, map[string]any{"tool": "export", "arguments": exp})
	pm := marker(prog, sc.CallStatusMetaKey)
	if state != "in_progress" || pm["attempt"] != float64(1) || pm["note"] != "copying (1 of 4)" || isError(prog) {
		t.Errorf("in progress: %v", prog)
	}
	if ms, _ := pm["retry_after_ms"].(float64); ms < 1000 || ms > 30000 {
		t.Errorf("in progress: retry_after_ms %v, want between 1s and 30s", pm["retry_after_ms"])
	}
	if !strings.Contains(text(prog), "still in progress") || !strings.Contains(text(prog), "Do not call export again") {
		t.Errorf("in progress text %q", text(prog))
	}
	if _, state := callStatus(t, bob, map[string]any{"tool": "export", "arguments": exp}); state != "unknown" {
		t.Errorf("bob sees alice's running call: %s", state)
	}
	close(release)
	finished := <-running
	if res, _ := callStatus(t, alice, map[string]any{"tool": "export", "arguments": exp}); !reflect.DeepEqual(withoutMarker(res, sc.ReplayMetaKey), finished) {
		t.Errorf("after the run: %v, want %v replayed", res, finished)
	}
	if slowRuns.get() != 1 {
		t.Errorf("export ran %d times", slowRuns.get())
	}

	// Released: the call failed, nothing is kept; a new call runs.
	if _, err := alice.CallTool(context.Background(), "broken", map[string]any{"x": "1"}, nil); err == nil {
		t.Fatal("broken: no error")
	}
	if res, state := callStatus(t, alice, map[string]any{"tool": "broken", "arguments": map[string]any{"x": "1"}}); state != "released" || !strings.Contains(text(res), "runs it again") {
		t.Errorf("released: %v", res)
	}
	// Tools whose calls are not recorded, and malformed questions.
	if _, state := callStatus(t, alice, map[string]any{"tool": "lookup", "arguments": map[string]any{}}); state != "not_recorded" {
		t.Errorf("a read-only tool: %s", state)
	}
	if _, state := callStatus(t, alice, map[string]any{"tool": "no_such_tool", "arguments": map[string]any{}}); state != "not_recorded" {
		t.Errorf("no such tool: %s", state)
	}
	for _, bad := range []map[string]any{{}, {"tool": "refund"}, {"tool": "refund", "arguments": "o-1"}, {"tool": "refund", "key": ""}} {
		if res, state := callStatus(t, alice, bad); state != "rejected" || !isError(res) {
			t.Errorf("%v: %v", bad, res)
		}
	}
	if brokenRuns.get() != 1 || runs.get() != 2 {
		t.Errorf("runs: broken %d, refund %d: asking ran something", brokenRuns.get(), runs.get())
	}
	// Its calls are traced as a read-only tool's: never protected.
	for _, s := range r.spans("tools/call " + mcpcall.DefaultCallStatusTool) {
		if a := attrs(s); a[sc.Outcome] != sc.OutcomeBypassed || a[sc.BypassReason] != sc.BypassUnprotected {
			t.Errorf("a call status span %v", a)
		}
	}
}
