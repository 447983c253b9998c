package dupconnector

import (
	"context"
	"flag"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/open-telemetry/opentelemetry-collector-contrib/pkg/golden"
	"github.com/open-telemetry/opentelemetry-collector-contrib/pkg/pdatatest/pmetrictest"
	"github.com/open-telemetry/opentelemetry-collector-contrib/pkg/pdatatest/ptracetest"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/confmap/confmaptest"
	"go.opentelemetry.io/collector/connector/connectortest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/idemkit-mcp/idemkit/collector/dupprocessor/dupconnector/internal/metadata"
	sc "github.com/idemkit-mcp/idemkit/spancontract"
)

// update regenerates testdata/<case>/input.yaml (processor_cases only) and
// expected.yaml:
//
//	go test ./dupconnector -run TestGolden -update
var update = flag.Bool("update", false, "regenerate the golden files in testdata/")

var fixedNow = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

func newTestConnector(t *testing.T, cfg *Config) (*dupConnector, *consumertest.MetricsSink) {
	if cfg == nil {
		cfg = createDefaultConfig()
	}
	require.NoError(t, cfg.Validate())
	sink := new(consumertest.MetricsSink)
	c := newDupConnector(connectortest.NewNopSettings(metadata.Type), cfg, sink)
	c.now = func() time.Time { return fixedNow }
	return c, sink
}

// processorOutputs concatenates the dup processor's golden outputs: the
// spans exactly as the processor annotates them.
func processorOutputs(t *testing.T) ptrace.Traces {
	paths, err := filepath.Glob(filepath.Join("..", "testdata", "*", "expected.yaml"))
	require.NoError(t, err)
	require.NotEmpty(t, paths)
	sort.Strings(paths)
	all := ptrace.NewTraces()
	for _, p := range paths {
		td, err := golden.ReadTraces(p)
		require.NoError(t, err)
		td.ResourceSpans().MoveAndAppendTo(all.ResourceSpans())
	}
	return all
}

// toolSpans counts the spans of the processor's golden outputs that carry
// gen_ai.tool.name and no mcp.method.name other than tools/call.
func toolSpans(t *testing.T) int {
	td := processorOutputs(t)
	n := 0
	rss := td.ResourceSpans()
	for i := 0; i < rss.Len(); i++ {
		sss := rss.At(i).ScopeSpans()
		for j := 0; j < sss.Len(); j++ {
			for _, s := range sss.At(j).Spans().All() {
				m, hasMethod := s.Attributes().Get(sc.MCPMethodName)
				if _, ok := s.Attributes().Get(sc.GenAIToolName); ok && (!hasMethod || m.Str() == sc.MethodToolsCall) {
					n++
				}
			}
		}
	}
	return n
}

// malformedAnnotations are spans whose annotations break the contract's
// types or enums: they count as tool calls and never as duplicates.
func malformedAnnotations() ptrace.Traces {
	td := ptrace.NewTraces()
	rs := td.ResourceSpans().AppendEmpty()
	rs.Resource().Attributes().PutInt("service.name", 42)
	spans := rs.ScopeSpans().AppendEmpty().Spans()
	add := func(f func(pcommon.Map)) {
		s := spans.AppendEmpty()
		s.Attributes().PutStr(sc.GenAIOperationName, sc.OperationExecuteTool)
		s.Attributes().PutStr(sc.GenAIToolName, "send_email")
		f(s.Attributes())
	}
	add(func(m pcommon.Map) { m.PutStr(sc.Duplicate, "true"); m.PutStr(sc.DuplicateCause, sc.CauseHarnessRetry) })
	add(func(m pcommon.Map) {
		m.PutBool(sc.Duplicate, true)
		m.PutStr(sc.DuplicateCause, "cosmic_ray")
		m.PutStr(sc.DuplicateEffect, sc.EffectLeaked)
	})
	add(func(m pcommon.Map) {
		m.PutBool(sc.Duplicate, true)
		m.PutStr(sc.DuplicateCause, sc.CauseHarnessRetry)
		m.PutStr(sc.DuplicateEffect, "vanished")
	})
	add(func(m pcommon.Map) {
		// Valid cause and effect, a gap of the wrong type: counted, no gap.
		m.PutBool(sc.Duplicate, true)
		m.PutStr(sc.DuplicateCause, sc.CauseHarnessRetry)
		m.PutStr(sc.DuplicateEffect, sc.EffectBlocked)
		m.PutStr(sc.DuplicateGapMS, "12")
	})
	// The uncompared mark counts only as the bool true, and never on a
	// span that also says it is a duplicate.
	add(func(m pcommon.Map) { m.PutStr(sc.DuplicateUncompared, "true") })
	add(func(m pcommon.Map) { m.PutBool(sc.DuplicateUncompared, true) })
	add(func(m pcommon.Map) {
		m.PutBool(sc.DuplicateUncompared, true)
		m.PutBool(sc.Duplicate, true)
		m.PutStr(sc.DuplicateCause, sc.CauseUnknown)
		m.PutStr(sc.DuplicateEffect, sc.EffectLeaked)
	})
	// A plain span with annotations is not a tool span: ignored.
	s := spans.AppendEmpty()
	s.Attributes().PutBool(sc.Duplicate, true)
	s.Attributes().PutStr(sc.DuplicateCause, sc.CauseHarnessRetry)
	s.Attributes().PutStr(sc.DuplicateEffect, sc.EffectLeaked)
	return td
}

