package instrument

import (
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/semconv/v1.41.0/mcpconv"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemkit/idemkit/spancontract"
)

// Metric names. Through an OpenTelemetry Prometheus exporter (the Go SDK's
// or the Collector's, with its default unit and type suffixes) they become
// the names in brackets.
const (
	// MetricToolCalls counts tool calls by gen_ai.tool.name and
	// idemkit.outcome (absent when the call was rejected before a claim:
	// invalid key or arguments, store unavailable), and for bypassed calls
	// idemkit.bypass.reason (unprotected, unscoped, no_guard).
	// [idemkit_tool_calls_total]
	MetricToolCalls = "idemkit.tool.calls"
	// MetricClaimDuration is the time from the start of the claim to the
	// start of the work, or to the answer for a duplicate, in seconds, by
	// gen_ai.tool.name. [idemkit_claim_duration_seconds_{bucket,sum,count}]
	MetricClaimDuration = "idemkit.claim.duration"
	// MetricReplays counts duplicates answered with a stored result, by
	// gen_ai.tool.name. [idemkit_replays_total]
	MetricReplays = "idemkit.replays"
	// MetricInProgress counts duplicates answered "in progress", by
	// gen_ai.tool.name. [idemkit_in_progress_total]
	MetricInProgress = "idemkit.in_progress"
	// With WithOperationDuration, the semantic-convention histogram
	// mcp.server.operation.duration (s) is recorded too, for tools/call
	// only, by mcp.method.name, gen_ai.tool.name and error.type.
	// [mcp_server_operation_duration_seconds_{bucket,sum,count}]
)

var claimBuckets = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}

// opBuckets are the semantic conventions' advice for MCP operation durations.
var opBuckets = []float64{0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 30, 60, 120, 300}

type instruments struct {
	calls      metric.Int64Counter
	claim      metric.Float64Histogram
	replays    metric.Int64Counter
	inProgress metric.Int64Counter
	op         metric.Float64Histogram
}

func (m *instruments) init(mp metric.MeterProvider) error {
	meter := mp.Meter(ScopeName, metric.WithInstrumentationVersion(Version))
	var errs, err error
	if m.calls, err = meter.Int64Counter(MetricToolCalls, metric.WithUnit("{call}"),
		metric.WithDescription("MCP tool calls by tool and idemkit outcome.")); err != nil {
		errs = errors.Join(errs, err)
		m.calls = noop.Int64Counter{}
	}
	if m.claim, err = meter.Float64Histogram(MetricClaimDuration, metric.WithUnit("s"),
		metric.WithDescription("Time spent claiming an idempotency key before the work starts or a duplicate is answered."),
		metric.WithExplicitBucketBoundaries(claimBuckets...)); err != nil {
		errs = errors.Join(errs, err)
		m.claim = noop.Float64Histogram{}
	}
	if m.replays, err = meter.Int64Counter(MetricReplays, metric.WithUnit("{call}"),
		metric.WithDescription("Duplicate tool calls answered with the stored result.")); err != nil {
		errs = errors.Join(errs, err)
		m.replays = noop.Int64Counter{}
	}
	if m.inProgress, err = meter.Int64Counter(MetricInProgress, metric.WithUnit("{call}"),
		metric.WithDescription("Duplicate tool calls answered that the first call is still in progress.")); err != nil {
		errs = errors.Join(errs, err)
		m.inProgress = noop.Int64Counter{}
	}
	op, err := mcpconv.NewServerOperationDuration(meter, metric.WithExplicitBucketBoundaries(opBuckets...))
	if err != nil {
		errs = errors.Join(errs, err)
	}
	m.op = op.Inst()
	return errs
}

// bypassReasons are the values of idemkit.bypass.reason, which
// MetricToolCalls carries on bypassed calls.
var bypassReasons = [...]string{spancontract.BypassUnprotected, spancontract.BypassUnscoped, spancontract.BypassNoGuard}

