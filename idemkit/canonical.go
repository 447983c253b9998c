package idemkit

import (
	"bytes"
	"unicode/utf8"

	"github.com/idemkit-mcp/idemkit/internal/argpolicy"
)

// isCanonical reports whether doc is already in RFC 8785 canonical form,
// for a common subset of documents, so that NewKey can hash it without
// re-encoding. It answers false whenever it is unsure (non-ASCII member
// names, non-integer or large numbers, deep nesting, invalid input); the
// caller then canonicalises with package canonjson, which also produces
// the errors. A true answer is checked against the library by FuzzIsCanonical.
//
// The subset: no whitespace; object members sorted by strictly ascending
// ASCII names without escapes, no two of them equal ignoring case
// (canonjson refuses those; an object with an upper-case name has at most
// maxFastMembers members); strings in valid UTF-8
// using only the escapes JCS writes; integers of at most 15 digits (exactly
// representable, so ECMAScript prints them unchanged), no "-0"; true,
// false, null.
func isCanonical(doc []byte) bool {
	if len(doc) > 1<<31-1 { // offsets are int32
		return false
	}
	end, ok := canonValue(doc, 0, 0)
	return ok && end == len(doc)
}

const canonMaxDepth = 64

// maxFastMembers bounds the members of an object with an upper-case
// name on the fast path, whose names it compares pairwise for
// case-insensitive equality; a larger one goes to canonjson, which sorts
// them.
const maxFastMembers = 16

// Classes of bytes in a member name on the fast path.
const (
	nameInvalid = 1 // not on the fast path: controls, '\\', non-ASCII
	nameUpper   = 2 // an ASCII upper-case letter
)

// nameBytes classifies every byte for the fast path's member names: one
// load per byte, the common (lower-case) byte 0.
var nameBytes = func() (t [256]uint8) {
	for c := range t {
		switch {
		case c < 0x20 || c >= 0x80 || c == '\\':
			t[c] = nameInvalid
		case c >= 'A' && c <= 'Z':
			t[c] = nameUpper
		}
	}
	return t
}()

// caseVariants reports whether the object at b[i] ('{', canonical, its
// names plain ASCII) may have two member names equal ignoring ASCII case:
// true when it does, and when it has more than maxFastMembers members.
// Two such names differ in the case of some letter, so one of them holds
// an upper-case letter; canonObject calls it only for an object that has
// one.
func caseVariants(b []byte, i int) bool {
	var names [maxFastMembers][]byte
	n := 0
	i++ // '{'
	for i < len(b) && b[i] == '"' {
		end := argpolicy.SkipString(b, i)
		if n == maxFastMembers {
			return true
		}
		names[n] = b[i+1 : end-1]
		n++
		i = argpolicy.SkipValue(b, end+1) // past ':'
		if i < len(b) && b[i] == ',' {
			i++
		}
	}
	for j := 1; j < n; j++ {
		for k := range j {
			if len(names[j]) == len(names[k]) && bytes.EqualFold(names[j], names[k]) {
				return true
			}
		}
	}
	return false
}

func canonValue(b []byte, i, depth int) (int, bool) {
	if i >= len(b) {
		return 0, false
	}
	switch c := b[i]; {
	case c == '{':
		return canonObject(b, i, depth+1)
	case c == '[':
		return canonArray(b, i, depth+1)
	case c == '"':
		return canonString(b, i)
	case c == '-' || (c >= '0' && c <= '9'):
		return canonInteger(b, i)
	case hasPrefix(b[i:], "true"):
		return i + 4, true
	case hasPrefix(b[i:], "false"):
		return i + 5, true
	case hasPrefix(b[i:], "null"):
		return i + 4, true
	}
	return 0, false
}

func hasPrefix(b []byte, s string) bool {
	return len(b) >= len(s) && string(b[:len(s)]) == s
}

