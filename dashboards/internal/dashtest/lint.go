package dashtest

import (
	"fmt"
	"regexp"
	"strings"
)

// The data source every panel, target and variable must use: the input
// Grafana's import asks for.
const (
	DSInput = "DS_PROMETHEUS"
	DSUID   = "${" + DSInput + "}"
)

// MinSchemaVersion is the oldest dashboard schema accepted (Grafana 10.4).
const MinSchemaVersion = 39

// Problem is one fault a check found.
type Problem struct {
	Where string
	What  string
}

func (p Problem) String() string { return p.Where + ": " + p.What }

// LintAll checks every dashboard, and that their UIDs differ.
func LintAll(ds []*Dashboard, reg *Registry) []Problem {
	var out []Problem
	uids := map[string]string{}
	for _, d := range ds {
		out = append(out, Lint(d, reg)...)
		if other, ok := uids[d.UID]; ok && d.UID != "" {
			out = append(out, Problem{d.File, fmt.Sprintf("uid %q is also the uid of %s", d.UID, other)})
		}
		uids[d.UID] = d.File
	}
	return out
}

// labelValuesQuery matches label_values(selector, label) and
// label_values(label).
var labelValuesQuery = regexp.MustCompile(`^\s*label_values\(\s*(?:(.+?)\s*,\s*)?([a-zA-Z_][a-zA-Z0-9_]*)\s*\)\s*$`)

// rangeRef matches a range or subquery duration [..] (not [[var]]).
var rangeRef = regexp.MustCompile(`(^|[^\[])\[([^\[\]]+)\]`)

// offsetRef matches an offset modifier's duration.
var offsetRef = regexp.MustCompile(`\boffset\s+(-?\S+?)(\)|\s|$)`)

// equalityMatcher matches label="value" and label!="value".
var equalityMatcher = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(!=|=)\s*"([^"]*)"`)

// Lint checks one dashboard without Prometheus: its structure, its data
// source input, every panel's title, description, unit and legend, every
// expression's syntax, and every metric and label against the registry.
func Lint(d *Dashboard, reg *Registry) []Problem {
	var out []Problem
	add := func(where, format string, args ...any) {
		out = append(out, Problem{where, fmt.Sprintf(format, args...)})
	}
	f := d.File
	if d.SchemaVersion < MinSchemaVersion {
		add(f, "schemaVersion %d < %d", d.SchemaVersion, MinSchemaVersion)
	}
	if d.UID == "" || len(d.UID) > 40 {
		add(f, "uid %q: must be 1 to 40 characters", d.UID)
	}
	if d.Title == "" {
		add(f, "no title")
	}
	if d.Time == nil || d.Time.From == "" {
		add(f, "no default time range")
	}
	hasInput := false
	for _, in := range d.Inputs {
		if in.Name == DSInput && in.Type == "datasource" && in.PluginID == "prometheus" {
			hasInput = true
		}
	}
	if !hasInput {
		add(f, "__inputs has no %s data source input of plugin prometheus: import would not ask for the data source", DSInput)
	}
	req := map[string]bool{}
	for _, r := range d.Requires {
		req[r.Type+"/"+r.ID] = true
	}
	for _, want := range []string{"grafana/grafana", "datasource/prometheus"} {
		if !req[want] {
			add(f, "__requires lacks %s", want)
		}
	}
	for _, p := range d.Panels {
		if !req["panel/"+p.Type] {
			add(Where(d, p, nil), "__requires lacks panel/%s", p.Type)
		}
	}

	// Variables.
	used := map[string]bool{}
	for _, v := range d.Templating.List {
		w := fmt.Sprintf("%s: variable $%s", f, v.Name)
		if v.Type != "query" {
			continue
		}
		if !isPromInput(v.Datasource) {
			add(w, "data source %v: must be {prometheus, %s}", v.Datasource, DSUID)
		}
		q := v.Query()
		for _, r := range References(q) {
			used[r] = true
		}
		m := labelValuesQuery.FindStringSubmatch(q)
		if m == nil {
			add(w, "query %q is not label_values(selector, label)", q)
			continue
		}
		if m[1] == "" {
			add(w, "label_values(%s) without a metric reads every series: name the metric", m[2])
			continue
		}
		expr, err := Substitute(m[1], d, StaticEnv())
		if err != nil {
			add(w, "%v", err)
			continue
		}
		e, err := ParseExpr(expr)
		if err != nil {
			add(w, "selector %q: %v", expr, err)
			continue
		}
		an := Analyze(e, reg)
		for _, p := range an.Problems {
			add(w, "%s", p)
		}
		if !an.Output.has(m[2]) {
			add(w, "%s has no label %q", m[1], m[2])
		}
	}

	// Panels.
	ids := map[int]bool{}
	for _, p := range append(append([]*Panel{}, d.Rows...), d.Panels...) {
		if ids[p.ID] {
			add(Where(d, p, nil), "panel id %d is not unique", p.ID)
		}
		ids[p.ID] = true
		if p.GridPos == nil || p.GridPos.W <= 0 || p.GridPos.H <= 0 || p.GridPos.X+p.GridPos.W > 24 {
			add(Where(d, p, nil), "gridPos missing or outside the 24-column grid")
		}
	}
	titles := map[string]bool{}
	for _, p := range d.Panels {
		w := Where(d, p, nil)
		if strings.TrimSpace(p.Title) == "" {
			add(w, "no title")
		} else if titles[p.Title] {
			// A reader tells panels apart by their titles, and so do the
			// live checks' value expectations.
			add(w, "title %q is also another panel's", p.Title)
		}
		titles[p.Title] = true
		if strings.TrimSpace(p.Description) == "" {
			add(w, "no description")
		}
		if p.FieldConfig == nil || p.FieldConfig.Defaults.Unit == "" {
			add(w, "no unit (fieldConfig.defaults.unit)")
		}
		if !isPromInput(p.Datasource) {
			add(w, "data source %v: must be {prometheus, %s}", p.Datasource, DSUID)
		}
		if len(p.Targets) == 0 {
			add(w, "no query")
		}
		refs := map[string]bool{}
		for _, t := range p.Targets {
			wt := Where(d, p, t)
			if t.RefID == "" || refs[t.RefID] {
				add(wt, "refId %q missing or repeated", t.RefID)
			}
			refs[t.RefID] = true
			if !isPromInput(t.Datasource) {
				add(wt, "data source %v: must be {prometheus, %s}", t.Datasource, DSUID)
			}
			if t.Hide {
				add(wt, "hidden target: a dashboard should not ship dead queries")
			}
			if strings.TrimSpace(t.Expr) == "" {
				add(wt, "empty expression")
				continue
			}
			for _, r := range References(t.Expr) {
				used[r] = true
			}
			out = append(out, lintExpr(d, p, t, reg)...)
		}
	}
	for _, v := range d.Templating.List {
		if v.Type == "query" && !used[v.Name] {
			add(fmt.Sprintf("%s: variable $%s", f, v.Name), "defined but used by no query")
		}
	}
	return out
}

