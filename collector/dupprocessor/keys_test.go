package dupprocessor

import (
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/pcommon"

	sc "github.com/idemkit-mcp/idemkit/spancontract"
)

// readToolAttrsPlain is readToolAttrs written as a plain switch: the
// reference its length dispatch must match.
func readToolAttrsPlain(attrs pcommon.Map, a *toolAttrs) {
	for k, v := range attrs.All() {
		switch k {
		case sc.KeyHash:
			a.keyHash = scalar(v)
		case sc.ArgsHash:
			a.argsHash = scalar(v)
		case sc.SubjectHash:
			a.subjectHash = scalar(v)
		case sc.KeySource:
			a.keySource = scalar(v)
		case sc.UserID:
			a.user = scalar(v)
		case sc.EndUserID:
			a.endUser = scalar(v)
		case sc.InputRequested:
			a.inputRequested = truthy(v)
		case sc.InputContinuation:
			a.inputContinuation = truthy(v)
		case sc.GenAIToolName:
			a.tool = scalar(v)
		case sc.GenAIToolCallArguments:
			a.args, a.hasArgs = v, v.Type() != pcommon.ValueTypeEmpty
		case sc.MCPSessionID:
			a.session = scalar(v)
		case sc.JSONRPCRequestID:
			a.requestID = scalar(v)
		case sc.WriteID:
			a.writeID = scalar(v)
		case sc.GenAIConversationID:
			a.conv = scalar(v)
		case sc.RefusalReason:
			a.refused = scalar(v) != ""
		case sc.Outcome:
			if v.Type() == pcommon.ValueTypeStr {
				a.outcome = v.Str()
			}
		case sc.BypassReason:
			a.bypassReason = scalar(v)
		case sc.Attempt:
			switch v.Type() {
			case pcommon.ValueTypeInt:
				a.attempt = v.Int()
			case pcommon.ValueTypeDouble:
				if f := v.Double(); f >= 0 && f < math.MaxInt32 {
					a.attempt = int64(f)
				}
			}
		default:
			if !a.annotated && strings.HasPrefix(k, sc.Duplicate) {
				a.annotated = true
			}
		}
	}
}

// FuzzReadToolAttrs_MatchesPlainSwitch puts fuzzed keys (and every key of
// interest, and near misses of the same length) into a map and checks that
// the length dispatch reads exactly what the plain switch reads.
func FuzzReadToolAttrs_MatchesPlainSwitch(f *testing.F) {
	for _, k := range []string{sc.KeyHash, sc.ArgsHash, sc.SubjectHash, sc.KeySource, sc.UserID, sc.EndUserID,
		sc.InputRequested, sc.InputContinuation, sc.GenAIToolName, sc.GenAIToolCallArguments, sc.MCPSessionID,
		sc.JSONRPCRequestID, sc.WriteID, sc.GenAIConversationID, sc.RefusalReason, sc.Outcome, sc.BypassReason, sc.Attempt,
		sc.DuplicateCause, "idemkit.key.hasX", "gen_ai.tool.namE", "user.iD", "x",
		sc.Duplicate, "idemkit.duplicatX", "xdemkit.duplicate", "idemkit.dup", "idemkit.duplicate_"} {
		f.Add(k, "v", int64(2))
	}
	f.Fuzz(func(t *testing.T, key, val string, n int64) {
		m := pcommon.NewMap()
		for i, k := range []string{sc.KeyHash, sc.GenAIToolName, sc.WriteID, sc.Outcome, sc.Attempt, sc.KeySource, sc.JSONRPCRequestID,
			sc.InputContinuation, sc.GenAIToolCallArguments, sc.UserID, sc.EndUserID, sc.MCPSessionID, sc.ArgsHash,
			sc.SubjectHash, sc.BypassReason, sc.GenAIConversationID, sc.InputRequested, sc.RefusalReason} {
			if i%2 == 0 {
				m.PutStr(k, val+k)
			} else {
				m.PutInt(k, n)
			}
		}
		m.PutStr(key, val)
		var got, want toolAttrs
		readToolAttrs(m, &got)
		readToolAttrsPlain(m, &want)
		require.Equal(t, want, got)
	})
}
