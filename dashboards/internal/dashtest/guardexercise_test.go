package dashtest

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/idemkit-mcp/idemkit/internal/testing/harness"
	sc "github.com/idemkit-mcp/idemkit/spancontract"
)

// TestGuardExercise_RecordsWhatAHealthyRunNeverDoes runs the exercised
// server for real and reads its metrics back: the finish errors (lease lost
// and store error), the refusals (store unavailable, invalid arguments), a
// session that ended and requests of every method it made, each agreeing
// with the server's own spans.
func TestGuardExercise_RecordsWhatAHealthyRunNeverDoes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	var log strings.Builder
	res, err := GuardExercise(ctx, t.TempDir(), mp, &log)
	if err != nil {
		t.Fatal(err)
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	sums := map[string]map[string]int64{} // metric -> label value -> sum
	counts := map[string]map[string]uint64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					k := labelOf(p.Attributes, sc.FinishError, sc.RefusalReason, sc.Outcome)
					if sums[m.Name] == nil {
						sums[m.Name] = map[string]int64{}
					}
					sums[m.Name][k] += p.Value
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					k := labelOf(p.Attributes, sc.MCPMethodName)
					if counts[m.Name] == nil {
						counts[m.Name] = map[string]uint64{}
					}
					counts[m.Name][k] += p.Count
				}
			}
		}
	}

	t.Logf("counters: %v", sums)
	t.Logf("histogram counts: %v", counts)
	finish := sums[sc.MetricFinishErrors]
	if finish[sc.FinishLeaseLost] != 1 || finish[sc.FinishStoreError] != 1 || len(finish) != 2 {
		t.Errorf("%s = %v, want lease_lost 1 and store_error 1", sc.MetricFinishErrors, finish)
	}
	for reason, n := range res.FinishErrors {
		if finish[reason] != int64(n) {
			t.Errorf("finish error %s: metric %d, spans %g", reason, finish[reason], n)
		}
	}
	calls := sums[sc.MetricToolCalls]
	for _, reason := range []string{sc.RefusalStoreUnavailable, sc.RefusalInvalidArguments} {
		if calls[reason] != 1 || res.Refusals[reason] != 1 {
			t.Errorf("refusal %s: metric %d, spans %g, want 1 (tool calls by label: %v)", reason, calls[reason], res.Refusals[reason], calls)
		}
	}
	if sums[sc.MetricReplays][""] != 1 {
		t.Errorf("%s = %v, want 1", sc.MetricReplays, sums[sc.MetricReplays])
	}
	if got := counts[sc.MetricSessionDuration][""]; got != uint64(res.Sessions) || got == 0 {
		t.Errorf("%s count %d, want the %d sessions the client closed", sc.MetricSessionDuration, got, res.Sessions)
	}
	methods := Count(res.Spans, func(s harness.Span) (string, bool) { m := s.Str(sc.MCPMethodName); return m, m != "" })
	for _, m := range []string{"initialize", "tools/list", "ping", "tools/call"} {
		if methods[m] == 0 {
			t.Errorf("no %s span (spans by method: %v)", m, methods)
		}
	}
	for m, n := range methods {
		if got := counts[sc.MetricOperationDuration][m]; got != uint64(n) {
			t.Errorf("%s{%s} count %d, want the %g spans of that method", sc.MetricOperationDuration, m, got, n)
		}
	}
	if !strings.Contains(log.String(), "finish failed") {
		t.Errorf("the Guard logged no failed finish:\n%s", log.String())
	}
}

// labelOf returns the value of the first of keys that set has, or "".
func labelOf(set attribute.Set, keys ...string) string {
	for _, k := range keys {
		if v, ok := set.Value(attribute.Key(k)); ok {
			return v.AsString()
		}
	}
	return ""
}
