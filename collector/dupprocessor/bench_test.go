package dupprocessor

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"github.com/open-telemetry/opentelemetry-collector-contrib/connector/spanmetricsconnector"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/connector/connectortest"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/idemkit-mcp/idemkit/collector/dupprocessor/dupconnector"
	sc "github.com/idemkit-mcp/idemkit/spancontract"
)

// streamGen generates a realistic stream: per batch of 100 spans, 60 tool
// spans from MCP servers (3 of them duplicates of recent calls, through
// each layer), 20 chat spans from the agent and 20 HTTP spans. Every call
// has a fresh key; five tool calls share a trace, twenty a session.
type streamGen struct {
	rng    *rand.Rand
	n      int
	at     time.Duration
	recent []sp
}

const (
	benchBatch     = 100
	benchToolSpans = 60
	benchChatSpans = 20
	benchDups      = 3
)

func newStreamGen() *streamGen { return &streamGen{rng: rand.New(rand.NewPCG(1, 2))} }

func (g *streamGen) batch() ptrace.Traces {
	spans := make([]sp, 0, benchBatch)
	for i := 0; i < benchToolSpans-benchDups; i++ {
		g.n++
		g.at += 2 * time.Millisecond
		s := sp{
			tag:     fmt.Sprint(g.n),
			trace:   fmt.Sprint(g.n / 5),
			key:     fmt.Sprint(g.n),
			session: fmt.Sprintf("session-%d", g.n/20),
			req:     fmt.Sprint(g.n % 1000),
			at:      g.at,
			outcome: sc.OutcomeExecuted,
			attempt: 1,
			writeID: fmt.Sprintf("re_%d", g.n),
			tool:    []string{"issue_refund", "send_email", "create_ticket"}[g.n%3],
		}
		spans = append(spans, s)
		if len(g.recent) < 64 {
			g.recent = append(g.recent, s)
		} else {
			g.recent[g.n%64] = s
		}
	}
	for i := 0; i < benchDups; i++ {
		g.n++
		d := g.recent[g.rng.IntN(len(g.recent))]
		d.tag = fmt.Sprint(g.n)
		d.at = g.at + time.Millisecond
		d.outcome, d.attempt = sc.OutcomeReplayed, 2
		switch i % 3 {
		case 0: // transport retry: same request ID
		case 1:
			d.req += "-retry"
		default:
			d.session += "-reconnected"
		}
		spans = append(spans, d)
	}
	for i := 0; i < benchChatSpans; i++ {
		spans = append(spans, sp{tag: fmt.Sprintf("chat-%d-%d", g.n, i), kind: "chat", svc: "agent", trace: fmt.Sprint((g.n - i*3) / 5), at: g.at})
	}
	for len(spans) < benchBatch {
		spans = append(spans, sp{tag: fmt.Sprintf("http-%d-%d", g.n, len(spans)), kind: "http", svc: "api", trace: fmt.Sprint(g.n / 5), at: g.at})
	}
	return buildTraces(spans...)
}

// warmup is the number of batches every benchmark streams through its
// component, untimed, before timing starts: 8,000 batches (80s of the
// simulated stream) bring the processor to its steady state, 100,000 groups
// and 100,000 contexts at their caps, evicting, with decision_wait's worth
// of spans held. Without it the timing of a stateful component includes its
// one-time start-up (its state growing to the caps, the first touch of that
// memory), which a stateless one like span_metrics does not have.
// -warmup 0 times from a cold start.
var warmup = flag.Int("warmup", 8000, "batches streamed through each benchmark, untimed, before timing starts")

// stopTimer selects the original way of leaving the generator out of the
// timing: b.StopTimer and b.StartTimer around it. Each of them reads the
// runtime's memory statistics, which stops the world and flushes every P's
// allocation caches, twice per batch: every component then pays, per batch,
// a refill from the central lists for each size class it allocates, a
// cost that exists only in the benchmark.
var stopTimer = flag.Bool("stoptimer", false, "time with b.StopTimer/b.StartTimer around the generator (stops the world twice per batch)")

