package dupprocessor // import "github.com/idemkit-mcp/idemkit/collector/dupprocessor"

import (
	"encoding/binary"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/idemkit-mcp/idemkit/collector/dupprocessor/internal/spanview"
	"github.com/idemkit-mcp/idemkit/collector/dupprocessor/internal/state"
	sc "github.com/idemkit-mcp/idemkit/spancontract"
)

// toolFact is what extract reads of a tool span, before track files it.
// It is pointer-free, like heldSpan.
type toolFact struct {
	key    state.Key
	m      state.Member
	pos    spanPos
	tag    uint32 // the key's tag in the group index
	ctxTag uint32 // the tag of m.CallCtx() in the evidence index; 0 for none
}

// chatFact is what the processor keeps of an inference span: its start and
// its contexts, the conversation and the trace (narrowed to its user, and
// anyCtx, when it names one).
type chatFact struct {
	start                     int64
	traceCtx, convCtx, anyCtx uint64
	traceTag, convTag, anyTag uint32 // their tags in the evidence index; 0 for none
}

// ingest records the evidence of every span of td and adds the tracked tool
// spans to their groups, leaving their heldSpans (in batch order) in
// p.pending. It first removes the evidence copies from td. It returns the
// number of tracked tool spans and the number of spans left in td.
func (p *dupProcessor) ingest(td ptrace.Traces, now int64) (tracked, total int) {
	p.pending = p.pending[:0]
	p.facts = p.facts[:0]
	p.chats = p.chats[:0]
	rss := td.ResourceSpans()
	if p.takeEvidenceCopies(rss) {
		rss = td.ResourceSpans()
	}
	for i := 0; i < rss.Len(); i++ {
		rs := rss.At(i)
		res := resourceOf{res: rs.Resource()}
		sss := rs.ScopeSpans()
		for j := 0; j < sss.Len(); j++ {
			spans := sss.At(j).Spans()
			n := spans.Len()
			total += n
			for k := 0; k < n; k++ {
				s := spans.At(k)
				switch spanview.Classify(s) {
				case spanview.Chat:
					p.chatFact(s, &res)
				case spanview.Tool:
					p.facts = append(p.facts, toolFact{})
					f := &p.facts[len(p.facts)-1]
					f.pos = spanPos{int32(i), int32(j), int32(k)}
					if reason := p.extract(s, &res, now+p.decWait, f); reason != reasonNone {
						p.counts.ignored[reasonIndex(reason)]++
						p.facts = p.facts[:len(p.facts)-1]
						continue
					}
					f.tag = p.groups.Tag(&f.key)
					if c := f.m.CallCtx(); c != 0 {
						f.ctxTag = p.evidence.Tag(c)
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

// takeEvidenceCopies reads the inference spans of the resources marked
// idemkit.evidence.copy (copies a tier-1 Collector sent to every tier-2
// Collector) into p.chats and removes those resources from rss. It reports
// whether it removed any.
func (p *dupProcessor) takeEvidenceCopies(rss ptrace.ResourceSpansSlice) bool {
	found := false
	for i := 0; i < rss.Len(); i++ {
		if isEvidenceCopy(rss.At(i).Resource()) {
			found = true
			break
		}
	}
	if !found {
		return false
	}
	rss.RemoveIf(func(rs ptrace.ResourceSpans) bool {
		if !isEvidenceCopy(rs.Resource()) {
			return false
		}
		res := resourceOf{res: rs.Resource()}
		sss := rs.ScopeSpans()
		for j := 0; j < sss.Len(); j++ {
			spans := sss.At(j).Spans()
			for k := 0; k < spans.Len(); k++ {
				p.counts.evidenceCopies++
				if s := spans.At(k); spanview.Classify(s) == spanview.Chat {
					p.chatFact(s, &res)
				}
			}
		}
		return true
	})
	return true
}

// isEvidenceCopy reports whether a resource carries idemkit.evidence.copy=true.
func isEvidenceCopy(res pcommon.Resource) bool {
	v, ok := res.Attributes().Get(sc.EvidenceCopy)
	return ok && truthy(v)
}

// prefetch loads the index slots that the tracking of this batch will read:
// those of every key and context, and those of the groups and contexts that
// it will evict. The loads are independent, so their cache misses overlap,
// which the dependent work of track cannot do.
func (p *dupProcessor) prefetch() {
	var sink uint32
	for i := range p.facts {
		sink += p.groups.Touch(p.facts[i].tag)
		if t := p.facts[i].ctxTag; t != 0 {
			sink += p.evidence.Touch(t)
		}
	}
	for i := range p.chats {
		if t := p.chats[i].traceTag; t != 0 {
			sink += p.evidence.Touch(t)
		}
		if t := p.chats[i].convTag; t != 0 {
			sink += p.evidence.Touch(t)
		}
		if t := p.chats[i].anyTag; t != 0 {
			sink += p.evidence.Touch(t)
		}
	}
	if n := len(p.chats) + len(p.facts); p.evidence.Len()+n > p.cfg.MaxGroups {
		q := p.evidence.Queue()
		for i := 0; i < n && i < q.Len(); i++ {
			r := q.At(i)
			sink += p.evidence.TouchDel(r.Tag) + p.evidence.At(r.Idx).Gen
		}
	}
	if n := len(p.facts); p.groups.Len()+n > p.cfg.MaxGroups {
		q := p.groups.Queue()
		for i := 0; i < n && i < q.Len(); i++ {
			r := q.At(i)
			sink += p.groups.TouchDel(r.Tag) + p.groups.Meta(r.Idx).Gen
		}
	}
	p.sink += sink
}

// resourceOf is a resource of the batch, with the user it names (user.id,
// else enduser.id) read once for all its spans.
type resourceOf struct {
	res      pcommon.Resource
	user     string
	userRead bool
}

// userOf returns the caller's identifier that the resource names; "" for none.
func (r *resourceOf) userOf() string {
	if !r.userRead {
		r.userRead = true
		ra := r.res.Attributes()
		for _, k := range [2]string{sc.UserID, sc.EndUserID} {
			if v, ok := ra.Get(k); ok {
				if u := scalar(v); u != "" {
					r.user = u
					break
				}
			}
		}
	}
	return r.user
}

// extract reads a tool span into f: its key and member (to be decided at
// decideAt), or why it stays untracked. An untracked span loses any
// idemkit.duplicate* attribute it arrived with (the processor owns them:
// a forged one must not reach the connector), and a span that could not be
// compared with other calls (no key: no idemkit key hash and no captured
// arguments) is marked idemkit.duplicate.uncompared.
func (p *dupProcessor) extract(s ptrace.Span, res *resourceOf, decideAt int64, f *toolFact) ignoreReason {
	var a toolAttrs
	reason := p.extractAttrs(s, res, decideAt, f, &a)
	if reason != reasonNone && (a.annotated || reason == reasonNoKey) {
		markUntracked(s, a.annotated, reason == reasonNoKey)
	}
	return reason
}

func (p *dupProcessor) extractAttrs(s ptrace.Span, res *resourceOf, decideAt int64, f *toolFact, a *toolAttrs) ignoreReason {
	readToolAttrs(s.Attributes(), a)
	start, ok := startNanos(s.StartTimestamp())
	if !ok {
		return reasonBadTimestamp
	}
	switch a.outcome {
	case sc.OutcomeBypassed:
		switch a.bypassReason {
		case sc.BypassUnscoped, sc.BypassNoGuard:
			// A write tool that ran unprotected (no caller scope, or
			// instrumentation without a Guard): its span carries the key
			// hashes precisely so that a second run shows as the real
			// double side effect it is.
			a.outcome = sc.OutcomeExecuted
		case sc.BypassUnprotected:
			// A tool the configuration leaves unprotected. A write says so
			// with its argument hash (idemkit records the hashes of the
			// write tools it runs unprotected): its second run is a real
			// double side effect. A read (or an idempotent tool) carries
			// none: a second run changes nothing.
			if !hasArgsHash(a, res.res) {
				return reasonReadOnly
			}
			a.outcome = sc.OutcomeExecuted
		case "":
			// An older instrumentation's read.
			return reasonReadOnly
		default:
			return reasonExcludedOutcome
		}
	case sc.OutcomeMismatch:
		return reasonExcludedOutcome
	case "":
		if a.refused {
			// idemkit answered the call itself before any claim (invalid
			// arguments or key, no caller scope, store unavailable): the
			// tool never ran, and the answer tells the model to fix the
			// call or retry it. Tracking it as an execution would make
			// that retry look like a duplicate that leaked.
			return reasonExcludedOutcome
		}
		if !p.readOnly.empty() && p.readOnly.match(a.tool) {
			return reasonReadOnly
		}
	}
	ok, weak := p.keys.groupKey(&f.key, a, res.res, s)
	if !ok {
		return reasonNoKey
	}
	oc := parseOutcome(a.outcome)
	var flags uint8
	var session uint64
	if p.reliable(a.session) {
		session = p.keys.str(ctxSession, a.session)
	}
	if weak {
		flags |= state.FlagWeakKey
	}
	user := a.user
	if user == "" {
		user = a.endUser
	}
	if user == "" {
		user = res.userOf()
	}
	switch {
	case a.inputContinuation:
		// A continuation proves an earlier round, which is the same call:
		// nothing to wait for.
		flags |= state.FlagInputContinuation
	case oc == state.OutcomeReplayed || oc == state.OutcomeInProgress || oc == state.OutcomeTakeover || a.attempt > 1:
		flags |= state.FlagProvenDup
	}
	if a.inputRequested {
		flags |= state.FlagInputRequested
	}
	if a.annotated {
		flags |= state.FlagAnnotated
	}
	// The member is written field by field, in place: a composite literal
	// with calls in it is built on the stack and copied, and the copy's
	// wide loads of the narrow stores just made stall.
	m := &f.m
	m.Start, m.DecideAt = start, decideAt
	m.Trace = traceKey(s.TraceID())
	m.Conv = p.keys.str(ctxConversation, a.conv)
	m.Session, m.User = session, p.keys.str(ctxUser, user)
	m.SpanID = s.SpanID()
	m.ReqID = p.keys.str32(a.requestID)
	m.WriteID = p.keys.str32(a.writeID)
	if oc != state.OutcomeNone {
		m.Parent = clientParent(s)
	}
	m.Outcome, m.Flags = oc, flags
	return reasonNone
}

// Span flags of OTLP (SpanFlags in trace.proto): the exporter knows whether
// the parent is remote, and it is.
const (
	flagHasIsRemote = 0x100
	flagIsRemote    = 0x200
)

// clientParent folds the parent span ID of an idemkit span into a non-zero
// 32-bit value when that parent is the client's context for this request:
// a SERVER span whose exporter says its parent is remote. idemkit takes the
// parent from params._meta (never from HTTP headers; the ambient HTTP span
// becomes a link), so it is part of the request's bytes. 0 otherwise.
func clientParent(s ptrace.Span) uint32 {
	if s.Kind() != ptrace.SpanKindServer || s.Flags()&(flagHasIsRemote|flagIsRemote) != flagHasIsRemote|flagIsRemote {
		return 0
	}
	id := s.ParentSpanID()
	if id.IsEmpty() {
		return 0
	}
	v := binary.LittleEndian.Uint32(id[:4]) ^ binary.LittleEndian.Uint32(id[4:])
	if v == 0 {
		return 1
	}
	return v
}

// hasArgsHash reports whether the span, or else its resource, carries
// idemkit.args.hash.
func hasArgsHash(a *toolAttrs, res pcommon.Resource) bool {
	if a.argsHash != "" {
		return true
	}
	v, ok := res.Attributes().Get(sc.ArgsHash)
	return ok && scalar(v) != ""
}

// markUntracked removes the idemkit.duplicate* attributes of an untracked
// tool span (stale: it carries some) and marks it
// idemkit.duplicate.uncompared when uncompared.
func markUntracked(s ptrace.Span, stale, uncompared bool) {
	attrs := s.Attributes()
	if stale {
		removeAnnotations(attrs)
	}
	if uncompared {
		attrs.PutBool(sc.DuplicateUncompared, true)
	}
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
	gi := p.groups.Find(&f.key, f.tag)
	if gi == 0 {
		// A new key (the common case): the group is created with its
		// first member, in one write of its slot.
		if p.groups.Len() >= p.cfg.MaxGroups {
			p.evictGroup()
		}
		gi = p.groups.CreateWith(&f.key, f.tag, m, now)
	} else {
		ms := p.groups.Members(gi)
		for i := range ms {
			if ms[i].Same(m) {
				return reasonResent
			}
		}
		for i := range ms {
			e := &ms[i]
			if e.DecideAt <= now && m.Before(e) && e.Start-m.Start <= p.window && e.Linked(m) {
				p.counts.lateTool++
				break
			}
		}
		p.groups.AddMember(gi, *m)
		p.groups.Get(gi).LastSeen = now
		mt := p.groups.Meta(gi)
		mt.Flags |= state.MetaHit
		mt.Held++
	}

	// The call's context (its reliable session, else its conversation,
	// else its trace) remembers it, for the deliberate-repeat rule.
	if c := m.CallCtx(); c != 0 {
		e := p.touchEvidence(c, f.ctxTag, now)
		p.evidence.AddTool(e, state.ToolMark{Start: m.Start, Key: f.key.Short()})
	}
	// Written in place, field by field: a composite literal would be built
	// on the stack and copied, twice the stores and loads.
	p.pending = append(p.pending, heldSpan{})
	hs := &p.pending[len(p.pending)-1]
	hs.m, hs.arrival, hs.gi, hs.pos = *m, now, gi, f.pos
	return reasonNone
}

// chatFact reads an inference span into p.chats; a span with an unusable
// start is ignored.
func (p *dupProcessor) chatFact(s ptrace.Span, res *resourceOf) {
	start, ok := startNanos(s.StartTimestamp())
	if !ok {
		return
	}
	var conv, user, endUser string
	for k, v := range s.Attributes().All() {
		switch k {
		case sc.GenAIConversationID:
			conv = scalar(v)
		case sc.UserID:
			user = scalar(v)
		case sc.EndUserID:
			endUser = scalar(v)
		}
	}
	if user == "" {
		user = endUser
	}
	if user == "" {
		user = res.userOf()
	}
	p.chats = append(p.chats, chatFact{}) // filled in place, not copied
	f := &p.chats[len(p.chats)-1]
	f.start, f.convCtx = start, p.keys.str(ctxConversation, conv)
	if t := traceKey(s.TraceID()); t != 0 {
		if u := p.keys.str(ctxUser, user); u != 0 {
			// A chat that names its user is evidence for that user's calls
			// of the trace, and for the calls that name no user.
			f.traceCtx, f.anyCtx = state.WithUser(t, u), state.WithUser(t, state.AnyUser)
			f.anyTag = p.evidence.Tag(f.anyCtx)
		} else {
			f.traceCtx = t
		}
		f.traceTag = p.evidence.Tag(f.traceCtx)
	}
	if f.convCtx != 0 {
		f.convTag = p.evidence.Tag(f.convCtx)
	}
}

// recordChat remembers the start of an inference span in its trace and
// conversation, and counts it late when it would have changed a decision.
func (p *dupProcessor) recordChat(f *chatFact, now int64) {
	late := false
	for _, c := range [3]struct {
		key uint64
		tag uint32
	}{{f.traceCtx, f.traceTag}, {f.convCtx, f.convTag}, {f.anyCtx, f.anyTag}} {
		if c.key == 0 {
			continue
		}
		e := p.touchEvidence(c.key, c.tag, now)
		if !late && p.evidence.LateChat(e, f.start) {
			late = true
		}
		p.evidence.AddChat(e, f.start)
	}
	if late {
		p.counts.lateChat++
	}
}
