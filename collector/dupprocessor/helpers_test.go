package dupprocessor

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/processor/processortest"

	"github.com/idemkit-mcp/idemkit/collector/dupprocessor/internal/metadata"
	sc "github.com/idemkit-mcp/idemkit/spancontract"
)

// eventBase is the event time (span timestamps) every test trace starts at.
var eventBase = time.Date(2026, 1, 5, 9, 0, 0, 0, time.UTC)

// sp describes one span of a test batch.
type sp struct {
	tag      string        // seeds the span ID; unique within a case
	trace    string        // seeds the trace ID
	svc      string        // service.name of the span's resource; "mcp-billing" when empty
	kind     string        // see appendSpan: "tool" (default), "server", "mcp", "method", "chat", "http"
	method   string        // mcp.method.name of a "method" span
	tool     string        // gen_ai.tool.name; "issue_refund" when empty
	key      string        // seeds idemkit.key.hash; none when empty
	args     string        // gen_ai.tool.call.arguments
	session  string        // mcp.session.id
	req      string        // jsonrpc.request.id
	at       time.Duration // start, after eventBase
	dur      time.Duration // duration; 50ms when zero
	outcome  string        // idemkit.outcome
	attempt  int64         // idemkit.attempt, when positive
	writeID  string        // idemkit.write.id
	conv     string        // gen_ai.conversation.id
	subject  string        // seeds idemkit.subject.hash; none when empty
	user     string        // user.id
	endUser  string        // enduser.id
	bypass   string        // idemkit.bypass.reason
	refusal  string        // idemkit.refusal.reason
	input    string        // "requested", "continuation" or "both": the idemkit.input.* marks
	copy     bool          // in a resource marked idemkit.evidence.copy (a tier-1 evidence copy)
	argsHash string        // seeds idemkit.args.hash; none when empty
	parent   string        // seeds the parent span ID; none when empty
	// localParent: the exporter says the parent is local (flags without
	// IS_REMOTE); otherwise a span with a parent says it is remote, as the
	// Go SDK's OTLP exporter does for a parent from params._meta.
	localParent bool
}

func seedID(s string) []byte {
	sum := sha256.Sum256([]byte(s))
	return sum[:]
}

func spanIDOf(tag string) pcommon.SpanID {
	var id pcommon.SpanID
	copy(id[:], seedID("span/"+tag))
	return id
}

func traceIDOf(tag string) pcommon.TraceID {
	var id pcommon.TraceID
	if tag == "" {
		return id
	}
	copy(id[:], seedID("trace/"+tag))
	return id
}

// keyHashOf returns the idemkit.key.hash a test key seed stands for.
func keyHashOf(seed string) string {
	return hex.EncodeToString(seedID("key/" + seed))[:sc.HashLen]
}

// buildTraces returns the spans as one Traces, one ResourceSpans per run of
// spans of the same service (and evidence-copy mark).
func buildTraces(spans ...sp) ptrace.Traces {
	td := ptrace.NewTraces()
	var ss ptrace.ScopeSpans
	lastSvc, lastCopy := "\x00", false
	for _, s := range spans {
		svc := s.svc
		if svc == "" {
			svc = "mcp-billing"
		}
		if svc != lastSvc || s.copy != lastCopy {
			rs := td.ResourceSpans().AppendEmpty()
			rs.Resource().Attributes().PutStr(serviceNameKey, svc)
			if s.copy {
				rs.Resource().Attributes().PutBool(sc.EvidenceCopy, true)
			}
			ss = rs.ScopeSpans().AppendEmpty()
			ss.Scope().SetName("github.com/idemkit-mcp/idemkit/instrument")
			lastSvc, lastCopy = svc, s.copy
		}
		appendSpan(ss.Spans(), s)
	}
	return td
}

// subjectHashOf returns the idemkit.subject.hash a test subject seed stands for.
func subjectHashOf(seed string) string {
	return hex.EncodeToString(seedID("subject/" + seed))[:sc.HashLen]
}

