// Package hashkey computes the hashes idemkit exports (span attributes,
// log records, error texts), keyed with a deployment's hash key or plain:
// the one definition used by the Guard, the middleware and the gateway.
package hashkey

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"

	"github.com/idemkit-mcp/idemkit/internal/clip"
	"github.com/idemkit-mcp/idemkit/spancontract"
)

// MinKeyLen is the shortest hash key idemkit.NewGuard accepts
// (Config.HashKey): 16 bytes. Use 32 random bytes.
const MinKeyLen = 16

// Hasher computes the hashes idemkit exports, on spans, in logs and in
// error texts: idemkit.args.hash, idemkit.key.hash, idemkit.subject.hash
// and the hashed mcp.session.id. Each is spancontract.HashLen hex
// characters.
//
// Without a key they are plain SHA-256, which anyone can recompute. A
// reader of the exported values who can guess the inputs confirms a guess
// by hashing it: arguments of low entropy (an order ID and an amount), and
// subjects such as e-mail addresses or user IDs, are recovered with a
// dictionary in seconds. With a deployment hash key they are HMAC-SHA-256
// under it, which nobody without the key can compute. Every replica of a
// deployment must use the same key, so that the same call gets the same
// hashes everywhere and the Collector's dup processor, which compares them
// as opaque strings, still groups its duplicates; hashes made under two
// keys never match.
//
// The key never changes what a Store keeps: Key.ID (the record's identity)
// and Key.Fingerprint are derived without it, so records written before a
// key was set, changed or removed stay valid, and replicas with different
// keys still share records (only their exported hashes differ).
//
// The zero Hasher has no key. A Hasher is a small value, safe to copy and
// to use from many goroutines.
type Hasher struct {
	key []byte // nil: plain SHA-256; never modified
}

// New returns a Hasher keyed with a copy of key; an empty key gives
// the zero Hasher (plain SHA-256).
func New(key []byte) Hasher {
	if len(key) == 0 {
		return Hasher{}
	}
	return Hasher{key: bytes.Clone(key)}
}

// Keyed reports whether h has a key.
func (h Hasher) Keyed() bool { return h.key != nil }

// Domains of the exported hashes that the unkeyed forms did not separate
// before there were keys (key and subject hashes keep their forms, so that
// values recorded before stay comparable).
const (
	argsHashDomain    = "idemkit.args.hash\x00"
	sessionHashDomain = "mcp.session.id\x00"
)

// KeyHash returns the idemkit.key.hash of the key whose ID (Key.ID) is id,
// the duplicate-group key: the first spancontract.HashLen characters of id
// without a key (Key.Hash), of the HMAC-SHA-256 of id with one.
func (h Hasher) KeyHash(id string) string {
	if h.key == nil {
		return short(id)
	}
	return h.mac("", id)
}

// ArgsHash returns the idemkit.args.hash of a key whose Key.ArgsHash is
// args: its first spancontract.HashLen characters without a key, an
// HMAC-SHA-256 of it with one.
func (h Hasher) ArgsHash(args string) string {
	if h.key == nil {
		return short(args)
	}
	return h.mac(argsHashDomain, args)
}

// SubjectHash returns the idemkit.subject.hash of subject (a key's subject,
// the scope of a call): clip.Hash(subject) without a key, an HMAC-SHA-256
// of it with one.
func (h Hasher) SubjectHash(subject string) string {
	if h.key == nil {
		return clip.Hash(subject)
	}
	return h.mac("", subject)
}

// SessionHash returns the value exported as mcp.session.id for the MCP
// session ID id, which in session scope is the credential that reaches the
// session's stored results: a hash of it, with or without a key, that tells
// sessions apart as the ID does and grants nothing.
func (h Hasher) SessionHash(id string) string {
	if h.key == nil {
		return clip.Hash(sessionHashDomain + id)
	}
	return h.mac(sessionHashDomain, id)
}

func (h Hasher) mac(domain, s string) string {
	m := hmac.New(sha256.New, h.key)
	m.Write([]byte(domain))
	m.Write([]byte(s))
	var sum [sha256.Size]byte
	return hex.EncodeToString(m.Sum(sum[:0])[:spancontract.HashLen/2])
}

func short(hexSum string) string {
	if len(hexSum) > spancontract.HashLen {
		return hexSum[:spancontract.HashLen]
	}
	return hexSum
}
