package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetricgrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"

	"github.com/idemkit-mcp/idemkit/idemkit"
)

// telemetry holds the gateway's OpenTelemetry providers.
type telemetry struct {
	tp *sdktrace.TracerProvider
	mp *sdkmetric.MeterProvider
}

// otlpEndpointHelp documents --otlp-endpoint.
const otlpEndpointHelp = `where to send spans and metrics over OTLP: HOST:PORT or grpc://HOST:PORT
for OTLP/gRPC without TLS (a Collector's 4317), http://HOST:PORT or
https://HOST:PORT for OTLP/HTTP (4318); empty: nothing is exported`

// newTelemetry builds the providers. Without an endpoint, spans and
// metrics are still made (and cost what they cost) but go nowhere.
func newTelemetry(ctx context.Context, endpoint, service string) (*telemetry, error) {
	host, _ := os.Hostname()
	res := resource.NewWithAttributes(semconv.SchemaURL,
		semconv.ServiceName(service),
		semconv.ServiceVersion(idemkit.Version),
		semconv.ServiceInstanceID(fmt.Sprintf("%s/%d", host, os.Getpid())),
	)
	topts := []sdktrace.TracerProviderOption{sdktrace.WithResource(res)}
	mopts := []sdkmetric.Option{sdkmetric.WithResource(res)}
	if endpoint != "" {
		te, me, err := otlpExporters(ctx, endpoint)
		if err != nil {
			return nil, err
		}
		topts = append(topts, sdktrace.WithBatcher(te, sdktrace.WithBatchTimeout(time.Second)))
		mopts = append(mopts, sdkmetric.WithReader(sdkmetric.NewPeriodicReader(me, sdkmetric.WithInterval(5*time.Second))))
	}
	return &telemetry{tp: sdktrace.NewTracerProvider(topts...), mp: sdkmetric.NewMeterProvider(mopts...)}, nil
}

func otlpExporters(ctx context.Context, endpoint string) (sdktrace.SpanExporter, sdkmetric.Exporter, error) {
	scheme, rest, hasScheme := strings.Cut(endpoint, "://")
	if !hasScheme {
		scheme, rest = "grpc", endpoint
	}
	switch scheme {
	case "grpc":
		if rest == "" || strings.Contains(rest, "/") {
			return nil, nil, usagef("--otlp-endpoint %q: an OTLP/gRPC endpoint is HOST:PORT (for example 127.0.0.1:4317)", endpoint)
		}
		te, err := otlptracegrpc.New(ctx, otlptracegrpc.WithEndpoint(rest), otlptracegrpc.WithInsecure())
		if err != nil {
			return nil, nil, fmt.Errorf("OTLP trace exporter for %s: %w", endpoint, err)
		}
		me, err := otlpmetricgrpc.New(ctx, otlpmetricgrpc.WithEndpoint(rest), otlpmetricgrpc.WithInsecure())
		if err != nil {
			_ = te.Shutdown(ctx)
			return nil, nil, fmt.Errorf("OTLP metric exporter for %s: %w", endpoint, err)
		}
		return te, me, nil
	case "http", "https":
		u, err := url.Parse(endpoint)
		if err != nil || u.Host == "" {
			return nil, nil, usagef("--otlp-endpoint %q is not a URL such as http://127.0.0.1:4318", endpoint)
		}
		topts := []otlptracehttp.Option{otlptracehttp.WithEndpoint(u.Host)}
		mopts := []otlpmetrichttp.Option{otlpmetrichttp.WithEndpoint(u.Host)}
		if scheme == "http" {
			topts = append(topts, otlptracehttp.WithInsecure())
			mopts = append(mopts, otlpmetrichttp.WithInsecure())
		}
		if p := strings.TrimRight(u.Path, "/"); p != "" {
			topts = append(topts, otlptracehttp.WithURLPath(p+"/v1/traces"))
			mopts = append(mopts, otlpmetrichttp.WithURLPath(p+"/v1/metrics"))
		}
		te, err := otlptracehttp.New(ctx, topts...)
		if err != nil {
			return nil, nil, fmt.Errorf("OTLP trace exporter for %s: %w", endpoint, err)
		}
		me, err := otlpmetrichttp.New(ctx, mopts...)
		if err != nil {
			_ = te.Shutdown(ctx)
			return nil, nil, fmt.Errorf("OTLP metric exporter for %s: %w", endpoint, err)
		}
		return te, me, nil
	}
	return nil, nil, usagef("--otlp-endpoint %q: use HOST:PORT (OTLP/gRPC) or an http:// or https:// URL (OTLP/HTTP)", endpoint)
}

// shutdown flushes and stops both providers. ctx bounds it.
func (t *telemetry) shutdown(ctx context.Context) error {
	return errors.Join(t.tp.Shutdown(ctx), t.mp.Shutdown(ctx))
}
