package idemkit

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
)

// RunIDLen is the length of a run ID as NewRunID makes it: 32 lowercase
// hex characters (128 random bits).
const RunIDLen = 32

// runDomain separates run key hashes from idempotency key hashes.
const runDomain = "idemkit/run/v1\x00"

// NewRunID returns a new random run ID for NewRunKey: 32 lowercase hex
// characters, 128 bits from crypto/rand, unguessable, so that an ID may
// serve as the only access control where callers cannot be identified.
func NewRunID() string {
	var b [RunIDLen / 2]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// ValidRunID reports whether id has NewRunID's form.
func ValidRunID(id string) bool {
	if len(id) != RunIDLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// RunKeyPrefix returns the namespace of owner's runs of kind: the first
// half (32 hex characters) of the ID of every Key that NewRunKey makes for
// them, which a ListRequest.KeyPrefix lists in one index range. Different
// kinds or owners never share a namespace; the owner's raw value is not in
// it.
func RunKeyPrefix(kind, owner string) string {
	b := make([]byte, 0, len(runDomain)+len(kind)+len(owner)+8)
	b = append(b, runDomain...)
	b = appendField(b, kind)
	b = appendField(b, owner)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:RunIDLen/2])
}

// NewRunKey returns the Key of a durable run: background work (a job of a
// job-and-poll tool, an MCP task) whose execution is itself a claim, with
// a lease its heartbeats keep, a progress note and a stored outcome, found
// again by its ID. Its ID is RunKeyPrefix(kind, owner) followed by id, so
// that a caller can only find the runs of its own owner namespace, and can
// list them. owner is the scope of the callers that may see the run ("" for
// a namespace every caller shares); id is made by NewRunID; tool is the tool
// whose work the run does: the record's Tool, and the Guard's per-tool
// configuration applies to it. The Key's Hash is its namespace's (the first
// half of its ID); its Fingerprint is "".
//
// It returns an error wrapping ErrInvalidKey for an id that NewRunID did not
// make, or an invalid tool name.
func NewRunKey(kind, owner, tool, id string) (Key, error) {
	if err := validateToolName(tool); err != nil {
		return Key{}, err
	}
	if !ValidRunID(id) {
		return Key{}, fmt.Errorf("%w: %q is not a run ID (32 lowercase hex characters, as NewRunID makes)", ErrInvalidKey, id)
	}
	prefix := RunKeyPrefix(kind, owner)
	return Key{subject: owner, tool: tool, args: id, id: prefix + id}, nil
}

// RunID returns the run ID of a record key that NewRunKey made (the second
// half of the key), and whether key has that form.
func RunID(key string) (string, bool) {
	if len(key) != 2*RunIDLen || !ValidRunID(key[RunIDLen:]) {
		return "", false
	}
	return key[RunIDLen:], true
}
