package mcpcall

import (
	"context"
	"encoding/json"
	"strconv"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/idemkit-mcp/idemkit/idemkit"
)

type nopProcessor struct{}

func (nopProcessor) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (nopProcessor) OnEnd(sdktrace.ReadOnlySpan)                     {}
func (nopProcessor) Shutdown(context.Context) error                  { return nil }
func (nopProcessor) ForceFlush(context.Context) error                { return nil }

// BenchmarkRequest measures the machinery alone, as a raw front end (the
// gateway) drives it: Start, CallTool with RawCodec on a protected tool
// (memory store, fresh arguments each time), End; spans recorded and
// dropped, metrics recorded.
func BenchmarkRequest(b *testing.B) {
	for _, tc := range []struct {
		name    string
		sampler sdktrace.Sampler
		tool    bool
	}{
		{"tools/call", sdktrace.AlwaysSample(), true},
		{"tools/call-unsampled", sdktrace.NeverSample(), true},
		{"tools/list", sdktrace.AlwaysSample(), false},
	} {
		b.Run(tc.name, func(b *testing.B) {
			tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(tc.sampler), sdktrace.WithSpanProcessor(nopProcessor{}))
			mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
			defer func() { _ = tp.Shutdown(context.Background()); _ = mp.Shutdown(context.Background()) }()
			g, _ := idemkit.NewGuard(&idemkit.MemoryStore{}, &idemkit.Config{Window: 10 * time.Millisecond})
			cfg := DefaultConfig()
			cfg.TracerProvider, cfg.MeterProvider = tp, mp
			in := New(g, cfg)
			v, _ := NewSchemaValidator(json.RawMessage(`{"type":"object","properties":{"order_id":{"type":"string"},"amount_cents":{"type":"integer"}}}`))
			result := json.RawMessage(`{"content":[{"type":"text","text":"Refunded order o-1"}],"structuredContent":{"refund_id":"re_1"}}`)
			upstream := func(context.Context) (json.RawMessage, error) { return result, nil }
			tr := Transport{Network: "tcp", ProtocolName: "http", ProtocolVersion: "1.1", AuthenticSessions: true}
			ctx := context.Background()
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				r := Request{Method: "tools/call", ID: strconv.Itoa(i), HasID: true, SessionID: "s-1", ProtocolVersion: "2025-11-25", Transport: tr}
				if !tc.tool {
					r.Method = "tools/list"
					_, op := in.Start(ctx, &r)
					op.End(Response{})
					continue
				}
				r.Target = "refund"
				_, op := in.Start(ctx, &r)
				args := []byte(`{"order_id":"o-` + strconv.Itoa(i) + `","amount_cents":1250}`)
				call := ToolCall{Tool: "refund", Arguments: args, Validator: v}
				if _, err := CallTool(op, &call, RawCodec{}, upstream); err != nil {
					b.Fatal(err)
				}
				op.End(Response{})
				if i%1024 == 1023 {
					_, _ = g.Sweep(ctx)
				}
			}
		})
	}
}
