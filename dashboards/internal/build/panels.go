package build

import (
	"fmt"
	"strings"
)

// Versions this package writes: schema 39 is Grafana 10.4 / 11.0.
const (
	schemaVersion = 39
	grafanaMin    = "10.4.0"
)

// newDashboard returns a dashboard with the ${DS_PROMETHEUS} input, the
// requirements of the panel types it uses, links to the other idemkit
// dashboards and the default time range.
func newDashboard(uid, title, description string, vars ...*Var) *Dashboard {
	return &Dashboard{
		Inputs: []Input{{
			Name:        "DS_PROMETHEUS",
			Label:       "Prometheus",
			Description: "The Prometheus that scrapes the otelcol-idemkit Collector (its prometheus exporter, and its own telemetry endpoint for the processor-health dashboard).",
			Type:        "datasource",
			PluginID:    "prometheus",
			PluginName:  "Prometheus",
		}},
		Elements: map[string]any{},
		Requires: []Require{
			{Type: "grafana", ID: "grafana", Name: "Grafana", Version: grafanaMin},
			{Type: "datasource", ID: "prometheus", Name: "Prometheus", Version: "1.0.0"},
			{Type: "panel", ID: "bargauge", Name: "Bar gauge", Version: ""},
			{Type: "panel", ID: "stat", Name: "Stat", Version: ""},
			{Type: "panel", ID: "table", Name: "Table", Version: ""},
			{Type: "panel", ID: "timeseries", Name: "Time series", Version: ""},
		},
		Annotations: map[string]any{"list": []any{map[string]any{
			"builtIn":    1,
			"datasource": map[string]any{"type": "grafana", "uid": "-- Grafana --"},
			"enable":     true,
			"hide":       true,
			"iconColor":  "rgba(0, 211, 255, 1)",
			"name":       "Annotations & Alerts",
			"type":       "dashboard",
		}}},
		Description:  description,
		Editable:     true,
		GraphTooltip: 1,
		Links: []Link{{
			AsDropdown: true, Icon: "external link", IncludeVars: false, KeepTime: true,
			Tags: []string{"idemkit"}, Title: "idemkit dashboards", Type: "dashboards",
		}},
		Refresh:       "30s",
		SchemaVersion: schemaVersion,
		Tags:          []string{"idemkit", "mcp", "opentelemetry"},
		Templating:    Templating{List: vars},
		Time:          TimeRange{From: "now-6h", To: "now"},
		Timepicker:    map[string]any{},
		Timezone:      "browser",
		Title:         title,
		UID:           uid,
		Version:       1,
	}
}

// labelVar is a multi-value query variable over the values of label in
// metric, "All" meaning the regex .* (so a series without the label would
// match too: the checks make sure the labels exist).
func labelVar(name, label, description, metric, lbl string) *Var {
	q := fmt.Sprintf("label_values(%s, %s)", metric, lbl)
	return &Var{
		Name: name, Label: label, Description: description, Type: "query",
		Datasource: prom, Definition: q,
		Query:   VarQuery{Query: q, RefID: "PrometheusVariableQueryEditor-VariableQuery"},
		Refresh: 2, Sort: 1, Multi: true, IncludeAll: true, AllValue: ".*",
		Current: map[string]any{}, Options: []any{},
	}
}

// layout places panels left to right, 24 columns wide.
type layout struct {
	d      *Dashboard
	nextID int
	x, y   int
	rowH   int
}

func newLayout(d *Dashboard) *layout { return &layout{d: d, nextID: 1} }

// row starts a new row of panels.
func (l *layout) row(title string) {
	l.newline()
	collapsed := false
	l.d.Panels = append(l.d.Panels, &Panel{
		ID: l.id(), Type: "row", Title: title, Collapsed: &collapsed,
		GridPos: GridPos{H: 1, W: 24, X: 0, Y: l.y},
	})
	l.y++
}

// add places p w columns wide and h rows high.
func (l *layout) add(w, h int, p *Panel) {
	if l.x+w > 24 {
		l.newline()
	}
	p.ID = l.id()
	p.GridPos = GridPos{H: h, W: w, X: l.x, Y: l.y}
	l.x += w
	if h > l.rowH {
		l.rowH = h
	}
	l.d.Panels = append(l.d.Panels, p)
}

