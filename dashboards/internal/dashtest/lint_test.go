package dashtest

import (
	"strings"
	"testing"
)

func TestLintFixtureIsValid(t *testing.T) {
	d, reg := fixture(t)
	if ps := Lint(d, reg); len(ps) > 0 {
		t.Fatalf("the valid fixture has problems: %v", ps)
	}
	if len(d.Panels) != 2 || len(d.Rows) != 1 {
		t.Fatalf("walked %d panels and %d rows, want 2 and 1", len(d.Panels), len(d.Rows))
	}
}

// TestLintCatches breaks the fixture one way at a time: each must be
// reported, or the static checks could pass a broken dashboard.
func TestLintCatches(t *testing.T) {
	for _, tc := range []struct {
		name    string
		replace []string
		want    string
	}{
		{"unknown metric", []string{`rate(demo_calls_total{`, `rate(demo_call_total{`}, "not in the registry"},
		{"unknown label in a matcher", []string{`{service_name=~`, `{service=~`}, `has no label "service"`},
		{"grouping by a missing label", []string{`sum by (cause)`, `sum by (tool)`}, `carries "tool"`},
		{"legend label not in the result", []string{`"{{cause}}"`, `"{{service_name}}"`}, "legend {{service_name}}"},
		{"fixed rate window", []string{`[$__rate_interval]))", "legendFormat"`, `[5m]))", "legendFormat"`}, "range [5m]"},
		{"offset without a variable", []string{`[$__rate_interval]))", "legendFormat"`, `[$__rate_interval] offset 1h))", "legendFormat"`}, "offset 1h"},
		{"multi-value variable with =", []string{`=~\"$service\"`, `=\"$service\"`}, "use =~"},
		{"no unit", []string{`"unit": "short"`, `"unit": ""`}, "no unit"},
		{"no description", []string{`"description": "Calls by cause."`, `"description": ""`}, "no description"},
		{"no title", []string{`"title": "Calls"`, `"title": ""`}, "no title"},
		{"repeated title", []string{`"title": "Latency"`, `"title": "Calls"`}, "also another panel's"},
		{"panel data source not the input", []string{`"uid": "${DS_PROMETHEUS}"}, "gridPos": {"h": 8, "w": 12, "x": 0`, `"uid": "P1809F7CD0C75ACF3"}, "gridPos": {"h": 8, "w": 12, "x": 0`}, "data source"},
		{"target data source missing", []string{`{"refId": "A", "datasource": {"type": "prometheus", "uid": "${DS_PROMETHEUS}"},
       "expr": "sum`, `{"refId": "A", "expr": "sum`}, "data source"},
		{"old schema", []string{`"schemaVersion": 39`, `"schemaVersion": 27`}, "schemaVersion 27"},
		{"no data source input", []string{`"name": "DS_PROMETHEUS"`, `"name": "DS_OTHER"`}, "__inputs"},
		{"panel type not required", []string{`{"type": "panel", "id": "stat"}`, `{"type": "panel", "id": "text"}`}, "lacks panel/stat"},
		{"rate of a gauge", []string{`rate(demo_calls_total{service_name=~\"$service\"}[$__rate_interval])`, `rate(demo_gauge{service_name=~\"$service\"}[$__rate_interval])`}, "a gauge"},
		{"histogram_quantile without le", []string{`sum by (le)`, `sum by (tool)`}, "without an le label"},
		{"PromQL syntax", []string{`sum by (cause) (rate`, `sum by (cause) ((rate`}, "does not parse"},
		{"undefined variable", []string{`=~\"$service\"`, `=~\"$svc\"`}, "undefined variable $svc"},
		{"variable reads a missing label", []string{`label_values(demo_calls_total, service_name)`, `label_values(demo_calls_total, service)`}, `has no label "service"`},
		{"variable without a metric", []string{`label_values(demo_calls_total, service_name)`, `label_values(service_name)`}, "without a metric"},
		{"unused variable", []string{`{service_name=~\"$service\"}`, `{service_name=~\".*\"}`}, "used by no query"},
		{"repeated panel id", []string{`"id": 2,`, `"id": 1,`}, "not unique"},
		{"outside the grid", []string{`"x": 12, "y": 1`, `"x": 16, "y": 1`}, "24-column grid"},
		{"no legend on a time series", []string{`"legendFormat": "{{cause}}", `, ``}, "no legend format"},
		{"empty expression", []string{`"expr": "histogram_quantile(0.99, sum by (le) (rate(demo_latency_seconds_bucket[$__rate_interval])))"`, `"expr": " "`}, "empty expression"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, reg := fixture(t, tc.replace...)
			ps := Lint(d, reg)
			var all []string
			for _, p := range ps {
				all = append(all, p.String())
				if strings.Contains(p.String(), tc.want) {
					return
				}
			}
			t.Errorf("no problem mentions %q; got:\n  %s", tc.want, strings.Join(all, "\n  "))
		})
	}
}

