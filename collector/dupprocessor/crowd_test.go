package dupprocessor

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	sc "github.com/idemkit-mcp/idemkit/spancontract"
)

// crowdTools are the tools every user of the crowd calls, with the same few
// arguments: identical calls of different users are the norm, not the
// exception. The reads are listed in read_only_tools for the spans of other
// instrumentations; idemkit's own spans mark them bypassed.
var (
	crowdWrites = []string{"book_flight", "issue_refund"}
	crowdReads  = []string{"get_weather", "lookup_order"}
	crowdArgs   = []string{"Paris", "Lyon", "Nice", "Lille", "Brest", "Pau", "Metz", "Tours"}
)

// crowdUser is how one user's agent reaches the MCP server.
type crowdUser struct {
	id          string
	idemkit     bool   // idemkit's instrumentation (key hashes, outcomes); else another one
	subject     bool   // idemkit: the key has a subject (an authenticated caller)
	unprotected bool   // idemkit: the write tools are configured unprotected (bypassed, with their argument hash)
	noArgs      bool   // another instrumentation that does not capture gen_ai.tool.call.arguments
	userAttr    string // "user.id", "enduser.id" or "" (none), on its tool spans
	chatUser    bool   // its agent's inference spans name the user too
	propagate   bool   // the agent sends its context in params._meta: its calls join its trace, the client's span as parent
	trace       string // the trace its calls join when it propagates: its agent's, or an orchestrator's shared by several users
	transport   string // "http" (a session per connection), "gateway" (one session, "default", for everyone), "stdio", "stateless"
	noReqID     bool   // the official go-sdk: no jsonrpc.request.id
}

// userValue is the user its spans name; "" for none.
func (u crowdUser) userValue() string {
	if u.userAttr == "" {
		return ""
	}
	return u.id
}

// expectation is what the processor must say of one generated tool span,
// derived from the evidence the generator put in the spans (the README's
// decision table applied by hand), and the truth behind it.
type expectation struct {
	truth      string // the layer that really duplicated the call; "" for a call that is not a duplicate
	cause      string // the answer the evidence supports; "" for none
	effect     string
	first      string // tag of the group's first call
	gap        time.Duration
	uncompared bool   // the span cannot be compared: idemkit.duplicate.uncompared
	why        string // what the generator did, for failure messages
}

type crowdGen struct {
	rng    *rand.Rand
	spans  []timedSpan
	chats  []sp
	expect map[string]expectation
	undetectable,
	uncomparable,
	reads, rounds int
	orchestrated, gateway int // users inside a shared trace, behind the shared session
}

func (g *crowdGen) pick(xs []string) string { return xs[g.rng.IntN(len(xs))] }

func (g *crowdGen) between(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(g.rng.Int64N(int64(hi-lo)))
}

// emit queues a span for delivery after its end plus an export delay of up
// to 3s (inside the 5s decision_wait: no evidence arrives late here).
func (g *crowdGen) emit(s sp) {
	dur := s.dur
	if dur == 0 {
		dur = 50 * time.Millisecond
	}
	g.spans = append(g.spans, timedSpan{s: s, arrival: s.at + dur + time.Duration(g.rng.Int64N(int64(3*time.Second)))})
	if s.kind == "chat" {
		g.chats = append(g.chats, s)
	}
}

// newUser draws user i: one in five is served by an orchestrator whose
// trace it shares with the orchestrator's other users (up to four), one in
// five reaches the server through a gateway that reports one session,
// "default", for everyone; the others connect on their own.
func (g *crowdGen) newUser(i int) crowdUser {
	rng := g.rng
	u := crowdUser{id: fmt.Sprintf("user-%d", i), propagate: rng.IntN(2) == 0, noReqID: rng.IntN(4) == 0}
	u.idemkit = rng.IntN(2) == 0
	u.transport = []string{"http", "http", "stdio", "stateless"}[rng.IntN(4)]
	switch rng.IntN(5) {
	case 0:
		// Orchestrated: the orchestrator's trace, shared; every span names
		// its user (the orchestrator knows whom it serves), so do its
		// inference spans.
		u.trace = fmt.Sprintf("orchestrator-%d", g.orchestrated/4)
		g.orchestrated++
		u.propagate, u.chatUser = true, true
		u.userAttr = g.pick([]string{"user.id", "enduser.id"})
		u.transport = g.pick([]string{"http", "stateless"})
	case 1:
		// Behind a gateway: one session for everyone, users told apart
		// only by the user attribute its spans carry.
		g.gateway++
		u.transport = "gateway"
		u.userAttr = g.pick([]string{"user.id", "enduser.id"})
	}
	if u.trace == "" {
		u.trace = u.id + "/agent"
	}
	if u.idemkit {
		// A local stdio server scopes nothing: its keys carry no subject.
		u.subject = u.transport != "stdio"
		if !u.subject {
			u.propagate = true
		}
		u.unprotected = rng.IntN(6) == 0
		if u.userAttr == "" && rng.IntN(4) == 0 {
			u.userAttr = "user.id"
		}
	} else {
		if u.userAttr == "" {
			u.userAttr = []string{"user.id", "enduser.id", ""}[rng.IntN(3)]
		}
		u.noArgs = rng.IntN(6) == 0
	}
	if u.userAttr != "" && !u.chatUser {
		u.chatUser = rng.IntN(2) == 0
	}
	return u
}

