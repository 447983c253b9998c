// Package e2e runs the otelcol-idemkit distribution (built from
// builder-config.yaml) as a process: OTLP spans in over gRPC, attribution
// metrics out of the Prometheus exporter.
//
// The binary comes from $IDEMKIT_OTELCOL, else collector/_build (built by
// scripts/collector-build.sh). When CI=true or IDEMKIT_E2E=1 the tests build
// it themselves and FAIL if that fails; otherwise, with no binary, they skip.
package e2e

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"

	sc "github.com/idemkit-mcp/idemkit/spancontract"
)

var eventBase = time.Now().Add(-time.Minute).Truncate(time.Second)

func id8(s string) pcommon.SpanID {
	sum := sha256.Sum256([]byte("span/" + s))
	var id pcommon.SpanID
	copy(id[:], sum[:])
	return id
}

func id16(s string) pcommon.TraceID {
	sum := sha256.Sum256([]byte("trace/" + s))
	var id pcommon.TraceID
	copy(id[:], sum[:])
	return id
}

func keyHash(s string) string {
	sum := sha256.Sum256([]byte("key/" + s))
	return hex.EncodeToString(sum[:])[:sc.HashLen]
}

// toolSpan appends an execute_tool span in the shape idemkit's
// instrumentation writes.
func toolSpan(spans ptrace.SpanSlice, tag, trace, key, session, req string, at time.Duration, outcome string) {
	s := spans.AppendEmpty()
	s.SetName(sc.SpanName("issue_refund"))
	s.SetKind(ptrace.SpanKindInternal)
	s.SetTraceID(id16(trace))
	s.SetSpanID(id8(tag))
	s.SetStartTimestamp(pcommon.NewTimestampFromTime(eventBase.Add(at)))
	s.SetEndTimestamp(pcommon.NewTimestampFromTime(eventBase.Add(at + 30*time.Millisecond)))
	m := s.Attributes()
	m.PutStr(sc.GenAIOperationName, sc.OperationExecuteTool)
	m.PutStr(sc.GenAIToolName, "issue_refund")
	m.PutStr(sc.MCPMethodName, sc.MethodToolsCall)
	m.PutStr(sc.MCPSessionID, session)
	m.PutStr(sc.JSONRPCRequestID, req)
	m.PutStr(sc.KeyHash, keyHash(key))
	m.PutStr(sc.KeySource, sc.KeySourceDerived)
	m.PutStr(sc.Outcome, outcome)
}

func newBatch(service string) (ptrace.Traces, ptrace.SpanSlice) {
	td := ptrace.NewTraces()
	rs := td.ResourceSpans().AppendEmpty()
	rs.Resource().Attributes().PutStr("service.name", service)
	return td, rs.ScopeSpans().AppendEmpty().Spans()
}

