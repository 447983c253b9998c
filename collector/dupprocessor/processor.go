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

// heldSpan is a tool span waiting for its decision, inside a heldBatch.
type heldSpan struct {
	span    ptrace.Span // points into the heldBatch's td
	gi      uint32      // arena index of its group
	m       member
	arrival int64 // processing time, ns
	decided bool
}

// heldBatch is a Traces holding only tracked tool spans (with copies of
// their resource and scope), released as a whole at its deadline. spans is
// in the order of the spans in td (resource, scope, span).
type heldBatch struct {
	td       ptrace.Traces
	deadline int64
	spans    []heldSpan
}

// spanPos is where a tracked tool span sits in an incoming batch.
type spanPos struct{ rs, ss, span int32 }

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
	unrelSess map[string]struct{}

	// mu protects everything below it: the tracked groups, the evidence,
	// the held batches and the scratch buffers.
	mu        sync.Mutex
	keys      keyer
	groups    *table[uint32] // arena index by nonZero(gkey.short())
	arena     []group
	free      []uint32
	extra     map[uint32][]member // members of groups with more than one
	groupQ    fifo[groupRef]
	evidence  *table[*evidence] // by context key
	evQ       fifo[*evidence]
	queue     []*heldBatch // held for decision_wait, deadlines non-decreasing
	extQueue  []*heldBatch // waiting for an original, deadlines non-decreasing
	held      int          // spans in queue and extQueue
	counts    counts
	shutdown  bool
	scratch   []member
	positions []spanPos
	pending   []heldSpan
	facts     []toolFact
	chats     []chatFact
	sink      uint64 // keeps the cache-warming loads of ingest alive

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
		unrelSess: make(map[string]struct{}, len(cfg.UnreliableSessionIDs)),
		keys:      keyer{seed: maphash.MakeSeed(), maxArgs: cfg.MaxArgumentsBytes},
		groups:    newTable[uint32](rand.Uint64()),
		evidence:  newTable[*evidence](rand.Uint64()),
		extra:     map[uint32][]member{},
		stop:      make(chan struct{}),
	}
	for _, s := range cfg.UnreliableSessionIDs {
		p.unrelSess[s] = struct{}{}
	}
	return p, nil
}

// Capabilities reports that the processor mutates the data it is given: it
// moves tool spans out of the batch and annotates them.
func (p *dupProcessor) Capabilities() consumer.Capabilities {
	return consumer.Capabilities{MutatesData: true}
}

