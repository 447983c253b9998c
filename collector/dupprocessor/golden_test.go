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

	sc "github.com/idemkit/idemkit/spancontract"
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

			require.Equal(t, input.SpanCount(), got.SpanCount(), "every span comes out, once")
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
