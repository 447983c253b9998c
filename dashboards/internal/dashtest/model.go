// Package dashtest checks Grafana dashboards against the metrics a system
// really emits.
//
// It reads the dashboard JSON files the way Grafana would (rows and their
// nested panels, every target, every template variable), substitutes the
// template variables, and then either checks them statically (Lint: the JSON
// structure, the data source input, PromQL syntax, every metric and label
// against a registry of emitted metrics, legends against the labels a query
// returns) or runs them against a real Prometheus (Live: every target must
// succeed and return series, every selector must match real series carrying
// the labels it filters on, and the headline panels must show the values
// the evidence of the run predicts).
package dashtest

//lint:file-ignore SA1019 the classic dashboard model (dashboard.Dashboard) is the one Grafana 10.4 and 11 import; the SDK deprecates it for dashboardv2, which needs Grafana 12's v2 API

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strings"

	"github.com/grafana/grafana-foundation-sdk/go/cog/plugins"
	"github.com/grafana/grafana-foundation-sdk/go/common"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
)

// DSRef is a data source reference.
type DSRef struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

// Dashboard is what the checks read of a Grafana dashboard: the Foundation
// SDK's model of it (SDK), flattened into panels, targets and variables.
type Dashboard struct {
	File          string
	SDK           *dashboard.Dashboard `json:"-"`
	UID           string               `json:"uid"`
	Title         string               `json:"title"`
	SchemaVersion int                  `json:"schemaVersion"`
	Inputs        []struct {
		Name     string `json:"name"`
		Type     string `json:"type"`
		PluginID string `json:"pluginId"`
	} `json:"__inputs"`
	Requires []struct {
		Type string `json:"type"`
		ID   string `json:"id"`
	} `json:"__requires"`
	Templating struct {
		List []*Variable `json:"list"`
	} `json:"templating"`
	Time *struct {
		From string `json:"from"`
		To   string `json:"to"`
	} `json:"time"`
	TopPanels []*Panel `json:"panels"`

	// Panels are every panel, rows' nested panels included, rows excluded,
	// in file order.
	Panels []*Panel `json:"-"`
	// Rows are the row panels.
	Rows []*Panel `json:"-"`
}

// Panel is a panel (or a row).
type Panel struct {
	ID          int    `json:"id"`
	Type        string `json:"type"`
	Title       string `json:"title"`
	Description string `json:"description"`
	Datasource  *DSRef `json:"datasource"`
	GridPos     *struct {
		H, W, X, Y int
	} `json:"gridPos"`
	FieldConfig *struct {
		Defaults struct {
			Unit string `json:"unit"`
		} `json:"defaults"`
	} `json:"fieldConfig"`
	Targets []*Target `json:"targets"`
	Panels  []*Panel  `json:"panels"`
}

// Target is a panel's query.
type Target struct {
	RefID        string `json:"refId"`
	Datasource   *DSRef `json:"datasource"`
	Expr         string `json:"expr"`
	LegendFormat string `json:"legendFormat"`
	Format       string `json:"format"`
	Instant      bool   `json:"instant"`
	Range        *bool  `json:"range"`
	Hide         bool   `json:"hide"`
}

// IsRange reports whether Grafana runs the target as a range query (range
// is true, or neither range nor instant is set).
func (t *Target) IsRange() bool {
	if t.Range != nil {
		return *t.Range
	}
	return !t.Instant
}

// Variable is a template variable.
type Variable struct {
	Name       string          `json:"name"`
	Type       string          `json:"type"`
	Datasource *DSRef          `json:"datasource"`
	Definition string          `json:"definition"`
	RawQuery   json.RawMessage `json:"query"`
	Multi      bool            `json:"multi"`
	IncludeAll bool            `json:"includeAll"`
	AllValue   string          `json:"allValue"`
	Regex      string          `json:"regex"`
}

// Query returns the variable's query: the string form, or the query field
// of the object form Grafana 10+ writes for Prometheus variables.
func (v *Variable) Query() string {
	var s string
	if json.Unmarshal(v.RawQuery, &s) == nil {
		return s
	}
	var o struct {
		Query string `json:"query"`
	}
	if json.Unmarshal(v.RawQuery, &o) == nil && o.Query != "" {
		return o.Query
	}
	return v.Definition
}

// Where names a panel target in messages.
func Where(d *Dashboard, p *Panel, t *Target) string {
	s := fmt.Sprintf("%s: panel %d %q", d.File, p.ID, p.Title)
	if t != nil {
		s += " target " + t.RefID
	}
	return s
}

