package idemkit

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/idemkit-mcp/idemkit/internal/argpolicy"
	"github.com/idemkit-mcp/idemkit/spancontract"
	"github.com/idemkit-mcp/idemkit/spancontract/canonjson"
)

// Defaults of KeyOptions.
const (
	// DefaultMaxArgsBytes is the largest argument document NewKey accepts.
	DefaultMaxArgsBytes = 1 << 20
	// MaxExplicitKeyLen is the longest explicit key accepted, in bytes.
	MaxExplicitKeyLen = 255
	// maxToolNameLen is the longest tool name NewKey accepts, in bytes.
	maxToolNameLen = 256
)

// KeyOptions tunes NewKey. A nil *KeyOptions means all defaults.
type KeyOptions struct {
	// ExplicitKey is an explicit idempotency key supplied outside the
	// arguments, for example from an MCP request's params._meta. When the
	// arguments carry one too, both must be equal. Defaults to none.
	ExplicitKey string

	// ExplicitKeyField is the top-level argument that may carry an explicit
	// key (a JSON string; null counts as absent). It is always stripped
	// before hashing. Set it to "-" to disable the field. Defaults to
	// spancontract.KeyArgument ("idempotency_key").
	ExplicitKeyField string

	// Exclude names argument fields left out of the hash, such as client
	// timestamps or nonces that differ on every retry and would otherwise
	// defeat the key. An entry that starts with "/" is a JSON Pointer
	// (RFC 6901, "~1" for "/" and "~0" for "~" in a name) reaching any
	// depth: "/order/requested_at", "/items/0/nonce"; on an array, the
	// token "*" (an extension: RFC 6901 has no wildcard) matches every
	// element: "/items/*/nonce". Member names match byte for byte. Any
	// other entry is a top-level member name, as it is. An excluded
	// member or element is hashed as if absent. Defaults to none.
	Exclude []string

	// Round maps argument fields (JSON Pointers or top-level names, as in
	// Exclude) to a granularity: the field, an RFC 3339 timestamp string
	// or null, is hashed as its instant in UTC truncated to the
	// granularity, which must divide 24 hours (1s, 1m, 15m, 1h, 24h...).
	// With 1m, "10:00:59Z" and "11:00:10+01:00" share a key, and
	// "10:00:59Z" and "10:01:00Z" do not: two retries that straddle a
	// boundary get two keys (exclude the field when that matters). A
	// present field that is not such a timestamp (a number, another
	// string) makes NewKey fail with ErrInvalidArguments rather than hash
	// it raw. The handler still sees the value as sent. Defaults to none.
	Round map[string]time.Duration

	// MaxArgsBytes bounds the size of the raw arguments. Defaults to
	// DefaultMaxArgsBytes (1 MiB).
	MaxArgsBytes int
}

// Key identifies one logical request: a subject (the authenticated caller),
// a tool, and either the hash of the canonical arguments or an explicit key.
// Build one with NewKey; the zero Key is invalid. A Key is a small value,
// safe to copy and to use from many goroutines.
type Key struct {
	subject  string
	tool     string
	explicit string
	args     string // hex SHA-256 of the canonical, stripped arguments (64 chars)
	id       string // hex SHA-256 of the full key (64 chars)
}