func appendSpan(dst ptrace.SpanSlice, s sp) ptrace.Span {
	span := dst.AppendEmpty()
	span.SetTraceID(traceIDOf(s.trace))
	span.SetSpanID(spanIDOf(s.tag))
	if s.parent != "" {
		span.SetParentSpanID(spanIDOf("parent/" + s.parent))
		flags := uint32(0x101) // sampled, HAS_IS_REMOTE
		if !s.localParent {
			flags |= 0x200 // IS_REMOTE
		}
		span.SetFlags(flags)
	}
	dur := s.dur
	if dur == 0 {
		dur = 50 * time.Millisecond
	}
	span.SetStartTimestamp(pcommon.NewTimestampFromTime(eventBase.Add(s.at)))
	span.SetEndTimestamp(pcommon.NewTimestampFromTime(eventBase.Add(s.at + dur)))
	attrs := span.Attributes()
	tool := s.tool
	if tool == "" {
		tool = "issue_refund"
	}
	// Kinds: "tool", idemkit's older INTERNAL `execute_tool {tool}` span;
	// "server", the MCP conventions' SERVER `tools/call {tool}` span that
	// idemkit writes now (gen_ai.operation.name=execute_tool too); "mcp",
	// another instrumentation's tools/call SERVER span without
	// gen_ai.operation.name; "method", a SERVER span of another MCP method
	// (s.method); "chat", an inference span; "http", anything else.
	switch s.kind {
	case "method":
		span.SetName(s.method)
		span.SetKind(ptrace.SpanKindServer)
		attrs.PutStr(sc.MCPMethodName, s.method)
		if s.session != "" {
			attrs.PutStr(sc.MCPSessionID, s.session)
		}
		return span
	case "server":
		span.SetName(sc.MethodToolsCall + " " + tool)
		span.SetKind(ptrace.SpanKindServer)
		attrs.PutStr(sc.MCPMethodName, sc.MethodToolsCall)
		attrs.PutStr(sc.GenAIOperationName, sc.OperationExecuteTool)
	case "chat":
		span.SetName("chat gpt-test")
		span.SetKind(ptrace.SpanKindClient)
		attrs.PutStr(sc.GenAIOperationName, sc.OperationChat)
		if s.conv != "" {
			attrs.PutStr(sc.GenAIConversationID, s.conv)
		}
		if s.user != "" {
			attrs.PutStr(sc.UserID, s.user)
		}
		if s.endUser != "" {
			attrs.PutStr(sc.EndUserID, s.endUser)
		}
		return span
	case "http":
		span.SetName("POST /mcp")
		span.SetKind(ptrace.SpanKindServer)
		attrs.PutStr("http.request.method", "POST")
		return span
	case "mcp":
		span.SetName(sc.MethodToolsCall + " " + tool)
		span.SetKind(ptrace.SpanKindServer)
		attrs.PutStr(sc.MCPMethodName, sc.MethodToolsCall)
	default:
		span.SetName(sc.SpanName(tool))
		span.SetKind(ptrace.SpanKindInternal)
		attrs.PutStr(sc.GenAIOperationName, sc.OperationExecuteTool)
		attrs.PutStr(sc.MCPMethodName, sc.MethodToolsCall)
	}
	attrs.PutStr(sc.GenAIToolName, tool)
	if s.key != "" {
		attrs.PutStr(sc.KeyHash, keyHashOf(s.key))
		attrs.PutStr(sc.KeySource, sc.KeySourceDerived)
	}
	if s.subject != "" {
		attrs.PutStr(sc.SubjectHash, subjectHashOf(s.subject))
	}
	if s.argsHash != "" {
		attrs.PutStr(sc.ArgsHash, hex.EncodeToString(seedID("args/" + s.argsHash))[:sc.HashLen])
	}
	if s.user != "" {
		attrs.PutStr(sc.UserID, s.user)
	}
	if s.endUser != "" {
		attrs.PutStr(sc.EndUserID, s.endUser)
	}
	if s.bypass != "" {
		attrs.PutStr(sc.BypassReason, s.bypass)
	}
	if s.refusal != "" {
		attrs.PutStr(sc.RefusalReason, s.refusal)
	}
	if s.input == "requested" || s.input == "both" {
		attrs.PutBool(sc.InputRequested, true)
	}
	if s.input == "continuation" || s.input == "both" {
		attrs.PutBool(sc.InputContinuation, true)
	}
	if s.args != "" {
		attrs.PutStr(sc.GenAIToolCallArguments, s.args)
	}
	if s.session != "" {
		attrs.PutStr(sc.MCPSessionID, s.session)
	}
	if s.req != "" {
		attrs.PutStr(sc.JSONRPCRequestID, s.req)
	}
	if s.outcome != "" {
		attrs.PutStr(sc.Outcome, s.outcome)
	}
	if s.attempt > 0 {
		attrs.PutInt(sc.Attempt, s.attempt)
	}
	if s.writeID != "" {
		attrs.PutStr(sc.WriteID, s.writeID)
	}
	if s.conv != "" {
		attrs.PutStr(sc.GenAIConversationID, s.conv)
	}
	return span
}

