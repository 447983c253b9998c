package build

//lint:file-ignore SA1019 the classic dashboard model (dashboard.Dashboard) is the one Grafana 10.4 and 11 import; the SDK deprecates it for dashboardv2, which needs Grafana 12's v2 API

import (
	"fmt"
	"sort"
	"strings"

	"github.com/grafana/grafana-foundation-sdk/go/bargauge"
	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/cog/variants"
	"github.com/grafana/grafana-foundation-sdk/go/common"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
	"github.com/grafana/grafana-foundation-sdk/go/stat"
	"github.com/grafana/grafana-foundation-sdk/go/table"
	"github.com/grafana/grafana-foundation-sdk/go/timeseries"
)

// prom is the data source of everything: the ${DS_PROMETHEUS} input, which
// Grafana asks for on import.
var prom = common.DataSourceRef{Type: cog.ToPtr("prometheus"), Uid: cog.ToPtr("${DS_PROMETHEUS}")}

// newDashboard returns a dashboard builder with links to the other idemkit
// dashboards, the default time range, a 30s refresh and the variables.
func newDashboard(uid, title, description string, vars ...*dashboard.QueryVariableBuilder) *dashboard.DashboardBuilder {
	b := dashboard.NewDashboardBuilder(title).
		Uid(uid).
		Description(description).
		Editable().
		Tooltip(dashboard.DashboardCursorSyncCrosshair).
		Refresh("30s").
		Tags([]string{"idemkit", "mcp", "opentelemetry"}).
		Time("now-6h", "now").
		Timezone(common.TimeZoneBrowser).
		Version(1).
		Link(dashboard.NewDashboardLinkBuilder("idemkit dashboards").
			Type(dashboard.DashboardLinkTypeDashboards).
			Tags([]string{"idemkit"}).
			AsDropdown(true).
			KeepTime(true).
			IncludeVars(false).
			TargetBlank(false).
			Icon("external link"))
	for _, v := range vars {
		b.WithVariable(v)
	}
	return b
}

// labelVar is a multi-value query variable over the values of label in
// metric, "All" meaning the regex .* (so a series without the label would
// match too: the checks make sure the labels exist).
func labelVar(name, label, description, metric, lbl string) *dashboard.QueryVariableBuilder {
	q := fmt.Sprintf("label_values(%s, %s)", metric, lbl)
	return dashboard.NewQueryVariableBuilder(name).
		Label(label).
		Description(description).
		Datasource(prom).
		Definition(q).
		Query(dashboard.StringOrMap{Map: map[string]any{"query": q, "refId": "PrometheusVariableQueryEditor-VariableQuery"}}).
		Refresh(dashboard.VariableRefreshOnTimeRangeChanged).
		Sort(dashboard.VariableSortAlphabeticalAsc).
		Multi(true).
		IncludeAll(true).
		AllValue(".*")
}

// layout adds rows and panels to a dashboard, numbering the panels; the
// SDK places them left to right on the 24-column grid.
type layout struct {
	d      *dashboard.DashboardBuilder
	nextID uint32
}

func newLayout(d *dashboard.DashboardBuilder) *layout { return &layout{d: d, nextID: 1} }

// row starts a new row of panels.
func (l *layout) row(title string) {
	l.d.WithRow(dashboard.NewRowBuilder(title).Id(l.id()).Collapsed(false))
}

// add places p w columns wide and h rows high.
func (l *layout) add(w, h uint32, p cog.Builder[dashboard.Panel]) {
	l.d.WithPanel(sized{p, w, h, l.id()})
}

func (l *layout) id() uint32 {
	id := l.nextID
	l.nextID++
	return id
}

// sized sets a panel's id and size when it is built.
type sized struct {
	cog.Builder[dashboard.Panel]
	w, h, id uint32
}

func (s sized) Build() (dashboard.Panel, error) {
	p, err := s.Builder.Build()
	if err != nil {
		return p, err
	}
	p.Id = cog.ToPtr(s.id)
	p.GridPos = &dashboard.GridPos{W: s.w, H: s.h}
	return p, nil
}

// Targets.

func query(expr string) *prometheus.DataqueryBuilder {
	return prometheus.NewDataqueryBuilder().Datasource(prom).EditorMode(prometheus.QueryEditorModeCode).Expr(expr)
}

// series is a range query drawn as a time series.
func series(expr, legend string) *prometheus.DataqueryBuilder {
	return query(expr).LegendFormat(legend).Format(prometheus.PromQueryFormatTimeSeries).Range()
}

