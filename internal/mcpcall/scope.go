package mcpcall

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/idemkit-mcp/idemkit/idemkit"
	"github.com/idemkit-mcp/idemkit/spancontract"
)

// ScopeKind says how a request's caller was identified.
type ScopeKind uint8

// Scope kinds.
const (
	// ScopeNone: the caller cannot be identified.
	ScopeNone ScopeKind = iota
	// ScopeSubject: the Subject function named the caller.
	ScopeSubject
	// ScopeLocal: a transport that serves exactly one client (stdio).
	ScopeLocal
	// ScopeSession: an authentic session (issued and validated by the
	// server, or in-process).
	ScopeSession
)

// Scope is the namespace a call's key lives in: two calls in different
// scopes never share a stored result.
type Scope struct {
	Kind ScopeKind
	// Value is the key's subject: the subject, "" for a local transport or
	// a shared namespace, or a session-derived value.
	Value string
}

// sessionScopePrefix starts the scope of a call scoped by its session. The
// NUL byte keeps it apart from any subject a Subject function returns.
const sessionScopePrefix = "\x00session:"

// connectionScopePrefix starts the scope of a call scoped by its connection.
const connectionScopePrefix = "\x00connection:"

// Transport is what a front end knows about the connection a request
// arrived on.
type Transport struct {
	// Network is network.transport: "tcp" over HTTP, "pipe" on stdio, ""
	// when unknown (in-process).
	Network string
	// ProtocolName and ProtocolVersion are network.protocol.name and
	// network.protocol.version ("http", "1.1"), or "".
	ProtocolName, ProtocolVersion string
	// ClientAddress and ClientPort are the HTTP peer's, or "" and 0.
	ClientAddress string
	ClientPort    int
	// Local reports a transport that serves exactly one client (stdio), on
	// which calls need no scope.
	Local bool
	// AuthenticSessions reports that the session IDs of requests on this
	// transport were issued and are validated by the server (a stateful
	// Streamable HTTP session manager, an in-process session), so that a
	// session ID may scope keys.
	AuthenticSessions bool
	// ConnectionID names a connection that is one client (an in-memory
	// connection without a session ID); it scopes the keys of the calls on
	// it that have no subject, as an authentic session does.
	ConnectionID string
}

// ScopeOf decides the scope of a request from ctx (for the Subject
// function), its session ID and its transport:
//
//   - the Subject function's answer, when it names a caller;
//   - otherwise, on a local transport, the empty scope: one client;
//   - otherwise, on a transport whose sessions are authentic, the session;
//   - otherwise none: the caller cannot be identified.
func (in *Instrumenter) ScopeOf(ctx context.Context, sessionID string, t *Transport) Scope {
	if in.cfg.Subject != nil {
		if s := in.cfg.Subject(ctx); s != "" {
			return Scope{Kind: ScopeSubject, Value: s}
		}
	}
	switch {
	case t.Local:
		return Scope{Kind: ScopeLocal}
	case sessionID != "" && t.AuthenticSessions:
		return Scope{Kind: ScopeSession, Value: in.sessionScope(sessionID)}
	case t.ConnectionID != "":
		return Scope{Kind: ScopeSession, Value: connectionScopePrefix + t.ConnectionID}
	}
	return Scope{Kind: ScopeNone}
}

// keyScope returns the subject the key of a call in sc is derived with.
func keyScope(sc Scope) string { return sc.Value }

// explicitKey returns the explicit idempotency key of a call: from
// params._meta (KeyMetaKey or KeyArgument) and from the argument a front
// end removed before the call reached it (stripped, its raw JSON), which
// must agree. Errors wrap idemkit.ErrInvalidKey.
func explicitKey(meta map[string]any, stripped json.RawMessage) (string, error) {
	var (
		key   string
		found bool
	)
	for _, name := range [...]string{spancontract.KeyMetaKey, spancontract.KeyArgument} {
		v, ok := meta[name]
		if !ok || v == nil {
			continue
		}
		s, ok := v.(string)
		if !ok {
			return "", fmt.Errorf("%w: _meta %q must be a string", idemkit.ErrInvalidKey, name)
		}
		if found && s != key {
			return "", fmt.Errorf("%w: _meta %q and %q carry two different idempotency keys", idemkit.ErrInvalidKey, spancontract.KeyMetaKey, spancontract.KeyArgument)
		}
		key, found = s, true
	}
	if len(stripped) > 0 && string(stripped) != "null" {
		var s string
		if err := json.Unmarshal(stripped, &s); err != nil {
			return "", fmt.Errorf("%w: the %q argument must be a string", idemkit.ErrInvalidKey, spancontract.KeyArgument)
		}
		if found && s != key {
			return "", fmt.Errorf("%w: the %q argument and the request metadata carry two different idempotency keys", idemkit.ErrInvalidKey, spancontract.KeyArgument)
		}
		key, found = s, true
	}
	if found {
		if err := idemkit.ValidateExplicitKey(key); err != nil {
			return "", err
		}
	}
	return key, nil
}

// maxCachedSessions bounds the session scope cache; past it, scopes are
// built per call.
const maxCachedSessions = 8192

// sessionScope returns the scope of a session ID, built once per session.
func (in *Instrumenter) sessionScope(id string) string {
	if v, ok := in.sessions.Load(id); ok {
		return v.(string)
	}
	s := sessionScopePrefix + id
	if in.nsessions.Load() < maxCachedSessions {
		if _, loaded := in.sessions.LoadOrStore(id, s); !loaded {
			in.nsessions.Add(1)
		}
	}
	return s
}
