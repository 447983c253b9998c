// Package clip cuts what idemkit stores and shows to its bounds: text cut
// to a byte limit at a character boundary (the notes and error texts of
// records), and a value hashed to the span contract's short form. The
// Guard, the instrumentation, the command and the conformance suites share
// it.
package clip

import (
	"crypto/sha256"
	"encoding/hex"
	"unicode/utf8"

	"github.com/idemkit-mcp/idemkit/spancontract"
)

// Hash returns the first spancontract.HashLen hex characters of the
// SHA-256 of s: the form the span contract uses for hashed values.
func Hash(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:spancontract.HashLen/2])
}

// Text returns s cut to at most n bytes without splitting a UTF-8
// encoded character: a multi-byte character that does not fit is left out
// whole. Bytes that are not valid UTF-8 are kept as they are (stores keep
// them byte for byte).
func Text(s string, n int) string {
	if len(s) <= n {
		return s
	}
	if n <= 0 {
		return ""
	}
	// s[n] is the first byte left out. When it continues a valid
	// character that starts before n, cut before that character.
	cut := n
	for i := n; i >= 0 && i > n-utf8.UTFMax; i-- {
		if !utf8.RuneStart(s[i]) {
			continue
		}
		if i < n {
			if r, size := utf8.DecodeRuneInString(s[i:]); (r != utf8.RuneError || size > 1) && i+size > n {
				cut = i
			}
		}
		break
	}
	return s[:cut]
}
