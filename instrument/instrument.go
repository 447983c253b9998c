package instrument

import (
	"context"
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemkit/idemkit/idemkit"
)

// ScopeName is the instrumentation scope of the tracer and meter: this
// package's import path.
const ScopeName = "github.com/idemkit/idemkit/instrument"

// Names of the request and result fields the middleware reads and writes.
// They follow the MCP rule for _meta keys: a reverse-DNS prefix (io.idemkit/)
// outside the reserved modelcontextprotocol/mcp labels, then a name.
const (
	// KeyArgument is the optional tool argument that carries a caller's
	// explicit idempotency key. The SDK wiring adds it to the input schema
	// and description of every protected tool.
	KeyArgument = idemkit.DefaultExplicitKeyField

	// KeyMetaKey is the params._meta entry that carries an explicit
	// idempotency key, for clients that send it outside the arguments. The
	// plain name KeyArgument is accepted in _meta too; when both are present
	// (or the argument too) they must be equal.
	KeyMetaKey = "io.idemkit/idempotency_key"

	// ReplayMetaKey is the result _meta entry that marks a replayed result.
	// Its value is an object {"replayed": true, "attempt": N, "write_id": "…"}
	// (write_id only when the tool recorded one). A replay is the original
	// result plus this entry, never an error.
	ReplayMetaKey = "io.idemkit/replay"

	// JobMetaKey is the result _meta entry of a job status answer:
	// {"job_id": "…", "state": "…"}.
	JobMetaKey = "io.idemkit/job"
)

// ToolCall describes one tools/call request to Handle. SDK adapters fill it
// from their request types; see the mcpgo and gosdk packages.
type ToolCall struct {
	// Tool is the tool name.
	Tool string
	// Arguments is the raw JSON of params.arguments, as received.
	Arguments []byte
	// Meta is params._meta, or nil. Handle reads the trace context
	// (traceparent, tracestate) and an explicit idempotency key from it.
	Meta map[string]any
	// SessionID is the MCP session ID, or "" when there is none.
	SessionID string
	// RequestID is the JSON-RPC request ID formatted with FormatRequestID,
	// or "" when the SDK does not expose it (the span then omits
	// jsonrpc.request.id rather than invent one).
	RequestID string
	// ProtocolVersion is the MCP protocol version in effect, or "".
	ProtocolVersion string
	// Local reports a transport that serves exactly one client (stdio), on
	// which calls without a subject need no scope.
	Local bool
	// ReadOnlyHint and IdempotentHint are the tool's MCP annotations. A tool
	// with either set is not protected unless WithProtect names it.
	ReadOnlyHint, IdempotentHint bool
	// Progress sends progress notifications for this request, or is nil when
	// the client gave no progress token.
	Progress ProgressSender
}

// Codec converts an SDK's tool result to and from the bytes the Guard
// stores. Its methods must accept the zero R.
type Codec[R any] interface {
	// Marshal returns the wire JSON of a result.
	Marshal(R) ([]byte, error)
	// Unmarshal decodes what Marshal returned.
	Unmarshal([]byte) (R, error)
	// IsError reports the result's isError flag.
	IsError(R) bool
	// NeedsInput reports a result that asks the client for more input before
	// the call can complete (MCP multi round-trip); it is not stored.
	NeedsInput(R) bool
	// ErrorResult returns an isError result whose only content is text.
	ErrorResult(text string) R
	// WithMeta returns the result with _meta[key] set to value. It must not
	// modify a result it did not create.
	WithMeta(r R, key string, value any) R
}

// ProgressSender sends MCP progress notifications for one request.
type ProgressSender interface {
	SendProgress(ctx context.Context, progress, total float64, message string) error
}

// Instrumenter traces tool calls and enforces claim-and-replay on the
// protected ones. It is SDK-agnostic: the mcpgo and gosdk packages wire it
// into an MCP server. Build it with New; it is safe for concurrent use.
type Instrumenter struct {
	cfg    config
	guard  *idemkit.Guard
	tracer trace.Tracer
	m      instruments

	tools  sync.Map     // tool name -> *toolAttrs
	ntools atomic.Int32 // entries in tools

	subjects  sync.Map     // scope -> subject hash
	nsubjects atomic.Int32 // entries in subjects

	statusMu sync.RWMutex      // protects status
	status   map[string]string // status tools registered at run time (jobs)
}

