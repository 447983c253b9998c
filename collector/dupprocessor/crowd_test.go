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
	id        string
	idemkit   bool   // idemkit's instrumentation (key hashes, outcomes); else another one
	subject   bool   // idemkit: the key has a subject (an authenticated caller)
	userAttr  string // another instrumentation: "user.id", "enduser.id" or "" (none)
	propagate bool   // the agent propagates trace context: its calls join its trace
	transport string // "http" (a reliable session per connection), "stdio", "stateless"
	noReqID   bool   // the official go-sdk: no jsonrpc.request.id
}

// expectation is what the processor must say of one generated tool span,
// derived from the evidence the generator put in the spans (the DESIGN
// table applied by hand), and the truth behind it.
type expectation struct {
	truth  string // the layer that really duplicated the call; "" for a call that is not a duplicate
	cause  string // the answer the evidence supports; "" for none
	effect string
	first  string // tag of the group's first call
	gap    time.Duration
	why    string // what the generator did, for failure messages
}

type crowdGen struct {
	rng    *rand.Rand
	spans  []timedSpan
	expect map[string]expectation
	n      int
	undetectable,
	reads, rounds int
}

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
}

func newCrowdUser(rng *rand.Rand, i int) crowdUser {
	u := crowdUser{id: fmt.Sprintf("user-%d", i), propagate: rng.IntN(2) == 0, noReqID: rng.IntN(4) == 0}
	u.idemkit = rng.IntN(2) == 0
	u.transport = []string{"http", "http", "stdio", "stateless"}[rng.IntN(4)]
	if u.idemkit {
		// A local stdio server scopes nothing: its keys carry no subject.
		u.subject = u.transport != "stdio"
		if !u.subject {
			u.propagate = true
		}
	} else {
		u.userAttr = []string{"user.id", "enduser.id", ""}[rng.IntN(3)]
	}
	return u
}

