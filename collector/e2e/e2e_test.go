// Package e2e runs the otelcol-idemkit distribution (built from
// builder-config.yaml) as a process: OTLP spans in over gRPC, attribution
// metrics out of the Prometheus exporter.
//
// The binary comes from $IDEMKIT_OTELCOL, else collector/_build (built by
// scripts/collector-build.sh). When CI=true or IDEMKIT_E2E=1 the tests build
// it themselves and FAIL if that fails; otherwise, with no binary, they skip.
package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	sc "github.com/idemkit/idemkit/spancontract"
)

var (
	buildOnce sync.Once
	buildPath string
	buildErr  error
)

func repoRoot(t *testing.T) string {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Clean(filepath.Join(wd, "..", ".."))
}

// collectorBinary returns the path of otelcol-idemkit, building it when the
// environment asks for it.
func collectorBinary(t *testing.T) string {
	if p := os.Getenv("IDEMKIT_OTELCOL"); p != "" {
		return p
	}
	root := repoRoot(t)
	built := filepath.Join(root, "collector", "_build", "otelcol-idemkit", "otelcol-idemkit")
	mustBuild := os.Getenv("CI") == "true" || os.Getenv("IDEMKIT_E2E") == "1"
	if !mustBuild {
		if _, err := os.Stat(built); err == nil {
			return built
		}
		t.Skip("no otelcol-idemkit binary: run scripts/collector-build.sh, or set IDEMKIT_E2E=1 to build it here")
	}
	buildOnce.Do(func() {
		cmd := exec.Command("bash", filepath.Join(root, "scripts", "collector-build.sh"))
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			buildErr = fmt.Errorf("scripts/collector-build.sh: %w\n%s", err, tail(out.String(), 4000))
			return
		}
		buildPath = built
	})
	if buildErr != nil {
		t.Fatalf("cannot build the Collector distribution (required when CI=true): %v", buildErr)
	}
	return buildPath
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// collector is a running otelcol-idemkit process.
type collector struct {
	name   string
	cmd    *exec.Cmd
	output *syncBuffer
}