// New returns an Instrumenter that protects calls with guard. A nil guard
// observes only: it traces every call and protects none (outcome
// "bypassed"); write tools' spans still carry the key hashes (bypass reason
// "no_guard"), so the Collector measures the duplicates that leak before
// protection is turned on. Metric
// instruments that cannot be created are reported to otel.Handle and
// replaced by no-ops.
func New(guard *idemkit.Guard, opts ...Option) *Instrumenter {
	in := &Instrumenter{cfg: newConfig(opts), guard: guard}
	in.tracer = in.cfg.tp.Tracer(ScopeName, trace.WithInstrumentationVersion(Version))
	if err := in.m.init(in.cfg.mp); err != nil {
		otel.Handle(err)
	}
	return in
}

// Version is the instrumentation version reported with the scope.
const Version = idemkit.Version

// Guard returns the Guard, or nil.
func (in *Instrumenter) Guard() *idemkit.Guard { return in.guard }

// Protects reports whether calls of tool are claimed and replayed: never
// without a Guard; then as WithProtect or WithBypass say; otherwise unless
// the tool is annotated read-only or idempotent. MCP's annotation defaults
// (readOnlyHint false, idempotentHint false) make an unannotated tool
// protected.
func (in *Instrumenter) Protects(tool string, readOnlyHint, idempotentHint bool) bool {
	return in.guard != nil && in.writeTool(tool, readOnlyHint, idempotentHint)
}

// writeTool reports whether calls of tool need protection, Guard or not:
// as WithProtect or WithBypass say, otherwise unless annotated read-only or
// idempotent.
func (in *Instrumenter) writeTool(tool string, readOnlyHint, idempotentHint bool) bool {
	if v, ok := in.cfg.protect[tool]; ok {
		return v
	}
	return !readOnlyHint && !idempotentHint
}

// AdvertisesKey reports whether protected tools' schemas and descriptions
// should offer the KeyArgument (see WithoutKeyParameter).
func (in *Instrumenter) AdvertisesKey() bool { return in.guard != nil && in.cfg.keyParam }

// StripsKey reports whether the KeyArgument is removed from the arguments
// before they reach a handler whose schema does not declare it (see
// WithKeyArgumentPassedThrough).
func (in *Instrumenter) StripsKey() bool { return in.cfg.stripKey }

// SetStatusTool registers, at run time, the tool that reports on an
// in-progress call of tool. Job tools call it.
func (in *Instrumenter) SetStatusTool(tool, statusTool string) {
	in.statusMu.Lock()
	defer in.statusMu.Unlock()
	if in.status == nil {
		in.status = make(map[string]string)
	}
	in.status[tool] = statusTool
}

// StatusTool returns the status tool of tool set with WithStatusTool or
// SetStatusTool, or "".
func (in *Instrumenter) StatusTool(tool string) string {
	if s, ok := in.cfg.statusTool[tool]; ok {
		return s
	}
	in.statusMu.RLock()
	defer in.statusMu.RUnlock()
	return in.status[tool]
}

// KeyDescription is the sentence appended to a protected tool's description
// when the KeyArgument is advertised.
const KeyDescription = "Retries are safe: a repeated identical call returns the first call's result instead of running twice. " +
	"To make a retry unambiguous, pass the same idempotency_key (for example a UUID chosen once per intended action) on every attempt; use a new key for a new action."

// KeyParameterDescription describes the KeyArgument in an input schema.
const KeyParameterDescription = "Optional. A stable key (1-255 printable ASCII characters, for example a UUID) identifying this intended action. " +
	"Send the same key when retrying the same action and a new key for a new action; the call then runs at most once per key."

// KeyParameterSchema returns the JSON Schema of the KeyArgument property, a
// fresh map on every call.
func KeyParameterSchema() map[string]any {
	return map[string]any{
		"type":        "string",
		"minLength":   1,
		"maxLength":   idemkit.MaxExplicitKeyLen,
		"description": KeyParameterDescription,
	}
}
