package harness

import (
	"fmt"
	"os"
	"slices"

	"gopkg.in/yaml.v3"
)

// TraceFileOverlay returns a Collector configuration to pass after the
// file at configPath (otelcol --config FILE --config OVERLAY): it adds a
// file exporter named name that writes every span of the traces pipelines
// that run processor to path, and appends it to those pipelines' exporters
// (the Collector merges maps and replaces lists, so the overlay repeats
// each list with the exporter added). The shipped configuration is used as
// it is: the overlay only adds an output to read the annotated spans from.
func TraceFileOverlay(configPath, processor, name, path string) ([]byte, error) {
	b, err := os.ReadFile(configPath)
	if err != nil {
		return nil, err
	}
	var cfg struct {
		Service struct {
			Pipelines map[string]struct {
				Processors []string `yaml:"processors"`
				Exporters  []string `yaml:"exporters"`
			} `yaml:"pipelines"`
		} `yaml:"service"`
	}
	if err := yaml.Unmarshal(b, &cfg); err != nil {
		return nil, fmt.Errorf("%s: %w", configPath, err)
	}
	pipelines := map[string]any{}
	for id, p := range cfg.Service.Pipelines {
		if (id == "traces" || len(id) > 7 && id[:7] == "traces/") && slices.Contains(p.Processors, processor) {
			pipelines[id] = map[string]any{"exporters": append(slices.Clone(p.Exporters), name)}
		}
	}
	if len(pipelines) == 0 {
		return nil, fmt.Errorf("%s: no traces pipeline runs the %s processor", configPath, processor)
	}
	return yaml.Marshal(map[string]any{
		"exporters": map[string]any{name: map[string]any{"path": path, "flush_interval": "200ms"}},
		"service":   map[string]any{"pipelines": pipelines},
	})
}
