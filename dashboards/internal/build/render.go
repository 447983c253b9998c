// Package build defines idemkit's Grafana dashboards with Grafana's own
// Foundation SDK (github.com/grafana/grafana-foundation-sdk/go) and renders
// them as the importable JSON files of the dashboards folder (cmd/gendash
// writes them; a test checks the files are what this package renders).
// Every metric name comes from metrics.json by id (internal/metrics).
//
// The SDK models the dashboard itself. What it does not model is the
// export wrapper Grafana's "Export for sharing externally" adds, which
// import reads: __inputs (the ${DS_PROMETHEUS} data source Grafana asks for
// on import), __requires (the Grafana version, data source and panel
// plugins) and __elements (library panels: none). Render adds those three
// keys, and nothing else, around the SDK's JSON.
//
// The JSON is the product: the checks in internal/dashtest read the files
// (through the SDK's types), not this package.
package build

//lint:file-ignore SA1019 the classic dashboard model (dashboard.Dashboard) is the one Grafana 10.4 and 11 import; the SDK deprecates it for dashboardv2, which needs Grafana 12's v2 API

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
)

// Versions the export wrapper declares.
const grafanaMin = "10.4.0"

// Input is an entry of __inputs: a data source Grafana asks for on import.
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

// inputs are the import-time inputs of every dashboard.
var inputs = []Input{{
	Name:        "DS_PROMETHEUS",
	Label:       "Prometheus",
	Description: "The Prometheus that scrapes the otelcol-idemkit Collector (its prometheus exporter, and its own telemetry endpoint for the processor-health dashboard).",
	Type:        "datasource",
	PluginID:    "prometheus",
	PluginName:  "Prometheus",
}}

var panelNames = map[string]string{"bargauge": "Bar gauge", "stat": "Stat", "table": "Table", "timeseries": "Time series"}

// Render returns the dashboard as Grafana's export for sharing writes it:
// the SDK's JSON with __inputs, __requires (the panel types it uses) and
// __elements added, keys sorted, indented, with a final newline and HTML
// characters not escaped.
func Render(d dashboard.Dashboard) ([]byte, error) {
	var raw bytes.Buffer
	enc := json.NewEncoder(&raw)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(d); err != nil {
		return nil, fmt.Errorf("render %v: %w", d.Uid, err)
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(raw.Bytes(), &doc); err != nil {
		return nil, err
	}
	requires := []Require{
		{Type: "grafana", ID: "grafana", Name: "Grafana", Version: grafanaMin},
		{Type: "datasource", ID: "prometheus", Name: "Prometheus", Version: "1.0.0"},
	}
	used := map[string]bool{}
	for _, p := range d.Panels {
		if p.RowPanel != nil {
			for _, q := range p.RowPanel.Panels {
				used[q.Type] = true
			}
		}
		if p.Panel != nil {
			used[p.Panel.Type] = true
		}
	}
	for _, t := range []string{"bargauge", "stat", "table", "timeseries"} {
		if used[t] {
			requires = append(requires, Require{Type: "panel", ID: t, Name: panelNames[t]})
		}
	}
	for key, v := range map[string]any{"__inputs": inputs, "__requires": requires, "__elements": map[string]any{}} {
		b, err := json.Marshal(v)
		if err != nil {
			return nil, err
		}
		doc[key] = b
	}
	var b bytes.Buffer
	enc = json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(doc); err != nil {
		return nil, fmt.Errorf("render %v: %w", d.Uid, err)
	}
	return b.Bytes(), nil
}
