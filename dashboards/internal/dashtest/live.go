package dashtest

import (
	"context"
	"fmt"
	"io"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/prometheus/prometheus/promql/parser"
)

// Live runs every panel target of the dashboards against a real
// Prometheus.
type Live struct {
	Prom *Prom
	Reg  *Registry
	// Start and End bound the run: the dashboard's time range. Instant
	// queries run at End; $__range is End-Start (rounded up).
	Start, End time.Time
	// ScrapeInterval is the Prometheus scrape interval, from which
	// $__interval and $__rate_interval are derived as Grafana does.
	ScrapeInterval time.Duration
	// Expect are the value assertions, by ExpectKey.
	Expect map[string][]Expectation
	// Out receives one line per check.
	Out io.Writer

	passed, failed int
	matched        map[string]bool
}

// Expectation asserts the result of one target, run with Vars chosen (the
// other variables "All").
type Expectation struct {
	Vars map[string][]string
	// Why says where the expected values come from.
	Why   string
	Check func([]Sample) error
}

// ExpectKey names a target for Expect: dashboard uid, panel title, refId.
func ExpectKey(uid, panel, refID string) string { return uid + " | " + panel + " | " + refID }

func (l *Live) pass(what, detail string) {
	l.passed++
	if detail != "" {
		detail = "  (" + detail + ")"
	}
	fmt.Fprintf(l.Out, "PASS  %s%s\n", what, detail)
}

func (l *Live) fail(what string, format string, args ...any) {
	l.failed++
	fmt.Fprintf(l.Out, "FAIL  %s: %s\n", what, fmt.Sprintf(format, args...))
}

// Intervals returns $__interval and $__rate_interval as Grafana computes
// them for the run's range: the interval is the range over 1000 points but
// at least the scrape interval; the rate interval is the larger of
// interval + scrape interval and four scrape intervals.
func (l *Live) Intervals() (interval, rateInterval time.Duration) {
	interval = (l.End.Sub(l.Start) / 1000).Round(time.Second)
	if interval < l.ScrapeInterval {
		interval = l.ScrapeInterval
	}
	rateInterval = max(interval+l.ScrapeInterval, 4*l.ScrapeInterval)
	return interval, rateInterval
}

// Range is $__range: the run, rounded up to the second.
func (l *Live) Range() time.Duration {
	return time.Duration(math.Ceil(l.End.Sub(l.Start).Seconds())) * time.Second
}

// Run checks the registry against Prometheus, then every variable and every
// target of every dashboard, and returns the numbers of checks passed and
// failed.
func (l *Live) Run(ctx context.Context, ds []*Dashboard) (passed, failed int) {
	l.matched = map[string]bool{}
	interval, rateInterval := l.Intervals()
	fmt.Fprintf(l.Out, "Prometheus %s, time range %s .. %s ($__range %s, $__interval %s, $__rate_interval %s)\n\n",
		l.Prom.URL, l.Start.Format(time.RFC3339), l.End.Format(time.RFC3339), l.Range(), interval, rateInterval)

	fmt.Fprintf(l.Out, "== metrics.json: every listed metric reaches Prometheus with exactly its labels\n")
	l.checkRegistry(ctx)

	for _, d := range ds {
		fmt.Fprintf(l.Out, "\n== %s (%s)\n", d.File, d.Title)
		options := l.checkVariables(ctx, d)
		for _, p := range d.Panels {
			for _, t := range p.Targets {
				l.checkTarget(ctx, d, p, t, options)
			}
		}
	}
	var missing []string
	for k := range l.Expect {
		if !l.matched[k] {
			missing = append(missing, k)
		}
	}
	sort.Strings(missing)
	for _, k := range missing {
		l.fail("expectation "+k, "no such dashboard panel target: the expectation no longer tests anything (panel renamed or removed?)")
	}
	return l.passed, l.failed
}

