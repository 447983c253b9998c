package dupprocessor // import "github.com/idemkit-mcp/idemkit/collector/dupprocessor"

import (
	"context"
	"fmt"
	"sync"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/processor"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
	"go.uber.org/zap"

	"github.com/idemkit-mcp/idemkit/collector/dupprocessor/internal/metadata"
)

// Annotate runs the dup processor over spans that were recorded earlier (an
// OTLP JSON file, a test's batches), as a Collector would over a stream
// that has ended, and returns every span it was given, with the
// idemkit.duplicate.* annotations on the duplicates: the spans that are not
// tracked tool spans first, then the tool spans. It never drops a span
// (evidence copies aside, see README.md). ctx bounds nothing but is handed
// to the processor.
//
// Every tool span is decided once all the batches are in, on all their
// evidence, whatever order the batches come in: the processor is never
// started (no ticker), so nothing is released before Shutdown, and the
// max_groups and max_held_spans caps of cfg are raised to the number of
// spans given. cfg may be nil (the defaults); it is validated and not
// modified.
//
// Annotate is a convenience: the factory path gives the same answer, as
// long as the processor is not started, Shutdown is called and the sink
// keeps what it is given (NewFactory().CreateTraces with a
// consumertest.TracesSink, ConsumeTraces for each batch, Shutdown).
func Annotate(ctx context.Context, cfg *Config, batches ...ptrace.Traces) (ptrace.Traces, error) {
	c := createDefaultConfig()
	if cfg != nil {
		*c = *cfg
	}
	if err := c.Validate(); err != nil {
		return ptrace.Traces{}, fmt.Errorf("dup processor configuration: %w", err)
	}
	n := 0
	for _, td := range batches {
		n += td.SpanCount()
	}
	c.MaxHeldSpans = max(c.MaxHeldSpans, n+1)
	c.MaxGroups = max(c.MaxGroups, n+1)

	var mu sync.Mutex // protects out
	out := ptrace.NewTraces()
	sink, err := consumer.NewTraces(func(_ context.Context, td ptrace.Traces) error {
		mu.Lock()
		defer mu.Unlock()
		td.ResourceSpans().MoveAndAppendTo(out.ResourceSpans())
		return nil
	})
	if err != nil {
		return ptrace.Traces{}, err
	}
	set := processor.Settings{
		ID: component.NewID(metadata.Type),
		TelemetrySettings: component.TelemetrySettings{
			Logger:         zap.NewNop(),
			TracerProvider: tracenoop.NewTracerProvider(),
			MeterProvider:  metricnoop.NewMeterProvider(),
			Resource:       pcommon.NewResource(),
		},
		BuildInfo: component.NewDefaultBuildInfo(),
	}
	p, err := NewFactory().CreateTraces(ctx, set, c, sink)
	if err != nil {
		return ptrace.Traces{}, err
	}
	for _, td := range batches {
		if err := p.ConsumeTraces(ctx, td); err != nil {
			_ = p.Shutdown(ctx)
			return ptrace.Traces{}, err
		}
	}
	if err := p.Shutdown(ctx); err != nil {
		return ptrace.Traces{}, err
	}
	mu.Lock()
	defer mu.Unlock()
	return out, nil
}
