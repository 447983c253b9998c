package dupprocessor // import "github.com/idemkit-mcp/idemkit/collector/dupprocessor"

import (
	"context"
	"hash/maphash"
	"math/rand/v2"
	"sync"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/processor"
	"go.uber.org/zap"

	"github.com/idemkit-mcp/idemkit/collector/dupprocessor/internal/metadata"
	"github.com/idemkit-mcp/idemkit/collector/dupprocessor/internal/state"
)

// The processor's code follows a batch through its phases, one file each:
//
//	processor.go  lifecycle: Start, ConsumeTraces, the ticker, Shutdown
//	ingest.go     read every span of a batch: evidence, keys, group members
//	hold.go       move the tracked tool spans out of the batch and hold them
//	release.go    at a batch's deadline: decide each span, annotate, release
//	classify.go   the decision procedure of README.md, on one span
//	evict.go      forget groups and contexts past max_groups or the window
//	telemetry.go  the processor's own metrics
//
// Its state (internal/state) is kept in pointer-free arenas
// (internal/arena) indexed by open-addressing tables (internal/tagindex).

// dupProcessor is the dup traces processor. ConsumeTraces is safe for
// concurrent use.
type dupProcessor struct {
	cfg       *Config
	next      consumer.Traces
	logger    *zap.Logger
	tel       *metadata.TelemetryBuilder
	now       func() time.Time
	window    int64 // cfg.Window in ns
	harness   int64
	deliber   int64
	origWait  int64
	decWait   int64
	unrelSess []string    // cfg.UnreliableSessionIDs (few: a slice beats a map)
	readOnly  toolMatcher // cfg.ReadOnlyTools

	// mu protects everything below it: the tracked groups and contexts,
	// the held batches, the telemetry counts and the scratch buffers.
	mu       sync.Mutex
	keys     keyer
	groups   state.Groups
	evidence state.Contexts
	queue    batchQueue // held for decision_wait, deadlines non-decreasing
	extQueue batchQueue // waiting for an original, deadlines non-decreasing
	held     int        // spans in queue and extQueue
	counts   counts
	shutdown bool
	// Scratch buffers, reused by every call. spanBufs recycles the
	// (pointer-free) spans slices of released batches for the next held
	// batches.
	scratch     []state.Member
	pending     []heldSpan
	facts       []toolFact
	slow        []int32 // spans of a released batch that decideFirst left
	chats       []chatFact
	spanBufs    [][]heldSpan
	spanBufsCap int    // total capacity of spanBufs
	sink        uint32 // keeps the cache-warming loads of ingest and release alive

	stop chan struct{}
	done sync.WaitGroup
	// startOnce and stopOnce guard the ticker goroutine's life.
	startOnce sync.Once
	stopOnce  sync.Once
}

var _ processor.Traces = (*dupProcessor)(nil)

func newDupProcessor(set processor.Settings, cfg *Config, next consumer.Traces) (*dupProcessor, error) {
	tel, err := metadata.NewTelemetryBuilder(set.TelemetrySettings)
	if err != nil {
		return nil, err
	}
	p := &dupProcessor{
		cfg:       cfg,
		next:      next,
		logger:    set.Logger,
		tel:       tel,
		now:       time.Now,
		window:    int64(cfg.Window),
		harness:   int64(cfg.HarnessThreshold),
		deliber:   int64(cfg.DeliberateRepeatGap),
		origWait:  int64(cfg.OriginalWait),
		decWait:   int64(cfg.DecisionWait),
		unrelSess: append([]string(nil), cfg.UnreliableSessionIDs...),
		readOnly:  newToolMatcher(cfg.ReadOnlyTools),
		keys:      keyer{seed: maphash.MakeSeed(), maxArgs: cfg.MaxArgumentsBytes},
		groups:    state.NewGroups(rand.Uint64(), rand.Uint64()),
		evidence:  state.NewContexts(rand.Uint64(), rand.Uint64()),
		stop:      make(chan struct{}),
	}
	return p, nil
}

