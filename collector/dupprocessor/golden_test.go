package dupprocessor

import (
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/open-telemetry/opentelemetry-collector-contrib/pkg/golden"
	"github.com/open-telemetry/opentelemetry-collector-contrib/pkg/pdatatest/ptracetest"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/ptrace"

	sc "github.com/idemkit-mcp/idemkit/spancontract"
)

// update regenerates testdata/<case>/input.yaml and expected.yaml:
//
//	go test -run TestGolden -update
var update = flag.Bool("update", false, "regenerate the golden files in testdata/")

// batch is one ConsumeTraces call, after advancing processing time.
type batch struct {
	after time.Duration // processing time since the previous batch
	spans []sp
}

// goldenCase is one testdata/<name> case. The spans are defined here so the
// timeline reads as a story; input.yaml is their concatenation, checked to
// be what this code builds. want holds the exact idemkit.duplicate.*
// attributes expected on every tool span, so that regenerating the golden
// files cannot bless a wrong classification.
type goldenCase struct {
	name    string
	cfg     func(*Config)
	batches []batch
	want    map[string]map[string]any
}

var anyGroup = "<any 32 hex>"

func goldenCases() []goldenCase {
	k := keyHashOf
	const (
		s1 = "5b1f0c9e-session-1"
		s2 = "a7d2e411-session-2"
	)
	return []goldenCase{
		{
			// A proxy re-sent the same POST: same session, same request ID.
			name: "transport_retry",
			batches: []batch{{spans: []sp{
				{tag: "http", kind: "http", trace: "t1", at: 0},
				{tag: "A", trace: "t1", key: "refund-1", session: s1, req: "7", at: 0, dur: 2 * time.Second, outcome: sc.OutcomeExecuted, attempt: 1, writeID: "re_1"},
				{tag: "B", trace: "t1", key: "refund-1", session: s1, req: "7", at: 150 * time.Millisecond, outcome: sc.OutcomeReplayed, attempt: 2, writeID: "re_1"},
			}}},
			want: map[string]map[string]any{
				"A": none(),
				"B": dup(sc.CauseTransportRetry, sc.EffectSuppressed, k("refund-1"), "A", 150*time.Millisecond),
			},
		},
		{
			// The harness retried at once: new request ID, no inference.
			name: "harness_retry",
			batches: []batch{{spans: []sp{
				{tag: "A", trace: "t1", key: "refund-2", session: s1, req: "7", at: 0, dur: time.Second, outcome: sc.OutcomeExecuted, attempt: 1},
				{tag: "B", trace: "t1", key: "refund-2", session: s1, req: "8", at: 400 * time.Millisecond, outcome: sc.OutcomeInProgress, attempt: 2},
			}}},
			want: map[string]map[string]any{
				"A": none(),
				"B": dup(sc.CauseHarnessRetry, sc.EffectBlocked, k("refund-2"), "A", 400*time.Millisecond),
			},
		},
		{
			// The model spoke between the calls (a chat span of the trace),
			// even though they are under the harness threshold apart; the
			// takeover ran the refund again with a new write ID.
			name: "model_reissue",
			batches: []batch{{spans: []sp{
				{tag: "A", trace: "t1", key: "refund-3", session: s1, req: "7", at: 0, outcome: sc.OutcomeExecuted, attempt: 1, writeID: "re_1"},
				{tag: "chat", kind: "chat", svc: "agent", trace: "t1", at: time.Second, dur: 300 * time.Millisecond},
				{tag: "B", trace: "t1", key: "refund-3", session: s1, req: "9", at: 1500 * time.Millisecond, outcome: sc.OutcomeTakeover, attempt: 2, writeID: "re_2"},
			}}},
			want: map[string]map[string]any{
				"A": none(),
				"B": dup(sc.CauseModelReissue, sc.EffectLeaked, k("refund-3"), "A", 1500*time.Millisecond),
			},
		},
		{
			// The client reconnected and re-POSTed: another session.
			name: "reconnect_replay",
			batches: []batch{{spans: []sp{
				{tag: "A", trace: "t1", key: "refund-4", session: s1, req: "3", at: 0, outcome: sc.OutcomeExecuted, attempt: 1},
				{tag: "B", trace: "t1", key: "refund-4", session: s2, req: "3", at: 20 * time.Second, outcome: sc.OutcomeReplayed, attempt: 2},
			}}},
			want: map[string]map[string]any{
				"A": none(),
				"B": dup(sc.CauseReconnectReplay, sc.EffectSuppressed, k("refund-4"), "A", 20*time.Second),
			},
		},
		{
			// stdio and stateless HTTP sessions cannot be told apart, and no
			// chat span says the model spoke: unknown, not a guess. Two
			// write IDs prove the leak.
			name: "unknown_session",
			batches: []batch{{spans: []sp{
				{tag: "A", trace: "t1", key: "refund-5", session: "stdio", req: "1", at: 0, outcome: sc.OutcomeExecuted, attempt: 1, writeID: "re_1"},
				{tag: "B", trace: "t1", key: "refund-5", session: "stdio", req: "2", at: 300 * time.Millisecond, outcome: sc.OutcomeExecuted, attempt: 1, writeID: "re_2"},
				{tag: "C", trace: "t2", key: "refund-6", at: 0, outcome: sc.OutcomeExecuted, attempt: 1},
				{tag: "D", trace: "t2", key: "refund-6", at: time.Second, outcome: sc.OutcomeReplayed, attempt: 2},
			}}},
			want: map[string]map[string]any{
				"A": none(),
				"B": dup(sc.CauseUnknown, sc.EffectLeaked, k("refund-5"), "A", 300*time.Millisecond),
				"C": none(),
				"D": dup(sc.CauseUnknown, sc.EffectSuppressed, k("refund-6"), "C", time.Second),
			},
		},
		{
			// One group, every effect: replayed, in progress, executed again.
			name: "effects",
			batches: []batch{{spans: []sp{
				{tag: "A", trace: "t1", key: "refund-7", session: s1, req: "7", at: 0, dur: 5 * time.Second, outcome: sc.OutcomeExecuted, attempt: 1},
				{tag: "B", trace: "t1", key: "refund-7", session: s1, req: "7", at: 100 * time.Millisecond, outcome: sc.OutcomeReplayed, attempt: 2},
				{tag: "C", trace: "t1", key: "refund-7", session: s1, req: "8", at: 500 * time.Millisecond, outcome: sc.OutcomeInProgress, attempt: 3},
				{tag: "D", trace: "t1", key: "refund-7", session: s1, req: "9", at: 4 * time.Second, outcome: sc.OutcomeExecuted, attempt: 1},
			}}},
			want: map[string]map[string]any{
				"A": none(),
				"B": dup(sc.CauseTransportRetry, sc.EffectSuppressed, k("refund-7"), "A", 100*time.Millisecond),
				"C": dup(sc.CauseHarnessRetry, sc.EffectBlocked, k("refund-7"), "A", 500*time.Millisecond),
				"D": dup(sc.CauseModelReissue, sc.EffectLeaked, k("refund-7"), "A", 4*time.Second),
			},
		},
		{
			// Another instrumentation: a tools/call SERVER span with raw
			// arguments and no idemkit attributes. The processor hashes the
			// canonical arguments (key order does not matter); nothing
			// suppressed the second run, so it leaked.
			name: "other_instrumentation",
			batches: []batch{{spans: []sp{
				{tag: "A", kind: "mcp", trace: "t1", args: `{"order_id":"o-1","amount_cents":500}`, session: s1, req: "1", at: 0},
				{tag: "B", kind: "mcp", trace: "t1", args: `{ "amount_cents": 500, "order_id": "o-1" }`, session: s1, req: "2", at: 200 * time.Millisecond},
				{tag: "C", kind: "mcp", trace: "t1", args: `{"order_id":"o-2","amount_cents":500}`, session: s1, req: "3", at: 400 * time.Millisecond},
			}}},
			want: map[string]map[string]any{
				"A": none(),
				"B": dup(sc.CauseHarnessRetry, sc.EffectLeaked, anyGroup, "A", 200*time.Millisecond),
				"C": none(),
			},
		},
		{
			// Minutes apart with an unrelated call in between in the same
			// session: a deliberate repeat. The same gap with nothing in
			// between (session s2) is a model re-issue after a timeout.
			// Different arguments are a different group.
			name: "deliberate_repeat",
			batches: []batch{{spans: []sp{
				{tag: "A", trace: "t1", key: "refund-8", session: s1, req: "1", at: 0, outcome: sc.OutcomeExecuted, attempt: 1},
				{tag: "other-args", trace: "t1", key: "refund-8b", session: s1, req: "2", at: time.Second, outcome: sc.OutcomeExecuted, attempt: 1},
				{tag: "U", trace: "t1", tool: "get_order", key: "order-1", session: s1, req: "3", at: time.Minute, outcome: sc.OutcomeExecuted, attempt: 1},
				{tag: "B", trace: "t1", key: "refund-8", session: s1, req: "4", at: 5 * time.Minute, outcome: sc.OutcomeExecuted, attempt: 1},
				{tag: "C1", trace: "t2", key: "refund-9", session: s2, req: "1", at: 0, outcome: sc.OutcomeExecuted, attempt: 1},
				{tag: "C2", trace: "t2", key: "refund-9", session: s2, req: "2", at: 4 * time.Minute, outcome: sc.OutcomeExecuted, attempt: 1},
			}}},
			want: map[string]map[string]any{
				"A":          none(),
				"other-args": none(),
				"U":          none(),
				"B":          none(),
				"C1":         none(),
				"C2":         dup(sc.CauseModelReissue, sc.EffectLeaked, k("refund-9"), "C1", 4*time.Minute),
			},
		},
		{
			// The retry arrives first; the original and the chat span that
			// explains it arrive two seconds later, inside decision_wait.
			name: "out_of_order",
			batches: []batch{
				{spans: []sp{
					{tag: "B", trace: "t1", key: "refund-10", session: s1, req: "8", at: time.Second, outcome: sc.OutcomeReplayed, attempt: 2},
				}},
				{after: 2 * time.Second, spans: []sp{
					{tag: "chat", kind: "chat", svc: "agent", trace: "t1", at: 500 * time.Millisecond, dur: 200 * time.Millisecond},
					{tag: "A", trace: "t1", key: "refund-10", session: s1, req: "7", at: 0, dur: 900 * time.Millisecond, outcome: sc.OutcomeExecuted, attempt: 1},
				}},
			},
			want: map[string]map[string]any{
				"A": none(),
				"B": dup(sc.CauseModelReissue, sc.EffectSuppressed, k("refund-10"), "A", time.Second),
			},
		},
		{
			// One group across three batches, the third after the first two
			// were released; other spans pass through at once.
			name: "split_batches",
			batches: []batch{
				{spans: []sp{
					{tag: "http-1", kind: "http", trace: "t1", at: 0},
					{tag: "A", trace: "t1", key: "refund-11", session: s1, req: "1", at: 0, outcome: sc.OutcomeExecuted, attempt: 1},
				}},
				{after: 3 * time.Second, spans: []sp{
					{tag: "B", trace: "t1", key: "refund-11", session: s1, req: "1", at: 100 * time.Millisecond, outcome: sc.OutcomeReplayed, attempt: 2},
					{tag: "http-2", kind: "http", trace: "t1", at: 100 * time.Millisecond},
				}},
				{after: 10 * time.Second, spans: []sp{
					{tag: "C", trace: "t1", key: "refund-11", session: s1, req: "2", at: time.Second, outcome: sc.OutcomeReplayed, attempt: 3},
				}},
			},
			want: map[string]map[string]any{
				"A": none(),
				"B": dup(sc.CauseTransportRetry, sc.EffectSuppressed, k("refund-11"), "A", 100*time.Millisecond),
				"C": dup(sc.CauseHarnessRetry, sc.EffectSuppressed, k("refund-11"), "A", time.Second),
			},
		},
		{
			// max_groups 2: the third group evicts the first, whose retry
			// then finds no original. Its outcome still proves it is a
			// duplicate, so it is annotated without a first span or gap.
			// Nothing is dropped: every span comes out.
			name: "eviction",
			cfg:  func(c *Config) { c.MaxGroups = 2 },
			batches: []batch{
				{spans: []sp{
					{tag: "A1", trace: "t1", key: "refund-12", session: s1, req: "1", at: 0, outcome: sc.OutcomeExecuted, attempt: 1},
					{tag: "B1", trace: "t1", key: "refund-13", session: s1, req: "2", at: time.Second, outcome: sc.OutcomeExecuted, attempt: 1},
					{tag: "C1", trace: "t1", key: "refund-14", session: s1, req: "3", at: 2 * time.Second, outcome: sc.OutcomeExecuted, attempt: 1},
				}},
				{after: time.Second, spans: []sp{
					{tag: "A2", trace: "t1", key: "refund-12", session: s1, req: "1", at: 3 * time.Second, outcome: sc.OutcomeReplayed, attempt: 2},
				}},
			},
			want: map[string]map[string]any{
				"A1": none(),
				"B1": none(),
				"C1": none(),
				"A2": {
					sc.Duplicate:       true,
					sc.DuplicateCause:  sc.CauseUnknown,
					sc.DuplicateEffect: sc.EffectSuppressed,
					sc.DuplicateGroup:  k("refund-12"),
				},
			},
		},
		{
			// The first call runs 65s; its retry (in progress, at 30s) is
			// exported first. The retry's outcome proves an original exists,
			// so it waits up to original_wait for it instead of passing as
			// a first call.
			name: "long_original",
			batches: []batch{
				{spans: []sp{
					{tag: "B", trace: "t1", key: "refund-15", session: s1, req: "9", at: 30 * time.Second, outcome: sc.OutcomeInProgress, attempt: 2},
				}},
				{after: 40 * time.Second, spans: []sp{
					{tag: "A", trace: "t1", key: "refund-15", session: s1, req: "8", at: 0, dur: 65 * time.Second, outcome: sc.OutcomeExecuted, attempt: 1},
				}},
			},
			want: map[string]map[string]any{
				"A": none(),
				"B": dup(sc.CauseModelReissue, sc.EffectBlocked, k("refund-15"), "A", 30*time.Second),
			},
		},
		{
			// Issue 12's span shape: the MCP conventions' SERVER span
			// `tools/call issue_refund`, and idemkit's older INTERNAL
			// `execute_tool issue_refund` span, in one group (a rolling
			// upgrade: old and new replicas). Spans of the other MCP methods
			// are never tool calls and pass untouched.
			name: "server_span_shape",
			batches: []batch{{spans: []sp{
				{tag: "init", kind: "method", method: "initialize", trace: "t1", at: 0},
				{tag: "list", kind: "method", method: "tools/list", session: s1, trace: "t1", at: 10 * time.Millisecond},
				{tag: "A", kind: "server", trace: "t1", key: "refund-20", subject: "u-1", session: s1, req: "7", at: 100 * time.Millisecond, outcome: sc.OutcomeExecuted, attempt: 1},
				{tag: "B", trace: "t1", key: "refund-20", subject: "u-1", session: s1, req: "7", at: 250 * time.Millisecond, outcome: sc.OutcomeReplayed, attempt: 2},
				{tag: "C", kind: "server", trace: "t1", key: "refund-20", subject: "u-1", session: s1, req: "8", at: 600 * time.Millisecond, outcome: sc.OutcomeReplayed, attempt: 3},
				{tag: "ping", kind: "method", method: "ping", session: s1, trace: "t1", at: 700 * time.Millisecond},
			}}},
			want: map[string]map[string]any{
				"A": none(),
				"B": dup(sc.CauseTransportRetry, sc.EffectSuppressed, k("refund-20"), "A", 150*time.Millisecond),
				"C": dup(sc.CauseHarnessRetry, sc.EffectSuppressed, k("refund-20"), "A", 500*time.Millisecond),
			},
		},
		{
			// Another instrumentation, no idemkit key: identical calls of
			// get_quote {"city":"Paris"} by different users, in different
			// sessions and traces, are not duplicates, whatever the gap. The
			// same user.id (or enduser.id) is evidence: U1b is U1's caller
			// again, from a new session (reconnect_replay); E2 is E1's,
			// over stdio, with the model speaking in between (model_reissue).
			name: "foreign_users",
			batches: []batch{{spans: []sp{
				{tag: "U1", kind: "mcp", trace: "t1", args: `{"city":"Paris"}`, tool: "get_quote", user: "u-1", session: "sess-a", req: "1", at: 0},
				{tag: "U2", kind: "mcp", trace: "t2", args: `{"city":"Paris"}`, tool: "get_quote", user: "u-2", session: "sess-b", req: "1", at: 30 * time.Second},
				{tag: "U1b", kind: "mcp", trace: "t3", args: `{"city": "Paris"}`, tool: "get_quote", user: "u-1", session: "sess-c", req: "4", at: 40 * time.Second},
				{tag: "E1", kind: "mcp", trace: "t4", args: `{"city":"Lyon"}`, tool: "get_quote", endUser: "e-1", session: "stdio", req: "1", at: 0},
				{tag: "chat", kind: "chat", svc: "agent", trace: "t5", at: time.Second},
				{tag: "E2", kind: "mcp", trace: "t5", args: `{"city":"Lyon"}`, tool: "get_quote", endUser: "e-1", session: "stdio", req: "2", at: 2 * time.Second},
			}}},
			want: map[string]map[string]any{
				"U1":  none(),
				"U2":  none(),
				"U1b": dup(sc.CauseReconnectReplay, sc.EffectLeaked, anyGroup, "U1", 40*time.Second),
				"E1":  none(),
				"E2":  dup(sc.CauseModelReissue, sc.EffectLeaked, anyGroup, "E1", 2*time.Second),
			},
		},
		{
			// No evidence that two identical calls are one caller's: no
			// user, stdio or empty sessions, different traces. Never
			// grouped, even 10ms apart. The same holds for idemkit spans
			// whose key has no subject (G1, G2: unscoped calls that ran
			// unprotected); G3 shares G1's trace, which links them.
			name: "foreign_no_evidence",
			batches: []batch{{spans: []sp{
				{tag: "F1", kind: "mcp", trace: "t1", args: `{"order":"o-1"}`, session: "stdio", req: "1", at: 0},
				{tag: "F2", kind: "mcp", trace: "t2", args: `{"order":"o-1"}`, session: "stdio", req: "1", at: time.Second},
				{tag: "F3", kind: "mcp", trace: "t3", args: `{"order":"o-1"}`, req: "2", at: 1010 * time.Millisecond},
				{tag: "G1", trace: "t4", key: "refund-21", outcome: sc.OutcomeBypassed, bypass: sc.BypassUnscoped, req: "1", at: 0},
				{tag: "G2", trace: "t5", key: "refund-21", outcome: sc.OutcomeBypassed, bypass: sc.BypassUnscoped, req: "1", at: 10 * time.Millisecond},
				{tag: "G3", trace: "t4", key: "refund-21", outcome: sc.OutcomeBypassed, bypass: sc.BypassUnscoped, req: "2", at: 700 * time.Millisecond},
			}}},
			want: map[string]map[string]any{
				"F1": none(),
				"F2": none(),
				"F3": none(),
				"G1": none(),
				"G2": none(),
				"G3": dup(sc.CauseUnknown, sc.EffectLeaked, k("refund-21"), "G1", 700*time.Millisecond),
			},
		},
		{
			// A reliable session is evidence without user.id or trace
			// propagation (every call in its own trace): the harness retried
			// with a new request ID, then a proxy re-sent that request.
			name: "foreign_same_session",
			batches: []batch{{spans: []sp{
				{tag: "S1", kind: "mcp", trace: "t1", args: `{"order":"o-2"}`, session: s1, req: "1", at: 0},
				{tag: "S2", kind: "mcp", trace: "t2", args: `{"order":"o-2"}`, session: s1, req: "2", at: 300 * time.Millisecond},
				{tag: "S3", kind: "mcp", trace: "t3", args: `{"order":"o-2"}`, session: s1, req: "2", at: 400 * time.Millisecond},
				{tag: "O1", kind: "mcp", trace: "t4", args: `{"order":"o-2"}`, session: s2, req: "1", at: 500 * time.Millisecond},
			}}},
			want: map[string]map[string]any{
				"S1": none(),
				"S2": dup(sc.CauseHarnessRetry, sc.EffectLeaked, anyGroup, "S1", 300*time.Millisecond),
				"S3": dup(sc.CauseTransportRetry, sc.EffectLeaked, anyGroup, "S1", 400*time.Millisecond),
				"O1": none(),
			},
		},
		{
			// The same trace is evidence; over stdio the sessions say
			// nothing and no inference span lies between: unknown.
			name: "foreign_same_trace",
			batches: []batch{{spans: []sp{
				{tag: "T1", kind: "mcp", trace: "t1", args: `{"order":"o-3"}`, session: "stdio", req: "1", at: 0},
				{tag: "T2", kind: "mcp", trace: "t1", args: `{"order":"o-3"}`, session: "stdio", req: "2", at: 500 * time.Millisecond},
			}}},
			want: map[string]map[string]any{
				"T1": none(),
				"T2": dup(sc.CauseUnknown, sc.EffectLeaked, anyGroup, "T1", 500*time.Millisecond),
			},
		},
		{
			// A tool asked for input (R1) and the call continued (R2, the
			// takeover of the released claim, same request ID): two rounds
			// of one call, not a duplicate. A harness retry of the whole call
			// afterwards is one, and its first call is the first round.
			name: "input_rounds",
			batches: []batch{{spans: []sp{
				{tag: "R1", trace: "t1", key: "refund-22", subject: "u-1", session: s1, req: "5", at: 0, outcome: sc.OutcomeExecuted, attempt: 1, input: "requested"},
				{tag: "R2", trace: "t1", key: "refund-22", subject: "u-1", session: s1, req: "5", at: 3 * time.Second, outcome: sc.OutcomeTakeover, attempt: 2, input: "continuation", writeID: "re_1"},
				{tag: "R3", trace: "t1", key: "refund-22", subject: "u-1", session: s1, req: "6", at: 3400 * time.Millisecond, outcome: sc.OutcomeReplayed, attempt: 3, writeID: "re_1"},
			}}},
			want: map[string]map[string]any{
				"R1": none(),
				"R2": none(),
				"R3": dup(sc.CauseHarnessRetry, sc.EffectSuppressed, k("refund-22"), "R1", 3400*time.Millisecond),
			},
		},
		{
			// An instrumentation that marks only the round that asked for
			// input: the takeover of the same request right after it is its
			// continuation (Q2). Without the mark (P1, P2), a takeover of
			// the same request is a transport retry that ran again.
			name: "input_rounds_unmarked",
			batches: []batch{{spans: []sp{
				{tag: "Q1", trace: "t1", key: "refund-23", subject: "u-1", session: s1, req: "5", at: 0, outcome: sc.OutcomeExecuted, attempt: 1, input: "requested"},
				{tag: "Q2", trace: "t1", key: "refund-23", subject: "u-1", session: s1, req: "5", at: 2 * time.Second, outcome: sc.OutcomeTakeover, attempt: 2},
				{tag: "P1", trace: "t2", key: "refund-24", subject: "u-1", session: s1, req: "7", at: 0, outcome: sc.OutcomeExecuted, attempt: 1},
				{tag: "P2", trace: "t2", key: "refund-24", subject: "u-1", session: s1, req: "7", at: 2 * time.Second, outcome: sc.OutcomeTakeover, attempt: 2},
			}}},
			want: map[string]map[string]any{
				"Q1": none(),
				"Q2": none(),
				"P1": none(),
				"P2": dup(sc.CauseTransportRetry, sc.EffectLeaked, k("refund-24"), "P1", 2*time.Second),
			},
		},
		{
			// Reads are never duplicates: idemkit's bypassed calls (reason
			// unprotected, or none from an instrumentation without a Guard),
			// and other instrumentations' calls of the tools listed in
			// read_only_tools (a name, a pattern). book_flight is not listed.
			// The list does not apply to idemkit's own spans, which say
			// themselves whether they wrote (get_or_create_user did).
			name: "read_only",
			cfg:  func(c *Config) { c.ReadOnlyTools = []string{"get_*", "search"} },
			batches: []batch{{spans: []sp{
				{tag: "B1", trace: "t1", tool: "lookup_order", key: "read-1", subject: "u-1", session: s1, req: "1", at: 0, outcome: sc.OutcomeBypassed, bypass: sc.BypassUnprotected},
				{tag: "B2", trace: "t1", tool: "lookup_order", key: "read-1", subject: "u-1", session: s1, req: "1", at: 100 * time.Millisecond, outcome: sc.OutcomeBypassed, bypass: sc.BypassUnprotected},
				{tag: "B3", trace: "t1", tool: "lookup_order", key: "read-2", session: s1, req: "2", at: 0, outcome: sc.OutcomeBypassed},
				{tag: "B4", trace: "t1", tool: "lookup_order", key: "read-2", session: s1, req: "3", at: 200 * time.Millisecond, outcome: sc.OutcomeBypassed},
				{tag: "W1", kind: "mcp", trace: "t2", tool: "get_weather", args: `{"city":"Paris"}`, session: s1, req: "4", at: 0},
				{tag: "W2", kind: "mcp", trace: "t2", tool: "get_weather", args: `{"city":"Paris"}`, session: s1, req: "5", at: 300 * time.Millisecond},
				{tag: "W3", kind: "mcp", trace: "t2", tool: "search", args: `{"q":"refund"}`, session: s1, req: "6", at: 0},
				{tag: "W4", kind: "mcp", trace: "t2", tool: "search", args: `{"q":"refund"}`, session: s1, req: "6", at: 50 * time.Millisecond},
				{tag: "X1", kind: "mcp", trace: "t2", tool: "book_flight", args: `{"to":"CDG"}`, session: s1, req: "7", at: 0},
				{tag: "X2", kind: "mcp", trace: "t2", tool: "book_flight", args: `{"to":"CDG"}`, session: s1, req: "8", at: 300 * time.Millisecond},
				{tag: "Y1", trace: "t3", tool: "get_or_create_user", key: "goc-1", subject: "u-1", session: s1, req: "9", at: 0, outcome: sc.OutcomeExecuted, attempt: 1},
				{tag: "Y2", trace: "t3", tool: "get_or_create_user", key: "goc-1", subject: "u-1", session: s1, req: "9", at: 80 * time.Millisecond, outcome: sc.OutcomeReplayed, attempt: 2},
			}}},
			want: map[string]map[string]any{
				"B1": none(), "B2": none(), "B3": none(), "B4": none(),
				"W1": none(), "W2": none(), "W3": none(), "W4": none(),
				"X1": none(),
				"X2": dup(sc.CauseHarnessRetry, sc.EffectLeaked, anyGroup, "X1", 300*time.Millisecond),
				"Y1": none(),
				"Y2": dup(sc.CauseTransportRetry, sc.EffectSuppressed, k("goc-1"), "Y1", 80*time.Millisecond),
			},
		},
		{
			// The official go-sdk does not report the JSON-RPC request ID: on
			// one session a transport retry and a harness retry look alike,
			// so the answer is unknown, not a guess. An inference span in
			// between still proves a model re-issue.
			name: "no_request_id",
			batches: []batch{{spans: []sp{
				{tag: "N1", kind: "server", trace: "t1", key: "refund-25", subject: "u-1", session: s1, at: 0, outcome: sc.OutcomeExecuted, attempt: 1},
				{tag: "N2", kind: "server", trace: "t1", key: "refund-25", subject: "u-1", session: s1, at: 300 * time.Millisecond, outcome: sc.OutcomeInProgress, attempt: 2},
				{tag: "M1", kind: "server", trace: "t2", key: "refund-26", subject: "u-1", session: s1, at: 0, outcome: sc.OutcomeExecuted, attempt: 1},
				{tag: "chat", kind: "chat", svc: "agent", trace: "t2", at: 500 * time.Millisecond},
				{tag: "M2", kind: "server", trace: "t2", key: "refund-26", subject: "u-1", session: s1, at: time.Second, outcome: sc.OutcomeReplayed, attempt: 2},
			}}},
			want: map[string]map[string]any{
				"N1": none(),
				"N2": dup(sc.CauseUnknown, sc.EffectBlocked, k("refund-25"), "N1", 300*time.Millisecond),
				"M1": none(),
				"M2": dup(sc.CauseModelReissue, sc.EffectSuppressed, k("refund-26"), "M1", time.Second),
			},
		},
		{
			// Two tiers: the inference span reached this tier-2 Collector as
			// a tier-1 evidence copy (resource idemkit.evidence.copy=true).
			// It proves the model spoke between A and B, and is not
			// forwarded: the original went its own way.
			name: "evidence_copy",
			batches: []batch{{spans: []sp{
				{tag: "A", trace: "t1", key: "refund-27", subject: "u-1", session: s1, req: "1", at: 0, outcome: sc.OutcomeExecuted, attempt: 1},
				{tag: "chat", kind: "chat", svc: "agent", trace: "t1", at: 200 * time.Millisecond, copy: true},
				{tag: "B", trace: "t1", key: "refund-27", subject: "u-1", session: s1, req: "2", at: 500 * time.Millisecond, outcome: sc.OutcomeReplayed, attempt: 2},
			}}},
			want: map[string]map[string]any{
				"A": none(),
				"B": dup(sc.CauseModelReissue, sc.EffectSuppressed, k("refund-27"), "A", 500*time.Millisecond),
			},
		},
		{
			// Keys without a subject (a local stdio server scopes nothing):
			// two local users' identical calls in their own traces are not
			// duplicates (L2). L3's outcome says the Guard replayed it, which
			// proves an earlier call of its key: unknown, first call L1.
			// A key with a subject identifies the caller by itself: K2
			// repeats K1 from another session and trace.
			name: "weak_keys",
			batches: []batch{{spans: []sp{
				{tag: "L1", trace: "t1", key: "refund-28", session: "stdio", req: "1", at: 0, outcome: sc.OutcomeExecuted, attempt: 1},
				{tag: "L2", trace: "t2", key: "refund-28", session: "stdio", req: "1", at: time.Second, outcome: sc.OutcomeExecuted, attempt: 1},
				{tag: "L3", trace: "t3", key: "refund-28", session: "stdio", req: "2", at: 2 * time.Second, outcome: sc.OutcomeReplayed, attempt: 2},
				{tag: "K1", trace: "t4", key: "refund-29", subject: "u-9", session: s1, req: "1", at: 0, outcome: sc.OutcomeExecuted, attempt: 1},
				{tag: "K2", trace: "t5", key: "refund-29", subject: "u-9", session: s2, req: "1", at: 8 * time.Second, outcome: sc.OutcomeReplayed, attempt: 2},
			}}},
			want: map[string]map[string]any{
				"L1": none(),
				"L2": none(),
				"L3": dup(sc.CauseUnknown, sc.EffectSuppressed, k("refund-28"), "L1", 2*time.Second),
				"K1": none(),
				"K2": dup(sc.CauseReconnectReplay, sc.EffectSuppressed, k("refund-29"), "K1", 8*time.Second),
			},
		},
		{
			// Issue 22: a differing user beats shared context. A gateway
			// reports one session, "default", for everyone: carol's and
			// dave's identical calls on it are not duplicates (C1, D1);
			// carol's own retry is (C2). Two users served inside one
			// orchestrator's trace are not one caller either (E1, F1). A
			// gateway authenticating as one service account gives its
			// users one subject, so one key hash, and the Guard even
			// replayed gina's answer to hal (H1): their users differ, so
			// it is not a retry of anything. Without a key that names the
			// caller, a span naming a user and one naming none are not
			// linked by the shared session (I1, A1); with such a key they
			// are (K1, K2: the subject is the caller). enduser.id is read
			// when user.id is absent (M1, M2).
			name: "users_differ",
			batches: []batch{{spans: []sp{
				{tag: "C1", kind: "mcp", trace: "tc1", args: `{"city":"Paris"}`, tool: "book_flight", user: "carol", session: "default", req: "1", at: 0},
				{tag: "D1", kind: "mcp", trace: "td1", args: `{"city":"Paris"}`, tool: "book_flight", user: "dave", session: "default", req: "1", at: 300 * time.Millisecond},
				{tag: "C2", kind: "mcp", trace: "tc2", args: `{"city":"Paris"}`, tool: "book_flight", user: "carol", session: "default", req: "2", at: 700 * time.Millisecond},
				{tag: "E1", kind: "mcp", trace: "orch", args: `{"city":"Lyon"}`, tool: "book_flight", user: "erin", req: "4", at: 0},
				{tag: "F1", kind: "mcp", trace: "orch", args: `{"city":"Lyon"}`, tool: "book_flight", user: "frank", req: "4", at: 200 * time.Millisecond},
				{tag: "G1", kind: "server", trace: "tg", key: "refund-40", subject: "gateway-account", user: "gina", session: s1, req: "1", at: 0, outcome: sc.OutcomeExecuted, attempt: 1},
				{tag: "H1", kind: "server", trace: "th", key: "refund-40", subject: "gateway-account", user: "hal", session: s2, req: "1", at: time.Second, outcome: sc.OutcomeReplayed, attempt: 2},
				{tag: "I1", kind: "mcp", trace: "ti", args: `{"city":"Nice"}`, tool: "book_flight", user: "ivan", session: "default", req: "1", at: 0},
				{tag: "A1", kind: "mcp", trace: "ta", args: `{"city":"Nice"}`, tool: "book_flight", session: "default", req: "2", at: 300 * time.Millisecond},
				{tag: "K1", kind: "server", trace: "tk", key: "refund-41", subject: "u-7", user: "kim", session: s1, req: "3", at: 0, outcome: sc.OutcomeExecuted, attempt: 1},
				{tag: "K2", kind: "server", trace: "tk", key: "refund-41", subject: "u-7", session: s1, req: "4", at: 500 * time.Millisecond, outcome: sc.OutcomeInProgress, attempt: 2},
				{tag: "M1", kind: "mcp", trace: "orch", args: `{"city":"Pau"}`, tool: "book_flight", endUser: "max", req: "5", at: 0},
				{tag: "M2", kind: "mcp", trace: "orch", args: `{"city":"Pau"}`, tool: "book_flight", user: "max", req: "6", at: 600 * time.Millisecond},
			}}},
			want: map[string]map[string]any{
				"C1": none(), "D1": none(),
				"C2": dup(sc.CauseHarnessRetry, sc.EffectLeaked, anyGroup, "C1", 700*time.Millisecond),
				"E1": none(), "F1": none(),
				"G1": none(), "H1": none(),
				"I1": none(), "A1": none(),
				"K1": none(),
				"K2": dup(sc.CauseHarnessRetry, sc.EffectBlocked, k("refund-41"), "K1", 500*time.Millisecond),
				"M1": none(),
				"M2": dup(sc.CauseUnknown, sc.EffectLeaked, anyGroup, "M1", 600*time.Millisecond),
			},
		},
		{
			// Issue 22: in a trace shared by several users (an
			// orchestrator's), an inference span that names its user is
			// evidence for that user's calls only: vic's model spoke
			// between una's two calls, which stay a harness retry (U2),
			// and between vic's own, a model re-issue (V2). Calls that
			// name no user cannot be told apart: any chat of the trace is
			// evidence for them (W2).
			name: "shared_trace_chats",
			batches: []batch{{spans: []sp{
				{tag: "U1", kind: "server", trace: "orch", key: "refund-42", subject: "una", user: "una", session: s1, req: "1", at: 0, outcome: sc.OutcomeExecuted, attempt: 1},
				{tag: "V1", kind: "server", trace: "orch", key: "refund-43", subject: "vic", user: "vic", session: s2, req: "1", at: 100 * time.Millisecond, outcome: sc.OutcomeExecuted, attempt: 1},
				{tag: "W1", kind: "server", trace: "orch", key: "refund-44", subject: "wes", session: "sess-w", req: "1", at: 150 * time.Millisecond, outcome: sc.OutcomeExecuted, attempt: 1},
				{tag: "chat-vic", kind: "chat", svc: "orchestrator", trace: "orch", user: "vic", at: 300 * time.Millisecond},
				{tag: "U2", kind: "server", trace: "orch", key: "refund-42", subject: "una", user: "una", session: s1, req: "2", at: 600 * time.Millisecond, outcome: sc.OutcomeReplayed, attempt: 2},
				{tag: "V2", kind: "server", trace: "orch", key: "refund-43", subject: "vic", user: "vic", session: s2, req: "2", at: 900 * time.Millisecond, outcome: sc.OutcomeReplayed, attempt: 2},
				{tag: "W2", kind: "server", trace: "orch", key: "refund-44", subject: "wes", session: "sess-w", req: "2", at: 950 * time.Millisecond, outcome: sc.OutcomeReplayed, attempt: 2},
			}}},
			want: map[string]map[string]any{
				"U1": none(), "V1": none(), "W1": none(),
				"U2": dup(sc.CauseHarnessRetry, sc.EffectSuppressed, k("refund-42"), "U1", 600*time.Millisecond),
				"V2": dup(sc.CauseModelReissue, sc.EffectSuppressed, k("refund-43"), "V1", 800*time.Millisecond),
				"W2": dup(sc.CauseModelReissue, sc.EffectSuppressed, k("refund-44"), "W1", 800*time.Millisecond),
			},
		},
		{
			// Issue 22: calls whose arguments were not captured. Another
			// instrumentation's tool spans without gen_ai.tool.call.arguments
			// cannot be compared: never duplicates, however alike, and
			// marked idemkit.duplicate.uncompared so that the connector
			// counts them (N1, N2); so is a write idemkit ran unprotected
			// without its hashes (B1). A read listed in read_only_tools is
			// not a call to compare (R1). An idemkit span with a key hash
			// is grouped by its key, arguments recorded or not (K2).
			name: "uncompared",
			cfg:  func(c *Config) { c.ReadOnlyTools = []string{"get_*"} },
			batches: []batch{{spans: []sp{
				{tag: "N1", kind: "mcp", trace: "t1", tool: "send_email", session: s1, req: "1", at: 0},
				{tag: "N2", kind: "mcp", trace: "t1", tool: "send_email", session: s1, req: "1", at: 100 * time.Millisecond},
				{tag: "B1", kind: "server", trace: "t2", tool: "send_email", session: s2, req: "1", at: 0, outcome: sc.OutcomeBypassed, bypass: sc.BypassUnscoped},
				{tag: "R1", kind: "mcp", trace: "t1", tool: "get_weather", session: s1, req: "2", at: 200 * time.Millisecond},
				{tag: "K1", kind: "server", trace: "t3", key: "email-1", subject: "u-1", session: s1, req: "3", at: 0, outcome: sc.OutcomeExecuted, attempt: 1},
				{tag: "K2", kind: "server", trace: "t3", key: "email-1", subject: "u-1", session: s1, req: "3", at: 150 * time.Millisecond, outcome: sc.OutcomeReplayed, attempt: 2},
			}}},
			want: map[string]map[string]any{
				"N1": uncompared(), "N2": uncompared(), "B1": uncompared(),
				"R1": none(),
				"K1": none(),
				"K2": dup(sc.CauseTransportRetry, sc.EffectSuppressed, k("email-1"), "K1", 150*time.Millisecond),
			},
		},
		{
			// Issue 22: a write tool the configuration leaves unprotected
			// (bypassed, reason unprotected) carries its argument hash, so
			// its repeats are compared like any other call: W2 ran again,
			// a real double side effect. An unprotected read carries no
			// argument hash and is never a duplicate (R2).
			name: "unprotected_write",
			batches: []batch{{spans: []sp{
				{tag: "W1", kind: "server", trace: "t1", tool: "send_email", key: "email-2", argsHash: "email-2", subject: "u-1", session: s1, req: "1", at: 0, outcome: sc.OutcomeBypassed, bypass: sc.BypassUnprotected},
				{tag: "W2", kind: "server", trace: "t1", tool: "send_email", key: "email-2", argsHash: "email-2", subject: "u-1", session: s1, req: "2", at: 400 * time.Millisecond, outcome: sc.OutcomeBypassed, bypass: sc.BypassUnprotected},
				{tag: "R1", kind: "server", trace: "t1", tool: "lookup_order", key: "read-3", subject: "u-1", session: s1, req: "3", at: 0, outcome: sc.OutcomeBypassed, bypass: sc.BypassUnprotected},
				{tag: "R2", kind: "server", trace: "t1", tool: "lookup_order", key: "read-3", subject: "u-1", session: s1, req: "4", at: 300 * time.Millisecond, outcome: sc.OutcomeBypassed, bypass: sc.BypassUnprotected},
			}}},
			want: map[string]map[string]any{
				"W1": none(),
				"W2": dup(sc.CauseHarnessRetry, sc.EffectLeaked, k("email-2"), "W1", 400*time.Millisecond),
				"R1": none(), "R2": none(),
			},
		},
		{
			// Issue 22: the client's parent context tells a new request
			// from the same one delivered twice. idemkit takes a span's
			// parent from the request's params._meta, and the Go SDK's
			// exporter says it is remote; a transport retry re-sends the
			// same bytes, so the same parent. Two parents: the client sent
			// the call again, a harness retry under harness_threshold with
			// no chat between, though the sessions say nothing (P2:
			// stateless; Q2: stdio) or no request ID is reported (R3, the
			// go-sdk); R2, same parent, stays unknown. Two parents 3s
			// apart: a model re-issue (S2). A parent the exporter calls
			// local (T2), or another instrumentation's parent, whose
			// origin is unknown (F2), is no evidence.
			name: "client_parents",
			batches: []batch{{spans: []sp{
				{tag: "P1", kind: "server", trace: "tp", parent: "pa", key: "refund-45", subject: "u-1", req: "1", at: 0, outcome: sc.OutcomeExecuted, attempt: 1},
				{tag: "P2", kind: "server", trace: "tp", parent: "pb", key: "refund-45", subject: "u-1", req: "2", at: 400 * time.Millisecond, outcome: sc.OutcomeInProgress, attempt: 2},
				{tag: "Q1", kind: "server", trace: "tq", parent: "qa", key: "refund-46", session: "stdio", req: "1", at: 0, outcome: sc.OutcomeExecuted, attempt: 1},
				{tag: "Q2", kind: "server", trace: "tq", parent: "qb", key: "refund-46", session: "stdio", req: "2", at: 300 * time.Millisecond, outcome: sc.OutcomeReplayed, attempt: 2},
				{tag: "R1", kind: "server", trace: "tr", parent: "ra", key: "refund-47", subject: "u-1", session: s1, at: 0, outcome: sc.OutcomeExecuted, attempt: 1},
				{tag: "R2", kind: "server", trace: "tr", parent: "ra", key: "refund-47", subject: "u-1", session: s1, at: 200 * time.Millisecond, outcome: sc.OutcomeReplayed, attempt: 2},
				{tag: "R3", kind: "server", trace: "tr", parent: "rc", key: "refund-47", subject: "u-1", session: s1, at: 800 * time.Millisecond, outcome: sc.OutcomeReplayed, attempt: 3},
				{tag: "S1", kind: "server", trace: "ts", parent: "sa", key: "refund-48", subject: "u-1", req: "1", at: 0, outcome: sc.OutcomeExecuted, attempt: 1},
				{tag: "S2", kind: "server", trace: "ts", parent: "sb", key: "refund-48", subject: "u-1", req: "2", at: 3 * time.Second, outcome: sc.OutcomeExecuted, attempt: 1},
				{tag: "T1", kind: "server", trace: "tt", parent: "ta", localParent: true, key: "refund-49", subject: "u-1", req: "1", at: 0, outcome: sc.OutcomeExecuted, attempt: 1},
				{tag: "T2", kind: "server", trace: "tt", parent: "tb", localParent: true, key: "refund-49", subject: "u-1", req: "2", at: 300 * time.Millisecond, outcome: sc.OutcomeReplayed, attempt: 2},
				{tag: "F1", kind: "mcp", trace: "tf", parent: "fa", args: `{"order":"o-9"}`, user: "u-1", req: "1", at: 0},
				{tag: "F2", kind: "mcp", trace: "tf", parent: "fb", args: `{"order":"o-9"}`, user: "u-1", req: "2", at: 300 * time.Millisecond},
			}}},
			want: map[string]map[string]any{
				"P1": none(),
				"P2": dup(sc.CauseHarnessRetry, sc.EffectBlocked, k("refund-45"), "P1", 400*time.Millisecond),
				"Q1": none(),
				"Q2": dup(sc.CauseHarnessRetry, sc.EffectSuppressed, k("refund-46"), "Q1", 300*time.Millisecond),
				"R1": none(),
				"R2": dup(sc.CauseUnknown, sc.EffectSuppressed, k("refund-47"), "R1", 200*time.Millisecond),
				"R3": dup(sc.CauseHarnessRetry, sc.EffectSuppressed, k("refund-47"), "R1", 800*time.Millisecond),
				"S1": none(),
				"S2": dup(sc.CauseModelReissue, sc.EffectLeaked, k("refund-48"), "S1", 3*time.Second),
				"T1": none(),
				"T2": dup(sc.CauseUnknown, sc.EffectSuppressed, k("refund-49"), "T1", 300*time.Millisecond),
				"F1": none(),
				"F2": dup(sc.CauseUnknown, sc.EffectLeaked, anyGroup, "F1", 300*time.Millisecond),
			},
		},
	}
}