// instant is an instant query at the end of the time range.
func instant(expr, legend string) *prometheus.DataqueryBuilder {
	return query(expr).LegendFormat(legend).Format(prometheus.PromQueryFormatTimeSeries).Instant()
}

// tableQuery is an instant query in table format.
func tableQuery(expr string) *prometheus.DataqueryBuilder {
	return query(expr).Format(prometheus.PromQueryFormatTable).Instant()
}

// heatmapQuery is an instant query in heatmap format (buckets by le).
func heatmapQuery(expr, legend string) *prometheus.DataqueryBuilder {
	return query(expr).LegendFormat(legend).Format(prometheus.PromQueryFormatHeatmap).Instant()
}

// withRefIDs names the targets A, B, C, ...
func withRefIDs(ts []*prometheus.DataqueryBuilder) []cog.Builder[variants.Dataquery] {
	out := make([]cog.Builder[variants.Dataquery], len(ts))
	for i, t := range ts {
		out[i] = t.RefId(string(rune('A' + i)))
	}
	return out
}

// Panels.

// thresholds are absolute thresholds: a base colour, then value, colour
// pairs.
func thresholds(base string, steps ...any) *dashboard.ThresholdsConfigBuilder {
	ts := []dashboard.Threshold{{Color: base}}
	for i := 0; i+1 < len(steps); i += 2 {
		ts = append(ts, dashboard.Threshold{Value: cog.ToPtr(steps[i].(float64)), Color: steps[i+1].(string)})
	}
	return dashboard.NewThresholdsConfigBuilder().Mode(dashboard.ThresholdsModeAbsolute).Steps(ts)
}

func colorMode(m dashboard.FieldColorModeId) *dashboard.FieldColorBuilder {
	return dashboard.NewFieldColorBuilder().Mode(m)
}

// fixedColors are overrides that give the series whose display names are
// the keys fixed colours, in name order (for a stable file).
func fixedColors(byName map[string]string) []cog.Builder[dashboard.DashboardFieldConfigSourceOverrides] {
	names := make([]string, 0, len(byName))
	for k := range byName {
		names = append(names, k)
	}
	sort.Strings(names)
	out := make([]cog.Builder[dashboard.DashboardFieldConfigSourceOverrides], 0, len(names))
	for _, k := range names {
		out = append(out, dashboard.NewDashboardFieldConfigSourceOverridesBuilder().
			Matcher(dashboard.MatcherConfig{Id: "byName", Options: k}).
			Properties([]dashboard.DynamicConfigValue{{Id: "color", Value: map[string]any{"mode": "fixed", "fixedColor": byName[k]}}}))
	}
	return out
}

// timeseries is a line chart; stacked panels fill their areas. colors
// (may be nil) fixes the colours of series by name.
func timeseriesPanel(title, description, unit string, stacked bool, colors map[string]string, targets ...*prometheus.DataqueryBuilder) *timeseries.PanelBuilder {
	p := timeseries.NewPanelBuilder().
		Title(title).Description(description).Datasource(prom).
		Unit(unit).Min(0).
		ColorScheme(colorMode(dashboard.FieldColorModeIdPaletteClassic)).
		Thresholds(thresholds("green")).
		DrawStyle(common.GraphDrawStyleLine).LineWidth(1).FillOpacity(10).
		ShowPoints(common.VisibilityModeNever).SpanNulls(common.BoolOrFloat64{Bool: cog.ToPtr(false)}).AxisSoftMin(0).
		Legend(common.NewVizLegendOptionsBuilder().DisplayMode(common.LegendDisplayModeTable).Placement(common.LegendPlacementBottom).
			ShowLegend(true).Calcs([]string{"mean", "max"})).
		Tooltip(common.NewVizTooltipOptionsBuilder().Mode(common.TooltipDisplayModeMulti).Sort(common.SortOrderDescending)).
		Targets(withRefIDs(targets)).
		Overrides(fixedColors(colors))
	if stacked {
		p.FillOpacity(60).Stacking(common.NewStackingConfigBuilder().Group("A").Mode(common.StackingModeNormal))
	}
	return p
}