// Start starts the ticker that releases held spans once decided.
func (p *dupProcessor) Start(context.Context, component.Host) error {
	p.startOnce.Do(func() {
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
// once, and holds the tracked tool spans for decision_wait.
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
		b := &heldBatch{deadline: now + p.decWait}
		if tracked == total {
			// Only tool spans: hold the batch itself, no copy.
			b.td = td
			b.spans = p.pending
			p.pending = make([]heldSpan, 0, cap(b.spans))
			passthrough = false
		} else {
			b.td, b.spans = p.split(td)
		}
		p.queue = append(p.queue, b)
		p.held += len(b.spans)
		if p.held > p.cfg.MaxHeldSpans {
			out = p.releaseOverflow(now)
		}
	}
	p.pending = p.pending[:0]
	c := p.takeCounts()
	p.mu.Unlock()

	c.record(ctx, p)
	p.forward(context.Background(), out)
	if passthrough {
		return p.next.ConsumeTraces(ctx, td)
	}
	return nil
}

// ingest records the evidence of every span of td and adds the tracked tool
// spans to their groups, leaving their heldSpans in p.pending and their
// positions in p.positions. It returns the number of tracked tool spans and
// the number of spans.
func (p *dupProcessor) ingest(td ptrace.Traces, now int64) (tracked, total int) {
	p.positions = p.positions[:0]
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
			total += spans.Len()
			for k := 0; k < spans.Len(); k++ {
				s := spans.At(k)
				switch spanview.Classify(s) {
				case spanview.Chat:
					if f, ok := p.chatFactOf(s); ok {
						p.chats = append(p.chats, f)
					}
				case spanview.Tool:
					key, m, reason := p.extract(s, res)
					if reason != reasonNone {
						p.counts.ignored[reasonIndex(reason)]++
						continue
					}
					p.facts = append(p.facts, toolFact{span: s, key: key, m: m, pos: spanPos{int32(i), int32(j), int32(k)}})
				}
			}
		}
	}
	// Touch the table slots of every key first: independent loads overlap
	// their cache misses, which the dependent work of track cannot.
	var sink uint64
	for i := range p.facts {
		sink += p.groups.touch(nonZero(p.facts[i].key.short()))
		if c := p.facts[i].m.callCtx(); c != 0 {
			sink += p.evidence.touch(c)
		}
	}
	for i := range p.chats {
		sink += p.evidence.touch(p.chats[i].traceCtx)
	}
	if n := len(p.chats) + len(p.facts); p.evidence.len()+n > p.cfg.MaxGroups {
		// And the contexts that may be evicted, with their slots.
		q := p.evQ.buf[p.evQ.head:]
		for i := 0; i < n && i < len(q); i++ {
			sink += p.evidence.touch(q[i].key)
		}
	}
	if p.groups.len()+len(p.facts) > p.cfg.MaxGroups {
		// And the groups that will be evicted, with their slots.
		q := p.groupQ.buf[p.groupQ.head:]
		for i := 0; i < len(p.facts) && i < len(q); i++ {
			sink += p.groups.touch(nonZero(p.arena[q[i].idx].key.short()))
		}
	}
	p.sink = sink
	for _, f := range p.chats {
		p.recordChat(f, now)
	}
	for i := range p.facts {
		f := &p.facts[i]
		hs, reason := p.track(f.span, f.key, f.m, now)
		if reason != reasonNone {
			p.counts.ignored[reasonIndex(reason)]++
			continue
		}
		p.pending = append(p.pending, hs)
		p.positions = append(p.positions, f.pos)
		tracked++
	}
	return tracked, total
}

// split moves the spans at p.positions out of td into a new Traces and
// returns it with their heldSpans. A resource or scope whose spans are all
// tracked moves as a whole (no copy); otherwise its resource and scope are
// copied and its tracked spans moved one by one.
func (p *dupProcessor) split(td ptrace.Traces) (ptrace.Traces, []heldSpan) {
	out := ptrace.NewTraces()
	spans := make([]heldSpan, 0, len(p.pending))
	rss := td.ResourceSpans()
	next := 0
	for next < len(p.positions) {
		ri := p.positions[next].rs
		rs := rss.At(int(ri))
		end := next
		for end < len(p.positions) && p.positions[end].rs == ri {
			end++
		}
		total := 0
		for j := 0; j < rs.ScopeSpans().Len(); j++ {
			total += rs.ScopeSpans().At(j).Spans().Len()
		}
		if end-next == total {
			// Every span of the resource is tracked: the handles taken in
			// ingest stay valid, as the span structs themselves do not move.
			rs.MoveTo(out.ResourceSpans().AppendEmpty())
			spans = append(spans, p.pending[next:end]...)
			next = end
			continue
		}
		dstRS := out.ResourceSpans().AppendEmpty()
		rs.Resource().CopyTo(dstRS.Resource())
		dstRS.SetSchemaUrl(rs.SchemaUrl())
		for next < end {
			si := p.positions[next].ss
			ss := rs.ScopeSpans().At(int(si))
			send := next
			for send < end && p.positions[send].ss == si {
				send++
			}
			if send-next == ss.Spans().Len() {
				ss.MoveTo(dstRS.ScopeSpans().AppendEmpty())
				spans = append(spans, p.pending[next:send]...)
				next = send
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
				if next >= send || p.positions[next] != (spanPos{ri, si, k}) {
					return false
				}
				moved := dst.AppendEmpty()
				s.MoveTo(moved)
				hs := p.pending[next]
				hs.span = moved
				spans = append(spans, hs)
				next++
				return true
			})
		}
	}
	// Drop the resources and scopes left empty, so that the passthrough
	// batch carries no empty containers.
	rss.RemoveIf(func(rs ptrace.ResourceSpans) bool {
		rs.ScopeSpans().RemoveIf(func(ss ptrace.ScopeSpans) bool { return ss.Spans().Len() == 0 })
		return rs.ScopeSpans().Len() == 0
	})
	return out, spans
}

