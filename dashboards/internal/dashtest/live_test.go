package dashtest

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/prometheus/promql/parser"
)

// fakeProm answers the Prometheus HTTP API from canned data; each test
// spoils one part of it.
type fakeProm struct {
	series  []map[string]string
	instant func(expr string) []map[string]any // result elements
	rng     func(expr string) []map[string]any
	err     func(path, expr string) string
}

func newFake() *fakeProm {
	base := map[string]string{"job": "j", "instance": "i"}
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
	labels := map[string]string{"cause": "x", "service_name": "a", "le": "1", "tool": "t"}
	return &fakeProm{
		series: []map[string]string{
			with("__name__", "demo_calls_total", "service_name", "a", "cause", "x"),
			with("__name__", "demo_gauge"),
			with("__name__", "demo_latency_seconds_bucket", "tool", "t", "le", "1"),
			with("__name__", "demo_latency_seconds_sum", "tool", "t"),
			with("__name__", "demo_latency_seconds_count", "tool", "t"),
		},
		instant: func(string) []map[string]any {
			return []map[string]any{{"metric": labels, "value": []any{1.0, "1"}}}
		},
		rng: func(string) []map[string]any {
			return []map[string]any{{"metric": labels, "values": []any{[]any{1.0, "1"}, []any{2.0, "2"}}}}
		},
		err: func(string, string) string { return "" },
	}
}

func (f *fakeProm) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_ = r.ParseForm()
	expr := r.Form.Get("query")
	reply := func(data any) {
		_ = json.NewEncoder(w).Encode(map[string]any{"status": "success", "data": data})
	}
	if e := f.err(r.URL.Path, expr+r.Form.Get("match[]")); e != "" {
		w.WriteHeader(http.StatusBadRequest)
		_ = json.NewEncoder(w).Encode(map[string]any{"status": "error", "errorType": "bad_data", "error": e})
		return
	}
	switch r.URL.Path {
	case "/api/v1/series":
		e, err := ParseExpr(r.Form.Get("match[]"))
		if err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		var out []map[string]string
		for _, s := range f.series {
			ok := true
			for _, m := range e.(*parser.VectorSelector).LabelMatchers {
				ok = ok && m.Matches(s[m.Name])
			}
			if ok {
				out = append(out, s)
			}
		}
		if out == nil {
			out = []map[string]string{}
		}
		reply(out)
	case "/api/v1/query":
		reply(map[string]any{"resultType": "vector", "result": f.instant(expr)})
	case "/api/v1/query_range":
		reply(map[string]any{"resultType": "matrix", "result": f.rng(expr)})
	default:
		http.NotFound(w, r)
	}
}

