package report

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemkit-mcp/idemkit/examples/internal/agent"
	"github.com/idemkit-mcp/idemkit/examples/internal/refunds"
	"github.com/idemkit-mcp/idemkit/internal/testing/harness"
	sc "github.com/idemkit-mcp/idemkit/spancontract"
)

func TestReadSpans(t *testing.T) {
	path := filepath.Join(t.TempDir(), "spans.jsonl")
	line := `{"resourceSpans":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"svc"}}]},"scopeSpans":[{"spans":[` +
		`{"traceId":"0af7651916cd43dd8448eb211c80319c","spanId":"b7ad6b7169203331","name":"execute_tool issue_refund","kind":1,"startTimeUnixNano":"42","attributes":[` +
		`{"key":"gen_ai.operation.name","value":{"stringValue":"execute_tool"}},{"key":"idemkit.duplicate","value":{"boolValue":true}},` +
		`{"key":"idemkit.duplicate.cause","value":{"stringValue":"harness_retry"}},{"key":"idemkit.duplicate.effect","value":{"stringValue":"blocked"}},` +
		`{"key":"idemkit.duplicate.gap_ms","value":{"intValue":"318"}}]}]}]}]}` + "\n" + `{"resourceSpans":[` // a half-written line
	if err := os.WriteFile(path, []byte(line), 0o644); err != nil {
		t.Fatal(err)
	}
	spans, err := ReadSpans(path)
	if err != nil || len(spans) != 1 {
		t.Fatalf("ReadSpans: %v, %d spans", err, len(spans))
	}
	s := spans[0]
	cause, effect, ok := s.Duplicate()
	if !s.IsTool() || s.Service != "svc" || s.Start != 42 || !ok || cause != "harness_retry" || effect != "blocked" || s.Int(sc.DuplicateGapMS) != 318 {
		t.Fatalf("span %+v", s)
	}
}

// TestBuildFailsOnMisattribution checks that the report has teeth: the
// same run passes with the right verdict and fails with a wrong one.
func TestBuildFailsOnMisattribution(t *testing.T) {
	target := agent.Target{Name: "protected", Service: "refundserver", Protected: true}
	run := &agent.ScenarioRun{
		Scenario: "transport_retry", Layer: sc.CauseTransportRetry, Target: target, OrderID: "ord_1001", TraceID: "t1",
		Expect: agent.Expectation{Requests: 2, Writes: 1, Intended: 1, Duplicates: []agent.Dup{{Cause: sc.CauseTransportRetry, Effect: sc.EffectSuppressed}}},
		Wire:   []agent.WireEvent{{Method: "tools/call"}, {Method: "tools/call"}},
	}
	tool := func(id string, start int64, outcome string, dup bool, cause string) Span {
		a := map[string]any{
			sc.GenAIOperationName: sc.OperationExecuteTool, sc.GenAIToolName: "issue_refund", sc.KeyHash: "k",
			sc.MCPSessionID: "s", sc.JSONRPCRequestID: "3", sc.Outcome: outcome,
		}
		if dup {
			a[sc.Duplicate], a[sc.DuplicateCause], a[sc.DuplicateEffect] = true, cause, sc.EffectSuppressed
		}
		return Span{harness.Span{TraceID: "t1", SpanID: id, Service: "refundserver", Start: start, Attrs: a}}
	}
	metrics := func(cause string) harness.Samples {
		text := `idemkit_duplicate_calls_total{service_name="refundserver",idemkit_duplicate_cause="` + cause + `",idemkit_duplicate_effect="suppressed"} 1
idemkit_duplicate_candidates_total{service_name="refundserver",gen_ai_tool_name="issue_refund"} 2
mcp_server_operation_duration_seconds_count{job="refundserver",gen_ai_tool_name="issue_refund"} 2
`
		ss, err := harness.ParseText(strings.NewReader(text))
		if err != nil {
			t.Fatal(err)
		}
		return ss
	}
	in := func(cause string) Inputs {
		return Inputs{
			Manifest: &agent.Manifest{Runs: []*agent.ScenarioRun{run}},
			Metrics:  metrics(cause),
			Spans:    []Span{tool("a", 1, sc.OutcomeExecuted, false, ""), tool("b", 2, sc.OutcomeReplayed, true, cause)},
			Refunds:  map[string][]refunds.Refund{"protected": {{ID: "re_1", OrderID: "ord_1001"}}},
		}
	}
	if rep := Build(in(sc.CauseTransportRetry)); !rep.OK() {
		var b bytes.Buffer
		rep.Render(&b)
		t.Fatalf("the right verdict fails:\n%s", b.String())
	}
	rep := Build(in(sc.CauseHarnessRetry))
	if rep.OK() {
		t.Fatal("a wrong verdict passes")
	}
	var b bytes.Buffer
	rep.Render(&b)
	for _, want := range []string{"attributed harness_retry/suppressed, expected transport_retry/suppressed", "decision table gives transport_retry", "RESULT: FAIL"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, b.String())
		}
	}
}

// A scenario that is another layer's retry (task_retry is a harness retry)
// is counted under that layer by the Collector: the report says so in its
// text, its lead, its attribution note and the scenario's pill. A run
// without such a scenario says nothing of it.
func TestReport_SaysWhichScenarioCountsAsAnotherLayer(t *testing.T) {
	const note = "the scenario task_retry is a harness_retry, counted as harness_retry"
	plain := Build(demoInputs(t))
	var b bytes.Buffer
	plain.Render(&b)
	if strings.Contains(b.String(), "counted as") || strings.Contains(plain.Page(HTMLMeta{}).Lead, "counted as") {
		t.Errorf("a run whose scenarios are each a layer mentions a folded scenario:\n%s", b.String())
	}

	in := demoInputs(t)
	n := 0
	for _, run := range in.Manifest.Runs {
		if run.Scenario == sc.CauseHarnessRetry {
			run.Scenario, n = "task_retry", n+1
		}
	}
	if n == 0 {
		t.Fatal("the recorded run has no harness_retry scenario to rename")
	}
	rep := Build(in)
	if !rep.OK() {
		t.Fatal("renaming a scenario changed the verdict")
	}
	b.Reset()
	rep.Render(&b)
	if !strings.Contains(b.String(), note) {
		t.Errorf("the text report does not say that task_retry counts as harness_retry:\n%s", b.String())
	}
	p := rep.Page(HTMLMeta{})
	if !strings.Contains(p.Lead, "The Collector names the layer, not the scenario: "+note) {
		t.Errorf("lead: %q", p.Lead)
	}
	if !strings.Contains(p.AttributionNote, note) {
		t.Errorf("attribution note: %q", p.AttributionNote)
	}
	for _, tl := range p.Timelines {
		if tl.Name == "task_retry" && tl.Pill != "layer: harness_retry (counted as harness_retry)" {
			t.Errorf("task_retry's pill: %q", tl.Pill)
		}
	}
}
