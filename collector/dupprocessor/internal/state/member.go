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
// carry it. The request and write IDs are only ever compared within a group
// (at most MaxMembers calls of one key), so 32 bits of a keyed hash tell
// them apart; the contexts and the user, which link calls across callers,
// keep 64.
type Member struct {
	Start    int64  // span start, ns since the epoch (event time)
	DecideAt int64  // processing time of its decision (arrival + decision_wait), ns
	Trace    uint64 // context key of the trace
	Conv     uint64 // context key of gen_ai.conversation.id
	Session  uint64 // context key of a reliable mcp.session.id (0 when unreliable)
	User     uint64 // hash of user.id, else enduser.id (weak keys only)
	SpanID   pcommon.SpanID
	ReqID    uint32 // hash of jsonrpc.request.id
	WriteID  uint32 // hash of idemkit.write.id
	Outcome  Outcome
	Flags    uint8
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
// reliable session, else its conversation, else its trace; 0 for none.
func (m *Member) CallCtx() uint64 {
	switch {
	case m.Session != 0:
		return m.Session
	case m.Conv != 0:
		return m.Conv
	}
	return m.Trace
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

// Linked reports whether m and o are, on the evidence of their spans, calls
// of the same caller: always when both keys identify the caller; otherwise
// only with the same user (user.id or enduser.id, both present), the same
// reliable session or the same trace. Identical calls of different callers
// are never duplicates, whatever the gap between them.
func (m *Member) Linked(o *Member) bool {
	if (m.Flags|o.Flags)&FlagWeakKey == 0 {
		return true
	}
	return (m.User != 0 && m.User == o.User) ||
		(m.Session != 0 && m.Session == o.Session) ||
		(m.Trace != 0 && m.Trace == o.Trace)
}
