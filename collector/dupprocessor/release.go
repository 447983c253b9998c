package dupprocessor // import "github.com/idemkit-mcp/idemkit/collector/dupprocessor"

import (
	"slices"

	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/idemkit-mcp/idemkit/collector/dupprocessor/internal/state"
	sc "github.com/idemkit-mcp/idemkit/spancontract"
)

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
		sink += uint32(p.groups.Meta(b.spans[i].gi).Flags)
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
		hs := &b.spans[i]
		sink += uint32(spanAt(b.td, hs.pos).Attributes().Len())
		// And what classify reads first: the group's members and the
		// index slots of the span's trace and conversation.
		if ms := p.groups.Members(hs.gi); len(ms) > 0 {
			sink += uint32(ms[len(ms)-1].Flags)
		}
		if c := hs.m.Trace; c != 0 {
			sink += p.evidence.Touch(p.evidence.Tag(c))
		}
		if c := hs.m.Conv; c != 0 {
			sink += p.evidence.Touch(p.evidence.Tag(c))
		}
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

// decide classifies hs and annotates its span, found at its position in
// td: only a duplicate, or a span that arrived with idemkit.duplicate*
// attributes, is read or written. It returns false, leaving hs undecided,
// when the span's own outcome proves an earlier call that has not arrived,
// final is false and original_wait has not run out since its arrival.
func (p *dupProcessor) decide(hs *heldSpan, td ptrace.Traces, now int64, final bool) bool {
	if p.decideFirst(hs) {
		return true
	}
	v := p.classify(hs.gi, &hs.m)
	if v.orphan && !final && now < hs.arrival+p.origWait {
		return false
	}
	if stale := hs.m.Flags&state.FlagAnnotated != 0; v.dup || stale {
		annotate(spanAt(td, hs.pos), p.groups.Get(hs.gi).Key, &v, stale)
	}
	hs.decided = true
	p.release(hs.gi)
	if v.dup && !v.orphan && (v.cause == sc.CauseHarnessRetry || v.cause == sc.CauseUnknown) {
		// A chat span arriving later inside this interval is late evidence.
		gm := state.GapMark{From: v.prevStart, To: hs.m.Start}
		ctxs := chatCtxs(hs.m.Trace, hs.m.Conv, v.prevTrace, v.prevConv, v.user)
		for i, c := range ctxs {
			if c != 0 && !slices.Contains(ctxs[:i], c) {
				p.evidence.AddGap(p.touchEvidence(c, p.evidence.Tag(c), now), gm)
			}
		}
	}
	if v.dup {
		p.counts.classified[causeIndex(v.cause)]++
	} else {
		p.counts.classified[causeIndexNone]++
	}
	return true
}

// decideFirst decides hs when it is the common case: alone in its group
// (the one member is this span), its outcome proves nothing and it carries
// nothing to strip, so it is a first call (row 0) with nothing to read or
// write in its span. It returns false, doing nothing, otherwise. It touches
// no evidence, so deciding such spans before the others of their batch
// changes no decision.
func (p *dupProcessor) decideFirst(hs *heldSpan) bool {
	if p.groups.Meta(hs.gi).Flags&state.MetaMulti != 0 || hs.m.Flags&(state.FlagProvenDup|state.FlagAnnotated) != 0 {
		return false
	}
	hs.decided = true
	p.release(hs.gi)
	p.counts.classified[causeIndexNone]++
	return true
}

// release notes that a held span of the group at gi was decided, freeing
// the group's slot when it was removed and this was its last held span.
func (p *dupProcessor) release(gi uint32) {
	mt := p.groups.Meta(gi)
	if mt.Held--; mt.Held == 0 && mt.Flags&state.MetaRemoved != 0 {
		p.groups.Free(gi)
	}
}
