package instrument

import (
	"context"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// DefaultCaptureBytes is the cap applied to raw arguments and results
// recorded on spans when WithRecordArguments or WithRecordResults is given a
// size of zero or less.
const DefaultCaptureBytes = 1 << 10

// UnscopedPolicy decides what happens to a call of a protected tool that
// cannot be scoped to a caller: no subject (WithSubject returned "" or was
// not set), not a single-client local transport, and no session ID. That is
// the shape of stateless Streamable HTTP without authentication.
type UnscopedPolicy uint8

const (
	// UnscopedBypass runs an unscoped call unprotected (outcome "bypassed",
	// idemkit.bypass.reason "unscoped") rather than let unknown callers share
	// one namespace, where a caller could be answered with another caller's
	// stored response. Its span still carries the key and argument hashes, so
	// the Collector can see duplicates that leaked. This is the default.
	UnscopedBypass UnscopedPolicy = iota
	// UnscopedShare protects unscoped calls in one shared namespace (the
	// empty subject). Choose it only for a server whose every caller may see
	// every other caller's results, such as a single-tenant internal service.
	UnscopedShare
)

// Option configures an Instrumenter. Options are applied in order; for the
// per-tool options a later one overrides an earlier one for the same tool.
type Option interface {
	apply(*config)
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	tp         trace.TracerProvider
	mp         metric.MeterProvider
	prop       propagation.TextMapPropagator
	subject    func(context.Context) string
	subjectKey []byte
	rawSubject bool
	protect    map[string]bool // tool -> true protect, false bypass
	statusTool map[string]string
	exclude    map[string][]string
	unscoped   UnscopedPolicy
	argsCap    int // 0: do not record
	resultCap  int // 0: do not record
	keyParam   bool
	stripKey   bool
	opDuration bool
}

func newConfig(opts []Option) config {
	c := config{keyParam: true, stripKey: true}
	for _, o := range opts {
		if o != nil {
			o.apply(&c)
		}
	}
	if c.tp == nil {
		c.tp = otel.GetTracerProvider()
	}
	if c.mp == nil {
		c.mp = otel.GetMeterProvider()
	}
	if c.prop == nil {
		c.prop = otel.GetTextMapPropagator()
	}
	return c
}

// WithTracerProvider sets the TracerProvider that creates the tool-call
// spans. Defaults to the global provider (otel.GetTracerProvider) at New.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return optionFunc(func(c *config) { c.tp = tp })
}

// WithMeterProvider sets the MeterProvider of the idemkit metrics. Defaults
// to the global provider (otel.GetMeterProvider) at New.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return optionFunc(func(c *config) { c.mp = mp })
}

// WithPropagator sets the propagator that extracts the caller's trace
// context from a request's params._meta (traceparent, tracestate). Defaults
// to the global propagator (otel.GetTextMapPropagator) at New.
func WithPropagator(p propagation.TextMapPropagator) Option {
	return optionFunc(func(c *config) { c.prop = p })
}

// WithSubject sets the function that names the authenticated caller of a
// request, from its context (a user ID, a tenant, an OAuth subject). Keys are
// scoped by it: two callers never share a stored response. It must be fast
// and safe for concurrent use; it is called once per tool call.
//
// When it is not set or returns "", the call is scoped as follows:
//
//   - On a single-client local transport (stdio), by nothing: the process
//     serves one client.
//   - Otherwise, when the transport has a session ID, by the session. A
//     duplicate sent on a new session after a reconnect is then not caught;
//     set WithSubject to catch it.
//   - Otherwise (stateless HTTP without a subject) the caller is unknown and
//     the call is handled by the UnscopedPolicy (WithUnscopedCalls), by
//     default run unprotected.
func WithSubject(fn func(ctx context.Context) string) Option {
	return optionFunc(func(c *config) { c.subject = fn })
}

// WithSubjectHashKey makes idemkit.subject.hash an HMAC-SHA-256 of the
// subject under key instead of a plain SHA-256, so that a span reader cannot
// confirm a guessed subject (an e-mail address) by hashing it. For the same
// reason idemkit.key.hash becomes an HMAC of the key ID under key (it is
// derived from the subject). Every replica must use the same key for their
// hashes, and the Collector's duplicate groups, to agree. Defaults to no key.
func WithSubjectHashKey(key []byte) Option {
	k := append([]byte(nil), key...)
	return optionFunc(func(c *config) { c.subjectKey = k })
}