func TestGolden(t *testing.T) {
	cases := []struct {
		name  string
		input func(t *testing.T) ptrace.Traces
		check func(t *testing.T, md pmetric.Metrics)
	}{
		{
			name:  "processor_cases",
			input: processorOutputs,
			check: func(t *testing.T, md pmetric.Metrics) {
				// The processor's golden cases hold 48 duplicates.
				byCause := sumBy(t, md, MetricCalls, sc.DuplicateCause)
				require.Equal(t, map[string]int64{
					sc.CauseTransportRetry:  8,
					sc.CauseHarnessRetry:    15,
					sc.CauseModelReissue:    11,
					sc.CauseReconnectReplay: 3,
					sc.CauseUnknown:         11,
				}, byCause)
				require.Equal(t, map[string]int64{
					sc.EffectSuppressed: 24,
					sc.EffectBlocked:    6,
					sc.EffectLeaked:     18,
				}, sumBy(t, md, MetricCalls, sc.DuplicateEffect))
				// The calls the processor could not compare (the uncompared
				// case: two spans of another instrumentation without
				// arguments, one unprotected write without hashes).
				require.Equal(t, map[string]int64{"send_email": 3}, sumBy(t, md, MetricUncompared, sc.GenAIToolName))
				// Every tool span is a candidate; the spans of the other MCP
				// methods (server_span_shape) are not tool calls.
				require.Equal(t, int64(toolSpans(t)), total(sumBy(t, md, MetricCandidates, sc.GenAIToolName)))
				forMetric(t, md, "idemkit.duplicate.leaked", func(pmetric.Metric) {
					t.Error("idemkit.duplicate.leaked is gone: leaked duplicates are calls{effect=leaked}")
				})
				// Every duplicate but the eviction case's orphan has a gap.
				require.Equal(t, uint64(47), histCount(t, md))
			},
		},
		{
			name:  "malformed_annotations",
			input: func(*testing.T) ptrace.Traces { return malformedAnnotations() },
			check: func(t *testing.T, md pmetric.Metrics) {
				require.Equal(t, map[string]int64{sc.CauseHarnessRetry: 1, sc.CauseUnknown: 1}, sumBy(t, md, MetricCalls, sc.DuplicateCause))
				require.Equal(t, map[string]int64{"send_email": 7}, sumBy(t, md, MetricCandidates, sc.GenAIToolName))
				require.Equal(t, map[string]int64{"send_email": 1}, sumBy(t, md, MetricUncompared, sc.GenAIToolName))
				require.Equal(t, uint64(0), histCount(t, md))
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join("testdata", tc.name)
			in := tc.input(t)
			c, sink := newTestConnector(t, nil)
			require.NoError(t, c.ConsumeTraces(context.Background(), in))
			require.NoError(t, c.Shutdown(context.Background()))
			require.Len(t, sink.AllMetrics(), 1)
			got := sink.AllMetrics()[0]
			tc.check(t, got)

			inPath, outPath := filepath.Join(dir, "input.yaml"), filepath.Join(dir, "expected.yaml")
			if *update {
				require.NoError(t, os.MkdirAll(dir, 0o755))
				require.NoError(t, golden.WriteTracesToFile(inPath, in))
				require.NoError(t, golden.WriteMetricsToFile(outPath, got))
			}
			wantIn, err := golden.ReadTraces(inPath)
			require.NoError(t, err)
			require.NoError(t, ptracetest.CompareTraces(wantIn, in), "input.yaml is stale: go test -run TestGolden -update")
			want, err := golden.ReadMetrics(outPath)
			require.NoError(t, err)
			require.NoError(t, pmetrictest.CompareMetrics(want, got,
				pmetrictest.IgnoreMetricDataPointsOrder(),
				pmetrictest.IgnoreStartTimestamp(),
				pmetrictest.IgnoreTimestamp()))
		})
	}
}

