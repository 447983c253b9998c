package instrument

import (
	"context"
	"strconv"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/idemkit/idemkit/idemkit"
)

type nopProcessor struct{}

func (nopProcessor) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (nopProcessor) OnEnd(sdktrace.ReadOnlySpan)                     {}
func (nopProcessor) Shutdown(context.Context) error                  { return nil }
func (nopProcessor) ForceFlush(context.Context) error                { return nil }

// BenchmarkHandle measures Handle's own cost around a trivial handler: the
// overhead the instrumentation adds to a tool call, whatever the SDK.
func BenchmarkHandle(b *testing.B) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()), sdktrace.WithSpanProcessor(nopProcessor{}))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	defer func() { _ = tp.Shutdown(context.Background()); _ = mp.Shutdown(context.Background()) }()
	g, err := idemkit.NewGuard(&idemkit.MemoryStore{}, nil)
	if err != nil {
		b.Fatal(err)
	}
	next := func(ctx context.Context) (*string, error) {
		RecordWrite(ctx, "re_1")
		s := `{"content":[{"type":"text","text":"Refunded order o-1"}],"structuredContent":{"refund_id":"re_1","amount_cents":1250}}`
		return &s, nil
	}
	run := func(b *testing.B, in *Instrumenter, readOnly bool) {
		ctx := context.Background()
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			call := ToolCall{
				Tool:            "refund",
				Arguments:       []byte(`{"order_id":"o-` + strconv.Itoa(i) + `","amount_cents":1250}`),
				SessionID:       "3f1c9a8e-5b7d-4e2a-9c61-0d8f2b7a4e19",
				RequestID:       strconv.Itoa(i),
				ProtocolVersion: "2025-11-25",
				ReadOnlyHint:    readOnly,
			}
			if _, err := Handle(ctx, in, &call, stringCodec{}, next); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("protected", func(b *testing.B) {
		run(b, New(g, WithTracerProvider(tp), WithMeterProvider(mp)), false)
	})
	b.Run("bypassed", func(b *testing.B) {
		run(b, New(g, WithTracerProvider(tp), WithMeterProvider(mp)), true)
	})
	b.Run("key-only", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			if _, err := idemkit.NewKey("\x00session:3f1c9a8e", "refund", []byte(`{"order_id":"o-`+strconv.Itoa(i)+`","amount_cents":1250}`), nil); err != nil {
				b.Fatal(err)
			}
		}
	})
}