// WithRawSubject also records the raw subject on spans (idemkit.subject).
// Subjects are personal data: opt in only where your tracing backend may
// hold them. Defaults to off.
func WithRawSubject() Option {
	return optionFunc(func(c *config) { c.rawSubject = true })
}

// WithProtect protects tools whatever their annotations say.
func WithProtect(tools ...string) Option {
	return optionFunc(func(c *config) { c.setProtect(tools, true) })
}

// WithBypass leaves tools unprotected (they still get spans and metrics)
// whatever their annotations say.
func WithBypass(tools ...string) Option {
	return optionFunc(func(c *config) { c.setProtect(tools, false) })
}

func (c *config) setProtect(tools []string, v bool) {
	if c.protect == nil {
		c.protect = make(map[string]bool, len(tools))
	}
	for _, t := range tools {
		c.protect[t] = v
	}
}

// WithStatusTool names the tool a model should call to check on an
// in-progress call of tool; the in-progress answer names it. A StatusTool
// set in the Guard's idemkit.ToolConfig takes precedence. Job tools register
// theirs automatically.
func WithStatusTool(tool, statusTool string) Option {
	return optionFunc(func(c *config) {
		if c.statusTool == nil {
			c.statusTool = make(map[string]string)
		}
		c.statusTool[tool] = statusTool
	})
}

// WithExclude leaves top-level argument fields of tool out of the argument
// hash: client timestamps, nonces, request IDs that differ on every retry and
// would otherwise make every duplicate look new.
func WithExclude(tool string, fields ...string) Option {
	return optionFunc(func(c *config) {
		if c.exclude == nil {
			c.exclude = make(map[string][]string)
		}
		c.exclude[tool] = append([]string(nil), fields...)
	})
}

// WithUnscopedCalls sets the policy for protected calls that cannot be
// scoped to a caller (see WithSubject). Defaults to UnscopedBypass.
func WithUnscopedCalls(p UnscopedPolicy) Option {
	return optionFunc(func(c *config) { c.unscoped = p })
}

// WithRecordArguments records the raw tool arguments on spans
// (gen_ai.tool.call.arguments), cut to maxBytes (DefaultCaptureBytes when
// maxBytes <= 0). Arguments may hold personal or secret data: opt in only
// where your tracing backend may hold them. Defaults to off.
func WithRecordArguments(maxBytes int) Option {
	return optionFunc(func(c *config) { c.argsCap = captureCap(maxBytes) })
}

// WithRecordResults records the raw tool results on spans
// (gen_ai.tool.call.result), cut to maxBytes (DefaultCaptureBytes when
// maxBytes <= 0). Defaults to off.
func WithRecordResults(maxBytes int) Option {
	return optionFunc(func(c *config) { c.resultCap = captureCap(maxBytes) })
}

func captureCap(n int) int {
	if n <= 0 {
		return DefaultCaptureBytes
	}
	return n
}

// WithoutKeyParameter stops the SDK wiring from advertising the optional
// idempotency_key argument in protected tools' input schemas and
// descriptions. Keys sent anyway (in the arguments or in params._meta) are
// still honoured. Defaults to advertising it.
func WithoutKeyParameter() Option {
	return optionFunc(func(c *config) { c.keyParam = false })
}

// WithKeyArgumentPassedThrough hands the idempotency_key argument to the
// tool handler instead of removing it from the arguments first. Tools whose
// own input schema declares idempotency_key always receive it. Defaults to
// removing it, so that handlers with strict argument decoding do not fail on
// a field they never declared.
func WithKeyArgumentPassedThrough() Option {
	return optionFunc(func(c *config) { c.stripKey = false })
}

// WithOperationDuration also records the semantic-convention histogram
// mcp.server.operation.duration (seconds, by mcp.method.name,
// gen_ai.tool.name and error.type) for every tools/call. Defaults to off:
// it adds a histogram measurement to every call, and an MCP server
// instrumented for all methods may record it already.
func WithOperationDuration() Option {
	return optionFunc(func(c *config) { c.opDuration = true })
}
