package dashtest

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	v1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"

	"github.com/idemkit-mcp/idemkit/internal/testing/harness"
)

// Prom queries a Prometheus through client_golang's API client, returning
// results in the shapes the checks compare.
type Prom struct {
	URL string // e.g. http://127.0.0.1:9090
	API v1.API
}

// NewProm returns a client of the Prometheus at url.
func NewProm(url string) (*Prom, error) {
	api, err := harness.NewPrometheusAPI(url)
	if err != nil {
		return nil, err
	}
	return &Prom{URL: url, API: api}, nil
}

// Sample is one series of an instant query's result.
type Sample struct {
	Labels map[string]string
	Value  float64
}

// Name renders the series for messages.
func (s Sample) Name() string {
	keys := make([]string, 0, len(s.Labels))
	for k := range s.Labels {
		if strings.HasPrefix(k, "otel_scope_") || k == model.MetricNameLabel {
			continue
		}
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	b.WriteString(s.Labels[model.MetricNameLabel])
	b.WriteByte('{')
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%s=%q", k, s.Labels[k])
	}
	b.WriteByte('}')
	return b.String()
}

func labelMap(m model.Metric) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[string(k)] = string(v)
	}
	return out
}

// Query runs an instant query at t; a scalar result is one sample without
// labels.
func (p *Prom) Query(ctx context.Context, expr string, t time.Time) ([]Sample, error) {
	v, _, err := p.API.Query(ctx, expr, t)
	if err != nil {
		return nil, err
	}
	switch r := v.(type) {
	case model.Vector:
		out := make([]Sample, 0, len(r))
		for _, s := range r {
			out = append(out, Sample{Labels: labelMap(s.Metric), Value: float64(s.Value)})
		}
		return out, nil
	case *model.Scalar:
		return []Sample{{Labels: map[string]string{}, Value: float64(r.Value)}}, nil
	}
	return nil, fmt.Errorf("instant query returned a %s", v.Type())
}

// RangeSeries is one series of a range query's result.
type RangeSeries struct {
	Labels map[string]string
	Values []float64
}

// QueryRange runs a range query.
func (p *Prom) QueryRange(ctx context.Context, expr string, start, end time.Time, step time.Duration) ([]RangeSeries, error) {
	v, _, err := p.API.QueryRange(ctx, expr, v1.Range{Start: start, End: end, Step: step})
	if err != nil {
		return nil, err
	}
	m, ok := v.(model.Matrix)
	if !ok {
		return nil, fmt.Errorf("range query returned a %s", v.Type())
	}
	out := make([]RangeSeries, 0, len(m))
	for _, s := range m {
		rs := RangeSeries{Labels: labelMap(s.Metric)}
		for _, pt := range s.Values {
			rs.Values = append(rs.Values, float64(pt.Value))
		}
		out = append(out, rs)
	}
	return out, nil
}

// Series returns the label sets of the series matching selector between
// start and end.
func (p *Prom) Series(ctx context.Context, selector string, start, end time.Time) ([]map[string]string, error) {
	sets, _, err := p.API.Series(ctx, []string{selector}, start, end)
	if err != nil {
		return nil, err
	}
	out := make([]map[string]string, 0, len(sets))
	for _, ls := range sets {
		m := make(map[string]string, len(ls))
		for k, v := range ls {
			m[string(k)] = string(v)
		}
		out = append(out, m)
	}
	return out, nil
}