// NewKey derives the idempotency key of a call to tool by subject with the
// JSON arguments args.
//
// The arguments are canonicalised with RFC 8785 (JCS): object members sorted
// by UTF-16 code units, no insignificant whitespace, strings with JCS's
// escapes, duplicate member names rejected, and so are two member names of
// one object (at any depth) that are equal under Unicode case folding, as
// Go's encoding/json matches names to struct fields: {"order_id":"o-1",
// "Order_Id":"o-2"} would be checked for o-1 and run by a Go handler for
// o-2 (refused with an explicit key too: the handler still reads the
// arguments). Numbers deviate from RFC 8785
// on purpose: they are canonicalised by their exact decimal value, written
// in ECMAScript form, rather than rounded to an IEEE-754 double. So 1, 1.0,
// 1e0 and 10e-1 hash alike, and 100 and 1e2, while 9007199254740992 and
// 9007199254740993, or 0 and 1e-400, do not: under RFC 8785 they would, and
// a second refund for a different order ID would be answered with the
// first one's result (a false merge loses a write; a missed merge only
// shows up as a duplicate). For numbers that a JSON encoder prints from a
// double, the form is RFC 8785's. The explicit-key field is stripped from
// the top-level object, and opts.Exclude and opts.Round are applied (at
// any depth, by JSON Pointer) before hashing. Empty or null
// arguments hash as {}. Key derivation streams the canonical form into the
// hash: its memory does not grow with the arguments' size (except with a
// nested pointer or a rounding in opts, which hold one canonical copy).
//
// Without an explicit key the Key is subject + tool + SHA-256(canonical
// arguments). With one (from the arguments or opts.ExplicitKey) it is
// subject + tool + explicit key, and the argument hash is kept as a
// fingerprint: reusing the key with different arguments is then a
// *MismatchError, never a replay of another request's answer.
//
// Errors wrap ErrInvalidArguments (malformed JSON, member names that differ
// only in letter case, too large, an explicit-key field that is not a
// string) or ErrInvalidKey (a tool name that is empty,
// longer than 256 bytes, not valid UTF-8 or holding a control
// character; an explicit key that is empty, longer than MaxExplicitKeyLen
// bytes or not printable ASCII; or two different explicit keys). A field
// of opts.Round that is not an RFC 3339 timestamp is ErrInvalidArguments.
// Invalid opts (a malformed JSON Pointer, a granularity that does not
// divide 24 hours, a field both excluded and rounded) are an error that
// wraps neither sentinel: the caller's configuration, not the call, is
// wrong.
func NewKey(subject, tool string, args []byte, opts *KeyOptions) (Key, error) {
	if err := validateToolName(tool); err != nil {
		return Key{}, err
	}
	var o KeyOptions
	if opts != nil {
		o = *opts
	}
	maxArgs := o.MaxArgsBytes
	if maxArgs <= 0 {
		maxArgs = DefaultMaxArgsBytes
	}
	if len(args) > maxArgs {
		return Key{}, fmt.Errorf("%w: the arguments of %q are %d bytes, over the %d-byte limit", ErrInvalidArguments, tool, len(args), maxArgs)
	}
	field := o.ExplicitKeyField
	switch field {
	case "":
		field = spancontract.KeyArgument
	case "-":
		field = ""
	}

	exclude := o.Exclude
	var policy *argpolicy.Policy
	if len(o.Round) > 0 || hasPointer(exclude) {
		p, err := argpolicy.Cached(exclude, o.Round)
		if err != nil {
			return Key{}, fmt.Errorf("idemkit: KeyOptions of %q: %v", tool, err)
		}
		if names, ok := p.TopLevelNames(); ok {
			exclude = names // "/nonce" is "nonce": the top-level path
		} else {
			policy = p
		}
	}
	var (
		sum      [sha256.Size]byte
		fieldKey *string
		err      error
	)
	if policy != nil {
		sum, fieldKey, err = policyHash(args, field, policy)
	} else {
		sum, fieldKey, err = argsHash(args, field, exclude)
	}
	if err != nil {
		return Key{}, fmt.Errorf("%w: %s: %v", ErrInvalidArguments, tool, err)
	}
	explicit := o.ExplicitKey
	if fieldKey != nil {
		if explicit != "" && explicit != *fieldKey {
			return Key{}, fmt.Errorf("%w: %s: the %q argument and the request metadata carry two different idempotency keys", ErrInvalidKey, tool, field)
		}
		explicit = *fieldKey
	}
	if explicit != "" || fieldKey != nil {
		if err := ValidateExplicitKey(explicit); err != nil {
			return Key{}, err
		}
	}

	k := Key{subject: subject, tool: tool, explicit: explicit}
	k.args, k.id = hexSums(sum, subject, tool, explicit)
	return k, nil
}

// hexSums returns the hex argument hash of sum and the hex key ID of
// (subject, tool, explicit key or argument hash), both in one allocation.
func hexSums(sum [sha256.Size]byte, subject, tool, explicit string) (args, id string) {
	var buf [4 * sha256.Size]byte
	hex.Encode(buf[:2*sha256.Size], sum[:])
	idSum := keyIDSum(subject, tool, explicit, buf[:2*sha256.Size])
	hex.Encode(buf[2*sha256.Size:], idSum[:])
	s := string(buf[:])
	return s[:2*sha256.Size], s[2*sha256.Size:]
}