// statPanel is a single number with thresholds that colour its background.
func statPanel(title, description, unit string, decimals float64, th *dashboard.ThresholdsConfigBuilder, t *prometheus.DataqueryBuilder) *stat.PanelBuilder {
	return stat.NewPanelBuilder().
		Title(title).Description(description).Datasource(prom).
		Unit(unit).Decimals(decimals).
		ColorScheme(colorMode(dashboard.FieldColorModeIdThresholds)).
		Thresholds(th).
		ColorMode(common.BigValueColorModeBackground).GraphMode(common.BigValueGraphModeNone).
		JustifyMode(common.BigValueJustifyModeCenter).Orientation(common.VizOrientationAuto).
		TextMode(common.BigValueTextModeValue).WideLayout(true).ShowPercentChange(false).
		ReduceOptions(common.NewReduceDataOptionsBuilder().Calcs([]string{"lastNotNull"}).Fields("").Values(false)).
		Targets(withRefIDs([]*prometheus.DataqueryBuilder{t}))
}

// bargaugePanel is horizontal bars, one per series of an instant query.
func bargaugePanel(title, description, unit string, th *dashboard.ThresholdsConfigBuilder, colors map[string]string, targets ...*prometheus.DataqueryBuilder) *bargauge.PanelBuilder {
	return bargauge.NewPanelBuilder().
		Title(title).Description(description).Datasource(prom).
		Unit(unit).Decimals(0).Min(0).
		ColorScheme(colorMode(dashboard.FieldColorModeIdThresholds)).
		Thresholds(th).
		Orientation(common.VizOrientationHorizontal).DisplayMode(common.BarGaugeDisplayModeGradient).
		ValueMode(common.BarGaugeValueModeColor).ShowUnfilled(true).NamePlacement(common.BarGaugeNamePlacementLeft).
		Sizing(common.BarGaugeSizingAuto).MinVizHeight(16).MaxVizHeight(300).
		ReduceOptions(common.NewReduceDataOptionsBuilder().Calcs([]string{"lastNotNull"}).Fields("").Values(false)).
		Targets(withRefIDs(targets)).
		Overrides(fixedColors(colors))
}

// column is a table column: the field it shows (a label, "Value", or
// "Value #refId" when the table merges several queries), its title, and
// its unit when it differs from the table's (a duration column beside
// counts).
type column struct{ field, title, unit string }

// tablePanel shows instant table queries; columns are renamed from their
// label (or "Value #refId") to rename's values, in rename's order.
func tablePanel(title, description, unit string, rename [][2]string, targets ...*prometheus.DataqueryBuilder) *table.PanelBuilder {
	cols := make([]column, len(rename))
	for i, r := range rename {
		cols[i] = column{field: r[0], title: r[1]}
	}
	return columnsTable(title, description, unit, cols, targets...)
}

// columnsTable is tablePanel with per-column units: a column whose unit is
// set shows it with two decimals (the table's other columns are counts).
func columnsTable(title, description, unit string, cols []column, targets ...*prometheus.DataqueryBuilder) *table.PanelBuilder {
	rename := make([][2]string, len(cols))
	var overrides []cog.Builder[dashboard.DashboardFieldConfigSourceOverrides]
	for i, c := range cols {
		rename[i] = [2]string{c.field, c.title}
		if c.unit != "" {
			overrides = append(overrides, dashboard.NewDashboardFieldConfigSourceOverridesBuilder().
				Matcher(dashboard.MatcherConfig{Id: "byName", Options: c.title}).
				Properties([]dashboard.DynamicConfigValue{{Id: "unit", Value: c.unit}, {Id: "decimals", Value: 2}}))
		}
	}
	names := map[string]any{}
	index := map[string]any{}
	for i, r := range rename {
		names[r[0]] = r[1]
		index[r[0]] = i
	}
	p := table.NewPanelBuilder().
		Title(title).Description(description).Datasource(prom).
		Unit(unit).Decimals(0).
		ColorScheme(colorMode(dashboard.FieldColorModeIdThresholds)).
		Thresholds(thresholds("green")).
		Align(common.FieldTextAlignmentAuto).
		CellOptions(common.TableCellOptions{TableAutoCellOptions: common.NewTableAutoCellOptions()}).
		Inspect(false).
		ShowHeader(true).CellHeight(common.TableCellHeightSm).
		Footer(common.NewTableFooterOptionsBuilder().Show(false).Reducer([]string{"sum"}).CountRows(false)).
		Targets(withRefIDs(targets))
	if len(targets) > 1 {
		p.WithTransformation(dashboard.DataTransformerConfig{Id: "merge", Options: map[string]any{}})
	}
	p.WithTransformation(dashboard.DataTransformerConfig{Id: "organize", Options: map[string]any{
		"excludeByName": map[string]any{"Time": true, "otel_scope_name": true, "otel_scope_version": true, "otel_scope_schema_url": true},
		"renameByName":  names,
		"indexByName":   index,
	}})
	if len(overrides) > 0 {
		p.Overrides(overrides)
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
