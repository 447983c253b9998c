package dupprocessor

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/pcommon"

	sc "github.com/idemkit-mcp/idemkit/spancontract"
)

// foreignGroups runs the spans of another instrumentation (no idemkit key)
// through the processor and returns, per tag, the first span of its
// duplicate group ("" for a span not flagged as a duplicate).
func foreignGroups(t *testing.T, spans ...sp) map[string]string {
	t.Helper()
	h := newHarness(t, nil)
	h.consume(buildTraces(spans...))
	out := h.finish()
	var tags []string
	for _, s := range spans {
		tags = append(tags, s.tag)
	}
	got := map[string]string{}
	for tag, attrs := range dupAttrs(t, out, tags...) {
		if attrs[sc.Duplicate] == true {
			got[tag] = attrs[sc.DuplicateFirstSpanID].(string)
		} else {
			got[tag] = ""
		}
	}
	return got
}

// The processor compares other instrumentations' arguments in the form
// idemkit's keys hash: numbers by exact decimal value. Two calls whose
// order IDs differ only beyond a double's precision are two calls (the JCS
// library rounded both to 9007199254740992 and grouped them as a leaked
// duplicate); 1, 1.0 and 1e0 are one value.
func TestForeignArguments_NumbersByExactDecimalValue(t *testing.T) {
	const session = "5f0c1d2e-aaaa-4bbb-8ccc-000000000001"
	at := func(ms int) time.Duration { return time.Duration(ms) * time.Millisecond }
	got := foreignGroups(t,
		sp{tag: "N1", kind: "mcp", trace: "t1", args: `{"order_id":9007199254740993}`, session: session, req: "1", at: at(0)},
		sp{tag: "N2", kind: "mcp", trace: "t2", args: `{"order_id":9007199254740992}`, session: session, req: "2", at: at(300)},
		sp{tag: "N3", kind: "mcp", trace: "t3", args: `{"order_id":12345678901234567891}`, session: session, req: "3", at: at(600)},
		sp{tag: "N4", kind: "mcp", trace: "t4", args: `{"order_id":12345678901234567890}`, session: session, req: "4", at: at(900)},
		sp{tag: "A1", kind: "mcp", trace: "t5", args: `{"amount":1}`, session: session, req: "5", at: at(1200)},
		sp{tag: "A2", kind: "mcp", trace: "t6", args: `{"amount": 1.0}`, session: session, req: "6", at: at(1500)},
		sp{tag: "A3", kind: "mcp", trace: "t7", args: `{"amount":1e0}`, session: session, req: "7", at: at(1800)},
	)
	require.Equal(t, map[string]string{
		"N1": "", "N2": "", "N3": "", "N4": "",
		"A1": "", "A2": spanIDOf("A1").String(), "A3": spanIDOf("A1").String(),
	}, got)
}

// Arguments with member names equal under case folding are one call to a
// Go server only byte for byte: {"a":1,"A":2} runs with 2 and {"A":2,"a":1}
// with 1, so the processor must not group them (one canonical form would);
// the same text twice is the same call and groups.
func TestForeignArguments_CaseVariantNamesGroupOnlyByTheirText(t *testing.T) {
	const session = "5f0c1d2e-aaaa-4bbb-8ccc-000000000002"
	at := func(ms int) time.Duration { return time.Duration(ms) * time.Millisecond }
	got := foreignGroups(t,
		sp{tag: "C1", kind: "mcp", trace: "t1", args: `{"order_id":"o-1","Order_Id":"o-2"}`, session: session, req: "1", at: at(0)},
		sp{tag: "C2", kind: "mcp", trace: "t2", args: `{"Order_Id":"o-2","order_id":"o-1"}`, session: session, req: "2", at: at(300)},
		sp{tag: "C3", kind: "mcp", trace: "t3", args: `{"order_id":"o-1","Order_Id":"o-2"}`, session: session, req: "3", at: at(600)},
	)
	require.Equal(t, map[string]string{"C1": "", "C2": "", "C3": spanIDOf("C1").String()}, got)

	// A map attribute is compared in its own member order.
	k := keyer{maxArgs: DefaultMaxArgumentsBytes}
	m1, m2 := pcommon.NewValueMap(), pcommon.NewValueMap()
	m1.Map().PutStr("order_id", "o-1")
	m1.Map().PutStr("Order_Id", "o-2")
	m2.Map().PutStr("Order_Id", "o-2")
	m2.Map().PutStr("order_id", "o-1")
	require.NotEqual(t, k.canonicalArgs(m1), k.canonicalArgs(m2))
	m3 := pcommon.NewValueMap()
	m1.CopyTo(m3)
	require.Equal(t, k.canonicalArgs(m1), k.canonicalArgs(m3))
	// Nested too; a map without case variants is canonical, in any order.
	n1, n2 := pcommon.NewValueMap(), pcommon.NewValueMap()
	n1.Map().PutEmptyMap("line").PutInt("Qty", 1)
	l, _ := n1.Map().Get("line")
	l.Map().PutInt("qty", 2)
	n2.Map().PutEmptyMap("line").PutInt("qty", 2)
	l2, _ := n2.Map().Get("line")
	l2.Map().PutInt("Qty", 1)
	require.NotEqual(t, k.canonicalArgs(n1), k.canonicalArgs(n2))
	o1, o2 := pcommon.NewValueMap(), pcommon.NewValueMap()
	o1.Map().PutInt("b", 1)
	o1.Map().PutDouble("a", 2)
	o2.Map().PutInt("a", 2)
	o2.Map().PutInt("b", 1)
	require.Equal(t, `c{"a":2,"b":1}`, k.canonicalArgs(o1))
	require.Equal(t, k.canonicalArgs(o1), k.canonicalArgs(o2))
}
