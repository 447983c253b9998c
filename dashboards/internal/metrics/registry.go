// Package metrics reads metrics.json, the one list of the metrics the
// idemkit dashboards may read: the dashboards (internal/build) take every
// metric name from it by id, and every check (internal/dashtest) checks
// queries and Prometheus against it.
package metrics

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
)

// Metric types of the registry.
const (
	Counter   = "counter"
	Gauge     = "gauge"
	Histogram = "histogram"
)

// Metric is one emitted metric of the registry (metrics.json).
type Metric struct {
	// ID names the metric in the code; Name is its Prometheus name.
	ID             string   `json:"id"`
	Name           string   `json:"name"`
	Type           string   `json:"type"`
	Unit           string   `json:"unit"`
	Endpoint       string   `json:"endpoint"`
	Labels         []string `json:"labels"`
	OptionalLabels []string `json:"optional_labels"`
	Emitted        string   `json:"emitted"`
	Source         string   `json:"source"`
}

// Endpoint is where a group of metrics is scraped from.
type Endpoint struct {
	What         string   `json:"what"`
	CommonLabels []string `json:"common_labels"`
}

// Registry is the list of metrics the system emits.
type Registry struct {
	Endpoints map[string]Endpoint `json:"endpoints"`
	Metrics   []*Metric           `json:"metrics"`
}

// ParseRegistry reads metrics.json and checks it is consistent.
func ParseRegistry(data []byte) (*Registry, error) {
	var raw struct {
		Description string `json:"description"`
		Registry
	}
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&raw); err != nil {
		return nil, fmt.Errorf("metrics registry: %w", err)
	}
	r := raw.Registry
	seen := map[string]bool{}
	ids := map[string]bool{}
	for _, m := range r.Metrics {
		switch {
		case m.Name == "":
			return nil, fmt.Errorf("metrics registry: a metric has no name")
		case m.ID == "" || ids[m.ID]:
			return nil, fmt.Errorf("metrics registry: %s: id %q is empty or not unique", m.Name, m.ID)
		case m.Type == Histogram && m.Unit == "":
			return nil, fmt.Errorf("metrics registry: histogram %s has no unit", m.Name)
		case seen[m.Name]:
			return nil, fmt.Errorf("metrics registry: %s listed twice", m.Name)
		case m.Type != Counter && m.Type != Gauge && m.Type != Histogram:
			return nil, fmt.Errorf("metrics registry: %s: type %q", m.Name, m.Type)
		case m.Type == Counter && !strings.HasSuffix(m.Name, "_total") && !strings.HasPrefix(m.Name, "otelcol_"):
			// The Collector's own telemetry has no _total suffix at v0.161.0.
			return nil, fmt.Errorf("metrics registry: counter %s has no _total suffix", m.Name)
		case m.Source == "":
			return nil, fmt.Errorf("metrics registry: %s: no source", m.Name)
		case m.Emitted != "always" && m.Emitted != "after_first_event":
			return nil, fmt.Errorf("metrics registry: %s: emitted %q", m.Name, m.Emitted)
		}
		if _, ok := r.Endpoints[m.Endpoint]; !ok {
			return nil, fmt.Errorf("metrics registry: %s: unknown endpoint %q", m.Name, m.Endpoint)
		}
		seen[m.Name] = true
		ids[m.ID] = true
	}
	return &r, nil
}

// ByID returns the metric with the id, or an error naming it.
func (r *Registry) ByID(id string) (*Metric, error) {
	for _, m := range r.Metrics {
		if m.ID == id {
			return m, nil
		}
	}
	return nil, fmt.Errorf("metrics.json has no metric with id %q", id)
}

// Name returns the Prometheus name of the metric with the id; it panics
// when there is none (the ids are the code's, checked by its tests).
func (r *Registry) Name(id string) string {
	m, err := r.ByID(id)
	if err != nil {
		panic(err)
	}
	return m.Name
}

// Series is a Prometheus series name resolved in the registry.
type Series struct {
	Metric *Metric
	// Suffix is _bucket, _sum or _count for histogram series, else "".
	Suffix string
}

// Lookup resolves a series name: a metric's own name, or a histogram's
// _bucket, _sum or _count series.
func (r *Registry) Lookup(name string) (Series, bool) {
	for _, m := range r.Metrics {
		if m.Type != Histogram {
			if m.Name == name {
				return Series{Metric: m}, true
			}
			continue
		}
		for _, suf := range []string{"_bucket", "_sum", "_count"} {
			if name == m.Name+suf {
				return Series{Metric: m, Suffix: suf}, true
			}
		}
	}
	return Series{}, false
}

// Counts reports whether the series is a counter (or a histogram's
// cumulative _bucket, _sum, _count series), which rate and increase need.
func (s Series) Counts() bool { return s.Metric.Type == Counter || s.Metric.Type == Histogram }

// Labels returns every label a series of s may carry, sorted.
func (r *Registry) Labels(s Series) []string {
	set := map[string]bool{}
	for _, l := range s.Metric.Labels {
		set[l] = true
	}
	for _, l := range s.Metric.OptionalLabels {
		set[l] = true
	}
	for _, l := range r.Endpoints[s.Metric.Endpoint].CommonLabels {
		set[l] = true
	}
	if s.Suffix == "_bucket" {
		set["le"] = true
	}
	out := make([]string, 0, len(set))
	for l := range set {
		out = append(out, l)
	}
	sort.Strings(out)
	return out
}

// HasLabel reports whether a series of s may carry label.
func (r *Registry) HasLabel(s Series, label string) bool {
	return slices.Contains(r.Labels(s), label)
}

// SeriesNames returns the Prometheus series names of a metric.
func (m *Metric) SeriesNames() []string {
	if m.Type == Histogram {
		return []string{m.Name + "_bucket", m.Name + "_sum", m.Name + "_count"}
	}
	return []string{m.Name}
}
