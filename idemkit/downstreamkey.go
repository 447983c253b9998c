package idemkit

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"

	"github.com/idemkit-mcp/idemkit/spancontract"
)

// downstreamKeyPrefix starts every downstream key.
const downstreamKeyPrefix = "idk_"

// DownstreamKey returns the idempotency key that the attempts of the record
// keyID (Key.ID, Record.Key) of generation (Record.Generation,
// ClaimResult.Generation) forward to a downstream API: the value of
// Call.IdempotencyKey while the record's work runs. A status tool or an
// operator uses it to find the record's request in a provider's logs.
//
// For a generation other than 0 it is "idk_", the key's
// idemkit.key.hash (the first 32 characters of keyID), "_" and 16
// lowercase hex characters of a SHA-256 of keyID and the generation: 53
// characters of [0-9a-z_], which fits the header limits of common
// providers (Stripe 255, PayPal 108, Adyen 64). The generation, a fencing
// token, is not recoverable from it. Generation 0, a record written before
// the stores kept generations, gives the key earlier versions forwarded,
// "idk_" and the whole keyID, so that an attempt taking such a record over
// repeats the key its first attempt sent.
func DownstreamKey(keyID string, generation int64) string {
	if generation == 0 {
		return downstreamKeyPrefix + keyID
	}
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(generation))
	h := sha256.New()
	h.Write([]byte("idemkit downstream key\x00"))
	h.Write([]byte(keyID))
	h.Write([]byte{0})
	h.Write(b[:])
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	out := make([]byte, 0, len(downstreamKeyPrefix)+spancontract.HashLen+1+16)
	out = append(out, downstreamKeyPrefix...)
	out = append(out, short(keyID)...)
	out = append(out, '_')
	out = hex.AppendEncode(out, sum[:8])
	return string(out)
}

// IdempotencyKey returns the key to forward to a downstream API that
// accepts idempotency keys (a payment gateway's Idempotency-Key header; see
// the idemkit/downstream package for HTTP, resource IDs and markers). It
// belongs to the record the attempt runs under, not to the arguments:
//
//   - the same for every attempt of one record: a retry after a released
//     failure, a takeover after a crash or a lapsed lease, on any replica
//     sharing the store, so that the downstream deduplicates a side effect
//     an earlier attempt made before it could record its outcome;
//   - another for a new record: a deliberate repeat after the window has
//     expired, with the same subject, tool and arguments, reaches a
//     provider that deduplicates for longer than the window (Stripe: 24
//     hours) as the new request it is.
//
// It carries no raw subject (see DownstreamKey for its form). It returns ""
// on a nil *Call.
//
// Inside a caller's transaction (pgstore.DoTx, sqlitestore.DoTx, the
// transactional tool handlers) the claim commits with the work, so an
// attempt that is rolled back (the process killed before the commit)
// leaves no record, and its retry is a fresh record: there the key is the
// argument-derived one (DownstreamKey with generation 0), the same for the
// retry as for the attempt that died, and also for a deliberate repeat
// after the window. Work that calls a provider is better done outside the
// transaction: claim with Do, call the provider with this key, then write
// locally.
func (c *Call) IdempotencyKey() string {
	if c == nil {
		return ""
	}
	return DownstreamKey(c.key.id, c.generation)
}