// call builds one tool call span of user u. parent is the client's span of
// the request, sent in params._meta by an agent that propagates; every
// span of an agent that does not is the root of its own trace.
func (g *crowdGen) call(u crowdUser, tag, tool, args, session, req, parent string, at time.Duration) sp {
	s := sp{tag: tag, kind: "server", trace: tag, tool: tool, at: at, dur: g.between(20*time.Millisecond, 800*time.Millisecond)}
	if u.propagate {
		s.trace, s.parent = u.trace, parent
	}
	switch u.transport {
	case "http":
		s.session = session
	case "gateway":
		s.session = "default"
	case "stdio":
		s.session = "stdio"
	}
	if !u.noReqID {
		s.req = req
	}
	switch u.userAttr {
	case "user.id":
		s.user = u.id
	case "enduser.id":
		s.endUser = u.id
	}
	read := slices.Contains(crowdReads, tool)
	if u.idemkit {
		s.key = u.keyScope() + "/" + tool + "/" + args
		if u.subject {
			s.subject = u.id
		}
		s.outcome, s.attempt = sc.OutcomeExecuted, 1
		switch {
		case read:
			s.outcome, s.attempt, s.bypass = sc.OutcomeBypassed, 0, sc.BypassUnprotected
		case u.unprotected:
			// A write run unprotected still carries its argument hash.
			s.outcome, s.attempt, s.bypass, s.argsHash = sc.OutcomeBypassed, 0, sc.BypassUnprotected, tool+"/"+args
		}
	} else {
		s.kind = "mcp"
		if !u.noArgs {
			s.args = fmt.Sprintf(`{"city":%q}`, args)
		}
	}
	return s
}

// keyScope is what idemkit's key derivation puts before the tool: the
// subject, or nothing (so two local users share the key hash).
func (u crowdUser) keyScope() string {
	if u.subject {
		return u.id
	}
	return ""
}

