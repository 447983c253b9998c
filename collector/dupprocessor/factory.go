package dupprocessor // import "github.com/idemkit-mcp/idemkit/collector/dupprocessor"

import (
	"context"
	"fmt"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/processor"

	"github.com/idemkit-mcp/idemkit/collector/dupprocessor/internal/metadata"
)

// NewFactory returns the factory of the dup traces processor (component
// type "dup"). Its default configuration is valid: `processors: {dup: {}}`.
func NewFactory() processor.Factory {
	return processor.NewFactory(
		metadata.Type,
		func() component.Config { return createDefaultConfig() },
		processor.WithTraces(createTraces, metadata.TracesStability),
	)
}

func createTraces(_ context.Context, set processor.Settings, cfg component.Config, next consumer.Traces) (processor.Traces, error) {
	c, ok := cfg.(*Config)
	if !ok {
		return nil, fmt.Errorf("dup processor: unexpected config type %T", cfg)
	}
	return newDupProcessor(set, c, next)
}
