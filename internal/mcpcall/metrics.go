package mcpcall

import (
	"errors"
	"strconv"
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/semconv/v1.41.0/mcpconv"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemkit-mcp/idemkit/idemkit"
	"github.com/idemkit-mcp/idemkit/spancontract"
)

// claimBuckets cover a memory store (tens of µs) to a slow database.
var claimBuckets = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}

// opBuckets are the conventions' advice for the MCP duration histograms.
var opBuckets = []float64{0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 30, 60, 120, 300}

type instruments struct {
	calls      metric.Int64Counter
	claim      metric.Float64Histogram
	replays    metric.Int64Counter
	inProgress metric.Int64Counter
	finishErrs metric.Int64Counter
	op         metric.Float64Histogram
	session    metric.Float64Histogram
}

func (m *instruments) init(mp metric.MeterProvider) error {
	meter := mp.Meter(ScopeName, metric.WithInstrumentationVersion(idemkit.Version), metric.WithSchemaURL(schemaURL))
	var errs, err error
	counter := func(name, desc string) metric.Int64Counter {
		c, cerr := meter.Int64Counter(name, metric.WithUnit("{call}"), metric.WithDescription(desc))
		if cerr != nil {
			errs = errors.Join(errs, cerr)
			return noop.Int64Counter{}
		}
		return c
	}
	m.calls = counter(spancontract.MetricToolCalls, "MCP tool calls by tool and idemkit outcome.")
	m.replays = counter(spancontract.MetricReplays, "Duplicate tool calls answered with the stored result.")
	m.inProgress = counter(spancontract.MetricInProgress, "Duplicate tool calls answered that the first call is still in progress.")
	m.finishErrs = counter(spancontract.MetricFinishErrors, "Tool calls whose work ran but whose outcome could not be recorded, so a duplicate may run the work again.")
	if m.claim, err = meter.Float64Histogram(spancontract.MetricClaimDuration, metric.WithUnit("s"),
		metric.WithDescription("Time spent claiming an idempotency key before the work starts or a duplicate is answered."),
		metric.WithExplicitBucketBoundaries(claimBuckets...)); err != nil {
		errs = errors.Join(errs, err)
		m.claim = noop.Float64Histogram{}
	}
	op, err := mcpconv.NewServerOperationDuration(meter, metric.WithExplicitBucketBoundaries(opBuckets...))
	if err != nil {
		errs = errors.Join(errs, err)
	}
	m.op = op.Inst()
	session, err := mcpconv.NewServerSessionDuration(meter, metric.WithExplicitBucketBoundaries(opBuckets...))
	if err != nil {
		errs = errors.Join(errs, err)
	}
	m.session = session.Inst()
	return errs
}

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

// bypassReasons are the values of idemkit.bypass.reason.
var bypassReasons = [...]string{spancontract.BypassUnprotected, spancontract.BypassUnscoped, spancontract.BypassNoGuard}

// refusalReasons are the values of idemkit.refusal.reason.
var refusalReasons = [...]string{
	spancontract.RefusalInProgress, spancontract.RefusalMismatch, spancontract.RefusalUnscoped,
	spancontract.RefusalInvalidKey, spancontract.RefusalInvalidArguments, spancontract.RefusalStoreUnavailable,
	spancontract.RefusalResponseNotKept, spancontract.RefusalResultUnreadable, spancontract.RefusalStoreFull,
	RefusalDeclined, RefusalConfirmationUnavailable, RefusalMissingKey, RefusalAttemptsExhausted,
	spancontract.RefusalMisconfigured,
}

func indexOf(list []string, s string) int {
	for i, v := range list {
		if v == s {
			return i
		}
	}
	return -1
}

// Attributes shared by many spans.
var (
	attrExecuteTool = attribute.String(spancontract.GenAIOperationName, spancontract.OperationExecuteTool)
	attrToolsCall   = attribute.String(spancontract.MCPMethodName, spancontract.MethodToolsCall)
)