// outcome indexes the precomputed per-outcome attribute sets.
type outcome uint8

const (
	outcomeNone outcome = iota
	outcomeExecuted
	outcomeReplayed
	outcomeInProgress
	outcomeTakeover
	outcomeMismatch
	outcomeBypassed
	numOutcomes
)

var outcomeNames = [numOutcomes]string{
	outcomeExecuted:   spancontract.OutcomeExecuted,
	outcomeReplayed:   spancontract.OutcomeReplayed,
	outcomeInProgress: spancontract.OutcomeInProgress,
	outcomeTakeover:   spancontract.OutcomeTakeover,
	outcomeMismatch:   spancontract.OutcomeMismatch,
	outcomeBypassed:   spancontract.OutcomeBypassed,
}

// outcomeAttrs are the span attributes of each outcome, built once.
var outcomeAttrs = func() (a [numOutcomes]attribute.KeyValue) {
	for i := outcomeExecuted; i < numOutcomes; i++ {
		a[i] = attribute.String(spancontract.Outcome, outcomeNames[i])
	}
	return a
}()

// Attributes shared by every tool-call span.
var (
	attrOperation = attribute.String(spancontract.GenAIOperationName, spancontract.OperationExecuteTool)
	attrMethod    = attribute.String(spancontract.MCPMethodName, spancontract.MethodToolsCall)
	attrToolError = attribute.String(spancontract.ErrorType, spancontract.ErrorTypeToolError)
)

// toolAttrs holds everything about a tool name that a call would otherwise
// rebuild: span name and start options, metric options per outcome.
type toolAttrs struct {
	spanName   string
	nameAttr   attribute.KeyValue
	startOpts  []trace.SpanStartOption
	callOpts   [numOutcomes][]metric.AddOption
	bypassOpts [len(bypassReasons)][]metric.AddOption
	toolAdd    []metric.AddOption
	toolRecord []metric.RecordOption
	opOK       []metric.RecordOption
	opToolErr  []metric.RecordOption
}

// maxCachedTools bounds the per-tool cache. Adapters only pass registered
// tool names, so it is never reached in practice; past it, attributes are
// built per call instead of cached.
const maxCachedTools = 4096

func (in *Instrumenter) toolAttrs(tool string) *toolAttrs {
	if v, ok := in.tools.Load(tool); ok {
		return v.(*toolAttrs)
	}
	ta := newToolAttrs(tool)
	if in.ntools.Load() >= maxCachedTools {
		return ta
	}
	if v, loaded := in.tools.LoadOrStore(tool, ta); loaded {
		return v.(*toolAttrs)
	}
	in.ntools.Add(1)
	return ta
}

func newToolAttrs(tool string) *toolAttrs {
	name := attribute.String(spancontract.GenAIToolName, tool)
	ta := &toolAttrs{
		spanName: spancontract.SpanName(tool),
		nameAttr: name,
		startOpts: []trace.SpanStartOption{
			trace.WithSpanKind(trace.SpanKindInternal),
			trace.WithAttributes(attrOperation, name, attrMethod),
		},
	}
	ta.callOpts[outcomeNone] = []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(name))}
	for i := outcomeExecuted; i < numOutcomes; i++ {
		ta.callOpts[i] = []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(name, outcomeAttrs[i]))}
	}
	for i, r := range bypassReasons {
		ta.bypassOpts[i] = []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(
			name, outcomeAttrs[outcomeBypassed], attribute.String(spancontract.BypassReason, r)))}
	}
	toolSet := attribute.NewSet(name)
	ta.toolAdd = []metric.AddOption{metric.WithAttributeSet(toolSet)}
	ta.toolRecord = []metric.RecordOption{metric.WithAttributeSet(toolSet)}
	ta.opOK = []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(attrMethod, name))}
	ta.opToolErr = []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(attrMethod, name, attrToolError))}
	return ta
}
