package dashtest

import (
	"math"
	"strings"
	"testing"
)

func samples(kv ...any) []Sample {
	var out []Sample
	for i := 0; i+1 < len(kv); i += 2 {
		out = append(out, Sample{Labels: map[string]string{"cause": kv[i].(string)}, Value: kv[i+1].(float64)})
	}
	return out
}

func TestBy(t *testing.T) {
	want := map[string]float64{"a": 2, "b": 1, "z": 0}
	for _, tc := range []struct {
		got []Sample
		err string
	}{
		{samples("a", 2.0, "b", 1.0), ""},
		{samples("a", 2.0, "b", 1.0, "c", 0.0, "z", 0.0), ""}, // counters exported at 0
		{samples("a", 2.0), "b: missing"},
		{samples("a", 2.0, "b", 2.0), "b: 2, want 1"},
		{samples("a", 2.0, "b", 1.0, "c", 1.0), "c: 1, not expected"},
		{samples("a", 2.0, "b", 1.0, "a", 0.0), "two series"},
	} {
		err := By(want, "cause")(tc.got)
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("%s: %v", describe(tc.got), err)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%s: got %v, want an error about %q", describe(tc.got), err, tc.err)
		}
	}
}

func TestWithinAndScalar(t *testing.T) {
	b := map[string][2]float64{"a": {10, 50}}
	if err := Within("cause", b)(samples("a", 30.0, "idle", math.NaN())); err != nil {
		t.Error(err)
	}
	for _, bad := range [][]Sample{samples("a", 51.0), samples("a", math.NaN()), samples("b", 30.0), samples("a", 30.0, "b", 1.0)} {
		if Within("cause", b)(bad) == nil {
			t.Errorf("Within accepted %s", describe(bad))
		}
	}
	if Scalar(4)(samples("x", 4.0)) != nil || Scalar(4)(samples("x", 3.0)) == nil || Scalar(4)(nil) == nil ||
		Scalar(4)(samples("x", 4.0, "y", 4.0)) == nil {
		t.Error("Scalar")
	}
}

func TestQuantileBounds(t *testing.T) {
	les := []float64{10, 50, 100, 500, 2000, 5000, math.Inf(1)}
	got := QuantileBounds(map[string][]float64{
		"transport": {23, 29}, "harness": {321, 322}, "model": {2225, 2226}, "spread": {5, 480}, "late": {9000},
	}, les)
	want := map[string][2]float64{
		"transport": {10, 50}, "harness": {100, 500}, "model": {2000, 5000}, "spread": {0, 500}, "late": {5000, 5000},
	}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("%s: %v, want %v", k, got[k], w)
		}
	}
}

// TestToolSpanIgnoredAs checks the reasons the expectations give the dup
// processor's untracked spans against its rules (collector/dupprocessor
// README, "Tool spans that are not tracked").
func TestToolSpanIgnoredAs(t *testing.T) {
	for _, tc := range []struct {
		outcome, bypass string
		refusal         string
		want            string // read_only, excluded_outcome or tracked
	}{
		{"bypassed", "unprotected", "", "read_only"},
		{"bypassed", "", "", "read_only"},
		{"bypassed", "unscoped", "", "tracked"}, // a write that ran unprotected
		{"bypassed", "no_guard", "", "tracked"},
		{"bypassed", "someday", "", "excluded_outcome"},
		{"mismatch", "", "mismatch", "excluded_outcome"},
		{"executed", "", "", "tracked"},
		{"replayed", "", "", "tracked"},
		{"in_progress", "", "in_progress", "tracked"},     // a duplicate answered "in progress" (blocked)
		{"", "", "store_unavailable", "excluded_outcome"}, // refused before any claim: never ran
		{"", "", "", "tracked"},                           // another instrumentation's span
	} {
		s := ToolSpan{Outcome: tc.outcome, BypassReason: tc.bypass, Refusal: tc.refusal}
		got := "tracked"
		switch {
		case s.ReadOnly() && s.Excluded():
			t.Errorf("%+v: both read_only and excluded_outcome", s)
		case s.ReadOnly():
			got = "read_only"
		case s.Excluded():
			got = "excluded_outcome"
		}
		if got != tc.want || s.Tracked() != (tc.want == "tracked") {
			t.Errorf("outcome %q, bypass reason %q: %s (tracked %v), want %s", tc.outcome, tc.bypass, got, s.Tracked(), tc.want)
		}
	}
	// A write the configuration leaves unprotected carries its argument
	// hash: the processor tracks it (its repeats leak).
	if s := (ToolSpan{Outcome: "bypassed", BypassReason: "unprotected", ArgsHash: true}); s.ReadOnly() || !s.Tracked() {
		t.Errorf("an unprotected write with its argument hash: read_only %v, tracked %v; want tracked", s.ReadOnly(), s.Tracked())
	}
}