// toolFact is what extract reads of a tool span, before track files it.
type toolFact struct {
	span ptrace.Span
	key  gkey
	m    member
	pos  spanPos
}

// extract reads a tool span: its key and member, or why it stays untracked.
func (p *dupProcessor) extract(s ptrace.Span, res pcommon.Resource) (gkey, member, ignoreReason) {
	start, ok := startNanos(s.StartTimestamp())
	if !ok {
		return gkey{}, member{}, reasonBadTimestamp
	}
	a := readToolAttrs(s.Attributes())
	if a.outcome == sc.OutcomeBypassed && (a.bypassReason == sc.BypassUnscoped || a.bypassReason == sc.BypassNoGuard) {
		// A write tool that ran unprotected (no caller scope, or
		// instrumentation without a Guard): its span carries the key
		// hashes precisely so that a second run shows as the real double
		// side effect it is.
		a.outcome = sc.OutcomeExecuted
	}
	oc := parseOutcome(a.outcome)
	if a.outcome == sc.OutcomeBypassed || a.outcome == sc.OutcomeMismatch {
		return gkey{}, member{}, reasonExcludedOutcome
	}
	key, ok := p.keys.groupKey(&a, res, s)
	if !ok {
		return gkey{}, member{}, reasonNoKey
	}
	m := member{
		start:    start,
		outcome:  oc,
		traceCtx: traceKey(s.TraceID()),
		convCtx:  p.keys.str(ctxConversation, a.conv),
		reqID:    p.keys.str(0, a.requestID),
		writeID:  p.keys.str(0, a.writeID),
		spanID:   s.SpanID(),
	}
	if _, unreliable := p.unrelSess[a.session]; !unreliable {
		m.session = p.keys.str(ctxSession, a.session)
	}
	if oc == outcomeReplayed || oc == outcomeInProgress || oc == outcomeTakeover || a.attempt > 1 {
		m.flags |= flagProvenDup
	}
	if a.annotated {
		m.flags |= flagAnnotated
	}
	return key, m, reasonNone
}

// track adds an extracted tool span to its group and returns its heldSpan
// (without its span handle for split batches), or reasonResent for a span
// the group already has.
func (p *dupProcessor) track(s ptrace.Span, key gkey, m member, now int64) (heldSpan, ignoreReason) {
	start := m.start
	gi := p.groups.get(nonZero(key.short()))
	if gi != 0 && p.arena[gi].key != key {
		// Two live keys share their first 64 bits: the newer one wins.
		p.removeGroup(gi)
		gi = 0
	}
	if gi == 0 {
		if p.groups.len() >= p.cfg.MaxGroups {
			p.evictGroup()
		}
		gi = p.newGroup(key)
		p.groups.put(nonZero(key.short()), gi)
		p.groupQ.push(groupRef{gi, p.arena[gi].gen})
	} else {
		for _, e := range p.members(gi) {
			if e.spanID == m.spanID && e.traceCtx == m.traceCtx {
				return heldSpan{}, reasonResent
			}
		}
		p.arena[gi].hit = true
	}
	m.decideAt = now + p.decWait
	for _, e := range p.members(gi) {
		if e.decideAt <= now && m.before(&e) && e.start-m.start <= p.window {
			p.counts.lateTool++
			break
		}
	}
	p.addMember(gi, m)
	g := &p.arena[gi]
	g.lastSeen = now
	g.held++

	// The call's context (its reliable session, else its conversation,
	// else its trace) remembers it, for the deliberate-repeat rule.
	if c := m.callCtx(); c != 0 {
		p.touchEvidence(c, now).addTool(toolMark{start: start, key: key.short()})
	}
	return heldSpan{span: s, gi: gi, m: m, arrival: now}, reasonNone
}

