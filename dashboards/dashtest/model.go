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

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strings"
)

// DSRef is a data source reference.
type DSRef struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

// Dashboard is the part of a Grafana dashboard's JSON model the checks read.
type Dashboard struct {
	File          string
	UID           string `json:"uid"`
	Title         string `json:"title"`
	SchemaVersion int    `json:"schemaVersion"`
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

// Parse reads a dashboard's JSON.
func Parse(file string, data []byte) (*Dashboard, error) {
	var d Dashboard
	if err := json.Unmarshal(data, &d); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	d.File = file
	var walk func(ps []*Panel)
	walk = func(ps []*Panel) {
		for _, p := range ps {
			if p == nil {
				continue
			}
			if p.Type == "row" {
				d.Rows = append(d.Rows, p)
				walk(p.Panels)
				continue
			}
			d.Panels = append(d.Panels, p)
			walk(p.Panels)
		}
	}
	walk(d.TopPanels)
	return &d, nil
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