// Parse reads a dashboard's JSON the way Grafana does, with the types of
// Grafana's Foundation SDK (a mistyped field is an error), plus the export wrapper the SDK does not model (__inputs,
// __requires, __elements), and returns the view the checks read.
func Parse(file string, data []byte) (*Dashboard, error) {
	plugins.RegisterDefaultPlugins()
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	var d Dashboard
	d.File = file
	if err := unmarshalOptional(raw["__inputs"], &d.Inputs); err != nil {
		return nil, fmt.Errorf("%s: __inputs: %w", file, err)
	}
	if err := unmarshalOptional(raw["__requires"], &d.Requires); err != nil {
		return nil, fmt.Errorf("%s: __requires: %w", file, err)
	}
	delete(raw, "__inputs")
	delete(raw, "__requires")
	delete(raw, "__elements")
	rest, err := json.Marshal(raw)
	if err != nil {
		return nil, err
	}
	var sdk dashboard.Dashboard
	// Not UnmarshalJSONStrict: at v0.0.22 it returns an empty
	// cog.BuildErrors (a non-nil error) from nested types on success, and
	// PanelOrRowPanel then drops every panel.
	if err := json.Unmarshal(rest, &sdk); err != nil {
		return nil, fmt.Errorf("%s: not a Grafana dashboard (Foundation SDK): %w", file, err)
	}
	d.SDK = &sdk
	d.UID, d.Title, d.SchemaVersion = deref(sdk.Uid), deref(sdk.Title), int(sdk.SchemaVersion)
	if sdk.Time != nil {
		d.Time = &struct {
			From string `json:"from"`
			To   string `json:"to"`
		}{sdk.Time.From, sdk.Time.To}
	}
	for _, v := range sdk.Templating.List {
		q, err := json.Marshal(v.Query)
		if err != nil {
			return nil, err
		}
		d.Templating.List = append(d.Templating.List, &Variable{
			Name: v.Name, Type: string(v.Type), Datasource: dsRef(v.Datasource), Definition: deref(v.Definition),
			RawQuery: q, Multi: deref(v.Multi), IncludeAll: deref(v.IncludeAll), AllValue: deref(v.AllValue), Regex: deref(v.Regex),
		})
	}
	for _, pr := range sdk.Panels {
		switch {
		case pr.RowPanel != nil:
			row := &Panel{ID: int(pr.RowPanel.Id), Type: "row", Title: deref(pr.RowPanel.Title)}
			if gp := pr.RowPanel.GridPos; gp != nil {
				row.GridPos = &struct{ H, W, X, Y int }{int(gp.H), int(gp.W), int(gp.X), int(gp.Y)}
			}
			d.Rows = append(d.Rows, row)
			d.TopPanels = append(d.TopPanels, row)
			for i := range pr.RowPanel.Panels {
				p := view(&pr.RowPanel.Panels[i])
				row.Panels = append(row.Panels, p)
				d.Panels = append(d.Panels, p)
			}
		case pr.Panel != nil:
			p := view(pr.Panel)
			d.TopPanels = append(d.TopPanels, p)
			d.Panels = append(d.Panels, p)
		}
	}
	return &d, nil
}

// view is the checks' view of an SDK panel.
func view(sp *dashboard.Panel) *Panel {
	p := &Panel{ID: int(deref(sp.Id)), Type: sp.Type, Title: deref(sp.Title), Description: deref(sp.Description), Datasource: dsRef(sp.Datasource)}
	if gp := sp.GridPos; gp != nil {
		p.GridPos = &struct{ H, W, X, Y int }{int(gp.H), int(gp.W), int(gp.X), int(gp.Y)}
	}
	if fc := sp.FieldConfig; fc != nil {
		p.FieldConfig = &struct {
			Defaults struct {
				Unit string `json:"unit"`
			} `json:"defaults"`
		}{}
		p.FieldConfig.Defaults.Unit = deref(fc.Defaults.Unit)
	}
	for _, q := range sp.Targets {
		t := &Target{}
		if pq, ok := q.(*prometheus.Dataquery); ok {
			t.RefID, t.Datasource, t.Expr = deref(pq.RefId), dsRef(pq.Datasource), pq.Expr
			t.LegendFormat, t.Instant, t.Range, t.Hide = deref(pq.LegendFormat), deref(pq.Instant), pq.Range, deref(pq.Hide)
			if pq.Format != nil {
				t.Format = string(*pq.Format)
			}
		} else {
			// Not a Prometheus query: no Prometheus data source, which the
			// static checks report.
			t.RefID = "?"
		}
		p.Targets = append(p.Targets, t)
	}
	return p
}

func dsRef(r *common.DataSourceRef) *DSRef {
	if r == nil {
		return nil
	}
	return &DSRef{Type: deref(r.Type), UID: deref(r.Uid)}
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

func unmarshalOptional(b json.RawMessage, v any) error {
	if len(b) == 0 {
		return nil
	}
	return json.Unmarshal(b, v)
}

// LoadAll parses every file of fsys matching pattern, in name order.
func LoadAll(fsys fs.FS, pattern string) ([]*Dashboard, error) {
	names, err := fs.Glob(fsys, pattern)
	if err != nil {
		return nil, err
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("no dashboard matches %s", pattern)
	}
	sort.Strings(names)
	var out []*Dashboard
	for _, name := range names {
		b, err := fs.ReadFile(fsys, name)
		if err != nil {
			return nil, err
		}
		d, err := Parse(path.Base(name), b)
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, nil
}

// Var returns the dashboard's variable called name, or nil.
func (d *Dashboard) Var(name string) *Variable {
	for _, v := range d.Templating.List {
		if v.Name == name {
			return v
		}
	}
	return nil
}

// PanelByTitle returns the panel titled title, or nil.
func (d *Dashboard) PanelByTitle(title string) *Panel {
	for _, p := range d.Panels {
		if strings.EqualFold(p.Title, title) {
			return p
		}
	}
	return nil
}
