package dupprocessor

import (
	"context"
	"errors"
	"math"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/confmap/confmaptest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/processor"
	"go.opentelemetry.io/collector/processor/processortest"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/metric/metricdata/metricdatatest"

	"github.com/idemkit-mcp/idemkit/collector/dupprocessor/internal/metadata"
	"github.com/idemkit-mcp/idemkit/collector/dupprocessor/internal/metadatatest"
	sc "github.com/idemkit-mcp/idemkit/spancontract"
)

func TestConfig(t *testing.T) {
	cm, err := confmaptest.LoadConf(filepath.Join("testdata", "config.yaml"))
	require.NoError(t, err)
	for _, tc := range []struct {
		id      string
		wantErr []string
		check   func(*testing.T, *Config)
	}{
		{id: "dup", check: func(t *testing.T, c *Config) { require.Equal(t, createDefaultConfig(), c) }},
		{id: "dup/custom", check: func(t *testing.T, c *Config) {
			want := createDefaultConfig()
			want.Window = 5 * time.Minute
			want.DecisionWait = 10 * time.Second
			want.OriginalWait = 2 * time.Minute
			want.MaxGroups = 1000
			want.MaxHeldSpans = 5000
			want.HarnessThreshold = time.Second
			want.DeliberateRepeatGap = time.Minute
			want.UnreliableSessionIDs = []string{"stdio", "anonymous"}
			want.MaxArgumentsBytes = 1024
			want.ReadOnlyTools = []string{"get_*", "search"}
			require.Equal(t, want, c)
		}},
		{id: "dup/invalid", wantErr: []string{
			"window: must be positive",
			"decision_wait: must be positive",
			"max_groups: must be positive",
			"max_held_spans: must be positive",
			"harness_threshold: must be positive",
			"max_arguments_bytes: must not be negative",
			"unreliable_session_ids[0]: must not be empty",
			"read_only_tools[0]: must not be empty",
			`read_only_tools[1]: "get_[a" is not a valid glob pattern`,
		}},
		{id: "dup/waits", wantErr: []string{
			"decision_wait: must be shorter than window (1m0s), got 2m0s",
			"original_wait: must be at least decision_wait (2m0s), got 1s",
			"deliberate_repeat_gap: must be longer than harness_threshold (5s), got 5s",
		}},
	} {
		t.Run(tc.id, func(t *testing.T) {
			cfg := createDefaultConfig()
			sub, err := cm.Sub(tc.id)
			require.NoError(t, err)
			require.NoError(t, sub.Unmarshal(cfg))
			err = cfg.Validate()
			if tc.wantErr != nil {
				for _, w := range tc.wantErr {
					require.ErrorContains(t, err, w)
				}
				return
			}
			require.NoError(t, err)
			tc.check(t, cfg)
		})
	}
}

func TestProcessor_ReleasesHeldSpansOnTickerAndShutdown(t *testing.T) {
	cfg := createDefaultConfig()
	cfg.DecisionWait = 20 * time.Millisecond
	sink := new(consumertest.TracesSink)
	p, err := NewFactory().CreateTraces(context.Background(), processortestSettings(), cfg, sink)
	require.NoError(t, err)
	require.NoError(t, p.Start(context.Background(), componenttest.NewNopHost()))
	require.NoError(t, p.ConsumeTraces(context.Background(), buildTraces(
		sp{tag: "A", trace: "t", key: "k", session: "s", req: "1", outcome: sc.OutcomeExecuted},
		sp{tag: "B", trace: "t", key: "k", session: "s", req: "1", at: time.Millisecond, outcome: sc.OutcomeReplayed},
	)))
	require.Eventually(t, func() bool { return sink.SpanCount() == 2 }, 5*time.Second, 5*time.Millisecond)
	got := dupAttrs(t, sink.AllTraces()[0], "A", "B")
	require.Equal(t, sc.CauseTransportRetry, got["B"][sc.DuplicateCause])

	// A span held at shutdown is decided and released, not lost.
	cfg2 := createDefaultConfig()
	sink2 := new(consumertest.TracesSink)
	p2, err := NewFactory().CreateTraces(context.Background(), processortestSettings(), cfg2, sink2)
	require.NoError(t, err)
	require.NoError(t, p2.Start(context.Background(), componenttest.NewNopHost()))
	require.NoError(t, p2.ConsumeTraces(context.Background(), buildTraces(sp{tag: "C", trace: "t", key: "k2", outcome: sc.OutcomeReplayed})))
	require.Zero(t, sink2.SpanCount())
	require.NoError(t, p2.Shutdown(context.Background()))
	require.Equal(t, 1, sink2.SpanCount())
	require.NoError(t, p.Shutdown(context.Background()))
	// After shutdown, spans pass straight through.
	require.NoError(t, p2.ConsumeTraces(context.Background(), buildTraces(sp{tag: "D", trace: "t", key: "k2"})))
	require.Equal(t, 2, sink2.SpanCount())
}