func TestLintAllRepeatedUID(t *testing.T) {
	a, reg := fixture(t)
	b, _ := fixture(t)
	b.File = "other.json"
	ps := LintAll([]*Dashboard{a, b}, reg)
	if len(ps) != 1 || !strings.Contains(ps[0].What, "also the uid") {
		t.Fatalf("got %v, want the repeated uid", ps)
	}
}

func TestSubstitute(t *testing.T) {
	d, _ := fixture(t)
	d.Templating.List = append(d.Templating.List, &Variable{Name: "inst", Type: "query", Multi: true, IncludeAll: true})
	env := Env{RateInterval: 4e9, Interval: 1e9, Range: 90e9,
		Options: map[string][]string{"service": {"a.b", "c"}, "inst": {"127.0.0.1:80"}}}
	for _, tc := range []struct {
		in, want string
		all      AllMode
		values   map[string][]string
	}{
		{`x[$__rate_interval] offset $__range`, `x[4s] offset 1m30s`, AllValue, nil},
		{`x[${__interval}] $__interval_ms $__range_s`, `x[1s] 1000 90`, AllValue, nil},
		{`{s=~"$service"}`, `{s=~".*"}`, AllValue, nil},
		{`{s=~"${service}"}`, `{s=~"(a\\.b|c)"}`, AllExplicit, nil},
		{`{s=~"[[service]]"}`, `{s=~"(a\\.b|c)"}`, AllExplicit, nil},
		{`{s=~"${service:regex}"}`, `{s=~"c"}`, AllValue, map[string][]string{"service": {"c"}}},
		{`{i=~"$inst"}`, `{i=~"127\\.0\\.0\\.1:80"}`, AllExplicit, nil},
		{`{i=~"$inst"}`, `{i=~"(x|y\\|z)"}`, AllValue, map[string][]string{"inst": {"x", "y|z"}}},
	} {
		env.All, env.Values = tc.all, tc.values
		got, err := Substitute(tc.in, d, env)
		if err != nil || got != tc.want {
			t.Errorf("Substitute(%s, %v) = %s, %v; want %s", tc.in, tc.all, got, err, tc.want)
		}
		if _, err := ParseExpr("m" + got); err != nil && strings.HasPrefix(got, "{") {
			t.Errorf("%s does not parse: %v", got, err)
		}
	}
	if _, err := Substitute(`$nope`, d, env); err == nil {
		t.Error("an undefined variable was substituted")
	}
}

func TestRegistryRejects(t *testing.T) {
	for _, bad := range []string{
		strings.Replace(fixtureRegistry, `"type": "gauge"`, `"type": "summary"`, 1),
		strings.Replace(fixtureRegistry, `"name": "demo_gauge"`, `"name": "demo_calls_total"`, 1),
		strings.Replace(fixtureRegistry, `"name": "demo_calls_total"`, `"name": "demo_calls"`, 1),
		strings.Replace(fixtureRegistry, `"endpoint": "exporter", "labels": []`, `"endpoint": "elsewhere", "labels": []`, 1),
		strings.Replace(fixtureRegistry, `"description": "test"`, `"descriptoin": "test"`, 1),
	} {
		if _, err := ParseRegistry([]byte(bad)); err == nil {
			t.Errorf("accepted a broken registry:\n%s", bad)
		}
	}
}
