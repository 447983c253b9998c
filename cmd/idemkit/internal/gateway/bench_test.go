package gateway

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/idemkit-mcp/idemkit/idemkit"
	"github.com/idemkit-mcp/idemkit/idemkit/idemstore"
	"github.com/idemkit-mcp/idemkit/idemkit/sqlitestore"
	"github.com/idemkit-mcp/idemkit/internal/mcpcall"
)

// BenchmarkGateway measures what the gateway adds to a tools/call on
// loopback: one mcp-go client calls a real mcp-go Streamable HTTP server
// directly, another calls the same server through the gateway, in
// alternating phases (so that both meet the same machine load), each call
// with fresh arguments, so that every gateway call claims a new key, runs
// and records its outcome, with its span exported (to a discarding
// exporter) and its metrics recorded. It reports each side's median
// latency and the difference (added-ms), which the project bounds at 1 ms.
//
//   - store=memory: the gateway's own cost;
//   - store=sqlite: with a durable SQLite store (synchronous=FULL), whose
//     claim and finish commits are most of the difference.
func BenchmarkGateway(b *testing.B) {
	b.Run("store=memory", func(b *testing.B) { benchGateway(b, &idemkit.MemoryStore{}) })
	b.Run("store=sqlite", func(b *testing.B) {
		st, err := sqlitestore.Open(context.Background(), filepath.Join(b.TempDir(), "idemkit.db"), nil)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { st.Close() })
		benchGateway(b, st)
	})
}

func benchGateway(b *testing.B, store idemstore.Store) {
	up := newUpstream(b)
	guard, err := idemkit.NewGuard(store, nil)
	if err != nil {
		b.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	b.Cleanup(func() {
		_ = tp.Shutdown(context.Background())
		_ = mp.Shutdown(context.Background())
	})
	ic := mcpcall.DefaultConfig()
	ic.TracerProvider, ic.MeterProvider = tp, mp
	_, gwURL := newGatewayServer(b, up.URL, Config{Guard: guard, Instrumentation: &ic})
	direct := mcpClient(b, up.URL, "bench")
	via := mcpClient(b, gwURL, "bench")
	run := 0
	call := [2]func(i int){
		func(i int) {
			callTool(b, direct, "issue_refund", map[string]any{"order_id": fmt.Sprint("d-", run, "-", i)})
		},
		func(i int) {
			callTool(b, via, "issue_refund", map[string]any{"order_id": fmt.Sprint("g-", run, "-", i)})
		},
	}
	for i := range 50 { // warm both paths (connections, tool index)
		call[0](-i - 1)
		call[1](-i - 1)
	}
	run++
	var lat [2][]time.Duration
	lat[0] = make([]time.Duration, 0, b.N)
	lat[1] = make([]time.Duration, 0, b.N)
	const phase = 25
	b.ReportAllocs()
	b.ResetTimer()
	for done := 0; done < b.N; done += phase {
		n := min(phase, b.N-done)
		order := [2]int{0, 1}
		if (done/phase)%2 == 1 {
			order = [2]int{1, 0}
		}
		for _, side := range order {
			for i := done; i < done+n; i++ {
				start := time.Now()
				call[side](i)
				lat[side] = append(lat[side], time.Since(start))
			}
		}
	}
	b.StopTimer()
	if got := up.count("issue_refund"); got != int64(2*b.N+100) {
		b.Fatalf("the upstream ran %d calls, want %d: a gateway call did not reach it", got, 2*b.N+100)
	}
	d, g := median(lat[0]), median(lat[1])
	b.ReportMetric(float64(d.Microseconds()), "direct-us")
	b.ReportMetric(float64(g.Microseconds()), "gateway-us")
	b.ReportMetric(float64(g-d)/float64(time.Millisecond), "added-ms")
}

func median(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}
