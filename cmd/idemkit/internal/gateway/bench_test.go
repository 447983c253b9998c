package gateway

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// BenchmarkGateway measures what the gateway adds to a tools/call on
// loopback: one mcp-go client calls a real mcp-go Streamable HTTP server
// directly, another calls the same server through the gateway, in
// alternating phases (so that both meet the same machine load), each call
// with fresh arguments. It reports each side's median latency and the
// difference (added-ms), which the project bounds at 1 ms.
func BenchmarkGateway(b *testing.B) {
	up := newUpstream(b)
	_, gwURL := newGatewayServer(b, up.URL, PassThrough{})
	var lat [2][]time.Duration
	direct := mcpClient(b, up.URL, "bench")
	via := mcpClient(b, gwURL, "bench")
	call := [2]func(i int){
		func(i int) {
			callTool(b, direct, "issue_refund", map[string]any{"order_id": fmt.Sprint("d-", i), "amount_cents": 500})
		},
		func(i int) {
			callTool(b, via, "issue_refund", map[string]any{"order_id": fmt.Sprint("g-", i), "amount_cents": 500})
		},
	}
	for i := range 50 { // warm both paths (connections, tool index)
		call[0](-i)
		call[1](-i)
	}
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
