package dashtest

import (
	"strings"
	"testing"
)

// A small registry and a valid dashboard over it; the tests break them one
// way at a time.
const fixtureRegistry = `{
  "description": "test",
  "endpoints": {"exporter": {"what": "test", "common_labels": ["job", "instance"]}},
  "metrics": [
    {"id": "calls", "name": "demo_calls_total", "type": "counter", "endpoint": "exporter", "labels": ["service_name", "cause"], "emitted": "after_first_event", "source": "test"},
    {"id": "gauge", "name": "demo_gauge", "type": "gauge", "endpoint": "exporter", "labels": [], "emitted": "always", "source": "test"},
    {"id": "latency", "name": "demo_latency_seconds", "type": "histogram", "unit": "s", "endpoint": "exporter", "labels": ["tool"], "emitted": "after_first_event", "source": "test"}
  ]
}`

const fixtureDashboard = `{
  "uid": "fixture", "title": "Fixture", "schemaVersion": 39,
  "time": {"from": "now-6h", "to": "now"}, "annotations": {"list": []},
  "__inputs": [{"name": "DS_PROMETHEUS", "type": "datasource", "pluginId": "prometheus"}],
  "__requires": [{"type": "grafana", "id": "grafana"}, {"type": "datasource", "id": "prometheus"},
                 {"type": "panel", "id": "timeseries"}, {"type": "panel", "id": "stat"}],
  "templating": {"list": [{"name": "service", "type": "query", "multi": true, "includeAll": true, "allValue": ".*",
    "datasource": {"type": "prometheus", "uid": "${DS_PROMETHEUS}"},
    "query": {"query": "label_values(demo_calls_total, service_name)", "refId": "V"}}]},
  "panels": [
    {"id": 10, "type": "row", "title": "Row", "collapsed": false, "gridPos": {"h": 1, "w": 24, "x": 0, "y": 0}, "panels": []},
    {"id": 1, "type": "timeseries", "title": "Calls", "description": "Calls by cause.",
     "datasource": {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}, "gridPos": {"h": 8, "w": 12, "x": 0, "y": 1},
     "fieldConfig": {"defaults": {"unit": "short"}},
     "targets": [{"refId": "A", "datasource": {"type": "prometheus", "uid": "${DS_PROMETHEUS}"},
       "expr": "sum by (cause) (rate(demo_calls_total{service_name=~\"$service\"}[$__rate_interval]))", "legendFormat": "{{cause}}", "range": true}]},
    {"id": 2, "type": "stat", "title": "Latency", "description": "p99.",
     "datasource": {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}, "gridPos": {"h": 8, "w": 12, "x": 12, "y": 1},
     "fieldConfig": {"defaults": {"unit": "s"}},
     "targets": [{"refId": "A", "datasource": {"type": "prometheus", "uid": "${DS_PROMETHEUS}"},
       "expr": "histogram_quantile(0.99, sum by (le) (rate(demo_latency_seconds_bucket[$__rate_interval])))", "instant": true, "range": false}]}
  ]
}`

func fixture(t *testing.T, replace ...string) (*Dashboard, *Registry) {
	t.Helper()
	reg, err := ParseRegistry([]byte(fixtureRegistry))
	if err != nil {
		t.Fatal(err)
	}
	js := fixtureDashboard
	for i := 0; i+1 < len(replace); i += 2 {
		if !strings.Contains(js, replace[i]) {
			t.Fatalf("mutation %q does not apply to the fixture", replace[i])
		}
		js = strings.Replace(js, replace[i], replace[i+1], 1)
	}
	d, err := Parse("fixture.json", []byte(js))
	if err != nil {
		t.Fatal(err)
	}
	return d, reg
}