var hex32 = regexp.MustCompile(`^[0-9a-f]{32}$`)

func TestGolden(t *testing.T) {
	for _, tc := range goldenCases() {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join("testdata", tc.name)
			var all []sp
			for _, b := range tc.batches {
				all = append(all, b.spans...)
			}
			input := buildTraces(all...)

			cfg := createDefaultConfig()
			if tc.cfg != nil {
				tc.cfg(cfg)
			}
			h := newHarness(t, cfg)
			for i, b := range tc.batches {
				if i > 0 {
					h.advance(b.after)
				}
				h.consume(buildTraces(b.spans...))
			}
			got := h.finish()

			copies := 0
			for _, s := range all {
				if s.copy {
					copies++
				}
			}
			require.Equal(t, input.SpanCount()-copies, got.SpanCount(), "every span comes out, once; evidence copies do not")
			var tags []string
			for tag := range tc.want {
				tags = append(tags, tag)
			}
			gotAttrs := dupAttrs(t, got, tags...)
			for tag, want := range tc.want {
				g := gotAttrs[tag]
				require.NotNil(t, g, "span %s was not forwarded", tag)
				if want[sc.DuplicateGroup] == anyGroup {
					require.Regexp(t, hex32, g[sc.DuplicateGroup])
					want = clone(want)
					want[sc.DuplicateGroup] = g[sc.DuplicateGroup]
				}
				require.Equal(t, want, g, "idemkit.duplicate.* of span %s", tag)
			}

			inPath, outPath := filepath.Join(dir, "input.yaml"), filepath.Join(dir, "expected.yaml")
			if *update {
				require.NoError(t, os.MkdirAll(dir, 0o755))
				require.NoError(t, golden.WriteTracesToFile(inPath, input))
				require.NoError(t, golden.WriteTracesToFile(outPath, got))
			}
			wantIn, err := golden.ReadTraces(inPath)
			require.NoError(t, err)
			require.NoError(t, ptracetest.CompareTraces(wantIn, input), "input.yaml is stale: go test -run TestGolden -update")
			wantOut, err := golden.ReadTraces(outPath)
			require.NoError(t, err)
			require.NoError(t, ptracetest.CompareTraces(wantOut, got))
		})
	}
}

func clone(m map[string]any) map[string]any {
	c := make(map[string]any, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

// TestGolden_InputUnchanged makes sure the processor never modifies a batch
// of spans that are not tool spans.
func TestGolden_NonToolSpansUntouched(t *testing.T) {
	h := newHarness(t, nil)
	in := buildTraces(
		sp{tag: "http", kind: "http", trace: "t1"},
		sp{tag: "chat", kind: "chat", svc: "agent", trace: "t1", conv: "c1"},
	)
	want := ptrace.NewTraces()
	in.CopyTo(want)
	h.consume(in)
	require.Len(t, h.sink.AllTraces(), 1, "non-tool spans pass at once")
	require.NoError(t, ptracetest.CompareTraces(want, h.sink.AllTraces()[0]))
	h.finish()
}
