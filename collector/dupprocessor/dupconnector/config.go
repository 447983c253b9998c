package dupconnector // import "github.com/idemkit-mcp/idemkit/collector/dupprocessor/dupconnector"

import (
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/collector/confmap"
)

// Defaults of Config, documented in README.md.
const (
	// DefaultMetricsFlushInterval is how often the cumulative metrics are
	// emitted: shorter than a usual Prometheus scrape interval.
	DefaultMetricsFlushInterval = 15 * time.Second
	// DefaultMaxSeries caps the series of each metric; past it new
	// attribute combinations are counted in one series marked
	// otel.metric.overflow=true.
	DefaultMaxSeries = 10_000
)

// DefaultGapBuckets returns the default upper bounds of the gap histogram:
// from harness retries (milliseconds) through model re-issues (seconds) and
// reconnects (under a minute) to the 10-minute default window and beyond, so
// a user can read off the window that catches a given share of duplicates.
func DefaultGapBuckets() []time.Duration {
	return []time.Duration{
		10 * time.Millisecond, 50 * time.Millisecond, 100 * time.Millisecond, 250 * time.Millisecond,
		500 * time.Millisecond, time.Second, 2 * time.Second, 5 * time.Second, 10 * time.Second,
		30 * time.Second, time.Minute, 2 * time.Minute, 5 * time.Minute, 10 * time.Minute, 15 * time.Minute,
	}
}

// Config is the configuration of the dup connector.
type Config struct {
	// MetricsFlushInterval is how often the metrics are emitted. Defaults to
	// DefaultMetricsFlushInterval.
	MetricsFlushInterval time.Duration `mapstructure:"metrics_flush_interval"`
	// GapBuckets are the upper bounds of the idemkit.duplicate.gap histogram
	// buckets, strictly increasing. Defaults to DefaultGapBuckets().
	GapBuckets []time.Duration `mapstructure:"gap_buckets"`
	// MaxSeries caps the series of each metric. Defaults to DefaultMaxSeries.
	MaxSeries int `mapstructure:"max_series"`

	// prevent unkeyed literal initialization
	_ struct{}
}

var _ confmap.Validator = (*Config)(nil)

// Validate checks the configuration; each error names the YAML key at fault.
func (c *Config) Validate() error {
	var errs []error
	if c.MetricsFlushInterval <= 0 {
		errs = append(errs, fmt.Errorf("metrics_flush_interval: must be positive, got %s", c.MetricsFlushInterval))
	}
	if len(c.GapBuckets) == 0 {
		errs = append(errs, errors.New("gap_buckets: must list at least one bucket bound"))
	}
	for i, b := range c.GapBuckets {
		if b <= 0 {
			errs = append(errs, fmt.Errorf("gap_buckets[%d]: must be positive, got %s", i, b))
		}
		if i > 0 && b <= c.GapBuckets[i-1] {
			errs = append(errs, fmt.Errorf("gap_buckets[%d]: must be greater than gap_buckets[%d] (%s), got %s", i, i-1, c.GapBuckets[i-1], b))
		}
	}
	if c.MaxSeries <= 0 {
		errs = append(errs, fmt.Errorf("max_series: must be positive, got %d", c.MaxSeries))
	}
	return errors.Join(errs...)
}

func createDefaultConfig() *Config {
	return &Config{
		MetricsFlushInterval: DefaultMetricsFlushInterval,
		GapBuckets:           DefaultGapBuckets(),
		MaxSeries:            DefaultMaxSeries,
	}
}