func TestProcessor_MaxHeldSpansReleasesEarly(t *testing.T) {
	cfg := createDefaultConfig()
	cfg.MaxHeldSpans = 2
	h := newHarness(t, cfg)
	h.consume(buildTraces(sp{tag: "A", trace: "t", key: "k1"}, sp{tag: "B", trace: "t", key: "k2"}))
	require.Zero(t, h.sink.SpanCount())
	h.consume(buildTraces(sp{tag: "C", trace: "t", key: "k3"}))
	require.Equal(t, 2, h.sink.SpanCount(), "the oldest batch is released early")
	require.Equal(t, 3, h.finish().SpanCount())
}

func TestProcessor_PassthroughErrorIsReturned(t *testing.T) {
	want := errors.New("refused")
	h := newHarnessNext(t, nil, consumertest.NewErr(want))
	err := h.p.ConsumeTraces(context.Background(), buildTraces(sp{tag: "x", kind: "http", trace: "t"}))
	require.ErrorIs(t, err, want)
	// Held spans that the next consumer refuses are logged, not retried.
	require.NoError(t, h.p.ConsumeTraces(context.Background(), buildTraces(sp{tag: "A", trace: "t", key: "k"})))
	h.finish()
}

func TestProcessor_ForgedAnnotationsAreReplaced(t *testing.T) {
	h := newHarness(t, nil)
	td := buildTraces(sp{tag: "A", trace: "t", key: "k", session: "s", req: "1"})
	attrs := td.ResourceSpans().At(0).ScopeSpans().At(0).Spans().At(0).Attributes()
	attrs.PutBool(sc.Duplicate, true)
	attrs.PutStr(sc.DuplicateCause, sc.CauseHarnessRetry)
	attrs.PutStr(sc.DuplicateGroup, "forged")
	h.consume(td)
	require.Equal(t, none(), dupAttrs(t, h.finish(), "A")["A"])
}

// Tool spans the processor does not track (a read, a refusal, a span that
// could not be compared) lose forged idemkit.duplicate* attributes too:
// the connector would count them as duplicates.
func TestProcessor_UntrackedToolSpansLoseForgedAnnotations(t *testing.T) {
	cfg := createDefaultConfig()
	cfg.ReadOnlyTools = []string{"get_*"}
	h := newHarness(t, cfg)
	td := buildTraces(
		sp{tag: "read", kind: "mcp", trace: "t", tool: "get_weather", args: `{"city":"Paris"}`, session: "s", req: "1"},
		sp{tag: "noargs", kind: "mcp", trace: "t", tool: "send_email", session: "s", req: "2"},
		sp{tag: "refused", trace: "t", key: "k", session: "s", req: "3", refusal: sc.RefusalInvalidArguments},
	)
	spans := td.ResourceSpans().At(0).ScopeSpans().At(0).Spans()
	for i := 0; i < spans.Len(); i++ {
		attrs := spans.At(i).Attributes()
		attrs.PutBool(sc.Duplicate, true)
		attrs.PutStr(sc.DuplicateCause, sc.CauseHarnessRetry)
		attrs.PutStr(sc.DuplicateEffect, sc.EffectLeaked)
	}
	h.consume(td)
	got := dupAttrs(t, h.finish(), "read", "noargs", "refused")
	require.Equal(t, none(), got["read"])
	require.Equal(t, uncompared(), got["noargs"])
	require.Equal(t, none(), got["refused"])
}

// A bypassed call with reason unprotected is a read unless it carries an
// argument hash, on the span or (an older two-tier setup moved it there)
// its resource.
func TestProcessor_UnprotectedWriteIsToldByItsArgumentHash(t *testing.T) {
	h := newHarness(t, nil)
	td := buildTraces(
		sp{tag: "A", kind: "server", trace: "t", key: "k", subject: "u", session: "s", req: "1", outcome: sc.OutcomeBypassed, bypass: sc.BypassUnprotected},
		sp{tag: "B", kind: "server", trace: "t", key: "k", subject: "u", session: "s", req: "2", at: 300 * time.Millisecond, outcome: sc.OutcomeBypassed, bypass: sc.BypassUnprotected},
	)
	td.ResourceSpans().At(0).Resource().Attributes().PutStr(sc.ArgsHash, keyHashOf("args"))
	h.consume(td)
	got := dupAttrs(t, h.finish(), "A", "B")
	require.Equal(t, dup(sc.CauseHarnessRetry, sc.EffectLeaked, keyHashOf("k"), "A", 300*time.Millisecond), got["B"])
}