// recordChat remembers the start of an inference span in its trace and
// conversation, and counts it late when it would have changed a decision.
func (p *dupProcessor) recordChat(f chatFact, now int64) {
	start := f.start
	late := false
	for _, c := range [2]uint64{f.traceCtx, f.convCtx} {
		if c == 0 {
			continue
		}
		e := p.touchEvidence(c, now)
		if !late && e.lateChat(start) {
			late = true
		}
		e.addChat(start)
	}
	if late {
		p.counts.lateChat++
	}
}

// chatFact is what the processor keeps of a chat span.
type chatFact struct {
	start             int64
	traceCtx, convCtx uint64
}

// chatFactOf reads a chat span; ok is false when its start is unusable.
func (p *dupProcessor) chatFactOf(s ptrace.Span) (chatFact, bool) {
	start, ok := startNanos(s.StartTimestamp())
	if !ok {
		return chatFact{}, false
	}
	conv := ""
	if v, ok := s.Attributes().Get(sc.GenAIConversationID); ok {
		conv = scalar(v)
	}
	return chatFact{start: start, traceCtx: traceKey(s.TraceID()), convCtx: p.keys.str(ctxConversation, conv)}, true
}

// touchEvidence returns the evidence of context c, creating it (and
// evicting the oldest context not touched again, at the cap) when needed.
func (p *dupProcessor) touchEvidence(c uint64, now int64) *evidence {
	e := p.evidence.get(c)
	if e == nil {
		if p.evidence.len() >= p.cfg.MaxGroups {
			p.evictEvidence()
		}
		e = newEvidence(c)
		p.evidence.put(c, e)
		p.evQ.push(e)
	} else {
		e.hit = true
	}
	e.lastSeen = now
	return e
}

// evictEvidence forgets the oldest context not touched since it was queued.
func (p *dupProcessor) evictEvidence() {
	for n := p.evQ.len(); n >= 0; n-- {
		e := p.evQ.pop()
		switch {
		case e == nil:
			return
		case e.removed:
			continue
		case e.hit:
			e.hit = false
			p.evQ.push(e)
			continue
		}
		p.evidence.del(e.key)
		e.removed = true
		return
	}
}

// evictGroup forgets the oldest group that saw no span since it was queued
// (FIFO with a second chance: a group seen again goes back to the end of
// the queue once). Its held spans are not dropped: the slot stays theirs
// until they are decided and released at their deadline, on the evidence
// the group had.
func (p *dupProcessor) evictGroup() {
	for n := p.groupQ.len(); n > 0; n-- {
		r := p.groupQ.pop()
		g := &p.arena[r.idx]
		switch {
		case g.gen != r.gen || g.removed:
			continue
		case g.hit:
			g.hit = false
			p.groupQ.push(r)
			continue
		}
		p.removeGroup(r.idx)
		p.counts.evictions++
		return
	}
}

// expire forgets the groups and contexts that saw nothing for a window.
func (p *dupProcessor) expire(now int64) {
	for n := p.groupQ.len(); n > 0; n-- {
		r := p.groupQ.peek()
		g := &p.arena[r.idx]
		switch {
		case g.gen != r.gen || g.removed:
			p.groupQ.pop()
			continue
		case now-g.lastSeen > p.window:
			p.groupQ.pop()
			p.removeGroup(r.idx)
			continue
		case g.hit:
			// Seen since it was queued: queue it again from now on.
			p.groupQ.pop()
			g.hit = false
			p.groupQ.push(r)
			continue
		}
		break
	}
	for n := p.evQ.len(); n > 0; n-- {
		e := p.evQ.peek()
		switch {
		case e.removed:
			p.evQ.pop()
			continue
		case now-e.lastSeen > p.window:
			p.evQ.pop()
			p.evidence.del(e.key)
			e.removed = true
			continue
		case e.hit:
			p.evQ.pop()
			e.hit = false
			p.evQ.push(e)
			continue
		}
		break
	}
}

