package dashtest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Prom is a client of the Prometheus HTTP API.
type Prom struct {
	URL    string // e.g. http://127.0.0.1:9090
	Client *http.Client
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
		if strings.HasPrefix(k, "otel_scope_") {
			continue
		}
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	b.WriteString(s.Labels["__name__"])
	b.WriteByte('{')
	first := true
	for _, k := range keys {
		if k == "__name__" {
			continue
		}
		if !first {
			b.WriteByte(',')
		}
		first = false
		fmt.Fprintf(&b, "%s=%q", k, s.Labels[k])
	}
	b.WriteByte('}')
	return b.String()
}

type apiResponse struct {
	Status    string          `json:"status"`
	Data      json.RawMessage `json:"data"`
	ErrorType string          `json:"errorType"`
	Error     string          `json:"error"`
	Warnings  []string        `json:"warnings"`
}

func (p *Prom) get(ctx context.Context, path string, q url.Values) (json.RawMessage, error) {
	c := p.Client
	if c == nil {
		c = &http.Client{Timeout: 30 * time.Second}
	}
	u := strings.TrimRight(p.URL, "/") + path
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, strings.NewReader(q.Encode()))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, err
	}
	var r apiResponse
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, fmt.Errorf("%s: HTTP %d, not a Prometheus API answer: %.200s", path, resp.StatusCode, body)
	}
	if r.Status != "success" {
		return nil, fmt.Errorf("%s: %s: %s", path, r.ErrorType, r.Error)
	}
	return r.Data, nil
}

func parseValue(v []any) (float64, error) {
	if len(v) != 2 {
		return 0, fmt.Errorf("bad sample %v", v)
	}
	s, ok := v[1].(string)
	if !ok {
		return 0, fmt.Errorf("bad sample value %v", v[1])
	}
	switch s {
	case "NaN":
		return math.NaN(), nil
	case "+Inf":
		return math.Inf(1), nil
	case "-Inf":
		return math.Inf(-1), nil
	}
	return strconv.ParseFloat(s, 64)
}

func promTime(t time.Time) string {
	return strconv.FormatFloat(float64(t.UnixMilli())/1000, 'f', 3, 64)
}

// Query runs an instant query at t; a scalar result is one sample without
// labels.
func (p *Prom) Query(ctx context.Context, expr string, t time.Time) ([]Sample, error) {
	data, err := p.get(ctx, "/api/v1/query", url.Values{"query": {expr}, "time": {promTime(t)}})
	if err != nil {
		return nil, err
	}
	var d struct {
		ResultType string          `json:"resultType"`
		Result     json.RawMessage `json:"result"`
	}
	if err := json.Unmarshal(data, &d); err != nil {
		return nil, err
	}
	switch d.ResultType {
	case "vector":
		var rs []struct {
			Metric map[string]string `json:"metric"`
			Value  []any             `json:"value"`
		}
		if err := json.Unmarshal(d.Result, &rs); err != nil {
			return nil, err
		}
		out := make([]Sample, 0, len(rs))
		for _, r := range rs {
			v, err := parseValue(r.Value)
			if err != nil {
				return nil, err
			}
			out = append(out, Sample{Labels: r.Metric, Value: v})
		}
		return out, nil
	case "scalar":
		var v []any
		if err := json.Unmarshal(d.Result, &v); err != nil {
			return nil, err
		}
		f, err := parseValue(v)
		if err != nil {
			return nil, err
		}
		return []Sample{{Labels: map[string]string{}, Value: f}}, nil
	}
	return nil, fmt.Errorf("instant query returned a %s", d.ResultType)
}

// RangeSeries is one series of a range query's result.
type RangeSeries struct {
	Labels map[string]string
	Values []float64
}

// QueryRange runs a range query.
func (p *Prom) QueryRange(ctx context.Context, expr string, start, end time.Time, step time.Duration) ([]RangeSeries, error) {
	data, err := p.get(ctx, "/api/v1/query_range", url.Values{
		"query": {expr}, "start": {promTime(start)}, "end": {promTime(end)},
		"step": {strconv.FormatFloat(step.Seconds(), 'f', -1, 64)},
	})
	if err != nil {
		return nil, err
	}
	var d struct {
		ResultType string `json:"resultType"`
		Result     []struct {
			Metric map[string]string `json:"metric"`
			Values [][]any           `json:"values"`
		} `json:"result"`
	}
	if err := json.Unmarshal(data, &d); err != nil {
		return nil, err
	}
	if d.ResultType != "matrix" {
		return nil, fmt.Errorf("range query returned a %s", d.ResultType)
	}
	out := make([]RangeSeries, 0, len(d.Result))
	for _, r := range d.Result {
		rs := RangeSeries{Labels: r.Metric}
		for _, v := range r.Values {
			f, err := parseValue(v)
			if err != nil {
				return nil, err
			}
			rs.Values = append(rs.Values, f)
		}
		out = append(out, rs)
	}
	return out, nil
}

// Series returns the label sets of the series matching selector between
// start and end.
func (p *Prom) Series(ctx context.Context, selector string, start, end time.Time) ([]map[string]string, error) {
	data, err := p.get(ctx, "/api/v1/series", url.Values{
		"match[]": {selector}, "start": {promTime(start)}, "end": {promTime(end)},
	})
	if err != nil {
		return nil, err
	}
	var out []map[string]string
	return out, json.Unmarshal(data, &out)
}

// Target is an active scrape target.
type ScrapeTarget struct {
	ScrapePool string            `json:"scrapePool"`
	ScrapeURL  string            `json:"scrapeUrl"`
	Labels     map[string]string `json:"labels"`
	Health     string            `json:"health"`
	LastError  string            `json:"lastError"`
	LastScrape time.Time         `json:"lastScrape"`
}

// Targets returns the active scrape targets.
func (p *Prom) Targets(ctx context.Context) ([]ScrapeTarget, error) {
	c := p.Client
	if c == nil {
		c = &http.Client{Timeout: 10 * time.Second}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(p.URL, "/")+"/api/v1/targets?state=active", nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var r struct {
		Status string `json:"status"`
		Data   struct {
			ActiveTargets []ScrapeTarget `json:"activeTargets"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return nil, err
	}
	if r.Status != "success" {
		return nil, fmt.Errorf("/api/v1/targets: status %s", r.Status)
	}
	return r.Data.ActiveTargets, nil
}

// WaitScraped waits until every target whose scrape URL has one of the
// hosts is up and had a scrape start at or after since.
func (p *Prom) WaitScraped(ctx context.Context, hosts []string, since time.Time) error {
	for {
		ts, err := p.Targets(ctx)
		var missing []string
		if err != nil {
			missing = append(missing, err.Error())
		} else {
			for _, h := range hosts {
				ok := false
				state := "not a target yet"
				for _, t := range ts {
					if !strings.Contains(t.ScrapeURL, "//"+h+"/") {
						continue
					}
					state = fmt.Sprintf("health %s, last scrape %s %s", t.Health, t.LastScrape.Format(time.RFC3339Nano), t.LastError)
					if t.Health == "up" && !t.LastScrape.Before(since) {
						ok = true
					}
				}
				if !ok {
					missing = append(missing, h+": "+state)
				}
			}
		}
		if len(missing) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("Prometheus did not scrape in time: %s", strings.Join(missing, "; "))
		case <-time.After(200 * time.Millisecond):
		}
	}
}