func TestProcessor_ResentSpanIsNotADuplicate(t *testing.T) {
	h := newHarness(t, nil)
	a := sp{tag: "A", trace: "t", key: "k", session: "s", req: "1", outcome: sc.OutcomeExecuted}
	h.consume(buildTraces(a))
	h.consume(buildTraces(a)) // an exporter retry delivers the same span again
	out := h.finish()
	require.Equal(t, 2, out.SpanCount(), "both copies are forwarded")
	spans := allSpans(out)
	for _, s := range spans {
		_, ok := s.Attributes().Get(sc.Duplicate)
		require.False(t, ok)
	}
}

// A call idemkit refused before any claim (its store was down) carries the
// key hashes and a refusal reason but no outcome: the tool never ran. The
// retry the refusal invites, which runs the tool, is the first execution,
// not a duplicate that leaked.
func TestProcessor_RefusedCallIsNotAnExecution(t *testing.T) {
	h := newHarness(t, nil)
	h.consume(buildTraces(
		sp{tag: "A", trace: "t", key: "k", subject: "alice", session: "s", req: "1", refusal: sc.RefusalStoreUnavailable},
		sp{tag: "B", trace: "t", key: "k", subject: "alice", session: "s", req: "2", at: 3 * time.Second, outcome: sc.OutcomeExecuted, attempt: 1},
		sp{tag: "C", trace: "t", key: "k", subject: "alice", session: "s", req: "3", at: 4 * time.Second, outcome: sc.OutcomeReplayed, attempt: 1},
	))
	got := dupAttrs(t, h.finish(), "A", "B", "C")
	require.Equal(t, none(), got["A"])
	require.Equal(t, none(), got["B"], "the retry after a refusal is the first execution")
	require.Equal(t, sc.EffectSuppressed, got["C"][sc.DuplicateEffect])
	require.Equal(t, spanIDOf("B").String(), got["C"][sc.DuplicateFirstSpanID], "the group starts at the execution, not at the refusal")
}

