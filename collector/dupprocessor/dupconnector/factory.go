package dupconnector // import "github.com/idemkit-mcp/idemkit/collector/dupprocessor/dupconnector"

import (
	"context"
	"fmt"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/connector"
	"go.opentelemetry.io/collector/consumer"

	"github.com/idemkit-mcp/idemkit/collector/dupprocessor/dupconnector/internal/metadata"
)

// NewFactory returns the factory of the dup connector (component type
// "dup", traces to metrics). Its default configuration is valid:
// `connectors: {dup: {}}`.
func NewFactory() connector.Factory {
	return connector.NewFactory(
		metadata.Type,
		func() component.Config { return createDefaultConfig() },
		connector.WithTracesToMetrics(createTracesToMetrics, metadata.TracesToMetricsStability),
	)
}

func createTracesToMetrics(_ context.Context, set connector.Settings, cfg component.Config, next consumer.Metrics) (connector.Traces, error) {
	c, ok := cfg.(*Config)
	if !ok {
		return nil, fmt.Errorf("dup connector: unexpected config type %T", cfg)
	}
	return newDupConnector(set, c, next), nil
}
