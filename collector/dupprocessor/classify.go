package dupprocessor // import "github.com/idemkit/idemkit/collector/dupprocessor"

import (
	"context"
	"slices"
	"strings"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	sc "github.com/idemkit/idemkit/spancontract"
)

// causeNone is the telemetry cause of a tool span that is not a duplicate.
const causeNone = "none"

// causes lists the telemetry causes; causeIndexNone is the last.
var causes = [...]string{sc.CauseTransportRetry, sc.CauseHarnessRetry, sc.CauseModelReissue, sc.CauseReconnectReplay, sc.CauseUnknown, causeNone}

const causeIndexNone = len(causes) - 1

func causeIndex(c string) int {
	for i, x := range causes {
		if x == c {
			return i
		}
	}
	return causeIndexNone
}

// reasons lists the ignore reasons, in the order of counts.ignored.
var reasons = [...]ignoreReason{reasonNoKey, reasonBadTimestamp, reasonExcludedOutcome, reasonResent}

func reasonIndex(r ignoreReason) int {
	for i, x := range reasons {
		if x == r {
			return i
		}
	}
	return 0
}

// Attribute options of the processor's own telemetry, built once (as
// slices, passed on with ...): building them per Add would allocate on every
// call.
var (
	causeOpts = func() (o [len(causes)][]metric.AddOption) {
		for i, c := range causes {
			o[i] = attrOpt("cause", c)
		}
		return o
	}()
	reasonOpts = func() (o [len(reasons)][]metric.AddOption) {
		for i, r := range reasons {
			o[i] = attrOpt("reason", string(r))
		}
		return o
	}()
	lateToolOpts = attrOpt("span", "tool")
	lateChatOpts = attrOpt("span", "chat")
)

func attrOpt(k, v string) []metric.AddOption {
	return []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(attribute.String(k, v)))}
}

// counts accumulates the processor's telemetry under its mutex; record
// hands it to the meter outside the mutex, once per call or tick rather
// than once per span.
type counts struct {
	classified [len(causes)]int64
	ignored    [len(reasons)]int64
	lateTool   int64
	lateChat   int64
	evictions  int64
}

func (c *counts) record(ctx context.Context, p *dupProcessor) {
	for i, n := range c.classified {
		if n > 0 {
			p.tel.ProcessorDupSpansClassified.Add(ctx, n, causeOpts[i]...)
		}
	}
	for i, n := range c.ignored {
		if n > 0 {
			p.tel.ProcessorDupSpansIgnored.Add(ctx, n, reasonOpts[i]...)
		}
	}
	if c.lateTool > 0 {
		p.tel.ProcessorDupLateSpans.Add(ctx, c.lateTool, lateToolOpts...)
	}
	if c.lateChat > 0 {
		p.tel.ProcessorDupLateSpans.Add(ctx, c.lateChat, lateChatOpts...)
	}
	if c.evictions > 0 {
		p.tel.ProcessorDupEvictions.Add(ctx, c.evictions)
	}
}

// recordZero exports every event counter at 0 when the processor starts,
// so that each series exists before its first event: rate() and increase()
// need a sample before an increment to see it, and a healthy Collector's
// dashboard then shows 0 evictions and 0 late spans instead of "No data".
func recordZero(ctx context.Context, p *dupProcessor) {
	p.tel.ProcessorDupEvictions.Add(ctx, 0)
	p.tel.ProcessorDupLateSpans.Add(ctx, 0, lateToolOpts...)
	p.tel.ProcessorDupLateSpans.Add(ctx, 0, lateChatOpts...)
	for i := range causeOpts {
		p.tel.ProcessorDupSpansClassified.Add(ctx, 0, causeOpts[i]...)
	}
	for i := range reasonOpts {
		p.tel.ProcessorDupSpansIgnored.Add(ctx, 0, reasonOpts[i]...)
	}
}