// call builds one tool call span of user u.
func (g *crowdGen) call(u crowdUser, tag, tool, args, trace, session, req string, at time.Duration) sp {
	s := sp{tag: tag, kind: "server", trace: trace, tool: tool, at: at, dur: g.between(20*time.Millisecond, 800*time.Millisecond)}
	if u.transport == "http" {
		s.session = session
	} else if u.transport == "stdio" {
		s.session = "stdio"
	}
	if !u.noReqID {
		s.req = req
	}
	if u.idemkit {
		s.key = u.keyScope() + "/" + tool + "/" + args
		if u.subject {
			s.subject = u.id
		}
		s.outcome, s.attempt = sc.OutcomeExecuted, 1
		if slices.Contains(crowdReads, tool) {
			s.outcome, s.attempt, s.bypass = sc.OutcomeBypassed, 0, sc.BypassUnprotected
		}
	} else {
		s.kind = "mcp"
		s.args = fmt.Sprintf(`{"city":%q}`, args)
		switch u.userAttr {
		case "user.id":
			s.user = u.id
		case "enduser.id":
			s.endUser = u.id
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
// 20-90s, each a distinct (tool, arguments) pair for this user, some of
// them duplicated by one layer.
func (g *crowdGen) user(u crowdUser, start time.Duration, intents int) {
	type combo struct{ tool, args string }
	var combos []combo
	for _, t := range append(slices.Clone(crowdWrites), crowdReads...) {
		for _, a := range crowdArgs {
			combos = append(combos, combo{t, a})
		}
	}
	g.rng.Shuffle(len(combos), func(i, j int) { combos[i], combos[j] = combos[j], combos[i] })
	agentTrace := u.id + "/agent"
	session := u.id + "/s0"
	conn, req := 0, 0
	at := start
	for i := 0; i < intents; i++ {
		at += g.between(20*time.Second, 90*time.Second)
		c := combos[i]
		g.n++
		id := fmt.Sprintf("%s/i%d", u.id, i)
		newTrace := func(suffix string) string {
			if u.propagate {
				return agentTrace
			}
			return id + "/" + suffix
		}
		trace := newTrace("a")
		req++
		first := g.call(u, id+"/a", c.tool, c.args, trace, session, fmt.Sprint(req), at)
		g.emit(first)
		g.expect[first.tag] = expectation{why: "first call"}
		read := slices.Contains(crowdReads, c.tool)

		// Input rounds (idemkit, writes): the tool asks for input, the
		// call continues with the same request ID: one call.
		if u.idemkit && !read && g.rng.IntN(8) == 0 {
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
				cont.trace = id + "/cont"
			}
			g.emit(cont)
			g.expect[cont.tag] = expectation{why: "continuation of an input round"}
			continue
		}

		truth := []string{"", "", sc.CauseTransportRetry, sc.CauseHarnessRetry, sc.CauseModelReissue, sc.CauseReconnectReplay}[g.rng.IntN(6)]
		if truth == sc.CauseReconnectReplay && u.transport != "http" {
			truth = sc.CauseHarnessRetry // only a connection with a session can reconnect
		}
		if truth == "" {
			continue
		}
		d := first
		d.tag, d.dur = id+"/b", g.between(20*time.Millisecond, 800*time.Millisecond)
		chat := false
		switch truth {
		case sc.CauseTransportRetry:
			d.at = at + g.between(5*time.Millisecond, 800*time.Millisecond)
		case sc.CauseHarnessRetry:
			req++
			d.at = at + g.between(10*time.Millisecond, 1500*time.Millisecond)
			d.trace = newTrace("b")
		case sc.CauseModelReissue:
			req++
			d.at = at + g.between(2500*time.Millisecond, 45*time.Second)
			d.trace = newTrace("b")
			chat = true
			g.emit(sp{tag: id + "/chat", kind: "chat", svc: "agent", trace: agentTrace, at: at + (d.at-at)/2, dur: 300 * time.Millisecond})
		case sc.CauseReconnectReplay:
			conn++
			session = fmt.Sprintf("%s/s%d", u.id, conn)
			d.at = at + g.between(200*time.Millisecond, 50*time.Second)
			d.trace = newTrace("b")
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
		if u.idemkit && !read {
			switch g.rng.IntN(3) {
			case 0:
				d.outcome, d.attempt, effect = sc.OutcomeReplayed, 2, sc.EffectSuppressed
			case 1:
				d.outcome, d.attempt, effect = sc.OutcomeInProgress, 2, sc.EffectBlocked
			default:
				d.outcome, d.attempt = sc.OutcomeExecuted, 1
			}
		}
		g.emit(d)
		e := expectation{truth: truth, first: first.tag, gap: d.at - first.at,
			why: fmt.Sprintf("%s of %s (%+v)", truth, first.tag, u)}
		switch {
		case read:
			// A read repeated is not a duplicate: nothing happened twice.
			g.reads++
			e.truth, e.why = "", "a repeated read: "+e.why
		case !g.linked(u, first, d):
			g.undetectable++
			e.why = "no evidence links the calls: " + e.why
		default:
			e.cause, e.effect = expectedCause(u, first, d, chat), effect
		}
		g.expect[d.tag] = e
	}
}

// linked is the evidence rule, from what the generator put in the spans.
func (g *crowdGen) linked(u crowdUser, a, b sp) bool {
	if u.idemkit && u.subject {
		return true
	}
	reliable := func(s string) bool { return s != "" && s != "stdio" }
	return (u.userAttr != "" && !u.idemkit) ||
		(reliable(a.session) && a.session == b.session) ||
		a.trace == b.trace
}

// expectedCause applies the DESIGN table to the evidence of the pair.
func expectedCause(u crowdUser, a, b sp, chat bool) string {
	reliable := func(s string) bool { return s != "" && s != "stdio" }
	// The model's turn is in the agent's trace: visible when a tool span
	// joined it.
	chatSeen := chat && (u.propagate)
	switch {
	case reliable(b.session) && b.req != "" && a.session == b.session && a.req == b.req:
		return sc.CauseTransportRetry
	case reliable(a.session) && reliable(b.session) && a.session != b.session:
		return sc.CauseReconnectReplay
	case !reliable(a.session) || !reliable(b.session):
		if chatSeen && (b.req == "" || b.req != a.req) {
			return sc.CauseModelReissue
		}
		return sc.CauseUnknown
	case a.req == "" || b.req == "":
		if chatSeen {
			return sc.CauseModelReissue
		}
		return sc.CauseUnknown
	case chatSeen, b.at-a.at >= DefaultHarnessThreshold:
		return sc.CauseModelReissue
	}
	return sc.CauseHarnessRetry
}

// TestAttribution_CrowdCallingIdenticalTools: many users, sessions and
// traces call the same few tools with the same few arguments (reads and
// writes; idemkit's instrumentation and others; with and without user.id;
// with and without trace propagation; HTTP, stdio and stateless
// transports; with and without request IDs; input rounds). No call is
// flagged unless it is a duplicate, and every duplicate whose calls the
// spans link is found with the cause its evidence supports, the right
// effect, first call and gap. Precision and recall per cause are logged
// (-v).
func TestAttribution_CrowdCallingIdenticalTools(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3} {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			g := &crowdGen{rng: rand.New(rand.NewPCG(seed, 11)), expect: map[string]expectation{}}
			const users = 120
			for i := 0; i < users; i++ {
				// Everyone within the same ten minutes: identical calls of
				// different users overlap all the time.
				g.user(newCrowdUser(g.rng, i), g.between(0, 10*time.Minute), 10)
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

			type tally struct{ n, correct, unknown, missed, wrong int }
			byTruth := map[string]*tally{}
			predicted := map[string]int{}
			var falseDup, dups int
			for _, tag := range tags {
				want, attrs := g.expect[tag], got[tag]
				cause, _ := attrs[sc.DuplicateCause].(string)
				if cause != "" {
					predicted[cause]++
				}
				if want.truth == "" && cause != "" {
					falseDup++
				}
				if want.truth != "" {
					dups++
					tl := byTruth[want.truth]
					if tl == nil {
						tl = &tally{}
						byTruth[want.truth] = tl
					}
					tl.n++
					switch cause {
					case want.truth:
						tl.correct++
					case sc.CauseUnknown:
						tl.unknown++
					case "":
						tl.missed++
					default:
						tl.wrong++
					}
				}
				if want.cause == "" {
					require.Equal(t, none(), attrs, "span %s: %s", tag, want.why)
					continue
				}
				require.Equal(t, dup(want.cause, want.effect, attrs[sc.DuplicateGroup].(string), want.first, want.gap), attrs, "span %s: %s", tag, want.why)
			}
			require.Zero(t, falseDup)

			var report strings.Builder
			fmt.Fprintf(&report, "%d users, %d tool spans: %d duplicates of writes (%d with no evidence linking their calls), %d repeated reads, %d input rounds\n",
				users, len(g.expect), dups, g.undetectable, g.reads, g.rounds)
			fmt.Fprintf(&report, "%-17s %6s %9s %7s %8s %7s %6s\n", "true cause", "n", "precision", "recall", "unknown", "missed", "wrong")
			for _, c := range []string{sc.CauseTransportRetry, sc.CauseHarnessRetry, sc.CauseModelReissue, sc.CauseReconnectReplay} {
				tl := byTruth[c]
				require.NotNil(t, tl, "the generator produced no %s", c)
				precision := float64(tl.correct) / float64(max(predicted[c], 1))
				fmt.Fprintf(&report, "%-17s %6d %9.3f %7.3f %8d %7d %6d\n", c, tl.n, precision, float64(tl.correct)/float64(tl.n), tl.unknown, tl.missed, tl.wrong)
				require.Zero(t, tl.wrong, "a wrong cause for %s", c)
				require.Equal(t, 1.0, precision, "precision of %s", c)
			}
			fmt.Fprintf(&report, "non-duplicates flagged: %d of %d; every duplicate answered as its evidence allows (unknown: the evidence cannot tell; missed: nothing links the calls)\n", falseDup, len(g.expect)-dups)
			t.Log("\n" + report.String())
		})
	}
}