func TestProcessor_Telemetry(t *testing.T) {
	tt := componenttest.NewTelemetry()
	t.Cleanup(func() { require.NoError(t, tt.Shutdown(context.Background())) })
	cfg := createDefaultConfig()
	cfg.MaxGroups = 3
	sink := new(consumertest.TracesSink)
	p, err := newDupProcessor(metadatatest.NewSettings(tt), cfg, sink)
	require.NoError(t, err)
	clock := &fakeClock{t: time.Unix(1_900_000_000, 0)}
	p.now = clock.Now
	ctx := context.Background()
	require.NoError(t, p.ConsumeTraces(ctx, buildTraces(
		sp{tag: "A", trace: "t", key: "k1", session: "s", req: "1", at: time.Second},
		sp{tag: "C", trace: "t", key: "k2", session: "s", req: "2", at: 2 * time.Second},
		sp{tag: "B", trace: "t", key: "k2", session: "s", req: "2", at: 2100 * time.Millisecond},
		sp{tag: "H1", trace: "t", key: "k5", session: "s", req: "5", at: 4 * time.Second},
		sp{tag: "H2", trace: "t", key: "k5", session: "s", req: "6", at: 4300 * time.Millisecond},
		sp{tag: "D", trace: "t", key: "k3", session: "s", req: "3", at: 3 * time.Second}, // evicts k1, the oldest not seen again
		sp{tag: "E", trace: "t", kind: "mcp"},                                            // no key
		sp{tag: "F", trace: "t", key: "k4", outcome: sc.OutcomeBypassed},
	)))
	p.tick(clock.Advance(cfg.DecisionWait))
	// A late original of k2 (C was decided as a first call) and a late chat
	// inside the decided harness retry H1 -> H2.
	require.NoError(t, p.ConsumeTraces(ctx, buildTraces(
		sp{tag: "C0", trace: "t", key: "k2", session: "s", req: "9", at: 1500 * time.Millisecond},
	)))
	require.NoError(t, p.ConsumeTraces(ctx, buildTraces(
		sp{tag: "chat", kind: "chat", trace: "t", at: 4100 * time.Millisecond},
	)))
	require.NoError(t, p.Shutdown(ctx))

	metadatatest.AssertEqualProcessorDupEvictions(t, tt, []metricdata.DataPoint[int64]{{Value: 1}}, metricdatatest.IgnoreTimestamp())
	metadatatest.AssertEqualProcessorDupLateSpans(t, tt, []metricdata.DataPoint[int64]{
		{Value: 1, Attributes: attribute.NewSet(attribute.String("span", "tool"))},
		{Value: 1, Attributes: attribute.NewSet(attribute.String("span", "chat"))},
	}, metricdatatest.IgnoreTimestamp())
	metadatatest.AssertEqualProcessorDupSpansClassified(t, tt, []metricdata.DataPoint[int64]{
		{Value: 1, Attributes: attribute.NewSet(attribute.String("cause", sc.CauseTransportRetry))},
		{Value: 1, Attributes: attribute.NewSet(attribute.String("cause", sc.CauseHarnessRetry))},
		{Value: 5, Attributes: attribute.NewSet(attribute.String("cause", "none"))},
	}, metricdatatest.IgnoreTimestamp())
	metadatatest.AssertEqualProcessorDupSpansIgnored(t, tt, []metricdata.DataPoint[int64]{
		{Value: 1, Attributes: attribute.NewSet(attribute.String("reason", "no_key"))},
		{Value: 1, Attributes: attribute.NewSet(attribute.String("reason", "read_only"))},
	}, metricdatatest.IgnoreTimestamp())
	metadatatest.AssertEqualProcessorDupGroupsTracked(t, tt, []metricdata.DataPoint[int64]{{Value: 3}}, metricdatatest.IgnoreTimestamp())
	metadatatest.AssertEqualProcessorDupSpansHeld(t, tt, []metricdata.DataPoint[int64]{{Value: 0}}, metricdatatest.IgnoreTimestamp())
	require.Equal(t, 10, sink.SpanCount())
}

// A started processor exports every event counter at 0 before the first
// event, so that rate() and increase() see the first increment and a healthy
// Collector's dashboard shows 0 evictions rather than "No data".
func TestProcessor_TelemetryStartsAtZero(t *testing.T) {
	tt := componenttest.NewTelemetry()
	t.Cleanup(func() { require.NoError(t, tt.Shutdown(context.Background())) })
	p, err := newDupProcessor(metadatatest.NewSettings(tt), createDefaultConfig(), new(consumertest.TracesSink))
	require.NoError(t, err)
	ctx := context.Background()
	require.NoError(t, p.Start(ctx, componenttest.NewNopHost()))
	t.Cleanup(func() { require.NoError(t, p.Shutdown(ctx)) })

	metadatatest.AssertEqualProcessorDupEvictions(t, tt, []metricdata.DataPoint[int64]{{Value: 0}}, metricdatatest.IgnoreTimestamp())
	metadatatest.AssertEqualProcessorDupLateSpans(t, tt, []metricdata.DataPoint[int64]{
		{Value: 0, Attributes: attribute.NewSet(attribute.String("span", "tool"))},
		{Value: 0, Attributes: attribute.NewSet(attribute.String("span", "chat"))},
	}, metricdatatest.IgnoreTimestamp())
	var classified []metricdata.DataPoint[int64]
	for _, c := range []string{sc.CauseTransportRetry, sc.CauseHarnessRetry, sc.CauseModelReissue, sc.CauseReconnectReplay, sc.CauseUnknown, "none"} {
		classified = append(classified, metricdata.DataPoint[int64]{Attributes: attribute.NewSet(attribute.String("cause", c))})
	}
	metadatatest.AssertEqualProcessorDupSpansClassified(t, tt, classified, metricdatatest.IgnoreTimestamp())
	var ignored []metricdata.DataPoint[int64]
	metadatatest.AssertEqualProcessorDupEvidenceCopies(t, tt, []metricdata.DataPoint[int64]{{Value: 0}}, metricdatatest.IgnoreTimestamp())
	for _, r := range []string{"no_key", "bad_timestamp", "excluded_outcome", "resent", "read_only"} {
		ignored = append(ignored, metricdata.DataPoint[int64]{Attributes: attribute.NewSet(attribute.String("reason", r))})
	}
	metadatatest.AssertEqualProcessorDupSpansIgnored(t, tt, ignored, metricdatatest.IgnoreTimestamp())
}