// duplicatePrefix starts every idemkit.duplicate.* key.
const duplicatePrefix = sc.Duplicate + "."

// verdict is the decision on one tool span.
type verdict struct {
	dup         bool
	orphan      bool // a proven duplicate whose original has not been seen
	cause       string
	effect      string
	firstSpanID pcommon.SpanID
	gapMS       int64
	prevStart   int64  // the call before the duplicate
	prevTrace   uint64 // its trace context
	prevConv    uint64 // its conversation context
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
	if stale := hs.m.flags&flagAnnotated != 0; v.dup || stale {
		annotate(spanAt(td, hs.pos), p.groups.get(hs.gi).key, &v, stale)
	}
	hs.decided = true
	p.release(hs.gi)
	if v.dup && !v.orphan && (v.cause == sc.CauseHarnessRetry || v.cause == sc.CauseUnknown) {
		// A chat span arriving later inside this interval is late evidence.
		gm := gapMark{from: v.prevStart, to: hs.m.start}
		ctxs := [4]uint64{hs.m.traceCtx, hs.m.convCtx, v.prevTrace, v.prevConv}
		for i, c := range ctxs {
			if c != 0 && !slices.Contains(ctxs[:i], c) {
				p.evidence.addGap(p.touchEvidence(c, p.evidence.tag(c), now), gm)
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
	if p.groups.metaOf(hs.gi).flags&metaMulti != 0 || hs.m.flags != 0 {
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
	mt := p.groups.metaOf(gi)
	if mt.held--; mt.held == 0 && mt.flags&metaRemoved != 0 {
		p.groups.free(gi)
	}
}

// classify applies the decision procedure of README.md to m, a member of
// the group at arena index gi, on the evidence held now.
func (p *dupProcessor) classify(gi uint32, m *member) verdict {
	ms := p.groups.members(gi)
	earlier := p.scratch[:0]
	for i := range ms {
		if e := &ms[i]; !e.same(m) && e.before(m) {
			earlier = append(earlier, *e)
		}
	}
	p.scratch = earlier
	if len(earlier) == 0 {
		if m.flags&flagProvenDup != 0 {
			return verdict{dup: true, orphan: true, cause: sc.CauseUnknown, effect: effectOf(nil, m)}
		}
		return verdict{}
	}
	slices.SortFunc(earlier, func(a, b member) int {
		if a.before(&b) {
			return -1
		}
		return 1
	})
	short := p.groups.get(gi).key.short()
	occ := 0
	for i := 1; i < len(earlier); i++ {
		if p.newOccurrence(short, &earlier[occ], &earlier[i-1], &earlier[i]) {
			occ = i
		}
	}
	first, prev := &earlier[occ], &earlier[len(earlier)-1]
	if p.newOccurrence(short, first, prev, m) {
		return verdict{}
	}
	run := earlier[occ:]
	return verdict{
		dup:         true,
		cause:       p.cause(run, prev, m),
		effect:      effectOf(run, m),
		firstSpanID: first.spanID,
		gapMS:       (m.start - first.start) / 1e6,
		prevStart:   prev.start,
		prevTrace:   prev.traceCtx,
		prevConv:    prev.convCtx,
	}
}

// newOccurrence reports whether m starts a new occurrence of the key rather
// than repeating the run that first started: it is past the window, or it is
// a deliberate repeat of prev (at least deliberate_repeat_gap later, with a
// call of another tool or arguments in between in one of m's contexts).
func (p *dupProcessor) newOccurrence(short uint64, first, prev, m *member) bool {
	if m.start-first.start > p.window {
		return true
	}
	if m.start-prev.start < p.deliber {
		return false
	}
	if c := m.callCtx(); c != 0 {
		if e := p.evidence.find(c, p.evidence.tag(c)); e != nil && p.evidence.otherToolBetween(e, short, prev.start, m.start) {
			return true
		}
	}
	return false
}

// chatBetween reports whether an inference span of prev's or m's trace or
// conversation started between the two calls.
func (p *dupProcessor) chatBetween(prev, m *member) bool {
	ctxs := [4]uint64{m.traceCtx, m.convCtx, prev.traceCtx, prev.convCtx}
	for i, c := range ctxs {
		if c == 0 || slices.Contains(ctxs[:i], c) {
			continue
		}
		if e := p.evidence.find(c, p.evidence.tag(c)); e != nil && p.evidence.chatBetween(e, prev.start, m.start) {
			return true
		}
	}
	return false
}

// cause names the layer that produced m, a repeat of prev in the run of
// calls run (first call first). The rows of the README table, in order.
func (p *dupProcessor) cause(run []member, prev, m *member) string {
	// 1. Same reliable session and same JSON-RPC request ID as any earlier
	// call: the same request delivered twice, below the client.
	if m.session != 0 && m.reqID != 0 {
		for i := range run {
			if run[i].session == m.session && run[i].reqID == m.reqID {
				return sc.CauseTransportRetry
			}
		}
	}
	// 2. Two reliable sessions that differ: the client reconnected and
	// replayed the call.
	if m.session != 0 && prev.session != 0 && m.session != prev.session {
		return sc.CauseReconnectReplay
	}
	chat := p.chatBetween(prev, m)
	// 3. Sessions cannot be told apart (empty, or shared like stdio's): only
	// the model speaking in between is evidence enough.
	if m.session == 0 || prev.session == 0 {
		if chat && (m.reqID == 0 || m.reqID != prev.reqID) {
			return sc.CauseModelReissue
		}
		return sc.CauseUnknown
	}
	// 4. Same session, a request ID missing: transport or harness cannot be
	// told apart.
	if m.reqID == 0 || prev.reqID == 0 {
		if chat {
			return sc.CauseModelReissue
		}
		return sc.CauseUnknown
	}
	// 5. Same session, different request IDs.
	if chat {
		return sc.CauseModelReissue
	}
	if m.start-prev.start < p.harness {
		return sc.CauseHarnessRetry
	}
	return sc.CauseModelReissue
}

// effectOf says what the duplicate m did: a different write ID from an
// earlier call of its run proves a leak; otherwise its outcome decides, and
// a span without a suppressing outcome (another instrumentation's, with no
// idemkit.outcome) ran again: leaked.
func effectOf(run []member, m *member) string {
	if m.writeID != 0 {
		for i := range run {
			if run[i].writeID != 0 && run[i].writeID != m.writeID {
				return sc.EffectLeaked
			}
		}
	}
	switch m.outcome {
	case outcomeReplayed:
		return sc.EffectSuppressed
	case outcomeInProgress:
		return sc.EffectBlocked
	default:
		return sc.EffectLeaked
	}
}

// annotate replaces the idemkit.duplicate.* attributes of s with the
// verdict's: the processor owns them, so stale or forged ones go (stale
// says whether the span arrived with any).
func annotate(s ptrace.Span, key gkey, v *verdict, stale bool) {
	attrs := s.Attributes()
	if stale {
		attrs.RemoveIf(func(k string, _ pcommon.Value) bool {
			return k == sc.Duplicate || strings.HasPrefix(k, duplicatePrefix)
		})
	}
	if !v.dup {
		return
	}
	attrs.EnsureCapacity(attrs.Len() + 6) // one growth, not several
	attrs.PutBool(sc.Duplicate, true)
	attrs.PutStr(sc.DuplicateCause, v.cause)
	attrs.PutStr(sc.DuplicateEffect, v.effect)
	attrs.PutStr(sc.DuplicateGroup, key.String())
	if !v.orphan {
		attrs.PutStr(sc.DuplicateFirstSpanID, v.firstSpanID.String())
		attrs.PutInt(sc.DuplicateGapMS, v.gapMS)
	}
}
