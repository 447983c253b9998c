package dupprocessor // import "github.com/idemkit/idemkit/collector/dupprocessor"

import (
	"context"
	"hash/maphash"
	"math/rand/v2"
	"sync"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/processor"
	"go.uber.org/zap"

	"github.com/idemkit/idemkit/collector/dupprocessor/internal/metadata"
	"github.com/idemkit/idemkit/collector/dupprocessor/internal/spanview"
	sc "github.com/idemkit/idemkit/spancontract"
)

// heldSpan is a tracked tool span waiting for its decision, inside a
// heldBatch. It holds no pointer: the span is found again by its position
// in the batch, which nothing moves while it is held, so the garbage
// collector does not scan the tens of thousands of heldSpans in flight.
type heldSpan struct {
	m       member
	arrival int64   // processing time, ns
	gi      uint32  // arena index of its group
	pos     spanPos // where the span sits in the heldBatch's td
	decided bool
}

// heldBatch is a Traces holding only tracked tool spans (with their
// resource and scope), released as a whole at its deadline: all the spans
// of a ConsumeTraces call arrive together, so they share one deadline.
// spans is in the order of the spans in td (resource, scope, span).
type heldBatch struct {
	td       ptrace.Traces
	deadline int64
	spans    []heldSpan
}

// spanPos is where a span sits in a Traces.
type spanPos struct{ rs, ss, span int32 }

// spanAt returns the span at pos in td.
func spanAt(td ptrace.Traces, pos spanPos) ptrace.Span {
	return td.ResourceSpans().At(int(pos.rs)).ScopeSpans().At(int(pos.ss)).Spans().At(int(pos.span))
}

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
	unrelSess []string // cfg.UnreliableSessionIDs (few: a slice beats a map)

	// mu protects everything below it: the tracked groups and contexts,
	// the held batches, the telemetry counts and the scratch buffers.
	mu       sync.Mutex
	keys     keyer
	groups   groupStore
	evidence evidenceStore
	queue    batchQueue // held for decision_wait, deadlines non-decreasing
	extQueue batchQueue // waiting for an original, deadlines non-decreasing
	held     int        // spans in queue and extQueue
	counts   counts
	shutdown bool
	// Scratch buffers, reused by every call. spanBufs recycles the
	// (pointer-free) spans slices of released batches for the next held
	// batches.
	scratch     []member
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
		keys:      keyer{seed: maphash.MakeSeed(), maxArgs: cfg.MaxArgumentsBytes},
		groups:    newGroupStore(rand.Uint64(), rand.Uint64()),
		evidence:  newEvidenceStore(rand.Uint64(), rand.Uint64()),
		stop:      make(chan struct{}),
	}
	return p, nil
}

// Capabilities reports that the processor mutates the data it is given: it
// moves tool spans out of the batch and annotates them.
func (p *dupProcessor) Capabilities() consumer.Capabilities {
	return consumer.Capabilities{MutatesData: true}
}

// Start starts the ticker that releases held spans once decided.
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
	d := wait / 5
	if d < 10*time.Millisecond {
		d = 10 * time.Millisecond
	}
	if d > time.Second {
		d = time.Second
	}
	return d
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
// gathered so far and releases it downstream. Spans consumed after
// Shutdown pass through unchanged.
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

// takeCounts returns the telemetry counted since the last call and resets
// it; the caller holds p.mu.
func (p *dupProcessor) takeCounts() counts {
	c := p.counts
	p.counts = counts{}
	return c
}

