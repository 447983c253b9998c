// Package telemetry sets up the OpenTelemetry SDK of the demo programs:
// a TracerProvider and a MeterProvider that export over OTLP/gRPC to a
// Collector, with service.name set, and one Shutdown that flushes both.
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetricgrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
)

// Config configures Setup.
type Config struct {
	// ServiceName is the service.name resource attribute. Required.
	ServiceName string
	// Endpoint is the Collector's OTLP/gRPC host:port (plaintext). Empty:
	// nothing is exported (spans and metrics are still created).
	Endpoint string
	// BatchTimeout is how long finished spans wait before export.
	// Defaults to 500ms: short, so that the dup processor sees every
	// process's spans well inside its decision_wait.
	BatchTimeout time.Duration
	// MetricInterval is how often metrics are exported. Defaults to 2s.
	MetricInterval time.Duration
}

// Providers are the SDK providers Setup built.
type Providers struct {
	Tracer *sdktrace.TracerProvider
	Meter  *sdkmetric.MeterProvider
}

// Setup builds the providers. It does not install them globally.
func Setup(ctx context.Context, cfg Config) (*Providers, error) {
	if cfg.ServiceName == "" {
		return nil, errors.New("telemetry: Config.ServiceName is required")
	}
	if cfg.BatchTimeout <= 0 {
		cfg.BatchTimeout = 500 * time.Millisecond
	}
	if cfg.MetricInterval <= 0 {
		cfg.MetricInterval = 2 * time.Second
	}
	host, _ := os.Hostname()
	res := resource.NewWithAttributes(semconv.SchemaURL,
		semconv.ServiceName(cfg.ServiceName),
		semconv.ServiceInstanceID(fmt.Sprintf("%s/%d", host, os.Getpid())),
	)
	topts := []sdktrace.TracerProviderOption{sdktrace.WithResource(res)}
	mopts := []sdkmetric.Option{sdkmetric.WithResource(res)}
	if cfg.Endpoint != "" {
		te, err := otlptracegrpc.New(ctx, otlptracegrpc.WithEndpoint(cfg.Endpoint), otlptracegrpc.WithInsecure())
		if err != nil {
			return nil, fmt.Errorf("telemetry: OTLP trace exporter for %s: %w", cfg.Endpoint, err)
		}
		me, err := otlpmetricgrpc.New(ctx, otlpmetricgrpc.WithEndpoint(cfg.Endpoint), otlpmetricgrpc.WithInsecure())
		if err != nil {
			_ = te.Shutdown(ctx)
			return nil, fmt.Errorf("telemetry: OTLP metric exporter for %s: %w", cfg.Endpoint, err)
		}
		topts = append(topts, sdktrace.WithBatcher(te, sdktrace.WithBatchTimeout(cfg.BatchTimeout)))
		mopts = append(mopts, sdkmetric.WithReader(sdkmetric.NewPeriodicReader(me, sdkmetric.WithInterval(cfg.MetricInterval))))
	}
	return &Providers{Tracer: sdktrace.NewTracerProvider(topts...), Meter: sdkmetric.NewMeterProvider(mopts...)}, nil
}

// Shutdown flushes and stops both providers: every span ended and every
// metric recorded so far is exported. ctx bounds it.
func (p *Providers) Shutdown(ctx context.Context) error {
	return errors.Join(p.Tracer.Shutdown(ctx), p.Meter.Shutdown(ctx))
}
