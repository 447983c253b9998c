package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"google.golang.org/grpc"
	_ "google.golang.org/grpc/encoding/gzip" // the Collector's otlp exporter compresses with gzip

	sc "github.com/idemkit-mcp/idemkit/spancontract"
)

// otlpSink is an OTLP/gRPC trace receiver: the trace backend behind the
// Collectors under test. It keeps every span it receives.
type otlpSink struct {
	ptraceotlp.UnimplementedGRPCServer
	name string
	port int

	mu    sync.Mutex // protects spans
	spans []sunk
}

// sunk is a span as a sink received it.
type sunk struct {
	id, name string
	tool     bool
	dup      map[string]any // its idemkit.duplicate.* attributes
	copy     bool           // its resource carries idemkit.evidence.copy
}

func startSink(t *testing.T, name string) *otlpSink {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &otlpSink{name: name, port: l.Addr().(*net.TCPAddr).Port}
	srv := grpc.NewServer()
	ptraceotlp.RegisterGRPCServer(srv, s)
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(srv.Stop)
	return s
}

// Export keeps the spans of req.
func (s *otlpSink) Export(_ context.Context, req ptraceotlp.ExportRequest) (ptraceotlp.ExportResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rss := req.Traces().ResourceSpans()
	for i := 0; i < rss.Len(); i++ {
		_, isCopy := rss.At(i).Resource().Attributes().Get(sc.EvidenceCopy)
		sss := rss.At(i).ScopeSpans()
		for j := 0; j < sss.Len(); j++ {
			for _, sp := range sss.At(j).Spans().All() {
				d := map[string]any{}
				for k, v := range sp.Attributes().All() {
					if k == sc.Duplicate || strings.HasPrefix(k, sc.Duplicate+".") {
						d[k] = v.AsRaw()
					}
				}
				_, tool := sp.Attributes().Get(sc.GenAIToolName)
				s.spans = append(s.spans, sunk{id: sp.SpanID().String(), name: sp.Name(), tool: tool, dup: d, copy: isCopy})
			}
		}
	}
	return ptraceotlp.NewExportResponse(), nil
}

func (s *otlpSink) received() []sunk {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]sunk(nil), s.spans...)
}

