// Package state holds what the dup processor remembers between spans: the
// tracked duplicate groups and their calls (Groups), and the evidence kept
// per context, a trace, a conversation or a session (Contexts). Both live in
// pointer-free arenas indexed by open-addressing tag tables, so the garbage
// collector never scans them. Nothing here is safe for concurrent use: the
// processor's mutex protects it.
package state // import "github.com/idemkit-mcp/idemkit/collector/dupprocessor/internal/state"

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"math/bits"

	"go.opentelemetry.io/collector/pdata/pcommon"
)

// Key is a duplicate group's key: the 16 bytes behind the 32 hex characters
// of idemkit.key.hash, or the first 16 bytes of a SHA-256 the processor
// computes when the span carries no key hash.
type Key [16]byte

// String returns the key as idemkit.duplicate.group carries it: 32
// lowercase hex characters.
func (k Key) String() string {
	var buf [2 * len(k)]byte // on the stack: one allocation, the string's
	hex.Encode(buf[:], k[:])
	return string(buf[:])
}

// Short returns the first 8 bytes of the key, used to tell groups apart in
// the evidence kept per context.
func (k Key) Short() uint64 { return binary.LittleEndian.Uint64(k[:8]) }

// Outcome is idemkit.outcome, parsed.
type Outcome uint8

// The outcomes the classification tells apart.
const (
	OutcomeNone       Outcome = iota // absent: a span from another instrumentation
	OutcomeExecuted                  // executed (or a write that ran unprotected)
	OutcomeReplayed                  // replayed
	OutcomeInProgress                // in_progress
	OutcomeTakeover                  // takeover
	OutcomeOther                     // a value the processor does not know
)

// Member is one tool call of a group: what the classification needs of its
// span, hashed down to fixed-size fields (72 bytes) so that a tracked group
// holds no reference into a batch. A field is 0 when the span does not
// carry it. The request IDs, write IDs and parents are only ever compared
// within a group (at most MaxMembers calls of one key), so 32 bits tell
// them apart; the contexts and the user, which link calls across callers,
// keep 64.
type Member struct {
	Start    int64  // span start, ns since the epoch (event time)
	DecideAt int64  // processing time of its decision (arrival + decision_wait), ns
	Trace    uint64 // context key of the trace
	Conv     uint64 // context key of gen_ai.conversation.id
	Session  uint64 // context key of a reliable mcp.session.id (0 when unreliable)
	User     uint64 // hash of user.id, else enduser.id, of the span or its resource
	SpanID   pcommon.SpanID
	ReqID    uint32 // hash of jsonrpc.request.id
	WriteID  uint32 // hash of idemkit.write.id
	// Parent folds the parent span ID of an idemkit SERVER span whose
	// parent is remote: the client's context, which idemkit takes from the
	// request's params._meta (0 otherwise). The same request delivered
	// twice carries the same one.
	Parent  uint32
	Outcome Outcome
	Flags   uint8
}

// Member flags.
const (
	// FlagProvenDup: the span's own outcome (replayed, in_progress,
	// takeover) or attempt (> 1) proves that an earlier call exists.
	FlagProvenDup uint8 = 1 << iota
	// FlagAnnotated: the span arrived with idemkit.duplicate* attributes,
	// which the decision must remove.
	FlagAnnotated
	// FlagWeakKey: the group key does not identify the caller (another
	// instrumentation's arguments hash, or an idemkit key without a
	// subject): the call joins another of its group only with evidence
	// that both are the same caller's (Linked).
	FlagWeakKey
	// FlagInputRequested: the call's result asked the client for more
	// input (idemkit.input.requested); the round that continues it is the
	// same call.
	FlagInputRequested
	// FlagInputContinuation: the request continues an earlier round of the
	// same call (idemkit.input.continuation).
	FlagInputContinuation
)

// CallCtx is the context of the call for the deliberate-repeat rule: its
// reliable session, else its conversation, else its trace, narrowed to its
// user when the span names one (a session or trace shared by several users
// is not one caller's context); 0 for none.
func (m *Member) CallCtx() uint64 {
	c := m.Trace
	switch {
	case m.Session != 0:
		c = m.Session
	case m.Conv != 0:
		c = m.Conv
	}
	if c == 0 || m.User == 0 {
		return c
	}
	return WithUser(c, m.User)
}

// AnyUser stands for every user in WithUser: the context of the inference
// spans of a trace that name a user, whichever it is.
const AnyUser uint64 = 0x85ebca6b0c2b2ae3

// WithUser returns the key of context c narrowed to one user (a context key
// from the user's hash), or to the spans that name any user (AnyUser).
func WithUser(c, user uint64) uint64 {
	if h := c ^ bits.RotateLeft64(user*0x9e3779b97f4a7c15, 29); h != 0 {
		return h
	}
	return 1
}

// Same reports whether m and o are the same span.
func (m *Member) Same(o *Member) bool {
	return m.SpanID == o.SpanID && m.Trace == o.Trace
}

// Before reports whether m started before o; arrival, then the span ID,
// break ties.
func (m *Member) Before(o *Member) bool {
	if m.Start != o.Start {
		return m.Start < o.Start
	}
	if m.DecideAt != o.DecideAt {
		return m.DecideAt < o.DecideAt
	}
	return bytes.Compare(m.SpanID[:], o.SpanID[:]) < 0
}

// OtherUser reports whether the users of m and o say that they are
// different callers: both spans name a user and the users differ; or only
// one names a user while a key does not identify the caller (then a shared
// session or trace is all that would link them, and one span says whose
// call it is while the other cannot be shown to be that user's).
func (m *Member) OtherUser(o *Member) bool {
	if m.User == o.User {
		return false
	}
	return m.User != 0 && o.User != 0 || (m.Flags|o.Flags)&FlagWeakKey != 0
}

// Linked reports whether m and o are, on the evidence of their spans, calls
// of the same caller. Never when their users differ (OtherUser), whatever
// else they share: a gateway's one session for everyone, an orchestrator's
// trace serving several users. Otherwise always when both keys identify the
// caller; else only with the same user (user.id or enduser.id, both
// present), the same reliable session or the same trace. Identical calls of
// different callers are never duplicates, whatever the gap between them.
func (m *Member) Linked(o *Member) bool {
	if m.OtherUser(o) {
		return false
	}
	if (m.Flags|o.Flags)&FlagWeakKey == 0 {
		return true
	}
	return m.User != 0 || // equal to o.User: not OtherUser
		(m.Session != 0 && m.Session == o.Session) ||
		(m.Trace != 0 && m.Trace == o.Trace)
}

// NewRequest reports whether the spans prove that o and m are two requests
// of the client rather than one request delivered twice: both carry a
// parent from the client (Parent) and the parents or traces differ. A
// transport retry or a replay re-sends the same bytes, params._meta
// included, so its parent is the first delivery's. The same parent proves
// nothing: a client may send several requests from one span.
func (m *Member) NewRequest(o *Member) bool {
	return m.Parent != 0 && o.Parent != 0 && (m.Parent != o.Parent || m.Trace != o.Trace)
}