// knownMethods are the request and notification methods whose name is their own
// mcp.method.name; any other method is recorded as "_OTHER" in metrics and
// span names, so that a client cannot grow their cardinality.
var knownMethods = map[string]bool{
	spancontract.MethodToolsCall: true, spancontract.MethodInitialize: true, spancontract.MethodPing: true,
	spancontract.MethodToolsList: true, spancontract.MethodPromptsList: true, spancontract.MethodPromptsGet: true,
	spancontract.MethodResourcesList: true, spancontract.MethodResourcesTemplatesList: true,
	spancontract.MethodResourcesRead: true, spancontract.MethodResourcesSubscribe: true,
	spancontract.MethodResourcesUnsubscribe: true, spancontract.MethodLoggingSetLevel: true,
	spancontract.MethodCompletionComplete: true, spancontract.MethodTasksGet: true,
	spancontract.MethodTasksResult: true, spancontract.MethodTasksList: true, spancontract.MethodTasksCancel: true,
	"server/discover": true, "subscriptions/listen": true,
	// The notifications a client sends (see notifications.go).
	NotificationInitialized: true, NotificationCancelled: true, NotificationProgress: true,
	NotificationRootsListChanged: true, NotificationTasksStatus: true,
}

// methodAttrs returns the attributes of every known method without a
// target, and of "_OTHER": a map that is never written after New.
func methodAttrs() map[string]*targetAttrs {
	m := make(map[string]*targetAttrs, len(knownMethods)+1)
	for method := range knownMethods {
		m[method] = newTargetAttrs(method, "")
	}
	m[spancontract.ErrorTypeOther] = newTargetAttrs(spancontract.ErrorTypeOther, "")
	return m
}

// methodName returns the low-cardinality name of a method.
func methodName(m string) string {
	if knownMethods[m] {
		return m
	}
	return spancontract.ErrorTypeOther
}

// targetKey identifies a (method, target) pair in the attribute cache.
type targetKey struct{ method, target string }

// targetAttrs holds everything about a (method, target) pair that a request
// would otherwise rebuild: span name and start options, metric attribute
// sets.
type targetAttrs struct {
	method    string
	target    string
	isTool    bool
	spanName  string
	startOpts []trace.SpanStartOption
	base      []attribute.KeyValue // method (+ operation, tool or prompt)
	// start is the prefix of base the span starts with: all of it, but
	// for a tools/call whose tool is not known yet, whose empty tool name
	// is set at the end only if no tool is learned by then.
	start    []attribute.KeyValue
	deferred bool // start is shorter than base

	// tools/call only.
	callOpts   [numOutcomes][]metric.AddOption
	bypassOpts [len(bypassReasons)][]metric.AddOption
	refuseOpts [len(refusalReasons)][]metric.AddOption
	toolAdd    []metric.AddOption
	toolRecord []metric.RecordOption
	finishOpts sync.Map         // reason -> []metric.AddOption
	duration   durationEstimate // the tool's successful calls, for the retry hint

	opOpts sync.Map                // opKey -> []metric.RecordOption
	opLast atomic.Pointer[opEntry] // the last opOpts entry used: most requests of a target repeat it
}

// opEntry is one opOpts entry.
type opEntry struct {
	k    opKey
	opts []metric.RecordOption
}

// opKey is what varies the operation duration's attributes besides the
// target.
type opKey struct {
	errType, protocol, network, protoName, protoVersion string
	code                                                bool // errType is a JSON-RPC code
}

// maxCachedTargets bounds the attribute cache; past it, attributes are built
// per request. Front ends only pass registered tool and prompt names.
const maxCachedTargets = 4096

func (in *Instrumenter) targetAttrs(method, target string) *targetAttrs {
	if target == "" {
		if ta, ok := in.methods[method]; ok {
			return ta
		}
		if !knownMethods[method] {
			return in.methods[spancontract.ErrorTypeOther]
		}
	}
	k := targetKey{method, target}
	if v, ok := in.targets.Load(k); ok {
		return v.(*targetAttrs)
	}
	ta := newTargetAttrs(method, target)
	if in.ntargets.Load() >= maxCachedTargets {
		return ta
	}
	if v, loaded := in.targets.LoadOrStore(k, ta); loaded {
		return v.(*targetAttrs)
	}
	in.ntargets.Add(1)
	return ta
}