// fakeClock is the processing-time clock of a test processor.
type fakeClock struct {
	mu sync.Mutex // protects t
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
	return c.t
}

// harness drives a processor on a fake clock without its ticker.
type harness struct {
	t     testing.TB
	p     *dupProcessor
	clock *fakeClock
	sink  *consumertest.TracesSink
}

func newHarness(t testing.TB, cfg *Config) *harness {
	return newHarnessNext(t, cfg, nil)
}

func newHarnessNext(t testing.TB, cfg *Config, next consumer.Traces) *harness {
	if cfg == nil {
		cfg = createDefaultConfig()
	}
	require.NoError(t, cfg.Validate())
	sink := new(consumertest.TracesSink)
	if next == nil {
		next = sink
	}
	p, err := newDupProcessor(processortest.NewNopSettings(metadata.Type), cfg, next)
	require.NoError(t, err)
	clock := &fakeClock{t: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	p.now = clock.Now
	return &harness{t: t, p: p, clock: clock, sink: sink}
}

func (h *harness) consume(td ptrace.Traces) {
	require.NoError(h.t, h.p.ConsumeTraces(context.Background(), td))
}

// advance moves processing time on and runs one tick.
func (h *harness) advance(d time.Duration) {
	h.p.tick(h.clock.Advance(d))
}

// finish lets every wait run out, shuts the processor down and returns all
// it forwarded, in order, as one Traces.
func (h *harness) finish() ptrace.Traces {
	h.advance(h.p.cfg.DecisionWait)
	h.advance(h.p.cfg.OriginalWait)
	require.NoError(h.t, h.p.Shutdown(context.Background()))
	out := ptrace.NewTraces()
	for _, td := range h.sink.AllTraces() {
		td.ResourceSpans().MoveAndAppendTo(out.ResourceSpans())
	}
	return out
}

// dupAttrs returns, per span ID tag found in tags, the idemkit.duplicate.*
// attributes of that span as a plain map ("-" when it has none).
func dupAttrs(t testing.TB, td ptrace.Traces, tags ...string) map[string]map[string]any {
	byID := map[pcommon.SpanID]string{}
	for _, tag := range tags {
		byID[spanIDOf(tag)] = tag
	}
	got := map[string]map[string]any{}
	rss := td.ResourceSpans()
	for i := 0; i < rss.Len(); i++ {
		sss := rss.At(i).ScopeSpans()
		for j := 0; j < sss.Len(); j++ {
			spans := sss.At(j).Spans()
			for k := 0; k < spans.Len(); k++ {
				s := spans.At(k)
				tag, ok := byID[s.SpanID()]
				if !ok {
					continue
				}
				_, seen := got[tag]
				require.False(t, seen, "span %s forwarded twice", tag)
				m := map[string]any{}
				for key, v := range s.Attributes().All() {
					if key == sc.Duplicate || len(key) > len(duplicatePrefix) && key[:len(duplicatePrefix)] == duplicatePrefix {
						m[key] = v.AsRaw()
					}
				}
				got[tag] = m
			}
		}
	}
	return got
}

// dup is the expected annotation of a duplicate span.
func dup(cause, effect, key, firstTag string, gap time.Duration) map[string]any {
	return map[string]any{
		sc.Duplicate:            true,
		sc.DuplicateCause:       cause,
		sc.DuplicateEffect:      effect,
		sc.DuplicateGroup:       key,
		sc.DuplicateFirstSpanID: spanIDOf(firstTag).String(),
		sc.DuplicateGapMS:       gap.Milliseconds(),
	}
}

// none is the expected annotation of a span that is not a duplicate.
func none() map[string]any { return map[string]any{} }

// uncompared is the annotation of a tool span the processor could not
// compare with other calls (no key, no captured arguments).
func uncompared() map[string]any { return map[string]any{sc.DuplicateUncompared: true} }
