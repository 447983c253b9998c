package instrument

import (
	"context"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemkit-mcp/idemkit/internal/mcpcall"
)

// UnscopedPolicy decides what happens to a call of a protected tool whose
// caller cannot be identified: WithSubject named no one, the transport is
// not a single-client local one (stdio), and the request has no authentic
// session (one issued and validated by the server). That is the shape of
// Streamable HTTP without authentication, and of any session a server does
// not validate.
type UnscopedPolicy = mcpcall.UnscopedPolicy

// Unscoped policies.
const (
	// UnscopedRefuse answers such a call with an isError result that tells
	// the model nothing was done (with the spancontract.RefusalMetaKey
	// marker, reason "unscoped"), and logs once per tool what the operator
	// can configure.
	// The tool's description does not claim that retries are safe for such
	// callers. This is the default: a protected tool never runs unprotected,
	// and two callers never share a stored result.
	UnscopedRefuse UnscopedPolicy = mcpcall.UnscopedRefuse
	// UnscopedShare protects such calls in one namespace that every
	// unidentified caller shares: a caller may be answered with another
	// caller's stored result. Choose it only for a server whose callers may
	// all see each other's results, such as a single-tenant internal service.
	UnscopedShare UnscopedPolicy = mcpcall.UnscopedShare
	// UnscopedBypass runs such calls unprotected (outcome "bypassed",
	// idemkit.bypass.reason "unscoped"); their spans still carry the key
	// hashes, so the Collector sees the duplicates that leak.
	UnscopedBypass UnscopedPolicy = mcpcall.UnscopedBypass
)

// Option configures the instrumentation of an MCP server (see the mcpgo
// and gosdk packages). Options are applied in order; for the per-tool
// options a later one overrides an earlier one for the same tool. The
// With… functions of this package make them.
type Option = mcpcall.Option

type optionFunc = mcpcall.OptionFunc

// WithTracerProvider sets the TracerProvider of the request spans. Defaults
// to the global provider (otel.GetTracerProvider) when the instrumentation
// is built.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return optionFunc(func(c *mcpcall.Config) { c.TracerProvider = tp })
}

// WithMeterProvider sets the MeterProvider of the metrics. Defaults to the
// global provider (otel.GetMeterProvider) when the instrumentation is built.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return optionFunc(func(c *mcpcall.Config) { c.MeterProvider = mp })
}

// WithPropagator sets the propagator that extracts the caller's trace
// context from a request's params._meta (traceparent, tracestate). Defaults
// to the global propagator (otel.GetTextMapPropagator) when the
// instrumentation is built.
func WithPropagator(p propagation.TextMapPropagator) Option {
	return optionFunc(func(c *mcpcall.Config) { c.Propagator = p })
}

// WithLogger sets the logger of the operator-facing messages, such as the
// one logged once per tool whose calls are refused because their caller
// cannot be identified. Defaults to slog.Default().
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(c *mcpcall.Config) { c.Logger = l })
}

// WithSubject sets the function that names the authenticated caller of a
// request, from its context: a user ID, a tenant, an OAuth subject (see
// mcpgo.TokenSubject and gosdk.TokenSubject for bearer tokens). Keys are
// scoped by it, so two callers never share a stored response. It must be
// fast and safe for concurrent use; it is called once per tool call, and
// once per tools/list (to decide which tools are advertised as safe to
// retry).
//
// When it is not set or returns "", a call is scoped as follows:
//
//   - on a single-client local transport (stdio), by nothing: the process
//     serves one client;
//   - otherwise, by the MCP session, when the server issued and validates
//     the session ID (stateful Streamable HTTP served through
//     mcpgo.NewStreamableHTTPHandler or gosdk.NewStreamableHTTPHandler, or
//     an in-process session). A duplicate sent on a new session after a
//     reconnect is then not caught; set WithSubject to catch it;
//   - otherwise the caller cannot be identified, and the UnscopedPolicy
//     decides (WithUnscopedCalls; by default the call is refused).
func WithSubject(fn func(ctx context.Context) string) Option {
	return optionFunc(func(c *mcpcall.Config) { c.Subject = fn })
}