type syncBuffer struct {
	mu sync.Mutex // protects b
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startCollector runs the binary with a config file and environment, and
// waits until its OTLP port accepts connections.
func startCollector(t *testing.T, name, bin, config string, otlpPort int, env ...string) *collector {
	t.Helper()
	return startCollectorArgs(t, name, bin, []string{"--config", config}, otlpPort, env...)
}

// startCollectorArgs is startCollector with the command line's arguments
// (several --config files are merged, later ones winning).
func startCollectorArgs(t *testing.T, name, bin string, args []string, otlpPort int, env ...string) *collector {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	c := &collector{name: name, cmd: cmd, output: &syncBuffer{}}
	cmd.Stdout, cmd.Stderr = c.output, c.output
	if err := cmd.Start(); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("%s output:\n%s", name, tail(c.output.String(), 6000))
		}
	})
	deadline := time.Now().Add(60 * time.Second)
	for {
		conn, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", otlpPort), time.Second)
		if err == nil {
			conn.Close()
			return c
		}
		if time.Now().After(deadline) || cmd.ProcessState != nil {
			t.Fatalf("%s did not open its OTLP port: %v\n%s", name, err, tail(c.output.String(), 6000))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func exportSpans(t *testing.T, port int, td ptrace.Traces) {
	t.Helper()
	conn, err := grpc.NewClient(fmt.Sprintf("127.0.0.1:%d", port), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := ptraceotlp.NewGRPCClient(conn).Export(ctx, ptraceotlp.NewExportRequestFromTraces(td)); err != nil {
		t.Fatalf("OTLP export: %v", err)
	}
}

// series is one sample of the Prometheus text format.
type series struct {
	name   string
	labels map[string]string
	value  float64
}

// scrape fetches a Prometheus text exposition and returns its samples, one
// per line of the format (a histogram gives its _bucket, _sum and _count
// series); a malformed exposition is an error.
func scrape(url string) ([]series, error) {
	resp, err := http.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", url, err)
	}
	var out []series
	for name, mf := range families {
		for _, m := range mf.GetMetric() {
			add := func(name string, v float64, extra ...string) {
				labels := make(map[string]string, len(m.GetLabel())+1)
				for _, lp := range m.GetLabel() {
					labels[lp.GetName()] = lp.GetValue()
				}
				for i := 0; i+1 < len(extra); i += 2 {
					labels[extra[i]] = extra[i+1]
				}
				out = append(out, series{name: name, labels: labels, value: v})
			}
			switch {
			case m.GetHistogram() != nil:
				h := m.GetHistogram()
				for _, b := range h.GetBucket() {
					add(name+"_bucket", float64(b.GetCumulativeCount()), model.BucketLabel, strconv.FormatFloat(b.GetUpperBound(), 'g', -1, 64))
				}
				add(name+"_bucket", float64(h.GetSampleCount()), model.BucketLabel, "+Inf")
				add(name+"_sum", h.GetSampleSum())
				add(name+"_count", float64(h.GetSampleCount()))
			case m.GetCounter() != nil:
				add(name, m.GetCounter().GetValue())
			case m.GetGauge() != nil:
				add(name, m.GetGauge().GetValue())
			default:
				add(name, m.GetUntyped().GetValue())
			}
		}
	}
	return out, nil
}

// sum adds up the samples of name whose labels include want.
func sum(all []series, name string, want map[string]string) (float64, bool) {
	var total float64
	found := false
	for _, s := range all {
		if s.name != name {
			continue
		}
		match := true
		for k, v := range want {
			if s.labels[k] != v {
				match = false
				break
			}
		}
		if match {
			total += s.value
			found = true
		}
	}
	return total, found
}

// expectation is a Prometheus series that must reach a value.
type expectation struct {
	name   string
	labels map[string]string
	value  float64
}

// waitFor scrapes the URLs until the sum over them of every expectation
// holds, or fails after the timeout.
func waitFor(t *testing.T, timeout time.Duration, urls []string, want []expectation) []series {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last []series
	var missing string
	for time.Now().Before(deadline) {
		last = nil
		for _, u := range urls {
			s, err := scrape(u)
			if err == nil {
				last = append(last, s...)
			}
		}
		missing = ""
		for _, e := range want {
			got, found := sum(last, e.name, e.labels)
			if !found || got != e.value {
				missing = fmt.Sprintf("%s%v: want %v, got %v (found %v)", e.name, e.labels, e.value, got, found)
				break
			}
		}
		if missing == "" {
			return last
		}
		time.Sleep(250 * time.Millisecond)
	}
	var dump strings.Builder
	for _, s := range last {
		if strings.HasPrefix(s.name, "idemkit_") || strings.HasPrefix(s.name, "otelcol_processor_dup") {
			fmt.Fprintf(&dump, "%s %v %v\n", s.name, s.labels, s.value)
		}
	}
	t.Fatalf("metrics never matched: %s\nidemkit series seen:\n%s", missing, dump.String())
	return nil
}

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
		{"idemkit_duplicate_candidates_total", base, 6},
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
	// The processor's own telemetry reaches the Collector's metrics endpoint.
	waitFor(t, 30*time.Second, []string{fmt.Sprintf("http://127.0.0.1:%d/metrics", tel)}, []expectation{
		{"otelcol_processor_dup_spans_classified", map[string]string{"cause": "none"}, 3},
		{"otelcol_processor_dup_spans_classified", map[string]string{"cause": "transport_retry"}, 1},
		{"otelcol_processor_dup_groups_tracked", nil, 3},
	})
}

// TestTwoTier_GroupsStayTogether runs the two-tier example: tier 1 routes
// by idemkit.key.hash to two tier-2 Collectors. Each export mixes several
// groups in one trace, and every group's two calls are sent in different
// exports: a group split across tier-2 instances would lose its duplicate.
func TestTwoTier_GroupsStayTogether(t *testing.T) {
	bin := collectorBinary(t)
	root := repoRoot(t)
	type tier2 struct{ otlp, prom int }
	var backends []tier2
	for _, name := range []string{"tier2-a", "tier2-b"} {
		b := tier2{freePort(t), freePort(t)}
		startCollector(t, name, bin, filepath.Join(root, "collector", "examples", "two-tier", "tier2.yaml"), b.otlp,
			fmt.Sprintf("OTLP_GRPC_ENDPOINT=127.0.0.1:%d", b.otlp),
			fmt.Sprintf("PROMETHEUS_ENDPOINT=127.0.0.1:%d", b.prom),
			"DUP_DECISION_WAIT=1s", "DUP_FLUSH_INTERVAL=200ms", "LOG_LEVEL=warn")
		backends = append(backends, b)
	}
	tier1 := freePort(t)
	startCollector(t, "tier1", bin, filepath.Join(root, "collector", "examples", "two-tier", "tier1.yaml"), tier1,
		fmt.Sprintf("OTLP_GRPC_ENDPOINT=127.0.0.1:%d", tier1),
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
}