func allSpans(td ptrace.Traces) []ptrace.Span {
	var out []ptrace.Span
	rss := td.ResourceSpans()
	for i := 0; i < rss.Len(); i++ {
		sss := rss.At(i).ScopeSpans()
		for j := 0; j < sss.Len(); j++ {
			spans := sss.At(j).Spans()
			for k := 0; k < spans.Len(); k++ {
				out = append(out, spans.At(k))
			}
		}
	}
	return out
}

// malformedBatch returns tool spans whose attributes have wrong types, huge
// values, absurd timestamps and missing IDs, mixed with well-formed ones.
func malformedBatch() ptrace.Traces {
	td := ptrace.NewTraces()
	td.ResourceSpans().AppendEmpty()                            // no scopes
	td.ResourceSpans().AppendEmpty().ScopeSpans().AppendEmpty() // no spans
	rs := td.ResourceSpans().AppendEmpty()
	rs.Resource().Attributes().PutEmptyMap(serviceNameKey).PutStr("nested", "yes")
	spans := rs.ScopeSpans().AppendEmpty().Spans()
	huge := strings.Repeat("x", 4<<20)
	deep := strings.Repeat("[", 100_000) + strings.Repeat("]", 100_000)
	tool := func(f func(s ptrace.Span, m pcommon.Map)) {
		s := spans.AppendEmpty()
		s.SetTraceID(traceIDOf("t"))
		s.SetSpanID(spanIDOf(pcommon.NewTimestampFromTime(time.Now()).String() + s.Name()))
		s.SetStartTimestamp(pcommon.NewTimestampFromTime(eventBase))
		s.Attributes().PutStr(sc.GenAIOperationName, sc.OperationExecuteTool)
		f(s, s.Attributes())
	}
	tool(func(_ ptrace.Span, m pcommon.Map) { m.PutInt(sc.KeyHash, 42) })
	tool(func(_ ptrace.Span, m pcommon.Map) { m.PutEmptyMap(sc.KeyHash).PutStr("a", "b") })
	tool(func(_ ptrace.Span, m pcommon.Map) { m.PutStr(sc.KeyHash, huge) })
	tool(func(_ ptrace.Span, m pcommon.Map) { m.PutStr(sc.KeyHash, "zz"+strings.Repeat("0", 30)) })
	tool(func(_ ptrace.Span, m pcommon.Map) { m.PutStr(sc.GenAIToolCallArguments, huge) })
	tool(func(_ ptrace.Span, m pcommon.Map) { m.PutStr(sc.GenAIToolCallArguments, deep) })
	tool(func(_ ptrace.Span, m pcommon.Map) { m.PutStr(sc.GenAIToolCallArguments, `{"a":`) })
	tool(func(_ ptrace.Span, m pcommon.Map) {
		m.PutEmptyBytes(sc.GenAIToolCallArguments).FromRaw([]byte{0xff, 0})
	})
	tool(func(_ ptrace.Span, m pcommon.Map) {
		args := m.PutEmptyMap(sc.GenAIToolCallArguments)
		args.PutDouble("nan", math.NaN())
		args.PutDouble("inf", math.Inf(1))
	})
	tool(func(_ ptrace.Span, m pcommon.Map) {
		m.PutStr(sc.KeyHash, keyHashOf("m"))
		m.PutEmptySlice(sc.MCPSessionID)
		m.PutDouble(sc.JSONRPCRequestID, 1e20)
		m.PutDouble(sc.Attempt, math.NaN())
		m.PutInt(sc.Outcome, 3)
		m.PutBool(sc.WriteID, true)
	})
	tool(func(_ ptrace.Span, m pcommon.Map) {
		m.PutStr(sc.KeyHash, keyHashOf("m"))
		m.PutDouble(sc.JSONRPCRequestID, math.Inf(-1))
		m.PutStr(sc.Attempt, "2")
		m.PutStr(sc.Outcome, "exploded")
		m.PutStr(sc.MCPSessionID, huge)
	})
	tool(func(s ptrace.Span, m pcommon.Map) { s.SetStartTimestamp(0); m.PutStr(sc.KeyHash, keyHashOf("m")) })
	tool(func(s ptrace.Span, m pcommon.Map) {
		s.SetStartTimestamp(pcommon.Timestamp(math.MaxUint64))
		m.PutStr(sc.KeyHash, keyHashOf("m"))
	})
	tool(func(s ptrace.Span, m pcommon.Map) {
		s.SetStartTimestamp(pcommon.Timestamp(math.MaxInt64))
		s.SetEndTimestamp(1)
		m.PutStr(sc.KeyHash, keyHashOf("m"))
	})
	tool(func(s ptrace.Span, m pcommon.Map) {
		s.SetStartTimestamp(1)
		s.SetTraceID(pcommon.NewTraceIDEmpty())
		s.SetSpanID(pcommon.NewSpanIDEmpty())
		m.PutStr(sc.KeyHash, keyHashOf("m"))
	})
	// Not tool spans: wrong types on the recognising attributes.
	s := spans.AppendEmpty()
	s.Attributes().PutInt(sc.GenAIOperationName, 1)
	s = spans.AppendEmpty()
	s.SetKind(ptrace.SpanKindServer)
	s.Attributes().PutEmptyMap(sc.MCPMethodName)
	s = spans.AppendEmpty()
	s.Attributes().PutStr(sc.GenAIOperationName, sc.OperationChat)
	s.Attributes().PutEmptyMap(sc.GenAIConversationID)
	spans.AppendEmpty() // an empty span
	return td
}

