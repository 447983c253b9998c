package demo_test

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemkit-mcp/idemkit/examples/internal/agent"
	"github.com/idemkit-mcp/idemkit/examples/internal/refunds"
	"github.com/idemkit-mcp/idemkit/examples/internal/report"
	"github.com/idemkit-mcp/idemkit/idemkit"
	"github.com/idemkit-mcp/idemkit/idemkit/sqlitestore"
	"github.com/idemkit-mcp/idemkit/internal/testing/harness"
	sc "github.com/idemkit-mcp/idemkit/spancontract"
)

// server is a refund server under test: real mcp-go over real HTTP
// (httptest), spans into a recorder, metrics into a manual reader.
type server struct {
	target  agent.Target
	db      *refunds.DB
	spans   *tracetest.SpanRecorder
	metrics *sdkmetric.ManualReader
}

func startServer(t *testing.T, protected bool) *server {
	t.Helper()
	ctx := context.Background()
	s := &server{spans: tracetest.NewSpanRecorder(), metrics: sdkmetric.NewManualReader()}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(s.spans))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(s.metrics))
	db, err := refunds.OpenDB(ctx, ":memory:")
	if err != nil {
		t.Fatal(err)
	}
	s.db = db
	cfg := refunds.Config{DB: db, TracerProvider: tp, MeterProvider: mp, Tokens: refunds.DemoTokens,
		FastLatency: 5 * time.Millisecond, SlowLatency: 400 * time.Millisecond}
	s.target = agent.Target{Name: "unprotected", Service: "refundserver-unprotected"}
	if protected {
		store, err := sqlitestore.Open(ctx, ":memory:", nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = store.Close() })
		if cfg.Guard, err = idemkit.NewGuard(store, nil); err != nil {
			t.Fatal(err)
		}
		s.target = agent.Target{Name: "protected", Service: "refundserver", Protected: true}
	}
	h, err := refunds.NewHandler(cfg)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(h)
	s.target.URL = hs.URL
	t.Cleanup(func() {
		hs.Close()
		_ = tp.Shutdown(ctx)
		_ = mp.Shutdown(ctx)
		_ = db.Close()
	})
	return s
}

// toSpans converts recorded spans to the report's view of them.
func toSpans(service string, recorded []sdktrace.ReadOnlySpan) []report.Span {
	out := make([]report.Span, 0, len(recorded))
	for _, s := range recorded {
		attrs := map[string]any{}
		for _, kv := range s.Attributes() {
			switch kv.Value.Type() {
			case attribute.INT64:
				attrs[string(kv.Key)] = kv.Value.AsInt64()
			case attribute.BOOL:
				attrs[string(kv.Key)] = kv.Value.AsBool()
			default:
				attrs[string(kv.Key)] = kv.Value.String()
			}
		}
		out = append(out, report.Span{Span: harness.Span{
			TraceID: s.SpanContext().TraceID().String(), SpanID: s.SpanContext().SpanID().String(),
			Name: s.Name(), Service: service, Kind: int(s.SpanKind()), Start: s.StartTime().UnixNano(), End: s.EndTime().UnixNano(), Attrs: attrs,
		}})
	}
	return out
}

// effectOf is the effect the dup processor gives a duplicate, from its
// outcome (collector/dupprocessor/README.md, "Effect").
func effectOf(s *report.Span) string {
	switch s.Str(sc.Outcome) {
	case sc.OutcomeReplayed:
		return sc.EffectSuppressed
	case sc.OutcomeInProgress:
		return sc.EffectBlocked
	}
	return sc.EffectLeaked
}

