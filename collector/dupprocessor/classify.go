package dupprocessor // import "github.com/idemkit-mcp/idemkit/collector/dupprocessor"

import (
	"slices"

	"go.opentelemetry.io/collector/pdata/pcommon"

	"github.com/idemkit-mcp/idemkit/collector/dupprocessor/internal/state"
	sc "github.com/idemkit-mcp/idemkit/spancontract"
)

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
	user        uint64 // the user the pair names; 0 for none
}

// inputRound marks the rounds of one multi-round call.
const inputRound = state.FlagInputRequested | state.FlagInputContinuation

// classify applies the decision procedure of README.md to m, a member of
// the group at arena index gi, on the evidence held now.
func (p *dupProcessor) classify(gi uint32, m *state.Member) verdict {
	if m.Flags&inputRound != 0 {
		// A round that asked for input, or the request that continues one:
		// rounds of one call, never duplicates (row 0c).
		return verdict{}
	}
	ms := p.groups.Members(gi)
	earlier := p.scratch[:0]
	unlinked := false
	for i := range ms {
		if e := &ms[i]; !e.Same(m) && e.Before(m) {
			if e.Linked(m) {
				earlier = append(earlier, *e)
			} else {
				unlinked = true
			}
		}
	}
	otherUsers := false
	if len(earlier) == 0 && unlinked && m.Flags&state.FlagProvenDup != 0 {
		// No evidence links m to an earlier call of its key, but its own
		// outcome says the Guard saw one: those calls are its candidates,
		// unless their users say they are another caller's.
		for i := range ms {
			if e := &ms[i]; !e.Same(m) && e.Before(m) {
				if e.OtherUser(m) {
					otherUsers = true
				} else {
					earlier = append(earlier, *e)
				}
			}
		}
	}
	p.scratch = earlier
	if len(earlier) == 0 {
		if m.Flags&state.FlagProvenDup != 0 && !otherUsers {
			// (With only other users' calls before it, the Guard's earlier
			// call was theirs: a key shared by two users, not a retry.)
			return verdict{dup: true, orphan: true, cause: sc.CauseUnknown, effect: effectOf(nil, m)}
		}
		return verdict{}
	}
	slices.SortFunc(earlier, func(a, b state.Member) int {
		if a.Before(&b) {
			return -1
		}
		return 1
	})
	short := p.groups.Get(gi).Key.Short()
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
	if continuesInput(prev, m) {
		return verdict{}
	}
	run := earlier[occ:]
	return verdict{
		dup:         true,
		cause:       p.cause(run, prev, m),
		effect:      effectOf(run, m),
		firstSpanID: first.SpanID,
		gapMS:       (m.Start - first.Start) / 1e6,
		prevStart:   prev.Start,
		prevTrace:   prev.Trace,
		prevConv:    prev.Conv,
		user:        userOfPair(prev, m),
	}
}

// userOfPair returns the user that m or prev names (they do not differ:
// the calls are linked); 0 for none.
func userOfPair(prev, m *state.Member) uint64 {
	if m.User != 0 {
		return m.User
	}
	return prev.User
}

// chatCtxs returns the contexts whose inference spans are evidence for the
// pair of calls prev, m: their traces and conversations; for a trace, the
// chats that name no user, and those of the pair's user (when the calls
// name one) or of any user (when they do not). Duplicates and absent
// contexts are 0.
func chatCtxs(mTrace, mConv, prevTrace, prevConv, user uint64) [6]uint64 {
	u := user
	if u == 0 {
		u = state.AnyUser
	}
	var c [6]uint64
	c[0], c[1] = mTrace, mConv
	if mTrace != 0 {
		c[2] = state.WithUser(mTrace, u)
	}
	if prevTrace != mTrace {
		c[3] = prevTrace
		if prevTrace != 0 {
			c[4] = state.WithUser(prevTrace, u)
		}
	}
	if prevConv != mConv {
		c[5] = prevConv
	}
	return c
}

// continuesInput reports whether m, unmarked, is the continuation of prev,
// a round that asked for input: a takeover of the same request (the same
// request ID, or none on either, as the official go-sdk reports; not
// another session) right after it. An instrumentation that does not mark
// continuations shows them this way: the round that asked for input
// released its claim, and the continuation took it over.
func continuesInput(prev, m *state.Member) bool {
	return prev.Flags&state.FlagInputRequested != 0 &&
		m.Outcome == state.OutcomeTakeover &&
		m.ReqID == prev.ReqID &&
		(m.Session == 0 || prev.Session == 0 || m.Session == prev.Session)
}

