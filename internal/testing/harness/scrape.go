package harness

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"sort"
	"strconv"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Sample is one series of a Prometheus exposition, as Prometheus stores
// it: a histogram gives its NAME_bucket (with le), NAME_sum and NAME_count
// series, a summary its quantiles, NAME_sum and NAME_count.
type Sample struct {
	Name   string
	Labels map[string]string // without the metric name
	Value  float64
}

// Samples is one scrape.
type Samples []Sample

var scrapeClient = &http.Client{Timeout: 10 * time.Second}

// Scrape fetches a Prometheus text exposition (a /metrics URL) and parses
// it with expfmt; a malformed exposition is an error.
func Scrape(ctx context.Context, url string) (Samples, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", string(expfmt.NewFormat(expfmt.TypeTextPlain)))
	resp, err := scrapeClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	ss, err := ParseText(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", url, err)
	}
	return ss, nil
}

// ParseText parses the Prometheus text format with expfmt. The samples are
// sorted by name, then labels, for stable output.
func ParseText(r io.Reader) (Samples, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(r)
	if err != nil {
		return nil, err
	}
	var out Samples
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
				out = append(out, Sample{Name: name, Labels: labels, Value: v})
			}
			switch {
			case m.GetHistogram() != nil:
				h := m.GetHistogram()
				hasInf := false
				for _, b := range h.GetBucket() {
					hasInf = hasInf || math.IsInf(b.GetUpperBound(), 1)
					add(name+"_bucket", float64(b.GetCumulativeCount()), model.BucketLabel, FormatFloat(b.GetUpperBound()))
				}
				if !hasInf { // the text format may leave the +Inf bucket implicit
					add(name+"_bucket", float64(h.GetSampleCount()), model.BucketLabel, "+Inf")
				}
				add(name+"_sum", h.GetSampleSum())
				add(name+"_count", float64(h.GetSampleCount()))
			case m.GetSummary() != nil:
				sm := m.GetSummary()
				for _, q := range sm.GetQuantile() {
					add(name, q.GetValue(), model.QuantileLabel, FormatFloat(q.GetQuantile()))
				}
				add(name+"_sum", sm.GetSampleSum())
				add(name+"_count", float64(sm.GetSampleCount()))
			case m.GetCounter() != nil:
				add(name, m.GetCounter().GetValue())
			case m.GetGauge() != nil:
				add(name, m.GetGauge().GetValue())
			default:
				add(name, m.GetUntyped().GetValue())
			}
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Name != out[j].Name {
			return out[i].Name < out[j].Name
		}
		return model.LabelsToSignature(out[i].Labels) < model.LabelsToSignature(out[j].Labels)
	})
	return out, nil
}

// FormatFloat formats a bucket bound or quantile as Prometheus does.
func FormatFloat(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

// Matches reports whether the sample's labels include every pair of match.
func (s Sample) Matches(match map[string]string) bool {
	for k, v := range match {
		if s.Labels[k] != v {
			return false
		}
	}
	return true
}

// Sum adds the values of the samples named name whose labels include
// match, and reports whether there was any.
func (ss Samples) Sum(name string, match map[string]string) (float64, bool) {
	total, found := 0.0, false
	for _, s := range ss {
		if s.Name == name && s.Matches(match) {
			total += s.Value
			found = true
		}
	}
	return total, found
}

// Total is Sum without the second result.
func (ss Samples) Total(name string, match map[string]string) float64 {
	v, _ := ss.Sum(name, match)
	return v
}

// By sums the samples named name whose labels include match, by the value
// of label.
func (ss Samples) By(name, label string, match map[string]string) map[string]float64 {
	out := map[string]float64{}
	for _, s := range ss {
		if s.Name == name && s.Matches(match) {
			out[s.Labels[label]] += s.Value
		}
	}
	return out
}

// Has reports whether any sample is named name.
func (ss Samples) Has(name string) bool {
	for _, s := range ss {
		if s.Name == name {
			return true
		}
	}
	return false
}

// Expect is a value the sum of some series must reach: the samples named
// Name whose labels include Labels add up to Value.
type Expect struct {
	Name   string
	Labels map[string]string
	Value  float64
}

func (e Expect) String() string { return fmt.Sprintf("%s%v = %g", e.Name, e.Labels, e.Value) }

// Unmet returns the first expectation the samples do not meet, with what
// they hold instead, or "".
func (ss Samples) Unmet(want []Expect) string {
	for _, e := range want {
		got, found := ss.Sum(e.Name, e.Labels)
		if !found || got != e.Value {
			return fmt.Sprintf("%s: got %g (series found: %v)", e, got, found)
		}
	}
	return ""
}

// WaitScrape scrapes urls every 250ms, adding up their samples, until they
// meet every expectation, and returns that scrape. After timeout it fails
// with the first unmet expectation.
func WaitScrape(ctx context.Context, timeout time.Duration, urls []string, want []Expect) (Samples, error) {
	deadline := time.Now().Add(timeout)
	var last Samples
	var why string
	for {
		last, why = nil, ""
		for _, u := range urls {
			s, err := Scrape(ctx, u)
			if err != nil {
				why = err.Error()
				continue
			}
			last = append(last, s...)
		}
		if why == "" {
			if why = last.Unmet(want); why == "" {
				return last, nil
			}
		}
		if time.Now().After(deadline) {
			return last, fmt.Errorf("after %s the metrics of %v still differ: %s", timeout, urls, why)
		}
		select {
		case <-ctx.Done():
			return last, ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}