// TestScenariosInProcess runs every scenario against a protected and an
// unprotected refund server, without a Collector, and checks what the dup
// processor needs to name each layer: the handler runs (refund rows), the
// span attributes (session IDs, request IDs per layer, key hashes or
// arguments, outcomes), the chat spans in the agent's trace and, through
// the decision table, the cause and effect each duplicate must get.
func TestScenariosInProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the scenarios in real time (a few seconds)")
	}
	ctx := context.Background()
	servers := map[string]*server{"protected": startServer(t, true), "unprotected": startServer(t, false)}
	agentSpans := tracetest.NewSpanRecorder()
	agentTP := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(agentSpans))
	defer func() { _ = agentTP.Shutdown(ctx) }()

	m, err := agent.Run(ctx, agent.Config{
		Targets:        []agent.Target{servers["protected"].target, servers["unprotected"].target},
		Token:          "demo-token-alice",
		TracerProvider: agentTP,
		ReissueThink:   300 * time.Millisecond, // the chat span decides; the gap needs no realism here
		HarnessTimeout: 150 * time.Millisecond,
		StatusWait:     600 * time.Millisecond,
	})
	if err != nil {
		t.Fatalf("agent.Run: %v", err)
	}
	if want := 2 * len(agent.Scenarios()); len(m.Runs) != want {
		t.Fatalf("%d runs, want %d", len(m.Runs), want)
	}

	all := toSpans("dupgen-agent", agentSpans.Ended())
	for _, s := range servers {
		all = append(all, toSpans(s.target.Service, s.spans.Ended())...)
	}
	byTrace := map[string][]*report.Span{}
	for i := range all {
		byTrace[all[i].TraceID] = append(byTrace[all[i].TraceID], &all[i])
	}

	for _, run := range m.Runs {
		t.Run(run.Scenario+"/"+run.Target.Name, func(t *testing.T) {
			srv := servers[run.Target.Name]
			checkRun(t, run, srv, byTrace[run.TraceID])
		})
	}
	checkOutcomeMetrics(t, servers["protected"], m)
}

func checkRun(t *testing.T, run *agent.ScenarioRun, srv *server, spans []*report.Span) {
	var tools, chats, refundsCalls []*report.Span
	for _, s := range spans {
		switch {
		case s.IsTool():
			tools = append(tools, s)
			if s.Str(sc.GenAIToolName) == refunds.ToolIssueRefund {
				refundsCalls = append(refundsCalls, s)
			}
		case s.IsChat():
			chats = append(chats, s)
		}
	}
	// Handler runs: the refund rows of the scenario's order.
	rows, err := srv.db.Refunds(context.Background(), run.OrderID)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != run.Expect.Writes {
		t.Errorf("%d refunds written, want %d", len(rows), run.Expect.Writes)
	}
	if len(refundsCalls) != run.Expect.Requests {
		t.Errorf("%d issue_refund spans in the agent's trace, want %d (server spans must join the trace from params._meta)", len(refundsCalls), run.Expect.Requests)
	}
	if len(chats) == 0 {
		t.Errorf("no chat span in the trace")
	}
	// The five fields on every server tool span.
	for _, s := range tools {
		if s.Str(sc.MCPSessionID) == "" || s.Str(sc.JSONRPCRequestID) == "" {
			t.Errorf("%s: mcp.session.id %q, jsonrpc.request.id %q: both are needed", s.Name, s.Str(sc.MCPSessionID), s.Str(sc.JSONRPCRequestID))
		}
		if s.Str(sc.GenAIToolName) != refunds.ToolIssueRefund {
			continue
		}
		if run.Target.Protected {
			if s.Str(sc.KeyHash) == "" || s.Str(sc.ArgsHash) == "" || s.Str(sc.SubjectHash) == "" || s.Str(sc.Outcome) == "" {
				t.Errorf("protected issue_refund span lacks idemkit attributes: %v", s.Attrs)
			}
		} else {
			if s.Str(sc.GenAIToolCallArguments) == "" {
				t.Errorf("unprotected issue_refund span lacks gen_ai.tool.call.arguments: %v", s.Attrs)
			}
			if _, ok := s.Attrs[sc.Outcome]; ok {
				t.Errorf("unprotected span carries idemkit.outcome: %v", s.Attrs)
			}
		}
	}
	// The duplicates, their evidence and the verdict the decision table gives it.
	pairs := report.Duplicates(tools, chats)
	if len(pairs) != len(run.Expect.Duplicates) {
		t.Fatalf("%d duplicates by the evidence, want %d: %+v", len(pairs), len(run.Expect.Duplicates), pairs)
	}
	for i, p := range pairs {
		want := run.Expect.Duplicates[i]
		if got := p.Evidence.Cause(2 * time.Second); got != want.Cause {
			t.Errorf("evidence %s gives %s, want %s", p.Evidence, got, want.Cause)
		}
		if got := effectOf(p.M); got != want.Effect {
			t.Errorf("duplicate outcome %q gives effect %s, want %s", p.M.Str(sc.Outcome), got, want.Effect)
		}
		checkLayerEvidence(t, run, p)
	}
}