// Capabilities reports that the processor mutates the data it is given: it
// moves tool spans out of the batch and annotates them.
func (p *dupProcessor) Capabilities() consumer.Capabilities {
	return consumer.Capabilities{MutatesData: true}
}

// Start starts the ticker that releases held spans once decided. A
// processor that is never started (an offline run: see Annotate) holds
// every tracked span until Shutdown.
func (p *dupProcessor) Start(ctx context.Context, _ component.Host) error {
	p.startOnce.Do(func() {
		recordZero(ctx, p)
		p.done.Add(1)
		go p.run(tickInterval(p.cfg.DecisionWait))
	})
	return nil
}

// tickInterval is a fifth of the decision wait, between 10ms and 1s.
func tickInterval(wait time.Duration) time.Duration {
	return min(max(wait/5, 10*time.Millisecond), time.Second)
}

func (p *dupProcessor) run(interval time.Duration) {
	defer p.done.Done()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-t.C:
			p.tick(p.now())
		}
	}
}

// Shutdown stops the ticker, decides every held span on the evidence
// gathered so far and releases it downstream, before it returns. Spans
// consumed after Shutdown pass through unchanged.
func (p *dupProcessor) Shutdown(ctx context.Context) error {
	p.stopOnce.Do(func() { close(p.stop) })
	p.done.Wait()
	p.mu.Lock()
	p.shutdown = true
	out := p.releaseAll(p.now().UnixNano())
	c := p.takeCounts()
	p.mu.Unlock()
	p.forward(ctx, out)
	c.record(ctx, p)
	p.tel.Shutdown()
	return nil
}

// tick releases the batches whose time has come and forgets idle groups
// and contexts.
func (p *dupProcessor) tick(now time.Time) {
	n := now.UnixNano()
	p.mu.Lock()
	out := p.releaseDue(n)
	p.expire(n)
	groups, held := p.groups.Len(), p.held
	c := p.takeCounts()
	p.mu.Unlock()
	p.forward(context.Background(), out)
	ctx := context.Background()
	c.record(ctx, p)
	p.tel.ProcessorDupGroupsTracked.Record(ctx, int64(groups))
	p.tel.ProcessorDupSpansHeld.Record(ctx, int64(held))
}

func (p *dupProcessor) forward(ctx context.Context, out []ptrace.Traces) {
	for _, td := range out {
		if err := p.next.ConsumeTraces(ctx, td); err != nil {
			p.logger.Warn("dup processor: the next consumer refused released tool spans",
				zap.Int("spans", td.SpanCount()), zap.Error(err))
		}
	}
}

// ConsumeTraces passes every span that is not a tracked tool span on at
// once, and holds the tracked tool spans for decision_wait. A batch without
// tracked tool spans passes through as it is, without a copy; a batch of
// tracked tool spans only is held as it is. Evidence copies (resources
// marked idemkit.evidence.copy) are read and dropped.
func (p *dupProcessor) ConsumeTraces(ctx context.Context, td ptrace.Traces) error {
	now := p.now().UnixNano()
	p.mu.Lock()
	if p.shutdown {
		p.mu.Unlock()
		return p.next.ConsumeTraces(ctx, td)
	}
	tracked, total := p.ingest(td, now)
	var out []ptrace.Traces
	passthrough := total > 0
	if tracked > 0 {
		b := heldBatch{deadline: now + p.decWait, spans: p.pending}
		p.pending = p.spanBuf()
		if tracked == total {
			// Only tool spans: hold the batch itself, no copy.
			b.td = td
			passthrough = false
		} else {
			b.td = p.split(td, b.spans)
		}
		p.queue.push(b)
		p.held += len(b.spans)
		if p.held > p.cfg.MaxHeldSpans {
			out = p.releaseOverflow(now)
		}
	}
	c := p.takeCounts()
	p.mu.Unlock()

	c.record(ctx, p)
	p.forward(context.Background(), out)
	if passthrough {
		return p.next.ConsumeTraces(ctx, td)
	}
	return nil
}
