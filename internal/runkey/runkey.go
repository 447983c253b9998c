// Package runkey is the form of the record keys of durable runs (the jobs
// and MCP tasks of package instrument, run by internal/runs): a namespace
// prefix per kind and owner, then a random run ID. idemkit.NewRunKey builds
// the Key of a run from it; internal/runs makes the IDs, lists a
// namespace and reads a run's ID back from its record's key.
package runkey

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
)

// IDLen is the length of a run ID as NewID makes it: 32 lowercase hex
// characters (128 random bits). A run's record key is its namespace's
// Prefix (IDLen characters) followed by its ID.
const IDLen = 32

// runDomain separates run key hashes from idempotency key hashes.
const runDomain = "idemkit/run/v1\x00"

// NewID returns a new random run ID: 32 lowercase hex characters, 128 bits
// from crypto/rand, unguessable, so that an ID may serve as the only access
// control where callers cannot be identified.
func NewID() string {
	var b [IDLen / 2]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// ValidID reports whether id has NewID's form.
func ValidID(id string) bool {
	if len(id) != IDLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// Prefix returns the namespace of owner's runs of kind: the first half (32
// hex characters) of the key of each of them, which a
// idemstore.ListRequest.KeyPrefix lists in one index range. Different kinds
// or owners never share a namespace; the owner's raw value is not in it.
func Prefix(kind, owner string) string {
	b := make([]byte, 0, len(runDomain)+len(kind)+len(owner)+8)
	b = append(b, runDomain...)
	b = appendField(b, kind)
	b = appendField(b, owner)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:IDLen/2])
}

// appendField writes s length-prefixed, as idemkit's key IDs do, so that
// no two different (kind, owner) pairs encode alike.
func appendField(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// ID returns the run ID of a run's record key (its second half), and
// whether key has that form.
func ID(key string) (string, bool) {
	if len(key) != 2*IDLen || !ValidID(key[IDLen:]) {
		return "", false
	}
	return key[IDLen:], true
}
