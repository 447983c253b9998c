package mcpgo

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/idemkit/idemkit/instrument"
	"github.com/idemkit/idemkit/spancontract"
)

func structured(t *testing.T, r *mcp.CallToolResult) map[string]any {
	t.Helper()
	m, ok := r.StructuredContent.(map[string]any)
	if !ok {
		t.Fatalf("structuredContent %#v", r.StructuredContent)
	}
	return m
}

func pollStatus(t *testing.T, c *client.Client, ctx context.Context, id string, until func(*mcp.CallToolResult) bool) *mcp.CallToolResult {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		req := callReq("export_status", map[string]any{"job_id": id})
		r, err := c.CallTool(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if until(r) || time.Now().After(deadline) {
			return r
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestJobTool_DuplicateStartsShareOneJobAndTheStatusToolReturnsItsResult(t *testing.T) {
	h := newHarness(t, harnessConfig{opts: []instrument.Option{instrument.WithSubject(userFrom)}})
	store := &instrument.MemoryJobStore{}
	jobs := instrument.NewJobs(h.inst.Instrumenter(), &instrument.JobsConfig{Store: store, Heartbeat: 20 * time.Millisecond})
	defer func() {
		if err := jobs.Close(context.Background()); err != nil {
			t.Error(err)
		}
	}()
	var runs counter
	release := make(chan struct{})
	AddJobTool(h.srv, jobs, mcp.NewTool("export", mcp.WithDescription("Export a table."), mcp.WithString("table")),
		func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			runs.inc("x")
			if err := instrument.Progress(ctx, 1, 2, "half way"); err != nil {
				return nil, err
			}
			instrument.RecordWrite(ctx, "exp_1")
			select {
			case <-release:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			return &mcp.CallToolResult{
				Content:           []mcp.Content{mcp.NewTextContent("exported " + req.GetString("table", ""))},
				StructuredContent: map[string]any{"rows": 42},
			}, nil
		})
	c := h.client()
	alice := ctxWithUser(context.Background(), "alice")

	start1, err := c.CallTool(alice, callReq("export", map[string]any{"table": "orders"}))
	if err != nil || start1.IsError {
		t.Fatalf("start: %v %q", err, resultText(start1))
	}
	id, _ := structured(t, start1)["job_id"].(string)
	if !strings.HasPrefix(id, "job_") || structured(t, start1)["status_tool"] != "export_status" {
		t.Fatalf("start result %#v", start1.StructuredContent)
	}
	if !strings.Contains(resultText(start1), "call export_status") {
		t.Errorf("start text %q", resultText(start1))
	}
	start2, err := c.CallTool(alice, callReq("export", map[string]any{"table": "orders"}))
	if err != nil {
		t.Fatal(err)
	}
	if got := structured(t, start2)["job_id"]; got != id {
		t.Errorf("duplicate start got job %v, want %s", got, id)
	}
	if start2.Meta == nil || start2.Meta.AdditionalFields[instrument.ReplayMetaKey] == nil {
		t.Error("duplicate start is not marked as a replay")
	}

	running := pollStatus(t, c, alice, id, func(r *mcp.CallToolResult) bool {
		return structured(t, r)["message"] == "half way"
	})
	if running.IsError || structured(t, running)["state"] != "running" || structured(t, running)["progress"] != float64(1) {
		t.Errorf("running status %#v", running.StructuredContent)
	}
	if !strings.Contains(resultText(running), "still running: 1 of 2 (half way)") {
		t.Errorf("running text %q", resultText(running))
	}
	if other, err := c.CallTool(ctxWithUser(context.Background(), "mallory"), callReq("export_status", map[string]any{"job_id": id})); err != nil || !other.IsError {
		t.Errorf("another subject read the job: %v %#v", err, other)
	}

	close(release)
	done := pollStatus(t, c, alice, id, func(r *mcp.CallToolResult) bool {
		return r.Meta.AdditionalFields[instrument.JobMetaKey].(map[string]any)["state"] != "running"
	})
	if done.IsError || resultText(done) != "exported orders" || !reflect.DeepEqual(done.StructuredContent, map[string]any{"rows": float64(42)}) {
		t.Errorf("final status %#v", done)
	}
	if got := done.Meta.AdditionalFields[instrument.JobMetaKey]; !reflect.DeepEqual(got, map[string]any{"job_id": id, "state": "succeeded"}) {
		t.Errorf("job meta %v", got)
	}
	if runs.get("x") != 1 {
		t.Errorf("work ran %d times, want 1", runs.get("x"))
	}
	if _, err := jobs.Get(alice, id); !errors.Is(err, instrument.ErrJobNotFound) {
		t.Errorf("Get without the owner's subject in ctx = %v", err)
	}
	job, err := store.Get(alice, id)
	if err != nil || job.WriteID != "exp_1" || job.Owner == "" {
		t.Errorf("job %#v %v", job, err)
	}

	// The status tool is read-only: never protected, so never replayed.
	for _, s := range h.toolSpans("export_status") {
		if attrMap(s)[spancontract.Outcome] != "bypassed" {
			t.Errorf("status span outcome %v", attrMap(s)[spancontract.Outcome])
		}
	}
	if h.inst.Instrumenter().StatusTool("export") != "export_status" {
		t.Error("status tool not registered for in-progress answers")
	}
	tools, err := c.ListTools(context.Background(), mcp.ListToolsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range tools.Tools {
		switch tool.Name {
		case "export":
			if !strings.Contains(tool.Description, "call export_status") {
				t.Errorf("start description %q", tool.Description)
			}
		case "export_status":
			if tool.Annotations.ReadOnlyHint == nil || !*tool.Annotations.ReadOnlyHint {
				t.Error("status tool is not read-only")
			}
			if _, ok := tool.InputSchema.Properties[instrument.KeyArgument]; ok {
				t.Error("status tool advertises an idempotency key")
			}
		}
	}
}

func TestJobs_CloseCancelsWorkersThatOutliveTheGracePeriod(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	jobs := instrument.NewJobs(h.inst.Instrumenter(), nil)
	started := make(chan struct{})
	AddJobTool(h.srv, jobs, mcp.NewTool("export"), func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		close(started)
		<-ctx.Done() // only Close ends it
		return nil, ctx.Err()
	})
	c := h.client()
	r, err := c.CallTool(context.Background(), callReq("export", nil))
	if err != nil {
		t.Fatal(err)
	}
	id := structured(t, r)["job_id"].(string)
	<-started
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := jobs.Close(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Close = %v, want the grace period's deadline", err)
	}
	job, err := jobs.Get(context.Background(), id)
	if err != nil || job.State != instrument.JobFailed || job.Error != context.Canceled.Error() {
		t.Errorf("job after Close: %#v %v", job, err)
	}
	r, err = c.CallTool(context.Background(), callReq("export", map[string]any{"again": true}))
	if err != nil || !r.IsError || !strings.Contains(resultText(r), "could not be started") {
		t.Errorf("start after Close: %v %q", err, resultText(r))
	}
}

func TestJobStatus_UnknownJob(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	jobs := instrument.NewJobs(h.inst.Instrumenter(), nil)
	defer func() { _ = jobs.Close(context.Background()) }()
	AddJobTool(h.srv, jobs, mcp.NewTool("export"), func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return mcp.NewToolResultText("x"), nil
	})
	r, err := h.client().CallTool(context.Background(), callReq("export_status", map[string]any{"job_id": "job_nope"}))
	if err != nil || !r.IsError || resultText(r) != instrument.NotFoundText("job_nope") {
		t.Errorf("%v %q", err, resultText(r))
	}
}