func canonObject(b []byte, i, depth int) (int, bool) {
	if depth > canonMaxDepth {
		return 0, false
	}
	i++ // '{'
	if i < len(b) && b[i] == '}' {
		return i + 1, true
	}
	lbrace := i - 1
	var prev []byte
	upper := false
	for first := true; ; first = false {
		// Member name: plain ASCII, no escapes, strictly after the previous.
		if i >= len(b) || b[i] != '"' {
			return 0, false
		}
		start := i + 1
		j := start
		for j < len(b) && b[j] != '"' {
			if k := nameBytes[b[j]]; k != 0 {
				if k == nameInvalid {
					return 0, false
				}
				upper = true
			}
			j++
		}
		if j >= len(b) {
			return 0, false
		}
		name := b[start:j]
		if !first && string(name) <= string(prev) {
			return 0, false
		}
		prev = name
		i = j + 1
		if i >= len(b) || b[i] != ':' {
			return 0, false
		}
		var ok bool
		if i, ok = canonValue(b, i+1, depth); !ok || i >= len(b) {
			return 0, false
		}
		switch b[i] {
		case ',':
			i++
		case '}':
			if upper && caseVariants(b, lbrace) {
				return 0, false
			}
			return i + 1, true
		default:
			return 0, false
		}
	}
}

func canonArray(b []byte, i, depth int) (int, bool) {
	if depth > canonMaxDepth {
		return 0, false
	}
	i++ // '['
	if i < len(b) && b[i] == ']' {
		return i + 1, true
	}
	for {
		var ok bool
		if i, ok = canonValue(b, i, depth); !ok || i >= len(b) {
			return 0, false
		}
		switch b[i] {
		case ',':
			i++
		case ']':
			return i + 1, true
		default:
			return 0, false
		}
	}
}

// canonString accepts a string as JCS writes it: raw UTF-8 except for '"'
// and '\' (escaped as \" and \\) and control characters (\b \t \n \f \r, or
// \u00xx in lower case for the others).
func canonString(b []byte, i int) (int, bool) {
	i++ // '"'
	for i < len(b) {
		c := b[i]
		switch {
		case c == '"':
			return i + 1, true
		case c < 0x20:
			return 0, false
		case c == '\\':
			if i+1 >= len(b) {
				return 0, false
			}
			switch b[i+1] {
			case '"', '\\', 'b', 't', 'n', 'f', 'r':
				i += 2
			case 'u':
				// Only \u00xx for a control without a short form.
				if i+6 > len(b) || b[i+2] != '0' || b[i+3] != '0' {
					return 0, false
				}
				v, ok := lowerHexByte(b[i+4], b[i+5])
				if !ok || v >= 0x20 || v == '\b' || v == '\t' || v == '\n' || v == '\f' || v == '\r' {
					return 0, false
				}
				i += 6
			default:
				return 0, false
			}
		case c < utf8.RuneSelf:
			i++
		default:
			r, size := utf8.DecodeRune(b[i:])
			if r == utf8.RuneError {
				return 0, false
			}
			i += size
		}
	}
	return 0, false
}

func lowerHexByte(hi, lo byte) (byte, bool) {
	h, ok1 := lowerHex(hi)
	l, ok2 := lowerHex(lo)
	return h<<4 | l, ok1 && ok2
}

func lowerHex(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}

// canonInteger accepts -?(0|[1-9][0-9]{0,14}), not "-0", followed by a
// delimiter (not '.', 'e' or 'E').
func canonInteger(b []byte, i int) (int, bool) {
	start := i
	if b[i] == '-' {
		i++
	}
	digits := i
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		i++
	}
	n := i - digits
	switch {
	case n == 0 || n > 15:
		return 0, false
	case b[digits] == '0' && n > 1:
		return 0, false
	case b[digits] == '0' && digits > start: // "-0"
		return 0, false
	}
	if i < len(b) && (b[i] == '.' || b[i] == 'e' || b[i] == 'E') {
		return 0, false
	}
	return i, true
}