func newTargetAttrs(method, target string) *targetAttrs {
	name := methodName(method)
	ta := &targetAttrs{method: name, target: target, spanName: spancontract.ServerSpanName(name, target)}
	mattr := attribute.String(spancontract.MCPMethodName, method)
	if name != method {
		mattr = attribute.String(spancontract.MCPMethodName, name)
	}
	switch {
	case method == spancontract.MethodToolsCall:
		ta.isTool = true
		tool := attribute.String(spancontract.GenAIToolName, target)
		ta.base = []attribute.KeyValue{attrToolsCall, attrExecuteTool, tool}
		ta.callOpts[outcomeNone] = []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(tool))}
		for i := outcomeExecuted; i < numOutcomes; i++ {
			ta.callOpts[i] = []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(tool, outcomeAttrs[i]))}
		}
		for i, r := range bypassReasons {
			ta.bypassOpts[i] = []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(
				tool, outcomeAttrs[outcomeBypassed], attribute.String(spancontract.BypassReason, r)))}
		}
		for i, r := range refusalReasons {
			kvs := []attribute.KeyValue{tool, attribute.String(spancontract.RefusalReason, r)}
			switch r {
			case spancontract.RefusalInProgress:
				kvs = append(kvs, outcomeAttrs[outcomeInProgress])
			case spancontract.RefusalMismatch:
				kvs = append(kvs, outcomeAttrs[outcomeMismatch])
			case spancontract.RefusalResponseNotKept, spancontract.RefusalResultUnreadable:
				kvs = append(kvs, outcomeAttrs[outcomeReplayed])
			}
			ta.refuseOpts[i] = []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(kvs...))}
		}
		set := attribute.NewSet(tool)
		ta.toolAdd = []metric.AddOption{metric.WithAttributeSet(set)}
		ta.toolRecord = []metric.RecordOption{metric.WithAttributeSet(set)}
	case method == spancontract.MethodPromptsGet && target != "":
		ta.base = []attribute.KeyValue{mattr, attribute.String(spancontract.GenAIPromptName, target)}
	default:
		ta.base = []attribute.KeyValue{mattr}
	}
	ta.start = ta.base
	if ta.isTool && target == "" {
		ta.start, ta.deferred = ta.base[:2], true
	}
	ta.startOpts = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(ta.start...)}
	return ta
}

// opOptions returns the mcp.server.operation.duration attributes of a
// request that ended with errType (a JSON-RPC code when code is set).
func (ta *targetAttrs) opOptions(k opKey) []metric.RecordOption {
	if e := ta.opLast.Load(); e != nil && e.k == k {
		return e.opts
	}
	if v, ok := ta.opOpts.Load(k); ok {
		opts := v.([]metric.RecordOption)
		ta.opLast.Store(&opEntry{k: k, opts: opts})
		return opts
	}
	kvs := make([]attribute.KeyValue, 0, len(ta.base)+7)
	kvs = append(kvs, ta.base...)
	if k.errType != "" {
		kvs = append(kvs, attribute.String(spancontract.ErrorType, k.errType))
		if k.code {
			kvs = append(kvs, attribute.String(spancontract.RPCResponseStatusCode, k.errType))
		}
	}
	kvs = appendNonEmpty(kvs, spancontract.MCPProtocolVersion, k.protocol)
	kvs = appendNonEmpty(kvs, spancontract.NetworkTransport, k.network)
	kvs = appendNonEmpty(kvs, spancontract.NetworkProtocolName, k.protoName)
	kvs = appendNonEmpty(kvs, spancontract.NetworkProtocolVersion, k.protoVersion)
	opts := []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(kvs...))}
	ta.opOpts.Store(k, opts) // bounded: versions and transports are few
	ta.opLast.Store(&opEntry{k: k, opts: opts})
	return opts
}

func (ta *targetAttrs) finishOptions(reason string) []metric.AddOption {
	if v, ok := ta.finishOpts.Load(reason); ok {
		return v.([]metric.AddOption)
	}
	opts := []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(
		attribute.String(spancontract.GenAIToolName, ta.target), attribute.String(spancontract.FinishError, reason)))}
	ta.finishOpts.Store(reason, opts)
	return opts
}

func appendNonEmpty(kvs []attribute.KeyValue, key, v string) []attribute.KeyValue {
	if v == "" {
		return kvs
	}
	return append(kvs, attribute.String(key, v))
}

// codeString formats a JSON-RPC error code.
func codeString(code int64) string { return strconv.FormatInt(code, 10) }
