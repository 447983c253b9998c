package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/pmetric/pmetricotlp"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/idemkit-mcp/idemkit/internal/testing/harness"
)

// The helpers below are the tests' names for the shared end-to-end harness
// (internal/testing/harness): processes, ports, readiness and scraping
// live there, once for the e2e tests, the dashboards test and the demo.

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// collectorBinary returns the path of otelcol-idemkit: $IDEMKIT_OTELCOL,
// else the build of scripts/collector-build.sh, which the tests run when
// CI=true or IDEMKIT_E2E=1 (failing if it fails). Otherwise, with no binary
// built yet, they skip.
func collectorBinary(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("IDEMKIT_OTELCOL"); p != "" {
		return p
	}
	root := repoRoot(t)
	if !harness.CI() && os.Getenv("IDEMKIT_E2E") != "1" {
		built := filepath.Join(root, "collector", "_build", "otelcol-idemkit", "otelcol-idemkit")
		if _, err := os.Stat(built); err == nil {
			return built
		}
		t.Skip("no otelcol-idemkit binary: run scripts/collector-build.sh, or set IDEMKIT_E2E=1 to build it here")
	}
	bin, err := harness.CollectorBinary(context.Background(), root, nil)
	if err != nil {
		t.Fatalf("cannot build the Collector distribution (required when CI=true or IDEMKIT_E2E=1): %v", err)
	}
	return bin
}

func freePort(t *testing.T) int {
	t.Helper()
	p, err := harness.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

var (
	groupsMu sync.Mutex // protects groups
	groups   = map[testing.TB]*harness.Group{}
)

// group returns the test's process group, stopped when the test ends.
func group(t testing.TB) *harness.Group {
	groupsMu.Lock()
	defer groupsMu.Unlock()
	if g := groups[t]; g != nil {
		return g
	}
	g := &harness.Group{Dir: t.TempDir()}
	groups[t] = g
	t.Cleanup(func() {
		if err := g.StopAll(15 * time.Second); err != nil {
			t.Error(err)
		}
		groupsMu.Lock()
		delete(groups, t)
		groupsMu.Unlock()
	})
	return g
}

// collector is a running otelcol-idemkit process.
type collector struct {
	name string
	proc *harness.Proc
}

// startCollector runs the binary with a config file and environment, and
// waits until its OTLP port accepts connections. Its output is logged when
// the test fails.
func startCollector(t *testing.T, name, bin, config string, otlpPort int, env ...string) *collector {
	t.Helper()
	return startCollectorArgs(t, name, bin, []string{"--config", config}, otlpPort, env...)
}

// startCollectorArgs is startCollector with the command line's arguments
// (several --config files are merged, later ones winning).
func startCollectorArgs(t *testing.T, name, bin string, args []string, otlpPort int, env ...string) *collector {
	t.Helper()
	p, err := group(t).Start(name, env, append([]string{bin}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("%s output (%s):\n%s", name, p.Log, p.Tail(80))
		}
	})
	if err := p.WaitReady(context.Background(), "its OTLP port", 60*time.Second, harness.Listening(fmt.Sprintf("127.0.0.1:%d", otlpPort))); err != nil {
		t.Fatal(err)
	}
	return &collector{name: name, proc: p}
}

// otlpExport dials the Collector's OTLP/gRPC port and calls export on
// the connection with a 10s deadline.
func otlpExport(t *testing.T, port int, what string, export func(context.Context, *grpc.ClientConn) error) {
	t.Helper()
	conn, err := grpc.NewClient(fmt.Sprintf("127.0.0.1:%d", port), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := export(ctx, conn); err != nil {
		t.Fatalf("OTLP %s export: %v", what, err)
	}
}

func exportSpans(t *testing.T, port int, td ptrace.Traces) {
	t.Helper()
	otlpExport(t, port, "traces", func(ctx context.Context, conn *grpc.ClientConn) error {
		_, err := ptraceotlp.NewGRPCClient(conn).Export(ctx, ptraceotlp.NewExportRequestFromTraces(td))
		return err
	})
}

// series is one sample of a Prometheus exposition (harness.Sample).
type series struct {
	name   string
	labels map[string]string
	value  float64
}

func fromSamples(ss harness.Samples) []series {
	out := make([]series, len(ss))
	for i, s := range ss {
		out[i] = series{name: s.Name, labels: s.Labels, value: s.Value}
	}
	return out
}

// scrape fetches a Prometheus exposition and returns its samples (a
// histogram gives its _bucket, _sum and _count series); a malformed
// exposition is an error.
func scrape(url string) ([]series, error) {
	ss, err := harness.Scrape(context.Background(), url)
	return fromSamples(ss), err
}

// sum adds up the samples of name whose labels include want.
func sum(all []series, name string, want map[string]string) (float64, bool) {
	ss := make(harness.Samples, len(all))
	for i, s := range all {
		ss[i] = harness.Sample{Name: s.name, Labels: s.labels, Value: s.value}
	}
	return ss.Sum(name, want)
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
	exp := make([]harness.Expect, len(want))
	for i, e := range want {
		exp[i] = harness.Expect{Name: e.name, Labels: e.labels, Value: e.value}
	}
	got, err := harness.WaitScrape(context.Background(), timeout, urls, exp)
	if err != nil {
		var dump string
		for _, s := range got {
			if len(s.Name) > 8 && (s.Name[:8] == "idemkit_" || s.Name[:8] == "otelcol_") {
				dump += fmt.Sprintf("%s %v %v\n", s.Name, s.Labels, s.Value)
			}
		}
		t.Fatalf("metrics never matched: %v\nseries seen:\n%s", err, dump)
	}
	return fromSamples(got)
}

// exportServerMetrics sends, as an MCP server protected by idemkit would,
// the counter idemkit.tool.calls at n for issue_refund, outcome executed.
func exportServerMetrics(t *testing.T, port int, service string, n int64) {
	t.Helper()
	md := pmetric.NewMetrics()
	rm := md.ResourceMetrics().AppendEmpty()
	rm.Resource().Attributes().PutStr("service.name", service)
	m := rm.ScopeMetrics().AppendEmpty().Metrics().AppendEmpty()
	m.SetName("idemkit.tool.calls")
	sum := m.SetEmptySum()
	sum.SetIsMonotonic(true)
	sum.SetAggregationTemporality(pmetric.AggregationTemporalityCumulative)
	dp := sum.DataPoints().AppendEmpty()
	dp.SetStartTimestamp(pcommon.NewTimestampFromTime(time.Now().Add(-time.Minute)))
	dp.SetTimestamp(pcommon.NewTimestampFromTime(time.Now()))
	dp.SetIntValue(n)
	dp.Attributes().PutStr("gen_ai.tool.name", "issue_refund")
	dp.Attributes().PutStr("idemkit.outcome", "executed")
	otlpExport(t, port, "metrics", func(ctx context.Context, conn *grpc.ClientConn) error {
		_, err := pmetricotlp.NewGRPCClient(conn).Export(ctx, pmetricotlp.NewExportRequestFromMetrics(md))
		return err
	})
}
