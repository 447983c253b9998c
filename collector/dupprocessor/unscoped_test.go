package dupprocessor

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	sc "github.com/idemkit-mcp/idemkit/spancontract"
)

// A write tool that ran unprotected, because the call had no scope (bypass
// reason unscoped) or the instrumentation has no Guard (no_guard), leaked
// its duplicate; a bypassed read-only tool is still left untracked.
func TestProcessor_UnprotectedWriteBypassIsTracked(t *testing.T) {
	h := newHarness(t, nil)
	td := buildTraces(
		sp{tag: "A", trace: "t", key: "k", session: "s", req: "1", outcome: sc.OutcomeBypassed, at: 0},
		sp{tag: "B", trace: "t", key: "k", session: "s", req: "2", outcome: sc.OutcomeBypassed, at: 40 * time.Millisecond},
		sp{tag: "C", trace: "t", key: "r", session: "s", req: "3", outcome: sc.OutcomeBypassed, at: 80 * time.Millisecond},
		sp{tag: "D", trace: "t", key: "r", session: "s", req: "4", outcome: sc.OutcomeBypassed, at: 120 * time.Millisecond},
		sp{tag: "E", trace: "t", key: "n", session: "s", req: "5", outcome: sc.OutcomeBypassed, at: 160 * time.Millisecond},
		sp{tag: "F", trace: "t", key: "n", session: "s", req: "5", outcome: sc.OutcomeBypassed, at: 190 * time.Millisecond},
	)
	spans := td.ResourceSpans().At(0).ScopeSpans().At(0).Spans()
	spans.At(0).Attributes().PutStr(sc.BypassReason, sc.BypassUnscoped)
	spans.At(1).Attributes().PutStr(sc.BypassReason, sc.BypassUnscoped)
	spans.At(2).Attributes().PutStr(sc.BypassReason, sc.BypassUnprotected)
	spans.At(3).Attributes().PutStr(sc.BypassReason, sc.BypassUnprotected)
	spans.At(4).Attributes().PutStr(sc.BypassReason, sc.BypassNoGuard)
	spans.At(5).Attributes().PutStr(sc.BypassReason, sc.BypassNoGuard)
	h.consume(td)
	got := dupAttrs(t, h.finish(), "A", "B", "C", "D", "E", "F")
	require.Equal(t, none(), got["A"])
	require.Equal(t, dup(sc.CauseHarnessRetry, sc.EffectLeaked, keyHashOf("k"), "A", 40*time.Millisecond), got["B"])
	require.Equal(t, none(), got["D"], "read-only bypassed calls stay untracked")
	require.Equal(t, dup(sc.CauseTransportRetry, sc.EffectLeaked, keyHashOf("n"), "E", 30*time.Millisecond), got["F"], "observe-only (no Guard) duplicates leak")
}
