package dashtest

import "github.com/idemkit-mcp/idemkit/dashboards/internal/metrics"

// The registry of emitted metrics (metrics.json), from package metrics.
type (
	// Registry is metrics.Registry.
	Registry = metrics.Registry
	// Metric is metrics.Metric.
	Metric = metrics.Metric
	// Series is metrics.Series.
	Series = metrics.Series
)

// Metric types of the registry.
const (
	Counter   = metrics.Counter
	Gauge     = metrics.Gauge
	Histogram = metrics.Histogram
)

// ParseRegistry is metrics.ParseRegistry.
func ParseRegistry(data []byte) (*Registry, error) { return metrics.ParseRegistry(data) }
