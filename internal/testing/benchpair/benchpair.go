// Package benchpair runs a candidate and its baseline interleaved inside
// one benchmark, so that both meet the same machine load: on a shared,
// noisy machine two benchmarks run one after the other drift apart, while
// phases of a few calls each, alternating which side goes first, do not.
package benchpair

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit-mcp/idemkit/idemkit"
)

// Op performs call number i of one side; i is unique across all calls of
// that side in the benchmark.
type Op func(i int) error

// Run performs b.N calls of candidate and b.N calls of baseline, in
// alternating phases of phase calls each, every phase spread over exactly
// callers goroutines. It reports each side's throughput (candidate-calls/s,
// baseline-calls/s) and their ratio (throughput-ratio: candidate over
// baseline, 1.0 = as fast as the baseline, higher is better).
func Run(b *testing.B, callers, phase int, candidate, baseline Op) {
	b.Helper()
	if callers < 1 || phase < 1 {
		b.Fatal("benchpair: callers and phase must be positive")
	}
	b.ReportAllocs()
	b.ResetTimer()
	var cTime, bTime time.Duration
	for done := 0; done < b.N; done += phase {
		n := min(phase, b.N-done)
		sides := [2]Op{candidate, baseline}
		times := [2]*time.Duration{&cTime, &bTime}
		if (done/phase)%2 == 1 {
			sides[0], sides[1] = sides[1], sides[0]
			times[0], times[1] = times[1], times[0]
		}
		for s := range sides {
			d, err := runPhase(callers, done, n, sides[s])
			if err != nil {
				b.Fatal(err)
			}
			*times[s] += d
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/cTime.Seconds(), "candidate-calls/s")
	b.ReportMetric(float64(b.N)/bTime.Seconds(), "baseline-calls/s")
	b.ReportMetric(bTime.Seconds()/cTime.Seconds(), "throughput-ratio")
}

func runPhase(callers, from, n int, op Op) (time.Duration, error) {
	start := time.Now()
	if callers == 1 {
		for i := from; i < from+n; i++ {
			if err := op(i); err != nil {
				return 0, err
			}
		}
		return time.Since(start), nil
	}
	var (
		next     atomic.Int64
		wg       sync.WaitGroup
		firstErr atomic.Pointer[error]
	)
	next.Store(int64(from))
	end := int64(from + n)
	for range callers {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < end; i = next.Add(1) - 1 {
				if err := op(int(i)); err != nil {
					firstErr.CompareAndSwap(nil, &err)
					return
				}
			}
		})
	}
	wg.Wait()
	if p := firstErr.Load(); p != nil {
		return 0, *p
	}
	return time.Since(start), nil
}

// Body is a typical tool response: a small CallToolResult.
var Body = []byte(`{"content":[{"type":"text","text":"refund re_123 issued"}],"structuredContent":{"refund_id":"re_123"}}`)

var (
	keysMu sync.Mutex // protects keys
	keys   []idemkit.Key
)

// Keys returns n distinct keys of one subject and tool (refunds of orders
// o-0, o-1, …), derived once per test binary and shared by its benchmarks.
func Keys(n int) []idemkit.Key {
	keysMu.Lock()
	defer keysMu.Unlock()
	for i := len(keys); i < n; i++ {
		k, err := idemkit.NewKey("user-42", "issue_refund", fmt.Appendf(nil, `{"order":"o-%d","amount_cents":500}`, i), nil)
		if err != nil {
			panic(err)
		}
		keys = append(keys, k)
	}
	return keys[:n]
}