// runStream times b.N batches of the stream through consume, after the
// same warm-up for every component. advance runs after each batch, timed.
// A batch is generated just before it is consumed (as a receiver hands a
// batch it has just decoded), and only the component's calls are timed:
// ns/op and spans/s are the component's own, and allocs/op and B/op are
// measured on the component alone, over a sample of batches after the
// timed loop.
func runStream(b *testing.B, consume consumer.Traces, advance func()) {
	ctx := context.Background()
	g := newStreamGen()
	step := func(td ptrace.Traces) {
		if err := consume.ConsumeTraces(ctx, td); err != nil {
			b.Fatal(err)
		}
		if advance != nil {
			advance()
		}
	}
	if b.N > 1 { // the first, single-batch run only sizes b.N
		for i := 0; i < *warmup; i++ {
			step(g.batch())
		}
	}
	if *stopTimer {
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			td := g.batch()
			b.StartTimer()
			step(td)
		}
		b.StopTimer()
		b.ReportMetric(float64(b.N*benchBatch)/b.Elapsed().Seconds(), "spans/s")
		return
	}
	b.ReportAllocs() // shows the allocs/op and B/op reported below
	var elapsed time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		td := g.batch()
		start := time.Now()
		step(td)
		elapsed += time.Since(start)
	}
	b.StopTimer()
	b.ReportMetric(float64(elapsed.Nanoseconds())/float64(b.N), "ns/op") // replaces Go's, which includes the generator
	b.ReportMetric(float64(b.N*benchBatch)/elapsed.Seconds(), "spans/s")
	const sample = 200
	var before, after runtime.MemStats
	var mallocs, bytes uint64
	for i := 0; i < sample; i++ {
		td := g.batch()
		runtime.ReadMemStats(&before)
		step(td)
		runtime.ReadMemStats(&after)
		mallocs += after.Mallocs - before.Mallocs
		bytes += after.TotalAlloc - before.TotalAlloc
	}
	b.ReportMetric(float64(mallocs)/sample, "allocs/op")
	b.ReportMetric(float64(bytes)/sample, "B/op")
}

// BenchmarkProcessor measures the dup processor on the stream, releasing
// held spans on a simulated clock (10ms of processing time per batch, so
// 10,000 spans/s arrive; decision_wait 5s holds 500 batches) on the same
// goroutine, so that all its work is timed.
func BenchmarkProcessor(b *testing.B) {
	h := newHarnessNext(b, nil, consumertest.NewNop())
	runStream(b, h.p, func() { h.p.tick(h.clock.Advance(10 * time.Millisecond)) })
	b.ReportMetric(float64(h.p.groups.Len()), "groups")
	b.ReportMetric(float64(h.p.evidence.Len()), "contexts")
	b.ReportMetric(float64(h.p.held), "held")
	require.NoError(b, h.p.Shutdown(context.Background()))
}

// BenchmarkProcessorAndConnector adds the dup connector behind the
// processor: the whole attribution path.
func BenchmarkProcessorAndConnector(b *testing.B) {
	conn, err := dupconnector.NewFactory().CreateTracesToMetrics(context.Background(),
		connectortest.NewNopSettings(component.MustNewType("dup")), dupconnector.NewFactory().CreateDefaultConfig(), consumertest.NewNop())
	require.NoError(b, err)
	h := newHarnessNext(b, nil, conn)
	runStream(b, h.p, func() { h.p.tick(h.clock.Advance(10 * time.Millisecond)) })
	require.NoError(b, h.p.Shutdown(context.Background()))
	require.NoError(b, conn.Shutdown(context.Background()))
}

// BenchmarkSpanMetricsConnector is the baseline: the contrib span_metrics
// connector (default configuration) on the same stream.
func BenchmarkSpanMetricsConnector(b *testing.B) {
	f := spanmetricsconnector.NewFactory()
	conn, err := f.CreateTracesToMetrics(context.Background(), connectortest.NewNopSettings(f.Type()), f.CreateDefaultConfig(), consumertest.NewNop())
	require.NoError(b, err)
	require.NoError(b, conn.Start(context.Background(), componenttest.NewNopHost()))
	runStream(b, conn, nil)
	require.NoError(b, conn.Shutdown(context.Background()))
}

// TestMemoryPerGroup measures the heap held per tracked group once its
// spans are released: the group, its member, its map entry and its share of
// the evidence contexts (one trace per five calls, one session per twenty).
func TestMemoryPerGroup(t *testing.T) {
	if testing.Short() {
		t.Skip("allocates ~100 MB")
	}
	const n = 100_000
	cfg := createDefaultConfig()
	cfg.MaxGroups = 2 * n
	h := newHarnessNext(t, cfg, consumertest.NewNop())
	g := newStreamGen()
	batches := make([]ptrace.Traces, 0, n/benchToolSpans+1)
	for tracked := 0; tracked < n; tracked += benchToolSpans {
		batches = append(batches, g.batch())
	}
	for _, td := range batches {
		h.consume(td)
	}
	batches = nil
	h.advance(cfg.DecisionWait) // release every held span
	groups, contexts := h.p.groups.Len(), h.p.evidence.Len()
	require.Zero(t, h.p.held)
	require.NoError(t, h.p.Shutdown(context.Background()))
	// Heap with the state, then without it: the difference is the state.
	var with, without runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&with)
	h.p = nil
	runtime.GC()
	runtime.ReadMemStats(&without)
	perGroup := float64(with.HeapAlloc-without.HeapAlloc) / float64(groups)
	t.Logf("%d groups, %d contexts: %.0f bytes held per tracked group (evidence included)", groups, contexts, perGroup)
	require.Greater(t, groups, n*9/10)
	require.Less(t, perGroup, 1024.0, "bytes per group")
}

