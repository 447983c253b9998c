// Package mcpcall is the per-request machinery every idemkit MCP front end
// shares: the SDK adapters (instrument/mcpgo, instrument/gosdk) and the
// idemkit gateway (cmd/idemkit), which handles raw JSON-RPC.
//
// One MCP request is one Op: Instrumenter.Start opens its SERVER span
// ("{mcp.method.name} {target}", parented on the trace context in
// params._meta), Op.End closes it and records mcp.server.operation.duration.
// A tools/call additionally goes through CallTool, which decides, in this
// order and each in one place, the call's protection, its scope, its key,
// its outcome and its write ID, and answers duplicates from the Guard. Tool
// results cross the package as an SDK's own type through a Codec; RawCodec
// handles results as raw JSON bytes.
//
// A front end that handles raw JSON-RPC (the gateway) serves each request
// so (raw_test.go does exactly this, and runs the protection through it):
//
//	ctx, op := in.Start(ctx, &mcpcall.Request{Method: method, ID: id, HasID: ok,
//		Meta: params.Meta, Target: params.Name, SessionID: sid, ProtocolVersion: v, Transport: t})
//	defer op.End(resp) // resp: the JSON-RPC error code and message, if any
//	switch method {
//	case "tools/list": // relay, then advertise the key where op's caller is protected
//		result, tools, err = in.DecorateRawToolsList(upstreamResult, op.Scope())
//	case "tools/call":
//		args, key := mcpcall.StripKeyArgument(params.Arguments) // when in.StripsKey
//		result, err = mcpcall.CallTool(op, &mcpcall.ToolCall{Tool: name, Arguments: args,
//			StrippedKey: key, Meta: params.Meta, Info: tools[name].Info, Validator: v},
//			mcpcall.RawCodec{}, forward) // forward sends the call upstream
//	}
//
// Nothing here imports an MCP SDK.
package mcpcall

import (
	"context"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// UnscopedPolicy decides what happens to a call of a protected tool whose
// caller cannot be identified: no subject, not a single-client local
// transport, and no authentic session. It is instrument.UnscopedPolicy,
// documented there.
type UnscopedPolicy uint8

const (
	// UnscopedRefuse answers such a call with an isError result saying that
	// nothing was done, and logs once per tool what to configure. It is the
	// default: the tool never runs unprotected while its description says
	// retries are safe, and callers never share stored results.
	UnscopedRefuse UnscopedPolicy = iota
	// UnscopedShare protects such calls in one namespace shared by every
	// unidentified caller.
	UnscopedShare
	// UnscopedBypass runs such calls unprotected (outcome bypassed, reason
	// unscoped); their spans still carry the key hashes.
	UnscopedBypass
)

// Config configures an Instrumenter. The zero value is not ready: start from
// DefaultConfig.
type Config struct {
	TracerProvider trace.TracerProvider
	MeterProvider  metric.MeterProvider
	Propagator     propagation.TextMapPropagator
	// Logger receives the operator-facing log lines (one per tool whose
	// unscoped calls are refused). Never nil after DefaultConfig.
	Logger *slog.Logger

	// Subject names the authenticated caller of a request, or "".
	Subject func(ctx context.Context) string
	// HashKey is the deployment's hash key: every hash exported on spans
	// (idemkit.args.hash, idemkit.key.hash, idemkit.subject.hash, the
	// hashed mcp.session.id) and in the Guard's errors is an HMAC-SHA-256
	// under it (see package idemkit). nil: the Guard's own
	// (idemkit.Config.HashKey), else plain SHA-256.
	HashKey []byte
	// RawSubject records the raw subject on spans.
	RawSubject bool
	// RawSessionID records the raw MCP session ID as mcp.session.id
	// instead of its hash.
	RawSessionID bool

	// Protect overrides, per tool, whether calls are protected (true) or
	// bypassed (false) whatever the tool's annotations say.
	Protect map[string]bool
	// StatusTools names, per tool, the tool that reports on an in-progress
	// call. A status tool set in the Guard's idemkit.ToolConfig wins.
	StatusTools map[string]string
	// Exclude lists, per tool, argument fields left out of the argument
	// hash: JSON Pointers or top-level names (idemkit.KeyOptions.Exclude).
	Exclude map[string][]string
	// Round maps, per tool, timestamp fields (JSON Pointers or top-level
	// names) to the granularity they are truncated to in the argument hash
	// (idemkit.KeyOptions.Round).
	Round map[string]map[string]time.Duration
	// Confirm holds, per tool, the human gate asked before a call runs
	// (see gate.go).
	Confirm map[string]Confirmation
	// RequireKey lists the tools whose calls must carry an explicit key
	// (refused with RefusalMissingKey otherwise).
	RequireKey map[string]bool
	// ToolVersions holds, per tool, a version mixed into its keys.
	ToolVersions map[string]string
	// CallStatusTool names the call status tool the front end serves (see
	// CallStatus), which is never protected and which in-progress answers
	// name for tools without a status tool of their own; "" serves none.
	CallStatusTool string
	// Unscoped is the policy for calls whose caller cannot be identified.
	Unscoped UnscopedPolicy
	// UnscopedAdvice, when set, returns what the refusal of an unscoped
	// call of tool tells the model to do, after saying that nothing was
	// done; UnscopedFix, when set, is what the operator's log line says to
	// configure. The defaults name the instrument package's options: a
	// front end configured otherwise (the idemkit gateway) sets both.
	UnscopedAdvice func(tool string) string
	UnscopedFix    string

	// ArgumentsCap and ResultCap cap gen_ai.tool.call.arguments and
	// gen_ai.tool.call.result; 0 records neither.
	ArgumentsCap, ResultCap int

	// AdvertiseKey adds the optional idempotency_key argument to protected
	// tools' schemas and descriptions in tools/list.
	AdvertiseKey bool
	// StripKey removes the idempotency_key argument before the handler sees
	// it, unless the tool's own schema declares it.
	StripKey bool

	// Tasks configures the durable MCP tasks of front ends that serve them
	// (see NewTasks).
	Tasks TasksConfig
}

// DefaultCaptureBytes is the cap of a recorded argument or result when the
// caller asked for recording without a size (instrument.WithRecordArguments
// and WithRecordResults document it).
const DefaultCaptureBytes = 1 << 10

// DefaultConfig returns the defaults: global OpenTelemetry providers and
// propagator, slog.Default, no subject, unscoped calls refused, the key
// advertised and stripped.
func DefaultConfig() Config {
	return Config{AdvertiseKey: true, StripKey: true}
}

// complete fills the unset providers from the globals.
func (c *Config) complete() {
	if c.TracerProvider == nil {
		c.TracerProvider = otel.GetTracerProvider()
	}
	if c.MeterProvider == nil {
		c.MeterProvider = otel.GetMeterProvider()
	}
	if c.Propagator == nil {
		c.Propagator = otel.GetTextMapPropagator()
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Option is one setting of a Config. It is instrument.Option (an alias of
// this type): the instrument package's With… functions return Options, and
// the SDK adapters apply the ones their users passed with ConfigFrom.
type Option interface {
	apply(*Config)
}

// OptionFunc is an Option that sets a Config by calling the function.
type OptionFunc func(*Config)

func (f OptionFunc) apply(c *Config) { f(c) }

// ConfigFrom returns DefaultConfig with opts applied in order; nil options
// are skipped.
func ConfigFrom(opts []Option) Config {
	c := DefaultConfig()
	for _, o := range opts {
		if o != nil {
			o.apply(&c)
		}
	}
	return c
}