func (l *layout) newline() {
	if l.x > 0 {
		l.y += l.rowH
	}
	l.x, l.rowH = 0, 0
}

func (l *layout) id() int {
	id := l.nextID
	l.nextID++
	return id
}

// Targets.

// series is a range query drawn as a time series.
func series(expr, legend string) *Target {
	return &Target{Datasource: prom, EditorMode: "code", Expr: expr, LegendFormat: legend, Format: "time_series", Range: true}
}

// instant is an instant query at the end of the time range.
func instant(expr, legend string) *Target {
	return &Target{Datasource: prom, EditorMode: "code", Expr: expr, LegendFormat: legend, Format: "time_series", Instant: true}
}

// tableQuery is an instant query in table format.
func tableQuery(expr string) *Target {
	return &Target{Datasource: prom, EditorMode: "code", Expr: expr, Format: "table", Instant: true}
}

func withRefIDs(ts []*Target) []*Target {
	for i, t := range ts {
		t.RefID = string(rune('A' + i))
	}
	return ts
}

// Panels.

func f(v float64) *float64 { return &v }
func n(v int) *int         { return &v }

func thresholds(base string, steps ...any) Thresholds {
	t := Thresholds{Mode: "absolute", Steps: []Step{{Color: base}}}
	for i := 0; i+1 < len(steps); i += 2 {
		t.Steps = append(t.Steps, Step{Value: f(steps[i].(float64)), Color: steps[i+1].(string)})
	}
	return t
}

// timeseries is a line chart; stacked panels fill their areas.
func timeseries(title, description, unit string, stacked bool, targets ...*Target) *Panel {
	custom := map[string]any{
		"drawStyle": "line", "lineWidth": 1, "fillOpacity": 10, "showPoints": "never",
		"spanNulls": false, "axisSoftMin": 0,
	}
	if stacked {
		custom["fillOpacity"] = 60
		custom["stacking"] = map[string]any{"group": "A", "mode": "normal"}
	}
	return &Panel{
		Type: "timeseries", Title: title, Description: description, Datasource: prom,
		FieldConfig: &FieldConfig{Defaults: Defaults{
			Unit: unit, Min: f(0),
			Color:      map[string]any{"mode": "palette-classic"},
			Thresholds: thresholds("green"),
			Custom:     custom,
		}, Overrides: []Override{}},
		Options: map[string]any{
			"legend":  map[string]any{"displayMode": "table", "placement": "bottom", "showLegend": true, "calcs": []string{"mean", "max"}},
			"tooltip": map[string]any{"mode": "multi", "sort": "desc"},
		},
		Targets: withRefIDs(targets),
	}
}

// stat is a single number with thresholds that color its background.
func stat(title, description, unit string, decimals int, th Thresholds, t *Target) *Panel {
	return &Panel{
		Type: "stat", Title: title, Description: description, Datasource: prom,
		FieldConfig: &FieldConfig{Defaults: Defaults{
			Unit: unit, Decimals: n(decimals),
			Color:      map[string]any{"mode": "thresholds"},
			Thresholds: th,
		}, Overrides: []Override{}},
		Options: map[string]any{
			"colorMode": "background", "graphMode": "none", "justifyMode": "center", "orientation": "auto",
			"textMode": "value", "wideLayout": true, "showPercentChange": false,
			"reduceOptions": map[string]any{"calcs": []string{"lastNotNull"}, "fields": "", "values": false},
		},
		Targets: withRefIDs([]*Target{t}),
	}
}

// bargauge is horizontal bars, one per series of an instant query.
func bargauge(title, description, unit string, th Thresholds, targets ...*Target) *Panel {
	return &Panel{
		Type: "bargauge", Title: title, Description: description, Datasource: prom,
		FieldConfig: &FieldConfig{Defaults: Defaults{
			Unit: unit, Decimals: n(0), Min: f(0),
			Color:      map[string]any{"mode": "thresholds"},
			Thresholds: th,
		}, Overrides: []Override{}},
		Options: map[string]any{
			"orientation": "horizontal", "displayMode": "gradient", "valueMode": "color",
			"showUnfilled": true, "namePlacement": "left", "sizing": "auto", "minVizHeight": 16, "maxVizHeight": 300,
			"reduceOptions": map[string]any{"calcs": []string{"lastNotNull"}, "fields": "", "values": false},
		},
		Targets: withRefIDs(targets),
	}
}