// BenchmarkVsSpanMetrics measures the dup processor (alone, and with the
// dup connector behind it) against the contrib span_metrics connector on
// the same stream, interleaved: phases of 50 batches alternate between the
// two sides, each side with its own generator and state, after the same
// warm-up, so that both meet the same machine load (sequential benchmark
// runs on a shared machine drift apart by more than the difference being
// measured). It reports each side's spans/s and their ratio
// (throughput-ratio: candidate over span_metrics, 1.0 = as fast).
func BenchmarkVsSpanMetrics(b *testing.B) {
	for _, withConnector := range []bool{false, true} {
		name := "processor"
		if withConnector {
			name = "processor+connector"
		}
		b.Run(name, func(b *testing.B) {
			var next consumer.Traces = consumertest.NewNop()
			if withConnector {
				conn, err := dupconnector.NewFactory().CreateTracesToMetrics(context.Background(),
					connectortest.NewNopSettings(component.MustNewType("dup")), dupconnector.NewFactory().CreateDefaultConfig(), consumertest.NewNop())
				require.NoError(b, err)
				b.Cleanup(func() { require.NoError(b, conn.Shutdown(context.Background())) })
				next = conn
			}
			h := newHarnessNext(b, nil, next)
			b.Cleanup(func() { require.NoError(b, h.p.Shutdown(context.Background())) })
			f := spanmetricsconnector.NewFactory()
			sm, err := f.CreateTracesToMetrics(context.Background(), connectortest.NewNopSettings(f.Type()), f.CreateDefaultConfig(), consumertest.NewNop())
			require.NoError(b, err)
			require.NoError(b, sm.Start(context.Background(), componenttest.NewNopHost()))
			b.Cleanup(func() { require.NoError(b, sm.Shutdown(context.Background())) })
			sides := [2]streamSide{
				{consume: h.p, advance: func() { h.p.tick(h.clock.Advance(10 * time.Millisecond)) }, gen: newStreamGen()},
				{consume: sm, gen: newStreamGen()},
			}
			runPair(b, &sides)
		})
	}
}

// streamSide is one component of an interleaved benchmark, with its own
// stream, and the wall-clock and thread CPU time its phases took.
type streamSide struct {
	consume consumer.Traces
	advance func()
	gen     *streamGen
	elapsed time.Duration
	cpu     time.Duration
}

// step consumes one batch (and advances the processor's clock).
func (s *streamSide) step(b *testing.B, td ptrace.Traces) {
	if err := s.consume.ConsumeTraces(context.Background(), td); err != nil {
		b.Fatal(err)
	}
	if s.advance != nil {
		s.advance()
	}
}

// runPair streams b.N batches through each side (candidate first in
// sides), in alternating phases of 250 batches, after *warmup untimed
// batches each, and reports both throughputs and their ratio. A batch is
// generated just before it is consumed (as a receiver hands on a batch it
// has just decoded), and only the component's calls are timed.
//
// On a loaded machine (other processes taking the cores) wall-clock time
// swings with the load even when interleaved, so it also reports the ratio
// of the CPU time the benchmark's thread spent in each side's calls
// (cpu-throughput-ratio, Linux), which time spent descheduled does not
// inflate. That one leaves out the garbage collector's background
// workers: the wall-clock ratio on a quiet machine is the judge.
func runPair(b *testing.B, sides *[2]streamSide) {
	const phase = 250
	runtime.LockOSThread() // the CPU clock read below is this thread's
	defer runtime.UnlockOSThread()
	if b.N > 1 {
		for i := 0; i < *warmup; i++ {
			sides[0].step(b, sides[0].gen.batch())
			sides[1].step(b, sides[1].gen.batch())
		}
	}
	b.ResetTimer()
	for done, k := 0, 0; done < b.N; done, k = done+phase, k+1 {
		n := min(phase, b.N-done)
		order := [2]int{0, 1}
		if k%2 == 1 {
			order = [2]int{1, 0}
		}
		for _, i := range order {
			s := &sides[i]
			for range n {
				td := s.gen.batch()
				cpu0, _ := threadCPU()
				start := time.Now()
				s.step(b, td)
				s.elapsed += time.Since(start)
				cpu1, _ := threadCPU()
				s.cpu += cpu1 - cpu0
			}
		}
	}
	b.StopTimer()
	cand := float64(b.N*benchBatch) / sides[0].elapsed.Seconds()
	base := float64(b.N*benchBatch) / sides[1].elapsed.Seconds()
	b.ReportMetric(cand, "candidate-spans/s")
	b.ReportMetric(base, "span_metrics-spans/s")
	b.ReportMetric(cand/base, "throughput-ratio")
	if _, ok := threadCPU(); ok && sides[0].cpu > 0 {
		b.ReportMetric(sides[1].cpu.Seconds()/sides[0].cpu.Seconds(), "cpu-throughput-ratio")
	}
	b.ReportMetric(0, "ns/op") // the loop's time includes the generator: see the spans/s
}