func (l *Live) checkRegistry(ctx context.Context) {
	for _, m := range l.Reg.Metrics {
		for _, name := range m.SeriesNames() {
			what := "metric " + name
			s, _ := l.Reg.Lookup(name)
			series, err := l.Prom.Series(ctx, name, l.Start, l.End)
			if err != nil {
				l.fail(what, "%v", err)
				continue
			}
			if len(series) == 0 {
				l.fail(what, "no series in Prometheus: the system does not emit it (under this name) or it is not scraped")
				continue
			}
			allowed := l.Reg.Labels(s)
			var problems []string
			required := append([]string{}, m.Labels...)
			if s.Suffix == "_bucket" {
				required = append(required, "le")
			}
			for _, r := range required {
				for _, ls := range series {
					if ls[r] == "" {
						problems = append(problems, fmt.Sprintf("a series lacks label %s: %v", r, ls))
						break
					}
				}
			}
			extra := map[string]bool{}
			for _, ls := range series {
				for k := range ls {
					if k != "__name__" && !slices.Contains(allowed, k) {
						extra[k] = true
					}
				}
			}
			for _, k := range SortedKeys(extra) {
				problems = append(problems, fmt.Sprintf("label %s is not in metrics.json", k))
			}
			if len(problems) > 0 {
				l.fail(what, "%s", strings.Join(problems, "; "))
				continue
			}
			l.pass(what, fmt.Sprintf("%d series", len(series)))
		}
	}
}

// checkVariables runs every query variable and returns their values.
func (l *Live) checkVariables(ctx context.Context, d *Dashboard) map[string][]string {
	options := map[string][]string{}
	// Variables may refer to earlier ones: resolve in order, "All" as .*.
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		what := fmt.Sprintf("%s: variable $%s = %s", d.File, v.Name, v.Query())
		m := labelValuesQuery.FindStringSubmatch(v.Query())
		if m == nil || m[1] == "" {
			l.fail(what, "not label_values(selector, label)")
			continue
		}
		sel, err := Substitute(m[1], d, Env{All: AllValue, Options: options})
		if err != nil {
			l.fail(what, "%v", err)
			continue
		}
		series, err := l.Prom.Series(ctx, sel, l.Start, l.End)
		if err != nil {
			l.fail(what, "%v", err)
			continue
		}
		set := map[string]bool{}
		for _, ls := range series {
			if ls[m[2]] != "" {
				set[ls[m[2]]] = true
			}
		}
		if len(set) == 0 {
			l.fail(what, "no values: the variable's drop-down would be empty")
			continue
		}
		options[v.Name] = SortedKeys(set)
		l.pass(what, strings.Join(options[v.Name], ", "))
	}
	return options
}

func (l *Live) env(mode AllMode, options map[string][]string, vars map[string][]string) Env {
	interval, rateInterval := l.Intervals()
	return Env{RateInterval: rateInterval, Interval: interval, Range: l.Range(), All: mode, Options: options, Values: vars}
}

func allNaN(vs []float64) bool {
	for _, v := range vs {
		if !math.IsNaN(v) {
			return false
		}
	}
	return true
}

// checkTarget runs one target with both meanings of "All", then its value
// expectations.
func (l *Live) checkTarget(ctx context.Context, d *Dashboard, p *Panel, t *Target, options map[string][]string) {
	for _, mode := range []AllMode{AllValue, AllExplicit} {
		what := fmt.Sprintf("%s #%d %q %s [%s]", d.UID, p.ID, p.Title, t.RefID, mode)
		expr, err := Substitute(t.Expr, d, l.env(mode, options, nil))
		if err != nil {
			l.fail(what, "%v", err)
			continue
		}
		if detail, err := l.runTarget(ctx, p, t, expr); err != nil {
			l.fail(what, "%v\n      query: %s", err, expr)
		} else {
			l.pass(what, detail)
		}
	}
	key := ExpectKey(d.UID, p.Title, t.RefID)
	exps, ok := l.Expect[key]
	if !ok {
		return
	}
	l.matched[key] = true
	for _, e := range exps {
		what := fmt.Sprintf("%s #%d %q %s", d.UID, p.ID, p.Title, t.RefID)
		if len(e.Vars) > 0 {
			what += fmt.Sprintf(" %v", e.Vars)
		}
		what += " value: " + e.Why
		expr, err := Substitute(t.Expr, d, l.env(AllValue, options, e.Vars))
		if err != nil {
			l.fail(what, "%v", err)
			continue
		}
		samples, err := l.Prom.Query(ctx, expr, l.End)
		if err != nil {
			l.fail(what, "%v", err)
			continue
		}
		if err := e.Check(samples); err != nil {
			l.fail(what, "%v\n      query: %s", err, expr)
			continue
		}
		l.pass(what, describe(samples))
	}
}