// releaseDue decides and returns the held batches whose deadline has passed.
func (p *dupProcessor) releaseDue(now int64) []ptrace.Traces {
	var out []ptrace.Traces
	for len(p.queue) > 0 && p.queue[0].deadline <= now {
		out = p.releaseHead(now, false, out)
	}
	for len(p.extQueue) > 0 && p.extQueue[0].deadline <= now {
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
		case len(p.queue) > 0:
			out = p.releaseHead(now, false, out)
		case len(p.extQueue) > 0:
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
	for len(p.queue) > 0 {
		out = p.releaseHead(now, true, out)
	}
	for len(p.extQueue) > 0 {
		out = p.releaseExtHead(now, out)
	}
	return out
}

// releaseHead decides every span of the oldest batch of the queue. A span
// that must wait for its original (unless final) moves to a batch of the
// extended queue; the rest is appended to out.
func (p *dupProcessor) releaseHead(now int64, final bool, out []ptrace.Traces) []ptrace.Traces {
	b := p.queue[0]
	p.queue[0] = nil
	p.queue = p.queue[1:]
	var ext *heldBatch
	idx := 0
	rss := b.td.ResourceSpans()
	for i := 0; i < rss.Len(); i++ {
		rs := rss.At(i)
		var extRS ptrace.ResourceSpans
		sss := rs.ScopeSpans()
		for j := 0; j < sss.Len(); j++ {
			ss := sss.At(j)
			var extSpans ptrace.SpanSlice
			hasExtSS := false
			ss.Spans().RemoveIf(func(s ptrace.Span) bool {
				if idx >= len(b.spans) {
					return false // cannot happen: every span of a held batch is tracked
				}
				hs := &b.spans[idx]
				idx++
				if hs.decided {
					return false
				}
				if p.decide(hs, now, final) {
					return false
				}
				// Wait for the original in the extended queue.
				if ext == nil {
					ext = &heldBatch{td: ptrace.NewTraces(), deadline: hs.arrival + p.origWait}
				}
				if extRS == (ptrace.ResourceSpans{}) {
					extRS = ext.td.ResourceSpans().AppendEmpty()
					rs.Resource().CopyTo(extRS.Resource())
					extRS.SetSchemaUrl(rs.SchemaUrl())
				}
				if !hasExtSS {
					extSS := extRS.ScopeSpans().AppendEmpty()
					ss.Scope().CopyTo(extSS.Scope())
					extSS.SetSchemaUrl(ss.SchemaUrl())
					extSpans = extSS.Spans()
					hasExtSS = true
				}
				moved := extSpans.AppendEmpty()
				s.MoveTo(moved)
				w := *hs
				w.span = moved
				ext.spans = append(ext.spans, w)
				return true
			})
		}
	}
	if ext != nil {
		p.extQueue = append(p.extQueue, ext)
		b.td.ResourceSpans().RemoveIf(func(rs ptrace.ResourceSpans) bool {
			rs.ScopeSpans().RemoveIf(func(ss ptrace.ScopeSpans) bool { return ss.Spans().Len() == 0 })
			return rs.ScopeSpans().Len() == 0
		})
		p.held -= len(b.spans) - len(ext.spans)
	} else {
		p.held -= len(b.spans)
	}
	if b.td.ResourceSpans().Len() > 0 {
		out = append(out, b.td)
	}
	return out
}

// releaseExtHead decides every span of the oldest batch of the extended
// queue, original or not, and appends it to out.
func (p *dupProcessor) releaseExtHead(now int64, out []ptrace.Traces) []ptrace.Traces {
	b := p.extQueue[0]
	p.extQueue[0] = nil
	p.extQueue = p.extQueue[1:]
	for i := range b.spans {
		if !b.spans[i].decided {
			p.decide(&b.spans[i], now, true)
		}
	}
	p.held -= len(b.spans)
	return append(out, b.td)
}