// newOccurrence reports whether m starts a new occurrence of the key rather
// than repeating the run that first started: it is past the window, or it is
// a deliberate repeat of prev (at least deliberate_repeat_gap later, with a
// call of another tool or arguments in between in one of m's contexts).
func (p *dupProcessor) newOccurrence(short uint64, first, prev, m *state.Member) bool {
	if m.Start-first.Start > p.window {
		return true
	}
	if m.Start-prev.Start < p.deliber {
		return false
	}
	if c := m.CallCtx(); c != 0 {
		if e := p.evidence.Find(c, p.evidence.Tag(c)); e != nil && p.evidence.OtherToolBetween(e, short, prev.Start, m.Start) {
			return true
		}
	}
	return false
}

// chatBetween reports whether an inference span of prev's or m's trace or
// conversation started between the two calls (in a trace, one that names
// no user or the calls' user: see chatCtxs).
func (p *dupProcessor) chatBetween(prev, m *state.Member) bool {
	ctxs := chatCtxs(m.Trace, m.Conv, prev.Trace, prev.Conv, userOfPair(prev, m))
	for i, c := range ctxs {
		if c == 0 || slices.Contains(ctxs[:i], c) {
			continue
		}
		if e := p.evidence.Find(c, p.evidence.Tag(c)); e != nil && p.evidence.ChatBetween(e, prev.Start, m.Start) {
			return true
		}
	}
	return false
}

// cause names the layer that produced m, a repeat of prev in the run of
// calls run (first call first). The rows of the README table, in order.
func (p *dupProcessor) cause(run []state.Member, prev, m *state.Member) string {
	// 3. Same reliable session and same JSON-RPC request ID as any earlier
	// call: the same request delivered twice, below the client.
	if m.Session != 0 && m.ReqID != 0 {
		for i := range run {
			if run[i].Session == m.Session && run[i].ReqID == m.ReqID {
				return sc.CauseTransportRetry
			}
		}
	}
	// 4. Two reliable sessions that differ: the client reconnected and
	// replayed the call.
	if m.Session != 0 && prev.Session != 0 && m.Session != prev.Session {
		return sc.CauseReconnectReplay
	}
	chat := p.chatBetween(prev, m)
	// The client's parent context in params._meta differs: the client sent
	// a new request (a transport retry or a replay re-sends the same one).
	newReq := m.NewRequest(prev)
	// 5, 6. Sessions cannot be told apart (empty, or shared like stdio's):
	// only the model speaking in between, or the client's parents, are
	// evidence enough.
	if m.Session == 0 || prev.Session == 0 {
		if chat && (newReq || m.ReqID == 0 || m.ReqID != prev.ReqID) {
			return sc.CauseModelReissue
		}
		if newReq {
			return p.byGap(prev, m)
		}
		return sc.CauseUnknown
	}
	// 7, 8. Same session, a request ID missing (the official go-sdk does
	// not report it): transport and harness cannot be told apart, unless
	// the client's parents differ.
	if m.ReqID == 0 || prev.ReqID == 0 {
		if chat {
			return sc.CauseModelReissue
		}
		if newReq {
			return p.byGap(prev, m)
		}
		return sc.CauseUnknown
	}
	// 9-11. Same session, different request IDs.
	if chat {
		return sc.CauseModelReissue
	}
	return p.byGap(prev, m)
}

// byGap names a new request of the same caller with no inference span
// between: a harness retry under harness_threshold, a model re-issue at or
// over it (a gap of seconds).
func (p *dupProcessor) byGap(prev, m *state.Member) string {
	if m.Start-prev.Start < p.harness {
		return sc.CauseHarnessRetry
	}
	return sc.CauseModelReissue
}

// effectOf says what the duplicate m did: a different write ID from an
// earlier call of its run proves a leak; otherwise its outcome decides, and
// a span without a suppressing outcome (another instrumentation's, with no
// idemkit.outcome) ran again: leaked.
func effectOf(run []state.Member, m *state.Member) string {
	if m.WriteID != 0 {
		for i := range run {
			if run[i].WriteID != 0 && run[i].WriteID != m.WriteID {
				return sc.EffectLeaked
			}
		}
	}
	switch m.Outcome {
	case state.OutcomeReplayed:
		return sc.EffectSuppressed
	case state.OutcomeInProgress:
		return sc.EffectBlocked
	default:
		return sc.EffectLeaked
	}
}