// ValidateExplicitKey reports whether key is acceptable as an explicit
// idempotency key: 1 to MaxExplicitKeyLen bytes of printable ASCII
// (0x20-0x7E). Errors wrap ErrInvalidKey.
func ValidateExplicitKey(key string) error {
	if key == "" {
		return fmt.Errorf("%w: the idempotency key is empty; omit it or send a stable value such as a UUID", ErrInvalidKey)
	}
	if len(key) > MaxExplicitKeyLen {
		return fmt.Errorf("%w: the idempotency key is %d bytes, over the %d-byte limit", ErrInvalidKey, len(key), MaxExplicitKeyLen)
	}
	for i := 0; i < len(key); i++ {
		if c := key[i]; c < 0x20 || c > 0x7e {
			return fmt.Errorf("%w: the idempotency key has a non-printable or non-ASCII byte 0x%02x at offset %d", ErrInvalidKey, c, i)
		}
	}
	return nil
}

// validateToolName accepts 1 to maxToolNameLen bytes of valid UTF-8
// without control characters: stores keep the tool name as text, and a
// name PostgreSQL refuses (NUL, invalid UTF-8) would fail every claim.
func validateToolName(tool string) error {
	if tool == "" {
		return fmt.Errorf("%w: the tool name is empty", ErrInvalidKey)
	}
	if len(tool) > maxToolNameLen {
		return fmt.Errorf("%w: the tool name is %d bytes, over the %d-byte limit", ErrInvalidKey, len(tool), maxToolNameLen)
	}
	for i, r := range tool {
		switch {
		case r == utf8.RuneError:
			if _, size := utf8.DecodeRuneInString(tool[i:]); size == 1 {
				return fmt.Errorf("%w: the tool name %q is not valid UTF-8 (byte 0x%02x at offset %d)", ErrInvalidKey, tool, tool[i], i)
			}
		case unicode.IsControl(r):
			return fmt.Errorf("%w: the tool name %q has a control character U+%04X at offset %d", ErrInvalidKey, tool, r, i)
		}
	}
	return nil
}

// keyDomain separates idempotency key hashes from any other SHA-256 use.
const keyDomain = "idemkit/key/v1\x00"

// keyIDSum returns the SHA-256 of the key's identity: subject, tool, and
// the explicit key or, without one, the hex argument hash.
func keyIDSum(subject, tool, explicit string, argsHex []byte) [sha256.Size]byte {
	var stack [256]byte // most keys fit: no allocation
	b := append(stack[:0], keyDomain...)
	b = appendField(b, subject)
	b = appendField(b, tool)
	if explicit != "" {
		b = append(b, 'x')
		b = appendField(b, explicit)
	} else {
		b = append(b, 'h')
		b = binary.AppendUvarint(b, uint64(len(argsHex)))
		b = append(b, argsHex...)
	}
	return sha256.Sum256(b)
}

