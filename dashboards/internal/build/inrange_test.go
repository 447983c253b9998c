package build

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/prometheus/promql/promqltest"
)

// TestInRange checks the query behind every "over the selected time range"
// panel on a real PromQL engine, for the series shapes a live demo run
// cannot show: a series that existed before the range (counted by
// increase), one born inside it (counted from zero, where increase says 0),
// one born inside it that kept growing, and a counter reset.
func TestInRange(t *testing.T) {
	st := promqltest.LoadedStorage(t, `
load 1m
  old{a="old"}       0+1x30
  born{a="born"}     _x24 4x6
  growing{a="grow"}  _x24 4 4 5 5 6 6 6
  reset{a="reset"}   0+1x22 0+1x8
`)
	t.Cleanup(func() { _ = st.Close() })
	engine := promqltest.NewTestEngine(t, false, 5*time.Minute, 100000)
	at := time.Unix(0, 0).Add(30 * time.Minute)
	eval := func(expr string) float64 {
		t.Helper()
		expr = strings.ReplaceAll(expr, "$__range", "10m")
		q, err := engine.NewInstantQuery(context.Background(), st, nil, "sum("+expr+")", at)
		if err != nil {
			t.Fatalf("%s: %v", expr, err)
		}
		defer q.Close()
		res := q.Exec(context.Background())
		if res.Err != nil {
			t.Fatalf("%s: %v", expr, res.Err)
		}
		v, err := res.Vector()
		if err != nil {
			t.Fatal(err)
		}
		if len(v) == 0 {
			return 0
		}
		return v[0].F
	}
	for _, tc := range []struct {
		series   string
		lo, hi   float64 // what inRange must give
		increase float64 // what plain increase gives (-1: not checked)
	}{
		{"old", 9.9, 10.1, -1}, // 10 increments in the last 10 minutes
		{"born", 4, 4, 0},      // born at 25m with 4: increase() loses all of it
		{"growing", 6, 6, -1},  // born at 25m, 6 by 30m
		{"reset", 7.9, 9, -1},  // 21 to 22, reset at 23m, 0 to 7 by 30m: 8 increments, extrapolated to the range
	} {
		got := eval(inRange(tc.series))
		if got < tc.lo || got > tc.hi {
			t.Errorf("inRange(%s) = %g, want within [%g, %g]", tc.series, got, tc.lo, tc.hi)
		}
		if tc.increase >= 0 {
			if inc := eval("increase(" + tc.series + "[$__range])"); math.Abs(inc-tc.increase) > 1e-9 {
				t.Errorf("increase(%s) = %g, want %g (the case inRange exists for)", tc.series, inc, tc.increase)
			}
		}
	}
}