func runFake(t *testing.T, f *fakeProm, d *Dashboard, reg *Registry, exp map[string][]Expectation) (int, int, string) {
	t.Helper()
	srv := httptest.NewServer(f)
	defer srv.Close()
	var out bytes.Buffer
	end := time.Now()
	prom, err := NewProm(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	l := &Live{Prom: prom, Reg: reg, Start: end.Add(-time.Minute), End: end,
		ScrapeInterval: time.Second, Expect: exp, Out: &out}
	p, n := l.Run(context.Background(), []*Dashboard{d})
	return p, n, out.String()
}

func TestLiveFixturePasses(t *testing.T) {
	d, reg := fixture(t)
	exp := map[string][]Expectation{ExpectKey("fixture", "Latency", "A"): {{Why: "= 1", Check: Scalar(1)}}}
	passed, failed, out := runFake(t, newFake(), d, reg, exp)
	if failed != 0 || passed == 0 {
		t.Fatalf("%d passed, %d failed on good data:\n%s", passed, failed, out)
	}
}

// TestLiveCatches spoils the fake Prometheus one way at a time: each must
// fail the run, with a message that says what is wrong.
func TestLiveCatches(t *testing.T) {
	replaces := map[string][]string{
		"legend label missing on a result": {`"legendFormat": "{{cause}}"`, `"legendFormat": "{{cause}} {{service_name}}"`},
	}
	nan := func(string) []map[string]any {
		return []map[string]any{{"metric": map[string]string{"cause": "x", "le": "1"}, "value": []any{1.0, "NaN"}}}
	}
	for _, tc := range []struct {
		name  string
		spoil func(f *fakeProm)
		exp   map[string][]Expectation
		want  string
	}{
		{"metric not emitted", func(f *fakeProm) { f.series = f.series[1:] }, nil, "metric demo_calls_total: no series"},
		{"label missing on emitted series", func(f *fakeProm) { delete(f.series[0], "cause") }, nil, "lacks label cause"},
		{"label not in the registry", func(f *fakeProm) { f.series[0]["exported_job"] = "x" }, nil, "label exported_job is not in metrics.json"},
		{"variable without values", func(f *fakeProm) { delete(f.series[0], "service_name") }, nil, "no values"},
		{"range query without series", func(f *fakeProm) { f.rng = func(string) []map[string]any { return []map[string]any{} } }, nil, "range query over the run returned no series"},
		{"range query all NaN", func(f *fakeProm) {
			f.rng = func(string) []map[string]any {
				return []map[string]any{{"metric": map[string]string{"cause": "x"}, "values": []any{[]any{1.0, "NaN"}}}}
			}
		}, nil, "every value of every series is NaN"},
		{"instant query without series", func(f *fakeProm) { f.instant = func(string) []map[string]any { return []map[string]any{} } }, nil, "returned no series"},
		{"instant target NaN", func(f *fakeProm) { f.instant = nan }, nil, "every value is NaN"},
		{"query error", func(f *fakeProm) {
			f.err = func(path, expr string) string {
				if path == "/api/v1/query" && strings.Contains(expr, "histogram_quantile") {
					return "boom"
				}
				return ""
			}
		}, nil, "boom"},
		{"legend label missing on a result", func(f *fakeProm) {
			f.instant = func(string) []map[string]any {
				return []map[string]any{{"metric": map[string]string{"cause": "x", "le": "1"}, "value": []any{1.0, "1"}}}
			}
		}, nil, "legend {{service_name}}"},
		{"grouping label missing on a result", func(f *fakeProm) {
			f.instant = func(string) []map[string]any {
				return []map[string]any{{"metric": map[string]string{"service_name": "a"}, "value": []any{1.0, "1"}}}
			}
		}, nil, `no result series carries "cause"`},
		{"value differs from the evidence", func(*fakeProm) {},
			map[string][]Expectation{ExpectKey("fixture", "Latency", "A"): {{Why: "= 2", Check: Scalar(2)}}}, "value 1, want 2"},
		{"expectation of a panel that is gone", func(*fakeProm) {},
			map[string][]Expectation{ExpectKey("fixture", "Renamed", "A"): {{Why: "= 1", Check: Scalar(1)}}}, "no such dashboard panel target"},
		{"label value not covered", func(*fakeProm) {},
			map[string][]Expectation{ExpectKey("fixture", "Calls", "A"): {{Why: "all causes", Check: Covers("cause", []string{"x", "y"})}}}, "no series for cause y"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, reg := fixture(t, replaces[tc.name]...)
			f := newFake()
			tc.spoil(f)
			_, failed, out := runFake(t, f, d, reg, tc.exp)
			if failed == 0 {
				t.Fatalf("the run passed:\n%s", out)
			}
			if !strings.Contains(out, tc.want) {
				t.Fatalf("no failure mentions %q:\n%s", tc.want, out)
			}
		})
	}
}

// TestLiveSelectorHiddenByOr: "or vector(0)" makes a stat show 0 when its
// metric is missing; the per-selector check must still fail it.
func TestLiveSelectorHiddenByOr(t *testing.T) {
	d, reg := fixture(t, `histogram_quantile(0.99, sum by (le) (rate(demo_latency_seconds_bucket[$__rate_interval])))`,
		`sum(rate(demo_calls_total{cause=\"nope\"}[$__rate_interval])) or vector(0)`)
	f := newFake()
	f.series[0]["cause"] = "x"
	_, failed, out := runFake(t, f, d, reg, nil)
	if failed == 0 || !strings.Contains(out, `selector demo_calls_total{cause="nope"} matches no series`) {
		t.Fatalf("a selector matching nothing behind or vector(0) passed:\n%s", out)
	}
}