// user generates one user's calls from event time start: intents every
// 20-90s (each after the previous one's last call), each a distinct (tool,
// arguments) pair for this user, some of them duplicated by one layer.
func (g *crowdGen) user(u crowdUser, start time.Duration, intents int) {
	type combo struct{ tool, args string }
	var combos []combo
	for _, t := range append(slices.Clone(crowdWrites), crowdReads...) {
		for _, a := range crowdArgs {
			combos = append(combos, combo{t, a})
		}
	}
	g.rng.Shuffle(len(combos), func(i, j int) { combos[i], combos[j] = combos[j], combos[i] })
	session := u.id + "/s0"
	conn, req := 0, 0
	at, last := start, start
	for i := 0; i < intents; i++ {
		at = max(at+g.between(20*time.Second, 90*time.Second), last+g.between(time.Second, 5*time.Second))
		c := combos[i]
		id := fmt.Sprintf("%s/i%d", u.id, i)
		req++
		first := g.call(u, id+"/a", c.tool, c.args, session, fmt.Sprint(req), id+"/client-a", at)
		last = at + first.dur
		g.emit(first)
		read := slices.Contains(crowdReads, c.tool)
		expectFirst := expectation{why: "first call", uncompared: u.noArgs && !read}
		g.expect[first.tag] = expectFirst

		// Input rounds (idemkit, protected writes): the tool asks for
		// input, the call continues with the same request ID, from the
		// same client span: one call.
		if u.idemkit && !u.unprotected && !read && g.rng.IntN(8) == 0 {
			g.rounds++
			first.input = "requested"
			g.spans[len(g.spans)-1].s = first
			cont := first
			cont.tag, cont.at, cont.input = id+"/cont", at+g.between(time.Second, 5*time.Second), "continuation"
			cont.outcome, cont.attempt = sc.OutcomeTakeover, 2
			if g.rng.IntN(2) == 0 {
				cont.input = "" // an instrumentation that marks only the asking round
			}
			if !u.propagate {
				cont.trace = cont.tag
			}
			last = cont.at + cont.dur
			g.emit(cont)
			g.expect[cont.tag] = expectation{why: "continuation of an input round"}
			continue
		}

		truth := []string{"", "", sc.CauseTransportRetry, sc.CauseHarnessRetry, sc.CauseModelReissue, sc.CauseReconnectReplay}[g.rng.IntN(6)]
		switch {
		case truth == sc.CauseReconnectReplay && u.transport != "http":
			truth = sc.CauseHarnessRetry // only a connection with its own session shows a reconnect
		case truth == sc.CauseTransportRetry && u.transport == "stdio":
			truth = sc.CauseHarnessRetry // no HTTP below a stdio client
		}
		if truth == "" {
			continue
		}
		d := first
		d.tag, d.dur = id+"/b", g.between(20*time.Millisecond, 800*time.Millisecond)
		if !u.propagate {
			d.trace = d.tag
		}
		switch truth {
		case sc.CauseTransportRetry:
			// The same request again: same ID, same client span.
			d.at = at + g.between(5*time.Millisecond, 800*time.Millisecond)
		case sc.CauseHarnessRetry:
			req++
			d.at = at + g.between(10*time.Millisecond, 1500*time.Millisecond)
			d.parent = id + "/client-b"
		case sc.CauseModelReissue:
			req++
			d.at = at + g.between(2500*time.Millisecond, 45*time.Second)
			d.parent = id + "/client-b"
			chat := sp{tag: id + "/chat", kind: "chat", svc: "agent", trace: u.trace, at: at + (d.at-at)/2, dur: 300 * time.Millisecond}
			if u.chatUser {
				chat.user = u.id
			}
			g.emit(chat)
		case sc.CauseReconnectReplay:
			// The client replays the same request on a new session.
			conn++
			session = fmt.Sprintf("%s/s%d", u.id, conn)
			d.at = at + g.between(200*time.Millisecond, 50*time.Second)
		}
		if !u.propagate {
			d.parent = ""
		}
		if !u.noReqID {
			d.req = fmt.Sprint(req)
			if truth == sc.CauseTransportRetry || truth == sc.CauseReconnectReplay && g.rng.IntN(2) == 0 {
				d.req = first.req // a reconnect may replay the same request ID
			}
		}
		if u.transport == "http" {
			d.session = session
		}
		effect := sc.EffectLeaked
		if u.idemkit && !read && !u.unprotected {
			switch g.rng.IntN(3) {
			case 0:
				d.outcome, d.attempt, effect = sc.OutcomeReplayed, 2, sc.EffectSuppressed
			case 1:
				d.outcome, d.attempt, effect = sc.OutcomeInProgress, 2, sc.EffectBlocked
			default:
				d.outcome, d.attempt = sc.OutcomeExecuted, 1
			}
		}
		last = max(last, d.at+d.dur)
		g.emit(d)
		e := expectation{truth: truth, first: first.tag, gap: d.at - first.at,
			why: fmt.Sprintf("%s of %s (%+v)", truth, first.tag, u)}
		switch {
		case read:
			// A read repeated is not a duplicate: nothing happened twice.
			g.reads++
			e.truth, e.why = "", "a repeated read: "+e.why
		case u.noArgs:
			g.uncomparable++
			e.uncompared, e.why = true, "arguments not captured: "+e.why
		case !g.linked(u, first, d):
			g.undetectable++
			e.why = "no evidence links the calls: " + e.why
		default:
			e.cause, e.effect = g.expectedCause(u, first, d), effect
		}
		g.expect[d.tag] = e
	}
}

// linked is the evidence rule, from what the generator put in the spans.
// The calls of one user name the same user or none, so the user never
// breaks their link here; other users' calls must never be linked to
// them, which the exact expectations of every span check.
func (g *crowdGen) linked(u crowdUser, a, b sp) bool {
	if u.idemkit && u.subject {
		return true
	}
	reliable := func(s string) bool { return s != "" && s != "stdio" }
	return u.userAttr != "" ||
		(reliable(a.session) && a.session == b.session) ||
		a.trace == b.trace
}