// sinkOverlay writes a configuration that, merged after a shipped one,
// sends its annotated spans to the sink as well as to the dup connector.
func sinkOverlay(t *testing.T, sink *otlpSink) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "sink.yaml")
	cfg := fmt.Sprintf(`exporters:
  otlp/e2e_sink:
    endpoint: 127.0.0.1:%d
    tls:
      insecure: true
service:
  pipelines:
    traces:
      exporters: [dup, otlp/e2e_sink]
`, sink.port)
	if err := os.WriteFile(p, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// labelled is one generated span and the annotation it must get.
type labelled struct {
	tag   string
	want  map[string]any // nil: no annotation
	group string         // the duplicate group of a tool span ("" for others)
}

// twoTierStream is a labelled stream of exports, as the processes of a
// deployment send them: each export is one process's batch.
type twoTierStream struct {
	exports []ptrace.Traces
	labels  []labelled
	groups  map[string][]string // group -> its tool span tags
	model   []string            // groups whose answer only a chat span decides
}

type call struct {
	tag, trace, key, subject, session, req, outcome string
	args                                            string // another instrumentation's call: its arguments, no key
	noArgs                                          bool   // another instrumentation's call without captured arguments
	user                                            string // user.id
	bypass, argsHash                                string // idemkit.bypass.reason; seeds idemkit.args.hash
	parent                                          string // seeds the remote parent (the client's span, from params._meta)
	at                                              time.Duration
}

func (st *twoTierStream) export(service, instance string, spans ...any) {
	td := ptrace.NewTraces()
	rs := td.ResourceSpans().AppendEmpty()
	rs.Resource().Attributes().PutStr("service.name", service)
	rs.Resource().Attributes().PutStr("service.instance.id", instance)
	ss := rs.ScopeSpans().AppendEmpty().Spans()
	for _, x := range spans {
		switch c := x.(type) {
		case call:
			s := ss.AppendEmpty()
			s.SetName("tools/call issue_refund")
			s.SetKind(ptrace.SpanKindServer)
			s.SetTraceID(id16(c.trace))
			s.SetSpanID(id8(c.tag))
			s.SetStartTimestamp(pcommon.NewTimestampFromTime(eventBase.Add(c.at)))
			s.SetEndTimestamp(pcommon.NewTimestampFromTime(eventBase.Add(c.at + 30*time.Millisecond)))
			if c.parent != "" {
				// What the Go SDK's exporter writes for a parent from
				// params._meta: sampled, HAS_IS_REMOTE, IS_REMOTE.
				s.SetParentSpanID(id8("parent/" + c.parent))
				s.SetFlags(0x301)
			}
			m := s.Attributes()
			m.PutStr(sc.MCPMethodName, sc.MethodToolsCall)
			m.PutStr(sc.GenAIToolName, "issue_refund")
			if c.session != "" {
				m.PutStr(sc.MCPSessionID, c.session)
			}
			if c.req != "" {
				m.PutStr(sc.JSONRPCRequestID, c.req)
			}
			if c.user != "" {
				m.PutStr(sc.UserID, c.user)
			}
			if c.args != "" || c.noArgs {
				// Another instrumentation: no gen_ai.operation.name, no key.
				if c.args != "" {
					m.PutStr(sc.GenAIToolCallArguments, c.args)
				}
				continue
			}
			m.PutStr(sc.GenAIOperationName, sc.OperationExecuteTool)
			m.PutStr(sc.KeyHash, keyHash(c.key))
			m.PutStr(sc.KeySource, sc.KeySourceDerived)
			m.PutStr(sc.SubjectHash, keyHash("subject/"+c.subject))
			m.PutStr(sc.Outcome, c.outcome)
			if c.bypass != "" {
				m.PutStr(sc.BypassReason, c.bypass)
			}
			if c.argsHash != "" {
				m.PutStr(sc.ArgsHash, keyHash("args/"+c.argsHash))
			}
		case chatAt:
			s := ss.AppendEmpty()
			s.SetName("chat gpt-test")
			s.SetKind(ptrace.SpanKindClient)
			s.SetTraceID(id16(c.trace))
			s.SetSpanID(id8(c.tag))
			s.SetStartTimestamp(pcommon.NewTimestampFromTime(eventBase.Add(c.at)))
			s.SetEndTimestamp(pcommon.NewTimestampFromTime(eventBase.Add(c.at + 200*time.Millisecond)))
			s.Attributes().PutStr(sc.GenAIOperationName, sc.OperationChat)
			if c.user != "" {
				s.Attributes().PutStr(sc.UserID, c.user)
			}
		}
	}
	st.exports = append(st.exports, td)
}

type chatAt struct {
	tag, trace, user string
	at               time.Duration
}

func (st *twoTierStream) label(tag, group string, want map[string]any) {
	st.labels = append(st.labels, labelled{tag: tag, group: group, want: want})
	if group != "" {
		st.groups[group] = append(st.groups[group], tag)
	}
}

func annotation(cause, effect, group, firstTag string, gap time.Duration) map[string]any {
	return map[string]any{
		sc.Duplicate:            true,
		sc.DuplicateCause:       cause,
		sc.DuplicateEffect:      effect,
		sc.DuplicateGroup:       group,
		sc.DuplicateFirstSpanID: id8(firstTag).String(),
		sc.DuplicateGapMS:       gap.Milliseconds(),
	}
}

// newTwoTierStream generates, per group index i:
//   - a reconnect replay in a new trace on another replica (the original on
//     replica r1 in trace A, the replay on r2 in trace B, new session);
//   - a repeat 800ms later on the same session that only the agent's chat
//     span in between tells from a harness retry (model re-issue);
//   - the same repeat without a chat span (harness retry);
//   - another instrumentation's call (no key) by user u-i, made again by
//     the same user from a new session and trace (reconnect replay), and
//     the same call by another user (not a duplicate);
//   - issue 22: carol's and dave's identical calls on a gateway's one
//     session "default" (not duplicates) and carol's harness retry; erin's
//     and frank's identical calls inside one orchestrator's trace (not
//     duplicates); una's harness retry and vic's model re-issue in that
//     trace, where only vic's inference span (naming vic) lies between
//     (the spans of the two groups may go to different tier-2
//     Collectors, the chat to both); two calls without captured arguments
//     (uncompared); a write left unprotected, with its argument hash,
//     repeated (leaked); a harness retry over stateless HTTP that only the
//     client's parents in params._meta prove.
func newTwoTierStream(n int) *twoTierStream {
	st := &twoTierStream{groups: map[string][]string{}}
	for i := 0; i < n; i++ {
		base := time.Duration(i) * 3 * time.Second
		rk, mk, hk := fmt.Sprintf("rr-%d", i), fmt.Sprintf("mr-%d", i), fmt.Sprintf("hr-%d", i)
		sess, sess2 := fmt.Sprintf("sess-%d", i), fmt.Sprintf("sess-%d-b", i)
		agent := fmt.Sprintf("agent-%d", i)
		st.export("mcp-billing", "r1",
			call{tag: rk + "/a", trace: agent, key: rk, subject: "u", session: sess, req: "1", outcome: sc.OutcomeExecuted, at: base},
			call{tag: mk + "/a", trace: agent, key: mk, subject: "u", session: sess, req: "2", outcome: sc.OutcomeExecuted, at: base + 100*time.Millisecond},
			call{tag: hk + "/a", trace: agent, key: hk, subject: "u", session: sess, req: "3", outcome: sc.OutcomeExecuted, at: base + 200*time.Millisecond},
			call{tag: fmt.Sprintf("f-%d/a", i), trace: agent, args: fmt.Sprintf(`{"order":"o-%d"}`, i), user: fmt.Sprintf("u-%d", i), session: sess, req: "4", at: base + 300*time.Millisecond},
		)
		st.export("agent", "agent-1", chatAt{tag: mk + "/chat", trace: agent + "/mr", at: base + 500*time.Millisecond})
		st.export("mcp-billing", "r1",
			call{tag: mk + "/b", trace: agent + "/mr", key: mk, subject: "u", session: sess, req: "5", outcome: sc.OutcomeReplayed, at: base + 900*time.Millisecond},
			call{tag: hk + "/b", trace: agent, key: hk, subject: "u", session: sess, req: "6", outcome: sc.OutcomeInProgress, at: base + time.Second},
		)
		// Another replica, another trace, another session: the reconnect.
		st.export("mcp-billing", "r2",
			call{tag: rk + "/b", trace: agent + "/reconnected", key: rk, subject: "u", session: sess2, req: "1", outcome: sc.OutcomeReplayed, at: base + 2*time.Second},
			call{tag: fmt.Sprintf("f-%d/b", i), trace: agent + "/reconnected", args: fmt.Sprintf(`{"order":"o-%d"}`, i), user: fmt.Sprintf("u-%d", i), session: sess2, req: "7", at: base + 2100*time.Millisecond},
			call{tag: fmt.Sprintf("f-%d/other", i), trace: fmt.Sprintf("other-%d", i), args: fmt.Sprintf(`{"order":"o-%d"}`, i), user: fmt.Sprintf("v-%d", i), session: fmt.Sprintf("other-%d", i), req: "1", at: base + 2200*time.Millisecond},
		)
		rg, mg, hg := keyHash(rk), keyHash(mk), keyHash(hk)
		fg := fmt.Sprintf("f-%d", i) // the processor's own hash: any value, the same in both deployments
		st.label(rk+"/a", rg, nil)
		st.label(rk+"/b", rg, annotation(sc.CauseReconnectReplay, sc.EffectSuppressed, rg, rk+"/a", 2*time.Second))
		st.label(mk+"/a", mg, nil)
		st.label(mk+"/b", mg, annotation(sc.CauseModelReissue, sc.EffectSuppressed, mg, mk+"/a", 800*time.Millisecond))
		st.label(hk+"/a", hg, nil)
		st.label(hk+"/b", hg, annotation(sc.CauseHarnessRetry, sc.EffectBlocked, hg, hk+"/a", 800*time.Millisecond))
		st.label(fg+"/a", fg, nil)
		st.label(fg+"/b", fg, annotation(sc.CauseReconnectReplay, sc.EffectLeaked, "", fg+"/a", 1800*time.Millisecond))
		st.label(fg+"/other", fg, nil)
		st.label(mk+"/chat", "", nil)
		st.model = append(st.model, mg)

		// Issue 22. Another instrumentation's spans route together (one
		// service and tool); idemkit's by their key.
		orch := fmt.Sprintf("orchestrator-%d", i)
		ua, va, pa, wa := fmt.Sprintf("una-%d", i), fmt.Sprintf("vic-%d", i), fmt.Sprintf("parents-%d", i), fmt.Sprintf("unprotected-%d", i)
		gw, ab, nc := fmt.Sprintf("gw-%d", i), fmt.Sprintf("orch-%d", i), fmt.Sprintf("noargs-%d", i)
		gwArgs, orchArgs := fmt.Sprintf(`{"order":"gw-%d"}`, i), fmt.Sprintf(`{"order":"orch-%d"}`, i)
		st.export("mcp-billing", "r1",
			call{tag: gw + "/carol", trace: gw + "/t1", args: gwArgs, user: "carol", session: "default", req: "1", at: base + 400*time.Millisecond},
			call{tag: gw + "/dave", trace: gw + "/t2", args: gwArgs, user: "dave", session: "default", req: "1", at: base + 600*time.Millisecond},
			call{tag: ab + "/erin", trace: orch, args: orchArgs, user: "erin", req: "1", at: base + 400*time.Millisecond},
			call{tag: ab + "/frank", trace: orch, args: orchArgs, user: "frank", req: "1", at: base + 700*time.Millisecond},
			call{tag: ua + "/a", trace: orch, key: ua, subject: "una", user: "una", session: ua, req: "1", outcome: sc.OutcomeExecuted, at: base + time.Second},
			call{tag: va + "/a", trace: orch, key: va, subject: "vic", user: "vic", session: va, req: "1", outcome: sc.OutcomeExecuted, at: base + 1100*time.Millisecond},
			call{tag: nc + "/a", trace: nc, noArgs: true, session: sess, req: "11", at: base + 500*time.Millisecond},
			call{tag: wa + "/a", trace: agent, key: wa, subject: "u", session: sess, req: "12", outcome: sc.OutcomeBypassed, bypass: sc.BypassUnprotected, argsHash: wa, at: base + 1200*time.Millisecond},
			call{tag: pa + "/a", trace: agent + "/p", parent: pa + "/client-a", key: pa, subject: "u", req: "1", outcome: sc.OutcomeExecuted, at: base + 100*time.Millisecond},
		)
		st.export("orchestrator", "orchestrator-1", chatAt{tag: va + "/chat", trace: orch, user: "vic", at: base + 1300*time.Millisecond})
		st.export("mcp-billing", "r2",
			call{tag: gw + "/carol-b", trace: gw + "/t3", args: gwArgs, user: "carol", session: "default", req: "2", at: base + 900*time.Millisecond},
			call{tag: ua + "/b", trace: orch, key: ua, subject: "una", user: "una", session: ua, req: "2", outcome: sc.OutcomeReplayed, at: base + 1600*time.Millisecond},
			call{tag: va + "/b", trace: orch, key: va, subject: "vic", user: "vic", session: va, req: "2", outcome: sc.OutcomeReplayed, at: base + 1700*time.Millisecond},
			call{tag: nc + "/b", trace: nc + "/b", noArgs: true, session: sess, req: "13", at: base + 700*time.Millisecond},
			call{tag: wa + "/b", trace: agent, key: wa, subject: "u", session: sess, req: "14", outcome: sc.OutcomeBypassed, bypass: sc.BypassUnprotected, argsHash: wa, at: base + 1500*time.Millisecond},
			call{tag: pa + "/b", trace: agent + "/p", parent: pa + "/client-b", key: pa, subject: "u", req: "2", outcome: sc.OutcomeInProgress, at: base + 500*time.Millisecond},
		)
		uncomp := map[string]any{sc.DuplicateUncompared: true}
		st.label(gw+"/carol", gw, nil)
		st.label(gw+"/dave", gw, nil)
		st.label(gw+"/carol-b", gw, annotation(sc.CauseHarnessRetry, sc.EffectLeaked, "", gw+"/carol", 500*time.Millisecond))
		st.label(ab+"/erin", ab, nil)
		st.label(ab+"/frank", ab, nil)
		st.label(ua+"/a", keyHash(ua), nil)
		st.label(ua+"/b", keyHash(ua), annotation(sc.CauseHarnessRetry, sc.EffectSuppressed, keyHash(ua), ua+"/a", 600*time.Millisecond))
		st.label(va+"/a", keyHash(va), nil)
		st.label(va+"/b", keyHash(va), annotation(sc.CauseModelReissue, sc.EffectSuppressed, keyHash(va), va+"/a", 600*time.Millisecond))
		st.label(va+"/chat", "", nil)
		st.label(nc+"/a", nc, uncomp)
		st.label(nc+"/b", nc, uncomp)
		st.label(wa+"/a", keyHash(wa), nil)
		st.label(wa+"/b", keyHash(wa), annotation(sc.CauseHarnessRetry, sc.EffectLeaked, keyHash(wa), wa+"/a", 300*time.Millisecond))
		st.label(pa+"/a", keyHash(pa), nil)
		st.label(pa+"/b", keyHash(pa), annotation(sc.CauseHarnessRetry, sc.EffectBlocked, keyHash(pa), pa+"/a", 400*time.Millisecond))
		st.model = append(st.model, keyHash(va))
	}
	return st
}

// TestTwoTier_SameAnnotationsAsOneCollector sends one labelled stream to a
// single Collector (collector/examples/single) and to a two-tier
// deployment (collector/examples/two-tier: tier 1 in front of two tier-2
// Collectors), both the shipped configurations with a trace sink added
// behind them, and checks that:
//   - the single Collector annotates the stream as labelled;
//   - the two-tier deployment gives every span the same annotations,
//     including the model re-issues that only a chat span, routed
//     elsewhere, tells from harness retries (tier 1 copies the inference
//     spans to every tier-2 Collector);
//   - every group's spans, the reconnect replays in a new trace from another
//     replica included, reached one tier-2 Collector, and both tier-2
//     Collectors decided model re-issues;
//   - every span reaches the trace backend exactly once (the evidence
//     copies are not forwarded).
func TestTwoTier_SameAnnotationsAsOneCollector(t *testing.T) {
	bin := collectorBinary(t)
	root := repoRoot(t)
	examples := filepath.Join(root, "collector", "examples")
	const wait = "DUP_DECISION_WAIT=2s"

	single := startSink(t, "single")
	singlePort := freePort(t)
	startCollectorArgs(t, "single", bin, []string{
		"--config", filepath.Join(examples, "single", "config.yaml"), "--config", sinkOverlay(t, single),
	}, singlePort,
		fmt.Sprintf("OTLP_GRPC_ENDPOINT=127.0.0.1:%d", singlePort),
		fmt.Sprintf("PROMETHEUS_ENDPOINT=127.0.0.1:%d", freePort(t)),
		"TELEMETRY_HOST=127.0.0.1", fmt.Sprintf("TELEMETRY_PORT=%d", freePort(t)),
		wait, "LOG_LEVEL=warn")

	var tier2 []*otlpSink
	var tier2Ports []int
	for _, name := range []string{"tier2-a", "tier2-b"} {
		sink := startSink(t, name)
		port := freePort(t)
		startCollectorArgs(t, name, bin, []string{
			"--config", filepath.Join(examples, "two-tier", "tier2.yaml"), "--config", sinkOverlay(t, sink),
		}, port,
			fmt.Sprintf("OTLP_GRPC_ENDPOINT=127.0.0.1:%d", port),
			fmt.Sprintf("PROMETHEUS_ENDPOINT=127.0.0.1:%d", freePort(t)),
			// Each Collector its own telemetry port: the default (8888)
			// can only be bound once.
			"TELEMETRY_HOST=127.0.0.1", fmt.Sprintf("TELEMETRY_PORT=%d", freePort(t)),
			wait, "LOG_LEVEL=warn")
		tier2 = append(tier2, sink)
		tier2Ports = append(tier2Ports, port)
	}
	tier1 := freePort(t)
	startCollector(t, "tier1", bin, filepath.Join(examples, "two-tier", "tier1.yaml"), tier1,
		fmt.Sprintf("OTLP_GRPC_ENDPOINT=127.0.0.1:%d", tier1),
		fmt.Sprintf("PROMETHEUS_ENDPOINT=127.0.0.1:%d", freePort(t)),
		"TELEMETRY_HOST=127.0.0.1", fmt.Sprintf("TELEMETRY_PORT=%d", freePort(t)),
		fmt.Sprintf("TIER2_A=127.0.0.1:%d", tier2Ports[0]),
		fmt.Sprintf("TIER2_B=127.0.0.1:%d", tier2Ports[1]), "LOG_LEVEL=warn")

	st := newTwoTierStream(16)
	total := 0
	for _, td := range st.exports {
		total += td.SpanCount()
		one := ptrace.NewTraces()
		td.CopyTo(one)
		exportSpans(t, singlePort, one)
		exportSpans(t, tier1, td)
	}

	// Wait until every span reached each deployment's backend, then a
	// little longer: a span forwarded twice would show up.
	collect := func(sinks ...*otlpSink) []sunk {
		var all []sunk
		for _, s := range sinks {
			all = append(all, s.received()...)
		}
		return all
	}
	deadline := time.Now().Add(60 * time.Second)
	for len(collect(single)) < total || len(collect(tier2...)) < total {
		if time.Now().After(deadline) {
			t.Fatalf("spans at the backends after 60s: single %d, two tiers %d, of %d", len(collect(single)), len(collect(tier2...)), total)
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(time.Second)

	byTag := map[string]string{} // span ID -> tag
	for _, l := range st.labels {
		byTag[id8(l.tag).String()] = l.tag
	}
	index := func(name string, spans []sunk) map[string]sunk {
		out := map[string]sunk{}
		for _, s := range spans {
			tag, ok := byTag[s.id]
			if !ok {
				t.Errorf("%s: a span that was never sent: %s %s", name, s.id, s.name)
				continue
			}
			if s.copy {
				t.Errorf("%s: the evidence copy of %s reached the backend", name, tag)
			}
			if _, seen := out[tag]; seen {
				t.Errorf("%s: span %s reached the backend twice", name, tag)
			}
			out[tag] = s
		}
		return out
	}
	one, two := index("single", collect(single)), index("two tiers", collect(tier2...))
	if len(one) != len(st.labels) || len(two) != len(st.labels) {
		t.Fatalf("distinct spans at the backends: single %d, two tiers %d, want %d", len(one), len(two), len(st.labels))
	}

	// The single Collector gives the labelled answers.
	for _, l := range st.labels {
		got := one[l.tag].dup
		want := l.want
		if want == nil {
			want = map[string]any{}
		} else if want[sc.DuplicateGroup] == "" {
			want = clone(want)
			want[sc.DuplicateGroup] = got[sc.DuplicateGroup]
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("single Collector, span %s: got %v, want %v", l.tag, got, want)
		}
	}
	// Two tiers, the same answers, span by span.
	var tags []string
	for tag := range one {
		tags = append(tags, tag)
	}
	sort.Strings(tags)
	for _, tag := range tags {
		if a, b := fmt.Sprint(one[tag].dup), fmt.Sprint(two[tag].dup); a != b {
			t.Errorf("span %s: one Collector says %s, two tiers say %s", tag, a, b)
		}
	}

	// Every group reached one tier-2 Collector, and both decided groups
	// that needed the chat evidence.
	where := map[string]map[string]bool{} // tag -> tier-2 names
	for _, s := range tier2 {
		for _, sp := range s.received() {
			if tag, ok := byTag[sp.id]; ok {
				if where[tag] == nil {
					where[tag] = map[string]bool{}
				}
				where[tag][s.name] = true
			}
		}
	}
	groupAt := map[string]string{}
	for g, members := range st.groups {
		at := map[string]bool{}
		for _, m := range members {
			for n := range where[m] {
				at[n] = true
			}
		}
		if len(at) != 1 {
			t.Errorf("group %s was split across tier-2 Collectors: %v", g, at)
		}
		for n := range at {
			groupAt[g] = n
		}
	}
	modelAt := map[string]int{}
	for _, g := range st.model {
		modelAt[groupAt[g]]++
	}
	if len(modelAt) != 2 {
		t.Errorf("the model re-issue groups all landed on one tier-2 Collector (%v): the test does not prove that the chat evidence reaches both", modelAt)
	}
	t.Logf("%d spans; model re-issue groups per tier-2 Collector: %v", total, modelAt)
}

func clone(m map[string]any) map[string]any {
	c := make(map[string]any, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}
