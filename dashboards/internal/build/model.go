// Package build defines idemkit's Grafana dashboards in Go and renders them
// as the importable JSON files of the dashboards folder (cmd/gendash writes
// them; a test checks the files are what this package renders).
//
// The JSON is the product: Grafana imports it, and the checks in
// package dashtest read the JSON files, not this package, so a dashboard
// edited by hand is checked the same way.
package build

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// DSRef is a panel's, target's or variable's data source.
type DSRef struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

// prom is the data source of everything: the ${DS_PROMETHEUS} input, which
// Grafana asks for on import.
var prom = &DSRef{Type: "prometheus", UID: "${DS_PROMETHEUS}"}

// Input is an entry of __inputs.
type Input struct {
	Name        string `json:"name"`
	Label       string `json:"label"`
	Description string `json:"description"`
	Type        string `json:"type"`
	PluginID    string `json:"pluginId"`
	PluginName  string `json:"pluginName"`
}

// Require is an entry of __requires.
type Require struct {
	Type    string `json:"type"`
	ID      string `json:"id"`
	Name    string `json:"name"`
	Version string `json:"version"`
}

// Dashboard is the JSON model of a Grafana dashboard (schema 39).
type Dashboard struct {
	Inputs               []Input        `json:"__inputs"`
	Elements             map[string]any `json:"__elements"`
	Requires             []Require      `json:"__requires"`
	Annotations          map[string]any `json:"annotations"`
	Description          string         `json:"description"`
	Editable             bool           `json:"editable"`
	FiscalYearStartMonth int            `json:"fiscalYearStartMonth"`
	GraphTooltip         int            `json:"graphTooltip"`
	ID                   *int           `json:"id"`
	Links                []Link         `json:"links"`
	Panels               []*Panel       `json:"panels"`
	Refresh              string         `json:"refresh"`
	SchemaVersion        int            `json:"schemaVersion"`
	Tags                 []string       `json:"tags"`
	Templating           Templating     `json:"templating"`
	Time                 TimeRange      `json:"time"`
	Timepicker           map[string]any `json:"timepicker"`
	Timezone             string         `json:"timezone"`
	Title                string         `json:"title"`
	UID                  string         `json:"uid"`
	Version              int            `json:"version"`
	WeekStart            string         `json:"weekStart"`
}

// Link is a dashboard link.
type Link struct {
	AsDropdown  bool     `json:"asDropdown"`
	Icon        string   `json:"icon"`
	IncludeVars bool     `json:"includeVars"`
	KeepTime    bool     `json:"keepTime"`
	Tags        []string `json:"tags"`
	TargetBlank bool     `json:"targetBlank"`
	Title       string   `json:"title"`
	Type        string   `json:"type"`
}

// Templating holds the template variables.
type Templating struct {
	List []*Var `json:"list"`
}

// TimeRange is the default time range.
type TimeRange struct {
	From string `json:"from"`
	To   string `json:"to"`
}

// Var is a query template variable.
type Var struct {
	Name        string         `json:"name"`
	Label       string         `json:"label"`
	Description string         `json:"description"`
	Type        string         `json:"type"`
	Datasource  *DSRef         `json:"datasource"`
	Definition  string         `json:"definition"`
	Query       VarQuery       `json:"query"`
	Refresh     int            `json:"refresh"`
	Regex       string         `json:"regex"`
	Sort        int            `json:"sort"`
	Multi       bool           `json:"multi"`
	IncludeAll  bool           `json:"includeAll"`
	AllValue    string         `json:"allValue"`
	Current     map[string]any `json:"current"`
	Options     []any          `json:"options"`
	Hide        int            `json:"hide"`
}

// VarQuery is a Prometheus variable query as Grafana 10+ stores it.
type VarQuery struct {
	Query string `json:"query"`
	RefID string `json:"refId"`
}

// GridPos places a panel.
type GridPos struct {
	H int `json:"h"`
	W int `json:"w"`
	X int `json:"x"`
	Y int `json:"y"`
}

// Panel is a panel or a row.
type Panel struct {
	ID              int              `json:"id"`
	Type            string           `json:"type"`
	Title           string           `json:"title"`
	Description     string           `json:"description,omitempty"`
	Datasource      *DSRef           `json:"datasource,omitempty"`
	GridPos         GridPos          `json:"gridPos"`
	Collapsed       *bool            `json:"collapsed,omitempty"`
	FieldConfig     *FieldConfig     `json:"fieldConfig,omitempty"`
	Options         map[string]any   `json:"options,omitempty"`
	Targets         []*Target        `json:"targets,omitempty"`
	Transformations []Transformation `json:"transformations,omitempty"`
	Panels          []*Panel         `json:"panels,omitempty"`
}

// FieldConfig is a panel's field configuration.
type FieldConfig struct {
	Defaults  Defaults   `json:"defaults"`
	Overrides []Override `json:"overrides"`
}

// Defaults are the field defaults.
type Defaults struct {
	Unit       string         `json:"unit"`
	Decimals   *int           `json:"decimals,omitempty"`
	Min        *float64       `json:"min,omitempty"`
	Max        *float64       `json:"max,omitempty"`
	NoValue    string         `json:"noValue,omitempty"`
	Color      map[string]any `json:"color"`
	Thresholds Thresholds     `json:"thresholds"`
	Custom     map[string]any `json:"custom,omitempty"`
}

// Thresholds are absolute thresholds.
type Thresholds struct {
	Mode  string `json:"mode"`
	Steps []Step `json:"steps"`
}

// Step is a threshold step; the first has a nil value.
type Step struct {
	Color string   `json:"color"`
	Value *float64 `json:"value"`
}

// Override overrides field properties of the fields a matcher selects.
type Override struct {
	Matcher    map[string]any   `json:"matcher"`
	Properties []map[string]any `json:"properties"`
}

// Transformation is a data transformation of a panel.
type Transformation struct {
	ID      string         `json:"id"`
	Options map[string]any `json:"options"`
}

// Target is a Prometheus query of a panel.
type Target struct {
	RefID        string `json:"refId"`
	Datasource   *DSRef `json:"datasource"`
	EditorMode   string `json:"editorMode"`
	Expr         string `json:"expr"`
	LegendFormat string `json:"legendFormat,omitempty"`
	Format       string `json:"format"`
	Instant      bool   `json:"instant"`
	Range        bool   `json:"range"`
}

// Render returns the dashboard as Grafana's export writes it: indented JSON
// with a final newline, HTML characters not escaped.
func Render(d *Dashboard) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(d); err != nil {
		return nil, fmt.Errorf("render %s: %w", d.UID, err)
	}
	return b.Bytes(), nil
}
