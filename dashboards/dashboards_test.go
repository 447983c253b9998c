package dashboards_test

import (
	"bytes"
	"io/fs"
	"testing"

	"github.com/idemkit-mcp/idemkit/dashboards"
	"github.com/idemkit-mcp/idemkit/dashboards/internal/build"
	"github.com/idemkit-mcp/idemkit/dashboards/internal/dashtest"
)

func load(t *testing.T) ([]*dashtest.Dashboard, *dashtest.Registry) {
	t.Helper()
	b, err := fs.ReadFile(dashboards.Files, dashboards.Registry)
	if err != nil {
		t.Fatal(err)
	}
	reg, err := dashtest.ParseRegistry(b)
	if err != nil {
		t.Fatal(err)
	}
	ds, err := dashtest.LoadAll(dashboards.Files, "idemkit-*.json")
	if err != nil {
		t.Fatal(err)
	}
	return ds, reg
}

// TestDashboards runs every static check on every dashboard file: JSON,
// schema version, the ${DS_PROMETHEUS} input on every panel, target and
// variable, title, description, unit and legend of every panel, PromQL
// syntax, and every metric and label against metrics.json.
func TestDashboards(t *testing.T) {
	ds, reg := load(t)
	if len(ds) != 3 {
		t.Errorf("%d dashboards, want the 3 of README.md", len(ds))
	}
	targets := 0
	for _, d := range ds {
		for _, p := range d.Panels {
			targets += len(p.Targets)
		}
	}
	for _, p := range dashtest.LintAll(ds, reg) {
		t.Error(p)
	}
	t.Logf("%d dashboards, %d targets checked", len(ds), targets)
}

// TestGenerated checks the files are what internal/build renders: edit the
// Go definitions, then run go generate.
func TestGenerated(t *testing.T) {
	all, err := build.All()
	if err != nil {
		t.Fatal(err)
	}
	for name, d := range all {
		want, err := build.Render(d)
		if err != nil {
			t.Fatal(err)
		}
		got, err := fs.ReadFile(dashboards.Files, name)
		if err != nil {
			t.Fatalf("%s: %v (run go generate in dashboards/)", name, err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s differs from internal/build: run go generate in dashboards/ (or move the hand edit into internal/build)", name)
		}
	}
}

// TestRegistryMetricsUsed checks every registry metric is read by some
// panel: the list is of what the dashboards need, not a wish list.
func TestRegistryMetricsUsed(t *testing.T) {
	ds, reg := load(t)
	used := map[string]bool{}
	for _, d := range ds {
		for _, p := range d.Panels {
			for _, tg := range p.Targets {
				expr, err := dashtest.Substitute(tg.Expr, d, dashtest.StaticEnv())
				if err != nil {
					t.Fatal(err)
				}
				e, err := dashtest.ParseExpr(expr)
				if err != nil {
					t.Fatal(err)
				}
				for _, vs := range dashtest.Selectors(e) {
					if s, ok := reg.Lookup(dashtest.MetricName(vs)); ok {
						used[s.Metric.Name] = true
					}
				}
			}
		}
	}
	for _, m := range reg.Metrics {
		if !used[m.Name] {
			t.Errorf("%s is in metrics.json but no panel reads it", m.Name)
		}
	}
}