// TestDistribution_AttributionReachesPrometheus runs the single-Collector
// example config: OTLP -> dup processor -> dup connector -> Prometheus.
func TestDistribution_AttributionReachesPrometheus(t *testing.T) {
	bin := collectorBinary(t)
	otlp, prom, tel := freePort(t), freePort(t), freePort(t)
	startCollector(t, "otelcol-idemkit", bin, filepath.Join(repoRoot(t), "collector", "examples", "single", "config.yaml"), otlp,
		fmt.Sprintf("OTLP_GRPC_ENDPOINT=127.0.0.1:%d", otlp),
		fmt.Sprintf("PROMETHEUS_ENDPOINT=127.0.0.1:%d", prom),
		"TELEMETRY_HOST=127.0.0.1", fmt.Sprintf("TELEMETRY_PORT=%d", tel),
		"DUP_DECISION_WAIT=300ms", "DUP_FLUSH_INTERVAL=200ms", "LOG_LEVEL=warn")

	// A transport retry (suppressed), a harness retry (blocked) and a
	// reconnect replay that ran again (leaked), in two exports.
	td, spans := newBatch("mcp-billing")
	toolSpan(spans, "a1", "t1", "refund-a", "sess-1", "7", 0, sc.OutcomeExecuted)
	toolSpan(spans, "a2", "t1", "refund-a", "sess-1", "7", 120*time.Millisecond, sc.OutcomeReplayed)
	toolSpan(spans, "b1", "t2", "refund-b", "sess-1", "8", 0, sc.OutcomeExecuted)
	exportSpans(t, otlp, td)
	td, spans = newBatch("mcp-billing")
	toolSpan(spans, "b2", "t2", "refund-b", "sess-1", "9", 400*time.Millisecond, sc.OutcomeInProgress)
	toolSpan(spans, "c1", "t3", "refund-c", "sess-1", "3", 0, sc.OutcomeExecuted)
	toolSpan(spans, "c2", "t3", "refund-c", "sess-2", "3", 20*time.Second, sc.OutcomeExecuted)
	// Another instrumentation's tool call without captured arguments: the
	// processor cannot compare it, and the connector counts it.
	s := spans.AppendEmpty()
	s.SetName("tools/call issue_refund")
	s.SetKind(ptrace.SpanKindServer)
	s.SetTraceID(id16("t4"))
	s.SetSpanID(id8("d1"))
	s.SetStartTimestamp(pcommon.NewTimestampFromTime(eventBase))
	s.SetEndTimestamp(pcommon.NewTimestampFromTime(eventBase.Add(30 * time.Millisecond)))
	s.Attributes().PutStr(sc.MCPMethodName, sc.MethodToolsCall)
	s.Attributes().PutStr(sc.GenAIToolName, "issue_refund")
	exportSpans(t, otlp, td)

	promURL := fmt.Sprintf("http://127.0.0.1:%d/metrics", prom)
	base := map[string]string{"gen_ai_tool_name": "issue_refund", "service_name": "mcp-billing"}
	with := func(kv ...string) map[string]string {
		m := map[string]string{}
		for k, v := range base {
			m[k] = v
		}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	got := waitFor(t, 60*time.Second, []string{promURL}, []expectation{
		{"idemkit_duplicate_calls_total", with("idemkit_duplicate_cause", "transport_retry", "idemkit_duplicate_effect", "suppressed"), 1},
		{"idemkit_duplicate_calls_total", with("idemkit_duplicate_cause", "harness_retry", "idemkit_duplicate_effect", "blocked"), 1},
		{"idemkit_duplicate_calls_total", with("idemkit_duplicate_cause", "reconnect_replay", "idemkit_duplicate_effect", "leaked"), 1},
		{"idemkit_duplicate_calls_total", nil, 3},
		{"idemkit_duplicate_calls_total", map[string]string{"idemkit_duplicate_effect": "leaked"}, 1},
		{"idemkit_duplicate_candidates_total", base, 7},
		{"idemkit_duplicate_uncompared_total", base, 1},
		{"idemkit_duplicate_gap_seconds_count", map[string]string{"idemkit_duplicate_cause": "transport_retry", "service_name": "mcp-billing"}, 1},
		{"idemkit_duplicate_gap_seconds_bucket", map[string]string{"idemkit_duplicate_cause": "transport_retry", "le": "0.25"}, 1},
		{"idemkit_duplicate_gap_seconds_bucket", map[string]string{"idemkit_duplicate_cause": "transport_retry", "le": "0.1"}, 0},
		{"idemkit_duplicate_gap_seconds_bucket", map[string]string{"idemkit_duplicate_cause": "reconnect_replay", "le": "30"}, 1},
	})
	if os.Getenv("IDEMKIT_E2E_DUMP") != "" {
		for _, s := range got {
			if strings.HasPrefix(s.name, "idemkit_") {
				t.Logf("%s %v %v", s.name, s.labels, s.value)
			}
		}
	}
	// The servers' own metrics, sent over OTLP, are served beside the
	// attribution metrics (the Guard dashboard reads them there).
	exportServerMetrics(t, otlp, "mcp-billing", 3)
	waitFor(t, 30*time.Second, []string{promURL}, []expectation{
		{"idemkit_tool_calls_total", map[string]string{"job": "mcp-billing", "gen_ai_tool_name": "issue_refund", "idemkit_outcome": "executed"}, 3},
	})
	// The processor's own telemetry reaches the Collector's metrics endpoint.
	waitFor(t, 30*time.Second, []string{fmt.Sprintf("http://127.0.0.1:%d/metrics", tel)}, []expectation{
		{"otelcol_processor_dup_spans_classified", map[string]string{"cause": "none"}, 3},
		{"otelcol_processor_dup_spans_classified", map[string]string{"cause": "transport_retry"}, 1},
		{"otelcol_processor_dup_groups_tracked", nil, 3},
		{"otelcol_processor_dup_spans_ignored", map[string]string{"reason": "no_key"}, 1},
	})
}

// TestTwoTier_GroupsStayTogether runs the two-tier example: tier 1 routes
// by idemkit.key.hash to two tier-2 Collectors. Each export mixes several
// groups in one trace, and every group's two calls are sent in different
// exports: a group split across tier-2 instances would lose its duplicate.
func TestTwoTier_GroupsStayTogether(t *testing.T) {
	bin := collectorBinary(t)
	root := repoRoot(t)
	type tier2 struct{ otlp, prom, tel int }
	var backends []tier2
	for _, name := range []string{"tier2-a", "tier2-b"} {
		b := tier2{freePort(t), freePort(t), freePort(t)}
		startCollector(t, name, bin, filepath.Join(root, "collector", "examples", "two-tier", "tier2.yaml"), b.otlp,
			fmt.Sprintf("OTLP_GRPC_ENDPOINT=127.0.0.1:%d", b.otlp),
			fmt.Sprintf("PROMETHEUS_ENDPOINT=127.0.0.1:%d", b.prom),
			fmt.Sprintf("TELEMETRY_PORT=%d", b.tel),
			"DUP_DECISION_WAIT=1s", "DUP_FLUSH_INTERVAL=200ms", "LOG_LEVEL=warn")
		backends = append(backends, b)
	}
	tier1, tier1Prom, tier1Tel := freePort(t), freePort(t), freePort(t)
	startCollector(t, "tier1", bin, filepath.Join(root, "collector", "examples", "two-tier", "tier1.yaml"), tier1,
		fmt.Sprintf("OTLP_GRPC_ENDPOINT=127.0.0.1:%d", tier1),
		fmt.Sprintf("PROMETHEUS_ENDPOINT=127.0.0.1:%d", tier1Prom),
		fmt.Sprintf("TELEMETRY_PORT=%d", tier1Tel),
		fmt.Sprintf("TIER2_A=127.0.0.1:%d", backends[0].otlp),
		fmt.Sprintf("TIER2_B=127.0.0.1:%d", backends[1].otlp), "LOG_LEVEL=warn")

	const groups = 24
	for round := 0; round < 2; round++ {
		td, spans := newBatch("mcp-billing")
		for i := 0; i < groups; i++ {
			// The second round lists each trace's calls in reverse order, so
			// the first span of each trace carries another key than in the
			// first round: routing on the first span would split groups.
			g := i
			if round == 1 {
				g = groups - 1 - i
			}
			outcome := sc.OutcomeExecuted
			if round == 1 {
				outcome = sc.OutcomeReplayed
			}
			// Three groups per trace, so one trace carries several keys.
			toolSpan(spans, fmt.Sprintf("g%d-r%d", g, round), fmt.Sprintf("trace-%d", g/3), fmt.Sprintf("two-tier-%d", g),
				"sess-1", fmt.Sprint(g), time.Duration(g)*time.Second+time.Duration(round)*100*time.Millisecond, outcome)
		}
		exportSpans(t, tier1, td)
	}
	var urls []string
	for _, b := range backends {
		urls = append(urls, fmt.Sprintf("http://127.0.0.1:%d/metrics", b.prom))
	}
	got := waitFor(t, 60*time.Second, urls, []expectation{
		{"idemkit_duplicate_calls_total", map[string]string{"idemkit_duplicate_cause": "transport_retry", "idemkit_duplicate_effect": "suppressed"}, groups},
		{"idemkit_duplicate_candidates_total", nil, 2 * groups},
	})
	// Both tier-2 Collectors got a share of the groups.
	for _, u := range urls {
		s, err := scrape(u)
		if err != nil {
			t.Fatal(err)
		}
		if n, _ := sum(s, "idemkit_duplicate_candidates_total", nil); n == 0 {
			t.Errorf("%s received no tool spans: routing did not spread the groups", u)
		}
	}
	_ = got

	// Tier 1 serves the servers' metrics; every tier keeps its own
	// telemetry on, and the tier-2 processors' health reaches it.
	exportServerMetrics(t, tier1, "mcp-billing", 5)
	waitFor(t, 30*time.Second, []string{fmt.Sprintf("http://127.0.0.1:%d/metrics", tier1Prom)}, []expectation{
		{"idemkit_tool_calls_total", map[string]string{"job": "mcp-billing", "gen_ai_tool_name": "issue_refund"}, 5},
	})
	var tels []string
	for _, b := range backends {
		tels = append(tels, fmt.Sprintf("http://127.0.0.1:%d/metrics", b.tel))
	}
	waitFor(t, 30*time.Second, tels, []expectation{
		{"otelcol_processor_dup_spans_classified", map[string]string{"cause": "transport_retry"}, groups},
		{"otelcol_processor_dup_spans_classified", map[string]string{"cause": "none"}, groups},
	})
	waitFor(t, 30*time.Second, []string{fmt.Sprintf("http://127.0.0.1:%d/metrics", tier1Tel)}, []expectation{
		{"otelcol_receiver_accepted_spans", nil, 2 * groups},
	})
}
