package dupprocessor // import "github.com/idemkit-mcp/idemkit/collector/dupprocessor"

import (
	"encoding/hex"
	"strings"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/idemkit-mcp/idemkit/collector/dupprocessor/internal/state"
	sc "github.com/idemkit-mcp/idemkit/spancontract"
)

// duplicatePrefix starts every idemkit.duplicate.* key.
const duplicatePrefix = sc.Duplicate + "."

// annotate replaces the idemkit.duplicate.* attributes of s with the
// verdict's: the processor owns them, so stale or forged ones go (stale
// says whether the span arrived with any).
func annotate(s ptrace.Span, key state.Key, v *verdict, stale bool) {
	attrs := s.Attributes()
	if stale {
		removeAnnotations(attrs)
	}
	if !v.dup {
		return
	}
	attrs.EnsureCapacity(attrs.Len() + 6) // one growth, not several
	attrs.PutBool(sc.Duplicate, true)
	attrs.PutStr(sc.DuplicateCause, v.cause)
	attrs.PutStr(sc.DuplicateEffect, v.effect)
	attrs.PutStr(sc.DuplicateGroup, key.String())
	if !v.orphan {
		attrs.PutStr(sc.DuplicateFirstSpanID, spanIDString(v.firstSpanID))
		attrs.PutInt(sc.DuplicateGapMS, v.gapMS)
	}
}

// removeAnnotations removes every idemkit.duplicate* attribute.
func removeAnnotations(attrs pcommon.Map) {
	attrs.RemoveIf(func(k string, _ pcommon.Value) bool {
		return k == sc.Duplicate || strings.HasPrefix(k, duplicatePrefix)
	})
}

// spanIDString is SpanID.String (16 lowercase hex characters) with one
// allocation, the string's, instead of two.
func spanIDString(id pcommon.SpanID) string {
	if id.IsEmpty() {
		return ""
	}
	var buf [2 * len(id)]byte
	hex.Encode(buf[:], id[:])
	return string(buf[:])
}