// checkLayerEvidence checks each layer's own fingerprint, on the wire and
// in the spans.
func checkLayerEvidence(t *testing.T, run *agent.ScenarioRun, p report.Pair) {
	e := p.Evidence
	switch run.Layer {
	case sc.CauseTransportRetry:
		var posts []agent.WireEvent
		for _, w := range run.Wire {
			if w.Tool == refunds.ToolIssueRefund {
				posts = append(posts, w)
			}
		}
		if len(posts) != 2 || posts[0].RequestID != posts[1].RequestID || posts[0].SessionID != posts[1].SessionID {
			t.Errorf("transport retry: want two POSTs with the same id and session, got %+v", posts)
		}
		if !e.SameRequest || !e.SameSession {
			t.Errorf("transport retry: spans say %s", e)
		}
	case sc.CauseHarnessRetry:
		if !e.SameSession || e.SameRequest || e.ChatsBetween != 0 || e.Gap >= 2*time.Second {
			t.Errorf("harness retry: spans say %s", e)
		}
	case sc.CauseModelReissue:
		if !e.SameSession || e.SameRequest || e.ChatsBetween == 0 {
			t.Errorf("model re-issue: spans say %s", e)
		}
	case sc.CauseReconnectReplay:
		if e.SameSession || e.Sessions[0] == "" || e.Sessions[1] == "" {
			t.Errorf("reconnect replay: spans say %s", e)
		}
	}
}

// checkOutcomeMetrics compares the protected server's idemkit.tool.calls
// counter with the outcomes on its spans.
func checkOutcomeMetrics(t *testing.T, srv *server, m *agent.Manifest) {
	var rm metricdata.ResourceMetrics
	if err := srv.metrics.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	fromMetrics := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, mt := range sm.Metrics {
			sum, ok := mt.Data.(metricdata.Sum[int64])
			if mt.Name != "idemkit.tool.calls" || !ok {
				continue
			}
			for _, dp := range sum.DataPoints {
				tool, _ := dp.Attributes.Value(sc.GenAIToolName)
				outcome, _ := dp.Attributes.Value(sc.Outcome)
				if tool.AsString() == refunds.ToolIssueRefund {
					fromMetrics[outcome.AsString()] += dp.Value
				}
			}
		}
	}
	fromSpans := map[string]int64{}
	for _, s := range toSpans("", srv.spans.Ended()) {
		// The tool calls' SERVER spans (a task's execute_task span names the
		// tool too, and carries its write ID, not an outcome).
		if s.Str(sc.GenAIToolName) == refunds.ToolIssueRefund && s.Kind == int(trace.SpanKindServer) {
			fromSpans[s.Str(sc.Outcome)]++
		}
	}
	if len(fromMetrics) == 0 || !equalCounts(fromMetrics, fromSpans) {
		t.Errorf("idemkit.tool.calls by outcome %v, spans by outcome %v", fromMetrics, fromSpans)
	}
	stopped := 0
	for _, run := range m.Runs {
		if run.Target.Protected {
			stopped += len(run.Expect.Duplicates)
		}
	}
	if got := fromMetrics[sc.OutcomeReplayed] + fromMetrics[sc.OutcomeInProgress]; got != int64(stopped) {
		t.Errorf("%d duplicates replayed or blocked, want %d", got, stopped)
	}
	if !strings.Contains(strings.Join(keys(fromMetrics), ","), sc.OutcomeMismatch) {
		t.Errorf("no mismatch outcome: the key_reuse scenario must be rejected once")
	}
}

func equalCounts(a, b map[string]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func keys(m map[string]int64) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