// chatBetween is the inference evidence of the pair, from every chat span
// generated: one of a's or b's trace that started between them, naming no
// user, or the pair's user when the pair names one.
func (g *crowdGen) chatBetween(u crowdUser, a, b sp) bool {
	for _, c := range g.chats {
		if (c.trace == a.trace || c.trace == b.trace) && c.at > a.at && c.at < b.at &&
			(c.user == "" || u.userValue() == "" || c.user == u.userValue()) {
			return true
		}
	}
	return false
}

// expectedCause applies the README's decision table to the evidence of the
// pair.
func (g *crowdGen) expectedCause(u crowdUser, a, b sp) string {
	reliable := func(s string) bool { return s != "" && s != "stdio" }
	chat := g.chatBetween(u, a, b)
	// idemkit's spans carry the client's parent from params._meta.
	newReq := u.idemkit && a.parent != "" && b.parent != "" && (a.parent != b.parent || a.trace != b.trace)
	byGap := func() string {
		if b.at-a.at < DefaultHarnessThreshold {
			return sc.CauseHarnessRetry
		}
		return sc.CauseModelReissue
	}
	switch {
	case reliable(b.session) && b.req != "" && a.session == b.session && a.req == b.req:
		return sc.CauseTransportRetry
	case reliable(a.session) && reliable(b.session) && a.session != b.session:
		return sc.CauseReconnectReplay
	case !reliable(a.session) || !reliable(b.session):
		if chat && (newReq || b.req == "" || b.req != a.req) {
			return sc.CauseModelReissue
		}
		if newReq {
			return byGap()
		}
		return sc.CauseUnknown
	case a.req == "" || b.req == "":
		if chat {
			return sc.CauseModelReissue
		}
		if newReq {
			return byGap()
		}
		return sc.CauseUnknown
	case chat:
		return sc.CauseModelReissue
	}
	return byGap()
}