// WithHashKey sets the deployment's hash key: every hash the
// instrumentation exports becomes an HMAC-SHA-256 under key instead of a
// plain SHA-256 (see package idemkit, "exported hashes"): idemkit.args.hash, idemkit.key.hash,
// idemkit.subject.hash, the hashed mcp.session.id, and the key hashes in
// the Guard's errors and log records (the instrumentation uses a copy of
// the Guard with the key).
//
// Without a key, anyone who reads the spans can recompute the hashes from
// guessed inputs: arguments of low entropy (an order ID and an amount) and
// subjects such as e-mail addresses are recovered with a dictionary in
// seconds. With one, nobody without the key can. Use 32 random bytes
// (16 bytes is the least NewGuard accepts; a shorter key is
// used, with a warning in the log), keep it with the service's other
// secrets, and give every replica the same key: the Collector's dup
// processor groups duplicates by these hashes, and hashes made under two
// keys never match. Rotating the key splits the duplicate groups that
// straddle the change, nothing else: stored records never depend on it.
// Defaults to none, or the Guard's idemkit.Config.HashKey when it has one.
func WithHashKey(key []byte) Option {
	k := append([]byte(nil), key...)
	return optionFunc(func(c *mcpcall.Config) { c.HashKey = k })
}

// WithRawSubject also records the raw subject on spans (idemkit.subject).
// Subjects are personal data: opt in only where your tracing backend may
// hold them. Defaults to off.
func WithRawSubject() Option {
	return optionFunc(func(c *mcpcall.Config) { c.RawSubject = true })
}

// WithRawSessionID records the MCP session ID itself as mcp.session.id,
// instead of its hash. A session ID a server issues and validates is the
// credential that reaches its session's stored results (in session scope,
// a stranger who presents it gets them), so by default spans carry only a
// hash of it (keyed with WithHashKey), which
// tells sessions apart exactly as the ID does for the Collector's dup
// processor. Opt in only where your tracing backend may hold credentials.
// Defaults to off.
func WithRawSessionID() Option {
	return optionFunc(func(c *mcpcall.Config) { c.RawSessionID = true })
}

// WithProtect protects tools whatever their annotations say.
func WithProtect(tools ...string) Option {
	return optionFunc(func(c *mcpcall.Config) { setProtect(c, tools, true) })
}

// WithBypass leaves tools unprotected (they still get spans and metrics)
// whatever their annotations say.
func WithBypass(tools ...string) Option {
	return optionFunc(func(c *mcpcall.Config) { setProtect(c, tools, false) })
}

func setProtect(c *mcpcall.Config, tools []string, v bool) {
	if c.Protect == nil {
		c.Protect = make(map[string]bool, len(tools))
	}
	for _, t := range tools {
		c.Protect[t] = v
	}
}

// WithStatusTool names the tool a model should call to check on an
// in-progress call of tool; the in-progress answer names it. A StatusTool
// set in the Guard's idemkit.ToolConfig takes precedence; a tool may also
// name its own in its _meta under spancontract.StatusToolMetaKey (job tools
// do).
func WithStatusTool(tool, statusTool string) Option {
	return optionFunc(func(c *mcpcall.Config) {
		if c.StatusTools == nil {
			c.StatusTools = make(map[string]string)
		}
		c.StatusTools[tool] = statusTool
	})
}

// WithExclude leaves argument fields of tool out of the argument hash:
// client timestamps, nonces, request IDs that differ on every retry and
// would otherwise make every duplicate look new. A field that starts with
// "/" is a JSON Pointer (RFC 6901; "~1" for "/" and "~0" for "~" in a
// name) that reaches any depth: "/order/requested_at", "/items/0/nonce",
// and, an extension of RFC 6901, "/items/*/nonce" for every element of an
// array. Any other field is a top-level argument name, as it is. Names
// match byte for byte. An excluded field is hashed as if absent: two
// calls that differ only there are one request. A later WithExclude for
// the same tool replaces the earlier one.
//
// The options cannot return an error: an invalid pointer is logged as an
// error when the instrumentation is built (mcpgo.New, gosdk.New), and the
// tool's protected calls are then refused (spancontract.RefusalMisconfigured),
// never keyed without the exclusion. Defaults to none.
func WithExclude(tool string, fields ...string) Option {
	return optionFunc(func(c *mcpcall.Config) {
		if c.Exclude == nil {
			c.Exclude = make(map[string][]string)
		}
		c.Exclude[tool] = append([]string(nil), fields...)
	})
}