// sumBy adds up the data points of the named sum by one attribute.
func sumBy(t *testing.T, md pmetric.Metrics, name, attr string) map[string]int64 {
	out := map[string]int64{}
	forMetric(t, md, name, func(m pmetric.Metric) {
		require.Equal(t, pmetric.AggregationTemporalityCumulative, m.Sum().AggregationTemporality())
		require.True(t, m.Sum().IsMonotonic())
		for i := 0; i < m.Sum().DataPoints().Len(); i++ {
			dp := m.Sum().DataPoints().At(i)
			v, ok := dp.Attributes().Get(attr)
			require.True(t, ok, "%s data point without %s", name, attr)
			out[v.Str()] += dp.IntValue()
		}
	})
	return out
}

func total(m map[string]int64) int64 {
	var n int64
	for _, v := range m {
		n += v
	}
	return n
}

func histCount(t *testing.T, md pmetric.Metrics) uint64 {
	var n uint64
	forMetric(t, md, MetricGap, func(m pmetric.Metric) {
		for i := 0; i < m.Histogram().DataPoints().Len(); i++ {
			dp := m.Histogram().DataPoints().At(i)
			var buckets uint64
			for _, c := range dp.BucketCounts().AsRaw() {
				buckets += c
			}
			require.Equal(t, dp.Count(), buckets)
			n += dp.Count()
		}
	})
	return n
}

func forMetric(t *testing.T, md pmetric.Metrics, name string, f func(pmetric.Metric)) {
	t.Helper()
	rms := md.ResourceMetrics()
	for i := 0; i < rms.Len(); i++ {
		sms := rms.At(i).ScopeMetrics()
		for j := 0; j < sms.Len(); j++ {
			ms := sms.At(j).Metrics()
			for k := 0; k < ms.Len(); k++ {
				if ms.At(k).Name() == name {
					f(ms.At(k))
				}
			}
		}
	}
}

func TestConnector_GapBuckets(t *testing.T) {
	c, sink := newTestConnector(t, nil)
	td := ptrace.NewTraces()
	rs := td.ResourceSpans().AppendEmpty()
	rs.Resource().Attributes().PutStr("service.name", "billing")
	spans := rs.ScopeSpans().AppendEmpty().Spans()
	for _, gap := range []int64{0, 10, 11, 1999, 2000, 3_600_000} {
		s := spans.AppendEmpty()
		s.Attributes().PutStr(sc.GenAIOperationName, sc.OperationExecuteTool)
		s.Attributes().PutStr(sc.GenAIToolName, "issue_refund")
		s.Attributes().PutBool(sc.Duplicate, true)
		s.Attributes().PutStr(sc.DuplicateCause, sc.CauseHarnessRetry)
		s.Attributes().PutStr(sc.DuplicateEffect, sc.EffectSuppressed)
		s.Attributes().PutInt(sc.DuplicateGapMS, gap)
	}
	require.NoError(t, c.ConsumeTraces(context.Background(), td))
	require.NoError(t, c.Shutdown(context.Background()))
	var dp pmetric.HistogramDataPoint
	forMetric(t, sink.AllMetrics()[0], MetricGap, func(m pmetric.Metric) { dp = m.Histogram().DataPoints().At(0) })
	// Seconds, as OpenTelemetry recommends for durations. Bounds: 0.01 0.05
	// 0.1 0.25 0.5 1 2 5 10 30 60 120 300 600 900, +Inf.
	var unit string
	forMetric(t, sink.AllMetrics()[0], MetricGap, func(m pmetric.Metric) { unit = m.Unit() })
	require.Equal(t, "s", unit)
	require.Equal(t, []float64{0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 900}, dp.ExplicitBounds().AsRaw())
	require.Equal(t, []uint64{2, 1, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 1}, dp.BucketCounts().AsRaw())
	require.Equal(t, uint64(6), dp.Count())
	require.InDelta(t, (0+10+11+1999+2000+3_600_000)/1e3, dp.Sum(), 1e-9)
	require.Equal(t, 3600.0, dp.Max())
	require.Equal(t, 0.0, dp.Min())
}