// describe renders a result briefly.
func describe(samples []Sample) string {
	var parts []string
	for _, s := range samples {
		var ls []string
		for _, k := range SortedKeys(s.Labels) {
			if strings.HasPrefix(k, "otel_scope_") || k == "__name__" {
				continue
			}
			ls = append(ls, s.Labels[k])
		}
		name := strings.Join(ls, "/")
		if name == "" {
			parts = append(parts, fmt.Sprintf("%g", s.Value))
		} else {
			parts = append(parts, fmt.Sprintf("%s=%g", name, s.Value))
		}
	}
	sort.Strings(parts)
	if len(parts) > 8 {
		parts = append(parts[:8], fmt.Sprintf("… %d more", len(parts)-8))
	}
	return strings.Join(parts, " ")
}

// runTarget runs the checks that need no expectation: the query succeeds
// as Grafana would run it and returns series with values, every selector
// in it matches real series, every label it groups by or shows in the
// legend is on the result.
func (l *Live) runTarget(ctx context.Context, p *Panel, t *Target, expr string) (string, error) {
	e, err := ParseExpr(expr)
	if err != nil {
		return "", fmt.Errorf("does not parse: %v", err)
	}
	interval, _ := l.Intervals()
	var notes []string
	if t.IsRange() {
		// Steps counted back from End, so that the last one is End itself
		// (where the final scrapes are) whatever the alignment of Start.
		first := l.End.Add(-l.End.Sub(l.Start).Truncate(interval))
		rs, err := l.Prom.QueryRange(ctx, expr, first, l.End, interval)
		if err != nil {
			return "", fmt.Errorf("range query: %v", err)
		}
		if len(rs) == 0 {
			return "", fmt.Errorf("range query over the run returned no series: the panel would say No data")
		}
		all := true
		for _, s := range rs {
			if !allNaN(s.Values) {
				all = false
			}
		}
		if all {
			return "", fmt.Errorf("range query: every value of every series is NaN: the panel would draw nothing")
		}
		notes = append(notes, fmt.Sprintf("range: %d series", len(rs)))
	}
	samples, err := l.Prom.Query(ctx, expr, l.End)
	if err != nil {
		return "", fmt.Errorf("instant query: %v", err)
	}
	if len(samples) == 0 {
		if t.IsRange() {
			return "", fmt.Errorf("instant query at the end of the run returned no series")
		}
		return "", fmt.Errorf("instant query returned no series: the panel would say No data")
	}
	if !t.IsRange() {
		var vs []float64
		for _, s := range samples {
			vs = append(vs, s.Value)
		}
		if allNaN(vs) {
			return "", fmt.Errorf("instant query: every value is NaN: the panel would show NaN")
		}
	}
	notes = append(notes, fmt.Sprintf("instant: %s", describe(samples)))

	// Every selector on its own: "or vector(0)" or an outer "or" must not
	// hide a metric or a filter that matches nothing.
	for _, vs := range Selectors(e) {
		sel := SelectorString(vs)
		series, err := l.Prom.Series(ctx, sel, l.Start, l.End)
		if err != nil {
			return "", fmt.Errorf("selector %s: %v", sel, err)
		}
		if len(series) == 0 {
			return "", fmt.Errorf("selector %s matches no series", sel)
		}
	}
	// Every label an aggregation groups by is on its result.
	var aggErr error
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		agg, ok := n.(*parser.AggregateExpr)
		if !ok || agg.Without || len(agg.Grouping) == 0 || aggErr != nil {
			return nil
		}
		res, err := l.Prom.Query(ctx, agg.String(), l.End)
		if err != nil {
			aggErr = fmt.Errorf("%s: %v", agg, err)
			return nil
		}
		for _, g := range agg.Grouping {
			found := false
			for _, s := range res {
				if s.Labels[g] != "" {
					found = true
				}
			}
			if !found && len(res) > 0 {
				aggErr = fmt.Errorf("by (%s): no result series carries %q", strings.Join(agg.Grouping, ", "), g)
			}
		}
		return nil
	})
	if aggErr != nil {
		return "", aggErr
	}
	// Legend labels are on every series.
	if t.Format != "table" {
		for _, lbl := range LegendLabels(t.LegendFormat) {
			for _, s := range samples {
				if s.Labels[lbl] == "" {
					return "", fmt.Errorf("legend {{%s}}: series %s has no %s: its legend would be blank", lbl, s.Name(), lbl)
				}
			}
		}
	}
	return strings.Join(notes, "; "), nil
}