// TestProcessor_MalformedInput never panics and never drops a span.
func TestProcessor_MalformedInput(t *testing.T) {
	h := newHarness(t, nil)
	in := malformedBatch()
	n := in.SpanCount()
	require.NotPanics(t, func() {
		h.consume(in)
		h.consume(malformedBatch())
	})
	out := h.finish()
	require.Equal(t, 2*n, out.SpanCount())
}

// FuzzProcessor feeds two tool spans built from fuzzed attributes. Its seed
// corpus runs with every `go test`; `go test -fuzz FuzzProcessor` explores.
func FuzzProcessor(f *testing.F) {
	f.Add("k", "s", "1", `{"a":1}`, "executed", uint64(1), uint64(2), int64(1))
	f.Add("", "", "", `{"a":`, "", uint64(0), uint64(math.MaxUint64), int64(-1))
	f.Add(strings.Repeat("f", 32), "stdio", "1e400", `[[[[`, "replayed", uint64(math.MaxInt64), uint64(1), int64(99))
	f.Fuzz(func(t *testing.T, key, session, req, args, outcome string, start1, start2 uint64, attempt int64) {
		td := ptrace.NewTraces()
		spans := td.ResourceSpans().AppendEmpty().ScopeSpans().AppendEmpty().Spans()
		for i, start := range []uint64{start1, start2} {
			s := spans.AppendEmpty()
			s.SetSpanID(spanIDOf(string(rune('a' + i))))
			s.SetTraceID(traceIDOf("t"))
			s.SetStartTimestamp(pcommon.Timestamp(start))
			m := s.Attributes()
			m.PutStr(sc.GenAIOperationName, sc.OperationExecuteTool)
			m.PutStr(sc.KeyHash, key)
			m.PutStr(sc.MCPSessionID, session)
			m.PutStr(sc.JSONRPCRequestID, req)
			m.PutStr(sc.GenAIToolCallArguments, args)
			m.PutStr(sc.Outcome, outcome)
			m.PutInt(sc.Attempt, attempt)
		}
		h := newHarness(t, nil)
		h.consume(td)
		require.Equal(t, 2, h.finish().SpanCount())
	})
}

func TestCanonicalArguments(t *testing.T) {
	k := keyer{maxArgs: DefaultMaxArgumentsBytes}
	a := pcommon.NewValueStr(`{"b":[1,2.0,{"y":true,"x":null}],"a":"é"}`)
	b := pcommon.NewValueMap()
	b.Map().PutStr("a", "é")
	sl := b.Map().PutEmptySlice("b")
	sl.AppendEmpty().SetInt(1)
	sl.AppendEmpty().SetDouble(2)
	m := sl.AppendEmpty().SetEmptyMap()
	m.PutEmpty("x")
	m.PutBool("y", true)
	require.Equal(t, `c{"a":"é","b":[1,2,{"x":null,"y":true}]}`, k.canonicalArgs(a))
	require.Equal(t, k.canonicalArgs(a), k.canonicalArgs(b), "a JSON string and a map attribute group together")
	small := keyer{maxArgs: 4}
	require.Equal(t, `r{"a":1}`, small.canonicalArgs(pcommon.NewValueStr(`{"a":1}`)), "over max_arguments_bytes: hashed as is")
}

func processortestSettings() processor.Settings { return processortest.NewNopSettings(metadata.Type) }