func isPromInput(ds *DSRef) bool { return ds != nil && ds.Type == "prometheus" && ds.UID == DSUID }

// lintExpr checks one target's expression.
func lintExpr(d *Dashboard, p *Panel, t *Target, reg *Registry) []Problem {
	var out []Problem
	wt := Where(d, p, t)
	add := func(format string, args ...any) {
		out = append(out, Problem{wt, fmt.Sprintf(format, args...)})
	}
	// Ranges and offsets follow the dashboard: $__rate_interval for rates,
	// $__range for totals over the time range, never a fixed window.
	for _, m := range rangeRef.FindAllStringSubmatch(t.Expr, -1) {
		switch strings.TrimSpace(m[2]) {
		case "$__rate_interval", "$__range", "$__interval", "${__rate_interval}", "${__range}", "${__interval}":
		default:
			add("range [%s]: use $__rate_interval (rates) or $__range (totals over the time range)", m[2])
		}
	}
	for _, m := range offsetRef.FindAllStringSubmatch(t.Expr, -1) {
		if !strings.HasPrefix(m[1], "$") {
			add("offset %s: use a dashboard variable ($__range)", m[1])
		}
	}
	// A multi-value variable needs a regex matcher: label="$var" breaks as
	// soon as two values (or All) are selected.
	for _, m := range equalityMatcher.FindAllStringSubmatch(t.Expr, -1) {
		for _, r := range References(m[3]) {
			if v := d.Var(r); v != nil && (v.Multi || v.IncludeAll) {
				add("%s%s%q uses multi-value variable $%s with %s: use =~ (or !~)", m[1], m[2], m[3], r, m[2])
			}
		}
	}
	if strings.Contains(t.Expr, "rate(") && !strings.Contains(t.Expr, "$__rate_interval") && !strings.Contains(t.Expr, "${__rate_interval}") {
		add("rate() without $__rate_interval")
	}
	expr, err := Substitute(t.Expr, d, StaticEnv())
	if err != nil {
		add("%v", err)
		return out
	}
	e, err := ParseExpr(expr)
	if err != nil {
		add("does not parse as PromQL: %v\n    %s", err, expr)
		return out
	}
	an := Analyze(e, reg)
	for _, pr := range an.Problems {
		add("%s", pr)
	}
	legendNeeded := t.Format != "table" && (p.Type == "timeseries" || p.Type == "bargauge")
	if legendNeeded && strings.TrimSpace(t.LegendFormat) == "" {
		add("no legend format: series would be named by their full label sets")
	}
	if t.Format != "table" {
		for _, l := range LegendLabels(t.LegendFormat) {
			if !an.Output.has(l) {
				add("legend {{%s}}: the query's result has no label %q (it carries: %s)", l, l, strings.Join(an.Output.sorted(), ", "))
			}
		}
	}
	return out
}