// appendField writes s length-prefixed, so that no two different field
// tuples encode alike ("a:b"+"c" versus "a"+"b:c").
func appendField(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// ID returns the key's storage identity: the hex SHA-256 (64 characters) of
// subject, tool and argument hash or explicit key. Stores index records by
// it; it carries no raw subject.
func (k Key) ID() string { return k.id }

// Hash returns the first spancontract.HashLen characters of ID: the
// idemkit.key.hash span attribute, the duplicate-group key.
func (k Key) Hash() string { return short(k.id) }

// ArgsHash returns the hex SHA-256 (64 characters) of the canonical
// arguments, stripped of the explicit-key field and excluded fields. For an
// explicit key it is the fingerprint checked on reuse.
func (k Key) ArgsHash() string { return k.args }

// Fingerprint returns what the Guard asks a Store to compare to detect a
// reused explicit key (ClaimRequest.Fingerprint): the argument hash for an
// explicit key, "" for a derived one, whose ID already commits to the
// arguments (storing the hash again would only cost space).
func (k Key) Fingerprint() string {
	if k.explicit == "" {
		return ""
	}
	return k.args
}

// Subject returns the subject the key was derived for.
func (k Key) Subject() string { return k.subject }

// Tool returns the tool name.
func (k Key) Tool() string { return k.tool }

// Source returns "explicit" when the key came from the caller and "derived"
// when it was computed from the arguments.
func (k Key) Source() string {
	if k.explicit != "" {
		return spancontract.KeySourceExplicit
	}
	return spancontract.KeySourceDerived
}

// IsZero reports whether k is the zero Key (not built by NewKey).
func (k Key) IsZero() bool { return k.id == "" }

// String returns a form safe to log: the tool, the source and the key hash.
// It never contains the subject or the explicit key.
func (k Key) String() string {
	if k.IsZero() {
		return "idemkit.Key{}"
	}
	return k.tool + "/" + k.Source() + "/" + k.Hash()
}

func short(hexSum string) string {
	if len(hexSum) > spancontract.HashLen {
		return hexSum[:spancontract.HashLen]
	}
	return hexSum
}

var emptyObject = []byte("{}")

// argsHash returns the SHA-256 of the canonical form of args with field
// (the explicit key field, "" for none) and exclude stripped from a
// top-level object, and the explicit key found in field (nil when absent
// or null).
func argsHash(args []byte, field string, exclude []string) (sum [sha256.Size]byte, explicit *string, err error) {
	trimmed := bytes.TrimSpace(args)
	if len(trimmed) == 0 || bytes.Equal(trimmed, []byte("null")) {
		return sha256.Sum256(emptyObject), nil, nil
	}
	if isCanonical(trimmed) { // most arguments encoded by encoding/json already are
		canon, explicit, err := stripCanonical(trimmed, field, exclude)
		if err != nil {
			return sum, nil, err
		}
		return sha256.Sum256(canon), explicit, nil
	}
	// Canonicalise straight into the hash: no copy of the document.
	h := sha256.New()
	taken, err := canonjson.Write(h, trimmed, canonjson.Options{Omit: exclude, Take: field})
	if err != nil {
		return sum, nil, canonError(err)
	}
	if taken != nil && string(taken) != "null" {
		if taken[0] != '"' {
			return sum, nil, fmt.Errorf("the %q argument must be a string, got %s", field, truncate(taken, 40))
		}
		s, err := jsonString(taken)
		if err != nil {
			return sum, nil, err
		}
		explicit = &s
	}
	h.Sum(sum[:0])
	return sum, explicit, nil
}

// hasPointer reports whether an Exclude entry is a JSON Pointer.
func hasPointer(exclude []string) bool {
	for _, x := range exclude {
		if len(x) > 0 && x[0] == '/' {
			return true
		}
	}
	return false
}

// policyHash is argsHash for a policy with nested pointers or rounding:
// the canonical form, with field taken out, is built in memory, then the
// policy is applied to it. (A policy of top-level names only streams, in
// argsHash.)
func policyHash(args []byte, field string, policy *argpolicy.Policy) (sum [sha256.Size]byte, explicit *string, err error) {
	trimmed := bytes.TrimSpace(args)
	if len(trimmed) == 0 || bytes.Equal(trimmed, []byte("null")) {
		trimmed = emptyObject
	}
	var canon []byte
	if isCanonical(trimmed) {
		canon, explicit, err = stripCanonical(trimmed, field, nil)
		if err != nil {
			return sum, nil, err
		}
	} else {
		var buf bytes.Buffer
		buf.Grow(len(trimmed))
		taken, err := canonjson.Write(&buf, trimmed, canonjson.Options{Take: field})
		if err != nil {
			return sum, nil, canonError(err)
		}
		if explicit, err = takenKey(taken, field); err != nil {
			return sum, nil, err
		}
		canon = buf.Bytes()
	}
	out, err := policy.Apply(make([]byte, 0, len(canon)), canon)
	if err != nil {
		return sum, nil, err
	}
	return sha256.Sum256(out), explicit, nil
}

// takenKey decodes the explicit key canonjson took out of field: nil when
// absent or null.
func takenKey(taken []byte, field string) (*string, error) {
	if taken == nil || string(taken) == "null" {
		return nil, nil
	}
	if taken[0] != '"' {
		return nil, fmt.Errorf("the %q argument must be a string, got %s", field, truncate(taken, 40))
	}
	s, err := jsonString(taken)
	if err != nil {
		return nil, err
	}
	return &s, nil
}

// canonError describes a canonicalisation error of arguments for the
// model that sent them.
func canonError(err error) error {
	if errors.Is(err, canonjson.ErrCaseVariantNames) {
		return fmt.Errorf("the arguments are ambiguous: %v. Send each argument once, with its name spelled exactly as the tool's input schema spells it", err)
	}
	return fmt.Errorf("the arguments are not valid JSON: %v", err)
}

// stripCanonical returns the canonical document canon with field and
// exclude stripped from a top-level object, and the explicit key found in
// field.
func stripCanonical(canon []byte, field string, exclude []string) ([]byte, *string, error) {
	if canon[0] != '{' || !mayHoldName(canon, field, exclude) {
		return canon, nil, nil
	}
	// Removing members from a canonical object leaves it canonical, so the
	// stripped form is the kept members' bytes, in order.
	var (
		out      []byte
		explicit *string
		pos      = 1
	)
	for pos < len(canon) && canon[pos] != '}' {
		start := pos
		nameEnd := argpolicy.SkipString(canon, pos)
		valueEnd := argpolicy.SkipValue(canon, nameEnd+1)
		if nameEnd < 0 || valueEnd < 0 || canon[nameEnd] != ':' {
			return nil, nil, fmt.Errorf("unexpected canonical form at offset %d", pos)
		}
		name, err := memberName(canon[start:nameEnd])
		if err != nil {
			return nil, nil, err
		}
		isField := field != "" && string(name) == field
		if isField || containsName(exclude, name) {
			if out == nil {
				out = make([]byte, 0, len(canon))
				out = append(out, canon[:start]...) // '{' and the members kept so far
			}
			if isField {
				value := canon[nameEnd+1 : valueEnd]
				if !bytes.Equal(value, []byte("null")) {
					s, err := jsonString(value)
					if err != nil {
						return nil, nil, fmt.Errorf("the %q argument must be a string, got %s", field, truncate(value, 40))
					}
					explicit = &s
				}
			}
		} else {
			if out != nil {
				if last := out[len(out)-1]; last != ',' && last != '{' {
					out = append(out, ',')
				}
				out = append(out, canon[start:valueEnd]...)
			}
		}
		pos = valueEnd
		if pos < len(canon) && canon[pos] == ',' {
			pos++
		}
	}
	if out == nil {
		return canon, nil, nil
	}
	if n := len(out); out[n-1] == ',' {
		out = out[:n-1]
	}
	return append(out, '}'), explicit, nil
}

// mayHoldName reports whether the canonical object canon may have a member
// named field or one of exclude. isCanonical accepts only member names of
// plain ASCII without escapes, written as they are, so a name that is
// nowhere in canon's bytes is not one of its members.
func mayHoldName(canon []byte, field string, exclude []string) bool {
	if field != "" && bytes.Contains(canon, []byte(field)) {
		return true
	}
	for _, x := range exclude {
		if bytes.Contains(canon, []byte(x)) {
			return true
		}
	}
	return false
}

// memberName decodes a canonical member name ("..." with JCS escapes),
// without a copy when it has no escapes.
func memberName(quoted []byte) ([]byte, error) {
	raw := quoted[1 : len(quoted)-1]
	if bytes.IndexByte(raw, '\\') < 0 {
		return raw, nil
	}
	var s string
	err := json.Unmarshal(quoted, &s)
	return []byte(s), err
}

func containsName(names []string, name []byte) bool {
	for _, n := range names {
		if n == string(name) {
			return true
		}
	}
	return false
}

// jsonString decodes a JSON string value.
func jsonString(v []byte) (string, error) {
	if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' && bytes.IndexByte(v, '\\') < 0 {
		return string(v[1 : len(v)-1]), nil
	}
	var s string
	err := json.Unmarshal(v, &s)
	return s, err
}

func truncate(b []byte, n int) string {
	if len(b) <= n {
		return string(b)
	}
	return string(b[:n]) + "…"
}

// canonicalJSON returns the canonical form of a JSON document: the bytes
// NewKey hashes for an object from which nothing is stripped. It is RFC
// 8785 (JCS) with numbers canonicalised by their exact decimal value
// instead of as IEEE-754 doubles (see NewKey), and it refuses what would
// make two different documents canonicalise alike, or one document mean
// two things: invalid UTF-8, unpaired surrogate escapes, duplicate member
// names, and member names of one object equal under case folding (see
// NewKey). It is package canonjson's Transform, which the Collector's dup
// processor uses too. Errors wrap ErrInvalidArguments.
func canonicalJSON(doc []byte) ([]byte, error) {
	out, err := canonjson.Transform(doc)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidArguments, err)
	}
	return out, nil
}