// WithRound truncates the timestamp field of tool at pointer (a JSON
// Pointer or a top-level name, as in WithExclude) to the granularity d in
// the argument hash, so that retries a client stamps with the time it sent
// them share a key: the seed's "exclude those fields or round them".
//
// The field must be an RFC 3339 date-time string
// ("2026-12-02T10:15:07.25+01:00") or null. It is converted to UTC and
// truncated to d, which must divide 24 hours (1s, 1m, 5m, 15m, 1h, 24h...):
// with 1m, 10:15:00Z to 10:15:59.999Z and 11:15:30+01:00 are one minute.
// It truncates rather than rounding to the nearest: any grid has
// boundaries, and two retries that straddle one (10:15:59.9 and 10:16:00.1)
// get two keys and both run. Where that matters, WithExclude the field
// instead (then only the other arguments tell two requests apart).
//
// A call whose field is present and is not such a timestamp (an epoch
// number, "yesterday") is refused as invalid arguments, with nothing
// claimed or run: hashing it raw would give each retry a new key. The
// handler always sees the field as sent. Configuration errors (a bad
// pointer, a granularity that does not divide 24h, a field both excluded
// and rounded) are reported as WithExclude's are. A later WithRound for
// the same tool and pointer replaces the earlier one. Defaults to none.
func WithRound(tool, pointer string, d time.Duration) Option {
	return optionFunc(func(c *mcpcall.Config) {
		if c.Round == nil {
			c.Round = make(map[string]map[string]time.Duration)
		}
		if c.Round[tool] == nil {
			c.Round[tool] = make(map[string]time.Duration)
		}
		c.Round[tool][pointer] = d
	})
}

// WithUnscopedCalls sets the policy for protected calls whose caller cannot
// be identified (see WithSubject). Defaults to UnscopedRefuse.
func WithUnscopedCalls(p UnscopedPolicy) Option {
	return optionFunc(func(c *mcpcall.Config) { c.Unscoped = p })
}

// WithRecordArguments records the raw tool arguments on spans
// (gen_ai.tool.call.arguments), cut to maxBytes (1 KiB when maxBytes <= 0). Arguments may hold personal or secret data: opt in only
// where your tracing backend may hold them. Defaults to off.
func WithRecordArguments(maxBytes int) Option {
	return optionFunc(func(c *mcpcall.Config) { c.ArgumentsCap = captureCap(maxBytes) })
}

// WithRecordResults records the raw tool results on spans
// (gen_ai.tool.call.result), cut to maxBytes (1 KiB when maxBytes <= 0). Defaults to off.
func WithRecordResults(maxBytes int) Option {
	return optionFunc(func(c *mcpcall.Config) { c.ResultCap = captureCap(maxBytes) })
}

func captureCap(n int) int {
	if n <= 0 {
		return mcpcall.DefaultCaptureBytes
	}
	return n
}

// WithoutKeyParameter stops the instrumentation from advertising the
// optional idempotency_key argument in protected tools' input schemas and
// descriptions. Keys sent anyway (in the arguments or in params._meta) are
// still honoured. Defaults to advertising it.
func WithoutKeyParameter() Option {
	return optionFunc(func(c *mcpcall.Config) { c.AdvertiseKey = false })
}

// WithKeyArgumentPassedThrough hands the idempotency_key argument to the
// tool handler instead of removing it from the arguments first. Tools whose
// own input schema declares idempotency_key always receive it. Defaults to
// removing it, so that handlers with strict argument decoding (and strict
// input schemas) do not fail on a field they never declared.
func WithKeyArgumentPassedThrough() Option {
	return optionFunc(func(c *mcpcall.Config) { c.StripKey = false })
}

// TasksConfig configures the MCP tasks (specification 2025-11-25) that an
// adapter serves from the Guard's store (see mcpgo.NewStreamableHTTPHandler).
// Zero fields take their defaults. A task is kept for its tool's window
// (idemkit.Config.Window, or the tool's ToolConfig.Window) from its
// creation, and at least a Lease after its last heartbeat: that window is
// the ttl tasks report. Set it above your longest task plus the time
// clients take to fetch its result.
type TasksConfig struct {
	// Lease is how long a task's worker holds it without a heartbeat before
	// the task is reported failed because its worker was lost (its process
	// died): a task's status is truthful within Lease of a crash. Defaults
	// to 30s.
	Lease time.Duration
	// Heartbeat is how often a worker renews its lease, and so how soon a
	// task cancelled on another replica stops. Defaults to a third of
	// Lease.
	Heartbeat time.Duration
	// Timeout bounds one task's work. Defaults to 0 (no bound but
	// tasks/cancel and shutdown).
	Timeout time.Duration
	// PollInterval is the pollInterval tasks suggest to clients. Defaults
	// to 1s.
	PollInterval time.Duration
}

// WithTasks configures the durable MCP tasks an adapter serves (see
// TasksConfig). Defaults to the zero TasksConfig: all defaults.
func WithTasks(cfg TasksConfig) Option {
	return optionFunc(func(c *mcpcall.Config) {
		c.Tasks = mcpcall.TasksConfig{Lease: cfg.Lease, Heartbeat: cfg.Heartbeat, Timeout: cfg.Timeout, PollInterval: cfg.PollInterval}
	})
}