func TestConnector_SeriesCap(t *testing.T) {
	cfg := createDefaultConfig()
	cfg.MaxSeries = 2
	c, sink := newTestConnector(t, cfg)
	td := ptrace.NewTraces()
	spans := td.ResourceSpans().AppendEmpty().ScopeSpans().AppendEmpty().Spans()
	for _, tool := range []string{"a", "b", "c", "d"} {
		s := spans.AppendEmpty()
		s.Attributes().PutStr(sc.GenAIOperationName, sc.OperationExecuteTool)
		s.Attributes().PutStr(sc.GenAIToolName, tool)
	}
	require.NoError(t, c.ConsumeTraces(context.Background(), td))
	require.NoError(t, c.Shutdown(context.Background()))
	var n, overflow int64
	forMetric(t, sink.AllMetrics()[0], MetricCandidates, func(m pmetric.Metric) {
		require.Equal(t, 3, m.Sum().DataPoints().Len(), "two series and the overflow series")
		for i := 0; i < m.Sum().DataPoints().Len(); i++ {
			dp := m.Sum().DataPoints().At(i)
			n += dp.IntValue()
			if _, ok := dp.Attributes().Get(attrOverflow); ok {
				overflow += dp.IntValue()
			}
		}
	})
	require.Equal(t, int64(4), n)
	require.Equal(t, int64(2), overflow)
}

func TestConnector_NothingSeenEmitsNothing(t *testing.T) {
	c, sink := newTestConnector(t, nil)
	require.NoError(t, c.Start(context.Background(), nil))
	require.NoError(t, c.Shutdown(context.Background()))
	require.Empty(t, sink.AllMetrics())
}

func TestConnector_FlushesOnTicker(t *testing.T) {
	cfg := createDefaultConfig()
	cfg.MetricsFlushInterval = 10 * time.Millisecond
	c, sink := newTestConnector(t, cfg)
	require.NoError(t, c.Start(context.Background(), nil))
	td := ptrace.NewTraces()
	s := td.ResourceSpans().AppendEmpty().ScopeSpans().AppendEmpty().Spans().AppendEmpty()
	s.Attributes().PutStr(sc.GenAIOperationName, sc.OperationExecuteTool)
	require.NoError(t, c.ConsumeTraces(context.Background(), td))
	require.Eventually(t, func() bool { return len(sink.AllMetrics()) > 0 }, 5*time.Second, 5*time.Millisecond)
	require.NoError(t, c.Shutdown(context.Background()))
}

func TestConfig(t *testing.T) {
	cm, err := confmaptest.LoadConf(filepath.Join("testdata", "config.yaml"))
	require.NoError(t, err)
	for _, tc := range []struct {
		id      string
		wantErr string
		check   func(*testing.T, *Config)
	}{
		{id: "dup", check: func(t *testing.T, c *Config) { require.Equal(t, createDefaultConfig(), c) }},
		{id: "dup/custom", check: func(t *testing.T, c *Config) {
			require.Equal(t, time.Second, c.MetricsFlushInterval)
			require.Equal(t, []time.Duration{100 * time.Millisecond, time.Second}, c.GapBuckets)
			require.Equal(t, 50, c.MaxSeries)
		}},
		{id: "dup/bad_buckets", wantErr: "gap_buckets[1]: must be greater than gap_buckets[0]"},
		{id: "dup/bad_interval", wantErr: "metrics_flush_interval: must be positive"},
		{id: "dup/bad_series", wantErr: "max_series: must be positive"},
	} {
		t.Run(tc.id, func(t *testing.T) {
			cfg := createDefaultConfig()
			sub, err := cm.Sub(tc.id)
			require.NoError(t, err)
			require.NoError(t, sub.Unmarshal(cfg))
			err = cfg.Validate()
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			tc.check(t, cfg)
		})
	}
}
