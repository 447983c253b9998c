package mcpcall

import (
	"bytes"
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemkit-mcp/idemkit/idemkit"
	"github.com/idemkit-mcp/idemkit/internal/hashkey"
)

// ScopeName is the instrumentation scope of the tracer and the meter: the
// import path of the package users configure, instrument.
const ScopeName = "github.com/idemkit-mcp/idemkit/instrument"

// Instrumenter traces MCP requests and protects the tool calls that need
// it. Build it with New; it is safe for concurrent use.
type Instrumenter struct {
	cfg    Config
	guard  *idemkit.Guard
	hasher hashkey.Hasher // every exported hash
	tracer trace.Tracer
	m      instruments

	methods  map[string]*targetAttrs // method without a target -> attributes; read-only
	targets  sync.Map                // targetKey -> *targetAttrs
	ntargets atomic.Int32            // entries in targets

	subjects  sync.Map     // scope -> subject hash
	nsubjects atomic.Int32 // entries in subjects

	sessions  sync.Map     // session ID -> scope
	nsessions atomic.Int32 // entries in sessions

	sessionHashes  sync.Map     // session ID -> its mcp.session.id
	nsessionHashes atomic.Int32 // entries in sessionHashes

	badPolicies map[string]error // tools whose key policy is invalid; read-only

	refusedMu sync.Mutex      // protects refused
	refused   map[string]bool // tools whose unscoped refusal was logged
}

// New returns an Instrumenter that protects calls with guard. A nil guard
// observes only: every call is traced, none is protected, and write tools'
// spans still carry the key hashes (bypass reason no_guard). Metric
// instruments that cannot be created are reported to otel.Handle and
// replaced by no-ops.
//
// With cfg.HashKey, every exported hash is keyed with it, the Guard's too
// (the Instrumenter uses a copy of guard with that key); without it, with
// the Guard's key (idemkit.Config.HashKey), if it has one.
func New(guard *idemkit.Guard, cfg Config) *Instrumenter {
	cfg.complete()
	in := &Instrumenter{cfg: cfg, guard: guard, methods: methodAttrs()}
	in.badPolicies = checkKeyPolicies(&in.cfg)
	switch {
	case len(cfg.HashKey) > 0:
		in.hasher = hashkey.New(cfg.HashKey)
		if len(cfg.HashKey) < hashkey.MinKeyLen {
			cfg.Logger.Warn("the hash key is short: use 32 random bytes, so that nobody can guess it and recompute the exported hashes",
				"bytes", len(cfg.HashKey), "minimum", hashkey.MinKeyLen)
		} else if guard != nil && !bytes.Equal(guard.Config().HashKey, cfg.HashKey) {
			// The Guard's errors and log records carry the same keyed
			// hashes: a Guard on the same store and configuration, with
			// this key.
			gc := guard.Config()
			gc.HashKey = cfg.HashKey
			if g, err := idemkit.NewGuard(guard.Store(), &gc); err == nil {
				in.guard = g
			} else {
				cfg.Logger.Warn("the Guard's errors keep unkeyed hashes", "error", err)
			}
		}
	case guard != nil:
		in.hasher = hashkey.New(guard.Config().HashKey)
	}
	in.tracer = cfg.TracerProvider.Tracer(ScopeName,
		trace.WithInstrumentationVersion(idemkit.Version), trace.WithSchemaURL(semconv.SchemaURL))
	if err := in.m.init(cfg.MeterProvider); err != nil {
		otel.Handle(err)
	}
	return in
}

// Guard returns the Guard, or nil.
func (in *Instrumenter) Guard() *idemkit.Guard { return in.guard }

// Config returns the configuration (a copy).
func (in *Instrumenter) Config() Config { return in.cfg }

// ToolInfo is what a front end knows about a tool from its registration or
// listing.
type ToolInfo struct {
	// ReadOnlyHint and IdempotentHint are the tool's MCP annotations. MCP's
	// defaults (both false) make an unannotated tool a write tool.
	ReadOnlyHint, IdempotentHint bool
	// DeclaresKey reports that the tool's own input schema has the
	// idempotency_key argument: it is then passed to the handler.
	DeclaresKey bool
	// StatusTool is the status tool the tool names in its _meta under
	// StatusToolMetaKey, or "".
	StatusTool string
}

// WriteTool reports whether calls of tool need protection, Guard or not:
// as the Protect overrides say, otherwise unless the tool is annotated
// read-only or idempotent.
func (in *Instrumenter) WriteTool(tool string, info ToolInfo) bool {
	if tool == in.cfg.CallStatusTool && tool != "" {
		return false // read-only, whatever Protect says
	}
	if v, ok := in.cfg.Protect[tool]; ok {
		return v
	}
	return !info.ReadOnlyHint && !info.IdempotentHint
}