// tick releases the batches whose time has come and forgets idle groups
// and contexts.
func (p *dupProcessor) tick(now time.Time) {
	n := now.UnixNano()
	p.mu.Lock()
	out := p.releaseDue(n)
	p.expire(n)
	groups, held := p.groups.len(), p.held
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
// tracked tool spans only is held as it is.
func (p *dupProcessor) ConsumeTraces(ctx context.Context, td ptrace.Traces) error {
	now := p.now().UnixNano()
	p.mu.Lock()
	if p.shutdown {
		p.mu.Unlock()
		return p.next.ConsumeTraces(ctx, td)
	}
	tracked, total := p.ingest(td, now)
	var out []ptrace.Traces
	passthrough := true
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

// spanBuf returns an empty heldSpan slice, recycled when possible.
func (p *dupProcessor) spanBuf() []heldSpan {
	if n := len(p.spanBufs); n > 0 {
		b := p.spanBufs[n-1]
		p.spanBufs = p.spanBufs[:n-1]
		p.spanBufsCap -= cap(b)
		return b
	}
	return make([]heldSpan, 0, 64)
}

// recycle keeps the spans slice of a released batch for a later one.
// The pool keeps at most maxSpanBufs heldSpans of capacity (460 kB).
func (p *dupProcessor) recycle(spans []heldSpan) {
	if p.spanBufsCap+cap(spans) <= maxSpanBufs {
		p.spanBufs = append(p.spanBufs, spans[:0])
		p.spanBufsCap += cap(spans)
	}
}

// maxSpanBufs bounds the capacity, in heldSpans, of the recycled slices.
const maxSpanBufs = 4096

// batchQueue is a FIFO of held batches, kept by value so that checking the
// deadline at its head reads the queue's own (sequentially reused) memory
// rather than a batch allocated decision_wait ago.
type batchQueue struct {
	buf  []heldBatch
	head int
}

func (q *batchQueue) len() int { return len(q.buf) - q.head }

func (q *batchQueue) push(b heldBatch) { q.buf = append(q.buf, b) }

// due reports whether the head batch exists and its deadline has passed.
func (q *batchQueue) due(now int64) bool { return q.head < len(q.buf) && q.buf[q.head].deadline <= now }

// pop removes and returns the head batch (the queue is not empty).
func (q *batchQueue) pop() heldBatch {
	b := q.buf[q.head]
	q.buf[q.head] = heldBatch{}
	q.head++
	if q.head >= 64 && 2*q.head >= len(q.buf) {
		n := copy(q.buf, q.buf[q.head:])
		clear(q.buf[n:])
		q.buf = q.buf[:n]
		q.head = 0
	}
	return b
}

// toolFact is what extract reads of a tool span, before track files it.
// It is pointer-free, like heldSpan.
type toolFact struct {
	key    gkey
	m      member
	pos    spanPos
	tag    uint32 // the key's tag in the group index
	ctxTag uint32 // the tag of m.callCtx() in the evidence index; 0 for none
}

// chatFact is what the processor keeps of a chat span.
type chatFact struct {
	start             int64
	traceCtx, convCtx uint64
	traceTag, convTag uint32 // their tags in the evidence index; 0 for none
}

// ingest records the evidence of every span of td and adds the tracked tool
// spans to their groups, leaving their heldSpans (in batch order) in
// p.pending. It returns the number of tracked tool spans and the number of
// spans.
func (p *dupProcessor) ingest(td ptrace.Traces, now int64) (tracked, total int) {
	p.pending = p.pending[:0]
	p.facts = p.facts[:0]
	p.chats = p.chats[:0]
	rss := td.ResourceSpans()
	for i := 0; i < rss.Len(); i++ {
		rs := rss.At(i)
		res := rs.Resource()
		sss := rs.ScopeSpans()
		for j := 0; j < sss.Len(); j++ {
			spans := sss.At(j).Spans()
			n := spans.Len()
			total += n
			for k := 0; k < n; k++ {
				s := spans.At(k)
				switch spanview.Classify(s) {
				case spanview.Chat:
					p.chatFact(s)
				case spanview.Tool:
					p.facts = append(p.facts, toolFact{pos: spanPos{int32(i), int32(j), int32(k)}})
					f := &p.facts[len(p.facts)-1]
					if reason := p.extract(s, res, f); reason != reasonNone {
						p.counts.ignored[reasonIndex(reason)]++
						p.facts = p.facts[:len(p.facts)-1]
						continue
					}
					f.tag = p.groups.tag(&f.key)
					if c := f.m.callCtx(); c != 0 {
						f.ctxTag = p.evidence.tag(c)
					}
				}
			}
		}
	}
	p.prefetch()
	for i := range p.chats {
		p.recordChat(&p.chats[i], now)
	}
	for i := range p.facts {
		if reason := p.track(&p.facts[i], now); reason != reasonNone {
			p.counts.ignored[reasonIndex(reason)]++
			continue
		}
		tracked++
	}
	return tracked, total
}

// prefetch loads the index slots that the tracking of this batch will read:
// those of every key and context, and those of the groups and contexts that
// it will evict. The loads are independent, so their cache misses overlap,
// which the dependent work of track cannot do.
func (p *dupProcessor) prefetch() {
	var sink uint32
	for i := range p.facts {
		sink += p.groups.index.touch(p.facts[i].tag)
		if t := p.facts[i].ctxTag; t != 0 {
			sink += p.evidence.index.touch(t)
		}
	}
	for i := range p.chats {
		if t := p.chats[i].traceTag; t != 0 {
			sink += p.evidence.index.touch(t)
		}
		if t := p.chats[i].convTag; t != 0 {
			sink += p.evidence.index.touch(t)
		}
	}
	if n := len(p.chats) + len(p.facts); p.evidence.len()+n > p.cfg.MaxGroups {
		q := &p.evidence.queue
		for i := 0; i < n && i < q.len(); i++ {
			r := q.at(i)
			sink += p.evidence.index.touch(r.tag) + p.evidence.arena.at(r.idx).gen
		}
	}
	if n := len(p.facts); p.groups.len()+n > p.cfg.MaxGroups {
		q := &p.groups.queue
		for i := 0; i < n && i < q.len(); i++ {
			r := q.at(i)
			sink += p.groups.index.touch(r.tag) + p.groups.metaOf(r.idx).gen
		}
	}
	p.sink += sink
}

// split moves the tracked tool spans (pend, in batch order) out of td into
// a new Traces, which it returns, and rewrites their positions to where they
// now sit. A resource or scope whose spans are all tracked moves as a whole
// (no copy); otherwise its resource and scope are copied and its tracked
// spans moved one by one.
func (p *dupProcessor) split(td ptrace.Traces, pend []heldSpan) ptrace.Traces {
	out := ptrace.NewTraces()
	rss := td.ResourceSpans()
	next := 0
	for next < len(pend) {
		ri := pend[next].pos.rs
		rs := rss.At(int(ri))
		sss := rs.ScopeSpans()
		end := next
		for end < len(pend) && pend[end].pos.rs == ri {
			end++
		}
		total := 0
		for j := 0; j < sss.Len(); j++ {
			total += sss.At(j).Spans().Len()
		}
		newRS := int32(out.ResourceSpans().Len())
		if end-next == total {
			// Every span of the resource is tracked: move it whole, the
			// scope and span indices stay.
			rs.MoveTo(out.ResourceSpans().AppendEmpty())
			for ; next < end; next++ {
				pend[next].pos.rs = newRS
			}
			continue
		}
		dstRS := out.ResourceSpans().AppendEmpty()
		rs.Resource().CopyTo(dstRS.Resource())
		dstRS.SetSchemaUrl(rs.SchemaUrl())
		for next < end {
			si := pend[next].pos.ss
			ss := sss.At(int(si))
			send := next
			for send < end && pend[send].pos.ss == si {
				send++
			}
			newSS := int32(dstRS.ScopeSpans().Len())
			if send-next == ss.Spans().Len() {
				ss.MoveTo(dstRS.ScopeSpans().AppendEmpty())
				for ; next < send; next++ {
					pend[next].pos.rs, pend[next].pos.ss = newRS, newSS
				}
				continue
			}
			dstSS := dstRS.ScopeSpans().AppendEmpty()
			ss.Scope().CopyTo(dstSS.Scope())
			dstSS.SetSchemaUrl(ss.SchemaUrl())
			dst := dstSS.Spans()
			dst.EnsureCapacity(send - next)
			k := int32(-1)
			ss.Spans().RemoveIf(func(s ptrace.Span) bool {
				k++
				if next >= send || pend[next].pos.span != k {
					return false
				}
				s.MoveTo(dst.AppendEmpty())
				pend[next].pos = spanPos{newRS, newSS, int32(dst.Len() - 1)}
				next++
				return true
			})
		}
	}
	pruneEmpty(td)
	return out
}

// pruneEmpty drops the resources and scopes left without spans, so that a
// forwarded batch carries no empty containers.
func pruneEmpty(td ptrace.Traces) {
	td.ResourceSpans().RemoveIf(func(rs ptrace.ResourceSpans) bool {
		rs.ScopeSpans().RemoveIf(func(ss ptrace.ScopeSpans) bool { return ss.Spans().Len() == 0 })
		return rs.ScopeSpans().Len() == 0
	})
}

// extract reads a tool span into f: its key and member, or why it stays
// untracked.
func (p *dupProcessor) extract(s ptrace.Span, res pcommon.Resource, f *toolFact) ignoreReason {
	start, ok := startNanos(s.StartTimestamp())
	if !ok {
		return reasonBadTimestamp
	}
	var a toolAttrs
	readToolAttrs(s.Attributes(), &a)
	if a.outcome == sc.OutcomeBypassed && (a.bypassReason == sc.BypassUnscoped || a.bypassReason == sc.BypassNoGuard) {
		// A write tool that ran unprotected (no caller scope, or
		// instrumentation without a Guard): its span carries the key
		// hashes precisely so that a second run shows as the real double
		// side effect it is.
		a.outcome = sc.OutcomeExecuted
	}
	oc := parseOutcome(a.outcome)
	if a.outcome == sc.OutcomeBypassed || a.outcome == sc.OutcomeMismatch {
		return reasonExcludedOutcome
	}
	if !p.keys.groupKey(&f.key, &a, res, s) {
		return reasonNoKey
	}
	m := &f.m
	*m = member{
		start:    start,
		outcome:  oc,
		traceCtx: traceKey(s.TraceID()),
		convCtx:  p.keys.str(ctxConversation, a.conv),
		reqID:    p.keys.str(0, a.requestID),
		writeID:  p.keys.str(0, a.writeID),
		spanID:   s.SpanID(),
	}
	if p.reliable(a.session) {
		m.session = p.keys.str(ctxSession, a.session)
	}
	if oc == outcomeReplayed || oc == outcomeInProgress || oc == outcomeTakeover || a.attempt > 1 {
		m.flags |= flagProvenDup
	}
	if a.annotated {
		m.flags |= flagAnnotated
	}
	return reasonNone
}

// reliable reports whether an mcp.session.id tells sessions apart: not
// empty and not one of unreliable_session_ids.
func (p *dupProcessor) reliable(session string) bool {
	if session == "" {
		return false
	}
	for _, u := range p.unrelSess {
		if session == u {
			return false
		}
	}
	return true
}

// track adds an extracted tool span to its group and appends its heldSpan
// to p.pending, or returns reasonResent for a span the group already has.
func (p *dupProcessor) track(f *toolFact, now int64) ignoreReason {
	m := &f.m
	gi := p.groups.find(&f.key, f.tag)
	if gi == 0 {
		if p.groups.len() >= p.cfg.MaxGroups {
			p.evictGroup()
		}
		gi = p.groups.create(&f.key, f.tag)
	} else {
		ms := p.groups.members(gi)
		for i := range ms {
			if ms[i].spanID == m.spanID && ms[i].traceCtx == m.traceCtx {
				return reasonResent
			}
		}
		p.groups.metaOf(gi).flags |= metaHit
	}
	m.decideAt = now + p.decWait
	ms := p.groups.members(gi)
	for i := range ms {
		e := &ms[i]
		if e.decideAt <= now && m.before(e) && e.start-m.start <= p.window {
			p.counts.lateTool++
			break
		}
	}
	p.groups.addMember(gi, *m)
	p.groups.get(gi).lastSeen = now
	p.groups.metaOf(gi).held++

	// The call's context (its reliable session, else its conversation,
	// else its trace) remembers it, for the deliberate-repeat rule.
	if c := m.callCtx(); c != 0 {
		e := p.touchEvidence(c, f.ctxTag, now)
		p.evidence.addTool(e, toolMark{start: m.start, key: f.key.short()})
	}
	p.pending = append(p.pending, heldSpan{m: *m, arrival: now, gi: gi, pos: f.pos})
	return reasonNone
}

// chatFact reads a chat span into p.chats; a span with an unusable start
// is ignored.
func (p *dupProcessor) chatFact(s ptrace.Span) {
	start, ok := startNanos(s.StartTimestamp())
	if !ok {
		return
	}
	conv := ""
	if v, ok := s.Attributes().Get(sc.GenAIConversationID); ok {
		conv = scalar(v)
	}
	f := chatFact{start: start, traceCtx: traceKey(s.TraceID()), convCtx: p.keys.str(ctxConversation, conv)}
	if f.traceCtx != 0 {
		f.traceTag = p.evidence.tag(f.traceCtx)
	}
	if f.convCtx != 0 {
		f.convTag = p.evidence.tag(f.convCtx)
	}
	p.chats = append(p.chats, f)
}

// recordChat remembers the start of an inference span in its trace and
// conversation, and counts it late when it would have changed a decision.
func (p *dupProcessor) recordChat(f *chatFact, now int64) {
	late := false
	for _, c := range [2]struct {
		key uint64
		tag uint32
	}{{f.traceCtx, f.traceTag}, {f.convCtx, f.convTag}} {
		if c.key == 0 {
			continue
		}
		e := p.touchEvidence(c.key, c.tag, now)
		if !late && p.evidence.lateChat(e, f.start) {
			late = true
		}
		p.evidence.addChat(e, f.start)
	}
	if late {
		p.counts.lateChat++
	}
}

// touchEvidence returns the evidence of context c (whose index tag is tag),
// creating it (and evicting the oldest context not touched again, at the
// cap) when needed. The pointer is valid until the next touchEvidence.
func (p *dupProcessor) touchEvidence(c uint64, tag uint32, now int64) *evidence {
	e := p.evidence.find(c, tag)
	if e == nil {
		if p.evidence.len() >= p.cfg.MaxGroups {
			p.evictEvidence()
		}
		e = p.evidence.create(c, tag)
	} else {
		e.hit = true
	}
	e.lastSeen = now
	return e
}

// evictEvidence forgets the oldest context not touched since it was queued.
func (p *dupProcessor) evictEvidence() {
	q := &p.evidence.queue
	for n := q.len(); n >= 0 && q.len() > 0; n-- {
		r := q.pop()
		e := p.evidence.live(r)
		switch {
		case e == nil:
			continue
		case e.hit:
			e.hit = false
			q.push(r)
			continue
		}
		p.evidence.remove(r.idx)
		return
	}
}

// liveGroup returns the bookkeeping of the group a queue entry names, nil
// when the entry is stale (the group was removed, or its slot reused, since
// it was queued).
func (p *dupProcessor) liveGroup(r ref) *groupMeta {
	if mt := p.groups.metaOf(r.idx); mt.gen == r.gen && mt.flags&metaRemoved == 0 {
		return mt
	}
	return nil
}

// evictGroup forgets the oldest group that saw no span since it was queued
// (FIFO with a second chance: a group seen again goes back to the end of
// the queue once). Its held spans are not dropped: the slot stays theirs
// until they are decided and released at their deadline, on the evidence
// the group had.
func (p *dupProcessor) evictGroup() {
	q := &p.groups.queue
	for n := q.len(); n > 0; n-- {
		r := q.pop()
		mt := p.liveGroup(r)
		switch {
		case mt == nil:
			continue
		case mt.flags&metaHit != 0:
			mt.flags &^= metaHit
			q.push(r)
			continue
		}
		p.groups.remove(r.idx, r.tag)
		p.counts.evictions++
		return
	}
}

// expire forgets the groups and contexts that saw nothing for a window.
func (p *dupProcessor) expire(now int64) {
	q := &p.groups.queue
	for n := q.len(); n > 0; n-- {
		r := q.peek()
		mt := p.liveGroup(r)
		switch {
		case mt == nil:
			q.pop()
			continue
		case now-p.groups.get(r.idx).lastSeen > p.window:
			q.pop()
			p.groups.remove(r.idx, r.tag)
			continue
		case mt.flags&metaHit != 0:
			// Seen since it was queued: queue it again from now on.
			q.pop()
			mt.flags &^= metaHit
			q.push(r)
			continue
		}
		break
	}
	eq := &p.evidence.queue
	for n := eq.len(); n > 0; n-- {
		r := eq.peek()
		e := p.evidence.live(r)
		switch {
		case e == nil:
			eq.pop()
			continue
		case now-e.lastSeen > p.window:
			eq.pop()
			p.evidence.remove(r.idx)
			continue
		case e.hit:
			eq.pop()
			e.hit = false
			eq.push(r)
			continue
		}
		break
	}
}

// releaseDue decides and returns the held batches whose deadline has passed.
func (p *dupProcessor) releaseDue(now int64) []ptrace.Traces {
	var out []ptrace.Traces
	for p.queue.due(now) {
		out = p.releaseHead(now, false, out)
	}
	for p.extQueue.due(now) {
		out = p.releaseExtHead(now, out)
	}
	return out
}

// releaseOverflow releases the oldest held batches early until no more
// than max_held_spans are held.
func (p *dupProcessor) releaseOverflow(now int64) []ptrace.Traces {
	var out []ptrace.Traces
	for p.held > p.cfg.MaxHeldSpans {
		switch {
		case p.queue.len() > 0:
			out = p.releaseHead(now, false, out)
		case p.extQueue.len() > 0:
			out = p.releaseExtHead(now, out)
		default:
			return out
		}
	}
	return out
}

// releaseAll decides and returns every held batch, waiting for nothing.
func (p *dupProcessor) releaseAll(now int64) []ptrace.Traces {
	var out []ptrace.Traces
	for p.queue.len() > 0 {
		out = p.releaseHead(now, true, out)
	}
	for p.extQueue.len() > 0 {
		out = p.releaseExtHead(now, out)
	}
	return out
}

// releaseHead decides every span of the oldest batch of the queue and
// appends the batch to out. A span that must wait for its original (unless
// final) moves to a batch of the extended queue. Only the spans to annotate
// are read: the rest of the batch goes out as it came in.
func (p *dupProcessor) releaseHead(now int64, final bool, out []ptrace.Traces) []ptrace.Traces {
	b := p.queue.pop()
	// Load the bookkeeping of the batch's groups first (independent loads,
	// overlapping misses): it was last touched decision_wait ago.
	var sink uint32
	for i := range b.spans {
		sink += uint32(p.groups.metaOf(b.spans[i].gi).flags)
	}
	// First calls first; the others, in order, once their spans (each a
	// chain of dependent loads into a batch last touched decision_wait
	// ago) are loaded together.
	slow := p.slow[:0]
	for i := range b.spans {
		if hs := &b.spans[i]; !hs.decided && !p.decideFirst(hs) {
			slow = append(slow, int32(i))
		}
	}
	for _, i := range slow {
		sink += uint32(spanAt(b.td, b.spans[i].pos).Attributes().Len())
	}
	p.sink += sink
	waiting := 0
	for _, i := range slow {
		if !p.decide(&b.spans[i], b.td, now, final) {
			waiting++
		}
	}
	p.slow = slow
	if waiting > 0 {
		p.extQueue.push(p.moveWaiting(&b, waiting))
	}
	p.held -= len(b.spans) - waiting
	if b.td.ResourceSpans().Len() > 0 {
		out = append(out, b.td)
	}
	p.recycle(b.spans)
	return out
}

// moveWaiting moves the undecided spans of b (waiting for their original)
// into a new batch of the extended queue, with copies of their resource
// and scope, and returns it.
func (p *dupProcessor) moveWaiting(b *heldBatch, waiting int) heldBatch {
	ext := heldBatch{td: ptrace.NewTraces(), spans: make([]heldSpan, 0, waiting)}
	rss := b.td.ResourceSpans()
	for i := 0; i < len(b.spans); {
		ri := b.spans[i].pos.rs
		rend := i
		for rend < len(b.spans) && b.spans[rend].pos.rs == ri {
			rend++
		}
		rs := rss.At(int(ri))
		var extRS ptrace.ResourceSpans
		hasRS := false
		for i < rend {
			si := b.spans[i].pos.ss
			send, undecided := i, false
			for send < rend && b.spans[send].pos.ss == si {
				undecided = undecided || !b.spans[send].decided
				send++
			}
			if !undecided {
				i = send
				continue
			}
			if !hasRS {
				extRS = ext.td.ResourceSpans().AppendEmpty()
				rs.Resource().CopyTo(extRS.Resource())
				extRS.SetSchemaUrl(rs.SchemaUrl())
				hasRS = true
			}
			ss := rs.ScopeSpans().At(int(si))
			extSS := extRS.ScopeSpans().AppendEmpty()
			ss.Scope().CopyTo(extSS.Scope())
			extSS.SetSchemaUrl(ss.SchemaUrl())
			dst := extSS.Spans()
			newRS, newSS := int32(ext.td.ResourceSpans().Len()-1), int32(extRS.ScopeSpans().Len()-1)
			k, next := int32(-1), i
			ss.Spans().RemoveIf(func(s ptrace.Span) bool {
				k++
				for next < send && b.spans[next].pos.span < k {
					next++
				}
				if next >= send || b.spans[next].pos.span != k || b.spans[next].decided {
					return false
				}
				s.MoveTo(dst.AppendEmpty())
				w := b.spans[next]
				w.pos = spanPos{newRS, newSS, int32(dst.Len() - 1)}
				if len(ext.spans) == 0 {
					ext.deadline = w.arrival + p.origWait
				}
				ext.spans = append(ext.spans, w)
				next++
				return true
			})
			i = send
		}
	}
	pruneEmpty(b.td)
	return ext
}

// releaseExtHead decides every span of the oldest batch of the extended
// queue, original or not, and appends it to out.
func (p *dupProcessor) releaseExtHead(now int64, out []ptrace.Traces) []ptrace.Traces {
	b := p.extQueue.pop()
	for i := range b.spans {
		if !b.spans[i].decided {
			p.decide(&b.spans[i], b.td, now, true)
		}
	}
	p.held -= len(b.spans)
	return append(out, b.td)
}
