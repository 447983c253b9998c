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