// TestAttribution_CrowdCallingIdenticalTools: many users, sessions and
// traces call the same few tools with the same few arguments (reads and
// writes; idemkit's instrumentation, protected and unprotected, and
// others, with and without captured arguments; with and without user.id
// or enduser.id; with and without trace propagation; orchestrators whose
// trace serves several users; a gateway whose one session serves many;
// HTTP, stdio and stateless transports; with and without request IDs;
// input rounds). No call is flagged unless it is a duplicate, and every
// duplicate whose calls the spans link is found with the cause its
// evidence supports, the right effect, first call and gap; the calls
// without captured arguments are marked uncompared. Precision and recall
// per cause are logged (-v).
func TestAttribution_CrowdCallingIdenticalTools(t *testing.T) {
	type tally struct{ n, correct, unknown, missed, uncompared, wrong, predicted int }
	all := map[string]*tally{}
	var allFalse, allFlagged, allDups, allSpans, allUsers int
	for _, seed := range []uint64{1, 2, 3, 4, 5} {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			g := &crowdGen{rng: rand.New(rand.NewPCG(seed, 11)), expect: map[string]expectation{}}
			const users = 400
			for i := 0; i < users; i++ {
				// Everyone within the same ten minutes: identical calls of
				// different users overlap all the time.
				g.user(g.newUser(i), g.between(0, 10*time.Minute), 10)
			}
			cfg := createDefaultConfig()
			cfg.ReadOnlyTools = []string{"get_*", "lookup_order"}
			out := (&scenarioGen{spans: g.spans}).run(t, cfg)

			var tags []string
			for tag := range g.expect {
				tags = append(tags, tag)
			}
			sort.Strings(tags)
			got := dupAttrs(t, out, tags...)
			require.Len(t, got, len(g.expect), "every tool span comes out")

			byTruth := map[string]*tally{}
			for _, c := range []string{sc.CauseTransportRetry, sc.CauseHarnessRetry, sc.CauseModelReissue, sc.CauseReconnectReplay, sc.CauseUnknown} {
				byTruth[c] = &tally{}
			}
			var falseDup, flagged, dups int
			for _, tag := range tags {
				want, attrs := g.expect[tag], got[tag]
				cause, _ := attrs[sc.DuplicateCause].(string)
				if cause != "" {
					flagged++
					byTruth[cause].predicted++
				}
				if want.truth == "" && cause != "" {
					falseDup++
				}
				if want.truth != "" {
					dups++
					tl := byTruth[want.truth]
					tl.n++
					switch {
					case cause == want.truth:
						tl.correct++
					case cause == sc.CauseUnknown:
						tl.unknown++
					case cause == "" && want.uncompared:
						tl.uncompared++
					case cause == "":
						tl.missed++
					default:
						tl.wrong++
					}
				}
				switch {
				case want.cause != "":
					require.Equal(t, dup(want.cause, want.effect, attrs[sc.DuplicateGroup].(string), want.first, want.gap), attrs, "span %s: %s", tag, want.why)
				case want.uncompared:
					require.Equal(t, uncompared(), attrs, "span %s: %s", tag, want.why)
				default:
					require.Equal(t, none(), attrs, "span %s: %s", tag, want.why)
				}
			}
			require.Zero(t, falseDup)

			var report strings.Builder
			fmt.Fprintf(&report, "%d users (%d in %d orchestrators' shared traces, %d behind the gateway's one session), %d tool spans: %d duplicates of writes (%d with no evidence linking their calls, %d whose arguments were not captured), %d repeated reads, %d input rounds\n",
				users, g.orchestrated, (g.orchestrated+3)/4, g.gateway, len(g.expect), dups, g.undetectable, g.uncomparable, g.reads, g.rounds)
			writeTally(&report, func(c string) (n, correct, unknown, missed, uncomp, wrong, predicted int) {
				tl := byTruth[c]
				return tl.n, tl.correct, tl.unknown, tl.missed, tl.uncompared, tl.wrong, tl.predicted
			})
			fmt.Fprintf(&report, "non-duplicates flagged: %d of %d; flagged %d, all duplicates; every duplicate answered as its evidence allows (unknown: the evidence cannot tell; missed: nothing links the calls; uncompared: no arguments)\n", falseDup, len(g.expect)-dups, flagged)
			t.Log("\n" + report.String())
			for _, c := range []string{sc.CauseTransportRetry, sc.CauseHarnessRetry, sc.CauseModelReissue, sc.CauseReconnectReplay} {
				tl := byTruth[c]
				require.NotZero(t, tl.n, "the generator produced no %s", c)
				require.Zero(t, tl.wrong, "a wrong cause for %s", c)
				require.Equal(t, tl.correct, tl.predicted, "precision of %s", c)
				a := all[c]
				if a == nil {
					a = &tally{}
					all[c] = a
				}
				a.n, a.correct, a.unknown, a.missed, a.uncompared, a.wrong, a.predicted = a.n+tl.n, a.correct+tl.correct, a.unknown+tl.unknown, a.missed+tl.missed, a.uncompared+tl.uncompared, a.wrong+tl.wrong, a.predicted+tl.predicted
			}
			allFalse, allFlagged, allDups, allSpans, allUsers = allFalse+falseDup, allFlagged+flagged, allDups+dups, allSpans+len(g.expect), allUsers+users
		})
	}
	var report strings.Builder
	fmt.Fprintf(&report, "all seeds: %d users, %d tool spans, %d duplicates of writes, %d flagged, %d of them not duplicates\n", allUsers, allSpans, allDups, allFlagged, allFalse)
	writeTally(&report, func(c string) (n, correct, unknown, missed, uncomp, wrong, predicted int) {
		tl := all[c]
		if tl == nil {
			tl = &tally{}
		}
		return tl.n, tl.correct, tl.unknown, tl.missed, tl.uncompared, tl.wrong, tl.predicted
	})
	t.Log("\n" + report.String())
}

// writeTally writes the precision and recall per true cause.
func writeTally(w *strings.Builder, get func(cause string) (n, correct, unknown, missed, uncompared, wrong, predicted int)) {
	fmt.Fprintf(w, "%-17s %6s %9s %7s %8s %7s %10s %6s\n", "true cause", "n", "precision", "recall", "unknown", "missed", "uncompared", "wrong")
	for _, c := range []string{sc.CauseTransportRetry, sc.CauseHarnessRetry, sc.CauseModelReissue, sc.CauseReconnectReplay} {
		n, correct, unknown, missed, uncompared, wrong, predicted := get(c)
		fmt.Fprintf(w, "%-17s %6d %9.3f %7.3f %8d %7d %10d %6d\n", c, n,
			float64(correct)/float64(max(predicted, 1)), float64(correct)/float64(max(n, 1)), unknown, missed, uncompared, wrong)
	}
}