// table shows instant table queries; columns are renamed from their label
// (or "Value #refId") to rename's values, in rename's order.
func table(title, description, unit string, rename [][2]string, targets ...*Target) *Panel {
	names := map[string]any{}
	index := map[string]any{}
	for i, r := range rename {
		names[r[0]] = r[1]
		index[r[0]] = i
	}
	tr := []Transformation{}
	if len(targets) > 1 {
		tr = append(tr, Transformation{ID: "merge", Options: map[string]any{}})
	}
	tr = append(tr, Transformation{ID: "organize", Options: map[string]any{
		"excludeByName": map[string]any{"Time": true, "otel_scope_name": true, "otel_scope_version": true, "otel_scope_schema_url": true},
		"renameByName":  names,
		"indexByName":   index,
	}})
	return &Panel{
		Type: "table", Title: title, Description: description, Datasource: prom,
		FieldConfig: &FieldConfig{Defaults: Defaults{
			Unit: unit, Decimals: n(0),
			Color:      map[string]any{"mode": "thresholds"},
			Thresholds: thresholds("green"),
			Custom:     map[string]any{"align": "auto", "cellOptions": map[string]any{"type": "auto"}, "inspect": false},
		}, Overrides: []Override{}},
		Options: map[string]any{
			"showHeader": true, "cellHeight": "sm",
			"footer": map[string]any{"show": false, "reducer": []string{"sum"}, "fields": "", "countRows": false},
		},
		Targets:         withRefIDs(targets),
		Transformations: tr,
	}
}

// colors gives the series whose display names are the keys fixed colors.
func colors(p *Panel, byName map[string]string) *Panel {
	keys := make([]string, 0, len(byName))
	for k := range byName {
		keys = append(keys, k)
	}
	// Sorted for a stable file.
	for i := range keys {
		for j := i + 1; j < len(keys); j++ {
			if keys[j] < keys[i] {
				keys[i], keys[j] = keys[j], keys[i]
			}
		}
	}
	for _, k := range keys {
		p.FieldConfig.Overrides = append(p.FieldConfig.Overrides, Override{
			Matcher:    map[string]any{"id": "byName", "options": k},
			Properties: []map[string]any{{"id": "color", "value": map[string]any{"mode": "fixed", "fixedColor": byName[k]}}},
		})
	}
	return p
}

// Queries.

// sel renders a selector: metric{matchers...}.
func sel(metric string, matchers ...string) string {
	var m []string
	for _, x := range matchers {
		if x != "" {
			m = append(m, x)
		}
	}
	return metric + "{" + strings.Join(m, ", ") + "}"
}

// inRange is what a counter selector counted during the dashboard's time
// range, per series, without losing the series born inside it: increase()
// needs two samples, so a series that appears with value 1 and stays there
// (the usual shape of a rare event such as a leaked duplicate, which the
// exporters only start exporting when it first happens) has increase 0.
// Series that already existed at the start of the range are counted by
// increase(); series born inside it by their current value (they started
// from zero).
func inRange(s string) string {
	return fmt.Sprintf("((increase(%[1]s[$__range]) and %[1]s offset $__range) or (%[1]s unless %[1]s offset $__range))", s)
}

// rate is the per-second rate over $__rate_interval.
func rate(s string) string { return fmt.Sprintf("rate(%s[$__rate_interval])", s) }

// or0 makes an empty sum show 0 rather than "No data" (the live test checks
// every selector on its own, so this cannot hide a metric that is missing).
func or0(expr string) string { return expr + " or vector(0)" }

// Effect and cause colors, shared by the dashboards.
var (
	effectColors = map[string]string{"leaked": "red", "blocked": "orange", "suppressed": "green"}
	causeColors  = map[string]string{
		"transport_retry": "purple", "harness_retry": "orange", "model_reissue": "blue",
		"reconnect_replay": "yellow", "unknown": "text",
	}
)