// Protects reports whether calls of tool are claimed and replayed for a
// caller whose scope is sc: never without a Guard; then for write tools,
// unless the caller is unidentified and the policy refuses or bypasses
// such calls.
func (in *Instrumenter) Protects(tool string, info ToolInfo, sc Scope) bool {
	if in.guard == nil || !in.WriteTool(tool, info) {
		return false
	}
	return sc.Kind != ScopeNone || in.cfg.Unscoped == UnscopedShare
}

// AdvertisesKey reports whether tools/list should offer the idempotency_key
// argument on tool to a caller whose scope is sc: only when that caller's
// calls of it are protected, so that a description never claims that
// retries are safe when they are not.
func (in *Instrumenter) AdvertisesKey(tool string, info ToolInfo, sc Scope) bool {
	return in.cfg.AdvertiseKey && !info.DeclaresKey && in.Protects(tool, info, sc)
}

// StripsKey reports whether the idempotency_key argument is removed from
// the arguments of tool before the handler sees them.
func (in *Instrumenter) StripsKey(tool string, info ToolInfo) bool {
	return in.cfg.StripKey && !info.DeclaresKey && in.WriteTool(tool, info)
}

// statusToolOf returns the tool a model should call to check on an
// in-progress call of tool: the one configured with WithStatusTool, else the
// one the tool names in its _meta, else the call status tool when one is
// served. (A status tool set in the Guard's idemkit.ToolConfig comes first:
// it is already in the Guard's answer.)
func (in *Instrumenter) statusToolOf(tool string, info ToolInfo) string {
	if s, ok := in.cfg.StatusTools[tool]; ok {
		return s
	}
	if info.StatusTool != "" {
		return info.StatusTool
	}
	return in.CallStatusTool()
}

// maxCachedSubjects bounds the subject hash cache; past it, hashes are
// computed per call.
const maxCachedSubjects = 8192

// hashSubject returns the idemkit.subject.hash of a scope.
func (in *Instrumenter) hashSubject(scope string) string {
	if v, ok := in.subjects.Load(scope); ok {
		return v.(string)
	}
	h := in.hasher.SubjectHash(scope)
	if in.nsubjects.Load() < maxCachedSubjects {
		if _, loaded := in.subjects.LoadOrStore(scope, h); !loaded {
			in.nsubjects.Add(1)
		}
	}
	return h
}

// unreliableSessionID reports a session ID that names no session (mcp-go's
// stdio placeholder, which its front end passes as ""): exported as it is,
// so that the Collector's dup processor still recognises it.
func unreliableSessionID(id string) bool { return id == "stdio" }

// SessionAttr returns the value exported as mcp.session.id for the session
// ID id: its hash (hashkey.Hasher.SessionHash), which tells sessions apart
// as the ID does but grants nothing, unless RawSessionID asks for the ID.
// Front ends use it wherever they log a session ID too.
func (in *Instrumenter) SessionAttr(id string) string {
	if id == "" || in.cfg.RawSessionID || unreliableSessionID(id) {
		return id
	}
	if v, ok := in.sessionHashes.Load(id); ok {
		return v.(string)
	}
	h := in.hasher.SessionHash(id)
	if in.nsessionHashes.Load() < maxCachedSessions {
		if _, loaded := in.sessionHashes.LoadOrStore(id, h); !loaded {
			in.nsessionHashes.Add(1)
		}
	}
	return h
}

// logRefusedOnce logs, once per tool, that unscoped calls of tool are
// refused and what the operator can configure.
func (in *Instrumenter) logRefusedOnce(tool string) {
	in.refusedMu.Lock()
	if in.refused[tool] {
		in.refusedMu.Unlock()
		return
	}
	if in.refused == nil {
		in.refused = make(map[string]bool)
	}
	in.refused[tool] = true
	in.refusedMu.Unlock()
	fix := in.cfg.UnscopedFix
	if fix == "" {
		fix = "name the caller with instrument.WithSubject (for example the subject your authentication verified), " +
			"or serve Streamable HTTP with validated sessions (mcpgo.NewStreamableHTTPHandler, gosdk.NewStreamableHTTPHandler), " +
			"or, on a single-tenant server, opt in with instrument.WithUnscopedCalls(instrument.UnscopedShare)"
	}
	in.cfg.Logger.Error("idemkit refused a call of a protected tool because its caller cannot be identified; "+
		"the tool did not run, and later such calls of it are refused too (logged once per tool)",
		"tool", tool, "fix", fix)
}
