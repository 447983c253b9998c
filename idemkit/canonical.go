package idemkit

import "unicode/utf8"

// isCanonical reports whether doc is already in RFC 8785 canonical form,
// for a common subset of documents, so that NewKey can hash it without
// re-encoding. It answers false whenever it is unsure (non-ASCII member
// names, non-integer or large numbers, deep nesting, invalid input); the
// caller then canonicalises with the JCS library, which also produces the
// errors. A true answer is checked against the library by FuzzIsCanonical.
//
// The subset: no whitespace; object members sorted by strictly ascending
// ASCII names without escapes; strings in valid UTF-8 using only the escapes
// JCS writes; integers of at most 15 digits (exactly representable, so
// ECMAScript prints them unchanged), no "-0"; true, false, null.
func isCanonical(doc []byte) bool {
	end, ok := canonValue(doc, 0, 0)
	return ok && end == len(doc)
}

const canonMaxDepth = 64

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
	var prev []byte
	for first := true; ; first = false {
		// Member name: plain ASCII, no escapes, strictly after the previous.
		if i >= len(b) || b[i] != '"' {
			return 0, false
		}
		start := i + 1
		j := start
		for j < len(b) && b[j] != '"' {
			if c := b[j]; c < 0x20 || c >= 0x80 || c == '\\' {
				return 0, false
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
