package dashtest

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
)

// Value checks used by the expectations.

func near(a, b float64) bool {
	if math.IsNaN(a) || math.IsNaN(b) {
		return false
	}
	return math.Abs(a-b) <= 1e-9*math.Max(1, math.Max(math.Abs(a), math.Abs(b)))
}

// Scalar expects exactly one series whose value is want.
func Scalar(want float64) func([]Sample) error {
	return func(ss []Sample) error {
		if len(ss) != 1 {
			return fmt.Errorf("want one series of value %g, got %d series: %s", want, len(ss), describe(ss))
		}
		if !near(ss[0].Value, want) {
			return fmt.Errorf("value %g, want %g", ss[0].Value, want)
		}
		return nil
	}
}

func key(s Sample, lbls []string) string {
	vs := make([]string, len(lbls))
	for i, l := range lbls {
		vs[i] = s.Labels[l]
	}
	return strings.Join(vs, "/")
}

// By expects exactly the series of want, keyed by the values of lbls
// joined with "/", with want's values. A count of 0 and no series are the
// same: a series at 0 that want lacks is accepted (exporters may create
// counters at 0), and so is a missing series that want has at 0.
func By(want map[string]float64, lbls ...string) func([]Sample) error {
	return func(ss []Sample) error {
		got := map[string]float64{}
		for _, s := range ss {
			k := key(s, lbls)
			if _, dup := got[k]; dup {
				return fmt.Errorf("two series for %s=%s", strings.Join(lbls, "/"), k)
			}
			got[k] = s.Value
		}
		var diffs []string
		for _, k := range SortedKeys(want) {
			g, ok := got[k]
			switch {
			case !ok && want[k] == 0:
			case !ok:
				diffs = append(diffs, fmt.Sprintf("%s: missing, want %g", k, want[k]))
			case !near(g, want[k]):
				diffs = append(diffs, fmt.Sprintf("%s: %g, want %g", k, g, want[k]))
			}
		}
		for _, k := range SortedKeys(got) {
			if _, ok := want[k]; !ok && got[k] != 0 {
				diffs = append(diffs, fmt.Sprintf("%s: %g, not expected", k, got[k]))
			}
		}
		if len(diffs) > 0 {
			return fmt.Errorf("by %s: %s", strings.Join(lbls, "/"), strings.Join(diffs, "; "))
		}
		return nil
	}
}

// Covers expects the values of lbl over the series to include every one
// of want.
func Covers(lbl string, want []string) func([]Sample) error {
	return func(ss []Sample) error {
		got := map[string]bool{}
		for _, s := range ss {
			got[s.Labels[lbl]] = true
		}
		var missing []string
		for _, w := range want {
			if !got[w] {
				missing = append(missing, w)
			}
		}
		if len(missing) > 0 {
			return fmt.Errorf("no series for %s %s (got %s)", lbl, strings.Join(missing, ", "), strings.Join(SortedKeys(got), ", "))
		}
		return nil
	}
}

// Within expects one series per key of bounds (values of lbl), each value
// inside its [lo, hi]; other series may only be NaN (a quantile of a
// histogram that counted nothing).
func Within(lbl string, bounds map[string][2]float64) func([]Sample) error {
	return func(ss []Sample) error {
		got := map[string]float64{}
		for _, s := range ss {
			got[s.Labels[lbl]] = s.Value
		}
		var diffs []string
		for _, k := range SortedKeys(bounds) {
			b := bounds[k]
			v, ok := got[k]
			switch {
			case !ok:
				diffs = append(diffs, fmt.Sprintf("%s: missing", k))
			case math.IsNaN(v) || v < b[0]-1e-9 || v > b[1]+1e-9:
				diffs = append(diffs, fmt.Sprintf("%s: %g, want within [%g, %g]", k, v, b[0], b[1]))
			}
		}
		for _, k := range SortedKeys(got) {
			if _, ok := bounds[k]; !ok && !math.IsNaN(got[k]) {
				diffs = append(diffs, fmt.Sprintf("%s: %g, not expected", k, got[k]))
			}
		}
		if len(diffs) > 0 {
			return fmt.Errorf("%s", strings.Join(diffs, "; "))
		}
		return nil
	}
}

// QuantileBounds returns, per cause, the interval histogram_quantile must
// fall in for gaps: from the lower bound of the bucket of the smallest gap
// to the upper bound of the bucket of the largest (the quantile is
// interpolated inside the bucket its rank falls in; past the last finite
// bound it is that bound). les are the bucket bounds, +Inf included.
func QuantileBounds(gaps map[string][]float64, les []float64) map[string][2]float64 {
	sort.Float64s(les)
	lastFinite := 0.0
	for _, le := range les {
		if !math.IsInf(le, 1) {
			lastFinite = le
		}
	}
	bucket := func(x float64) (lo, hi float64) {
		lo = 0
		for _, le := range les {
			if x <= le {
				if math.IsInf(le, 1) {
					return lastFinite, lastFinite
				}
				return lo, le
			}
			lo = le
		}
		return lastFinite, lastFinite
	}
	out := map[string][2]float64{}
	for cause, gs := range gaps {
		if len(gs) == 0 {
			continue
		}
		mn, mx := slicesMin(gs), slicesMax(gs)
		lo, _ := bucket(mn)
		_, hi := bucket(mx)
		out[cause] = [2]float64{lo, hi}
	}
	return out
}

func slicesMin(xs []float64) float64 {
	m := xs[0]
	for _, x := range xs {
		m = math.Min(m, x)
	}
	return m
}

func slicesMax(xs []float64) float64 {
	m := xs[0]
	for _, x := range xs {
		m = math.Max(m, x)
	}
	return m
}

// ParseLe parses an le label value.
func ParseLe(s string) (float64, error) {
	if s == "+Inf" {
		return math.Inf(1), nil
	}
	return strconv.ParseFloat(s, 64)
}

// Causes are the four layers the processor names; the demo reproduces each.
var Causes = []string{"transport_retry", "harness_retry", "model_reissue", "reconnect_replay"}

// Facts are the numbers the idemkit dashboards must show for a demo run,
// derived from the evidence (never from Prometheus).
type Facts struct {
	Evidence *Evidence
	Exercise *ExerciseResult
	// DemoInstances are the instance labels of the telemetry of the demo's
	// Collectors that run the dup processor.
	DemoInstances     []string
	ExerciserInstance string // instance label of the exercised Collector's telemetry
	// GapBounds are the gap histogram's bucket bounds, in GapUnit (the
	// histogram's unit in metrics.json: ms or s).
	GapBounds []float64
	GapUnit   string
	// EvidenceCopies says that a tier-1 Collector copies every inference
	// span to each of the DemoInstances (the two-tier deployment).
	EvidenceCopies bool
	// Guard is what the exercised MCP server did (nil: not run).
	Guard *GuardExerciseResult
}

// IdemkitExpectations are the value assertions for the idemkit dashboards.
func IdemkitExpectations(f Facts) (map[string][]Expectation, error) {
	ev := f.Evidence
	exp := map[string][]Expectation{}
	add := func(uid, panel, ref, why string, vars map[string][]string, check func([]Sample) error) {
		k := ExpectKey(uid, panel, ref)
		exp[k] = append(exp[k], Expectation{Vars: vars, Why: why, Check: check})
	}

	// From the manifest and the databases.
	var dups []CauseEffect
	dupsBySvc := map[string][]CauseEffect{}
	double, doubleBySvc := 0.0, map[string]float64{}
	var protected *ServiceEvidence
	for _, name := range SortedKeys(ev.Services) {
		s := ev.Services[name]
		dups = append(dups, s.Duplicates...)
		dupsBySvc[name] = s.Duplicates
		if d := s.DoubleRefunds(); d > 0 {
			doubleBySvc[name] = float64(d)
			double += float64(d)
		}
		if s.Protected {
			if protected != nil {
				return nil, fmt.Errorf("two protected services in the manifest: %s, %s", protected.Name, name)
			}
			protected = s
		}
	}
	if protected == nil {
		return nil, fmt.Errorf("no protected service in the manifest")
	}
	byCause := Count(dups, func(d CauseEffect) (string, bool) { return d.Cause, true })
	byEffect := Count(dups, func(d CauseEffect) (string, bool) { return d.Effect, true })
	leakedByCause := Count(dups, func(d CauseEffect) (string, bool) { return d.Cause, d.Effect == "leaked" })
	leaked := 0.0
	for _, n := range leakedByCause {
		leaked += n
	}
	for _, c := range Causes {
		if byCause[c] == 0 {
			return nil, fmt.Errorf("the demo's manifest expects no %s duplicate: the headline assertions need all four causes", c)
		}
	}
	if leaked != double {
		return nil, fmt.Errorf("evidence disagrees with itself: the manifest expects %g leaked duplicates, the databases hold %g double refunds", leaked, double)
	}

	// From the spans the Collector wrote out.
	spans := ev.ToolSpans
	tracked := func(s ToolSpan) bool { return s.Tracked() }
	annotated := func(s ToolSpan) bool { return s.Cause != "" }
	spanDups := 0.0
	matrix := map[string]float64{}
	leakedBySvcTool := map[string]float64{}
	gaps := map[string][]float64{}
	var allGaps []float64
	for _, s := range spans {
		if !annotated(s) {
			continue
		}
		spanDups++
		matrix[strings.Join([]string{s.Service, s.Tool, s.Cause, s.Effect}, "/")]++
		if s.Effect == "leaked" {
			leakedBySvcTool[s.Service+"/"+s.Tool]++
		}
		if s.HasGap {
			g := s.GapMs
			switch f.GapUnit {
			case "ms":
			case "s":
				g /= 1000
			default:
				return nil, fmt.Errorf("gap histogram unit %q: the checks know ms and s", f.GapUnit)
			}
			gaps[s.Cause] = append(gaps[s.Cause], g)
			allGaps = append(allGaps, g)
		}
	}
	if spanDups != float64(len(dups)) {
		return nil, fmt.Errorf("evidence disagrees with itself: %g annotated duplicate spans, the manifest expects %d duplicates", spanDups, len(dups))
	}

	const attr = "idemkit-duplicates"
	add(attr, "Leaked duplicates (double side effects)", "A",
		fmt.Sprintf("= %g double refunds in the servers' refund databases (rows beyond the intended refunds)", double), nil, Scalar(double))
	add(attr, "Duplicate tool calls", "A", "= duplicates the demo's manifest expects", nil, Scalar(float64(len(dups))))
	add(attr, "Stopped by idemkit (suppressed + blocked)", "A", "= suppressed + blocked duplicates of the manifest", nil,
		Scalar(byEffect["suppressed"]+byEffect["blocked"]))
	add(attr, "Duplicate share of tool calls", "A",
		fmt.Sprintf("= %d duplicates / %d execute_tool spans written by the Collector", len(dups), len(spans)), nil,
		Scalar(float64(len(dups))/float64(len(spans))))
	add(attr, "Duplicate calls by cause", "A", "covers all four causes", nil, Covers("idemkit_duplicate_cause", Causes))
	add(attr, "Duplicate calls by effect", "A", "covers every effect of the manifest", nil, Covers("idemkit_duplicate_effect", SortedKeys(byEffect)))
	add(attr, "Duplicates by cause", "A", "= the manifest's duplicates by cause", nil, By(byCause, "idemkit_duplicate_cause"))
	add(attr, "Duplicates by effect", "A", "= the manifest's duplicates by effect", nil, By(byEffect, "idemkit_duplicate_effect"))
	add(attr, "Leaked duplicates by cause", "A", "= the manifest's leaked duplicates by cause", nil, By(leakedByCause, "idemkit_duplicate_cause"))
	add(attr, "Top tools by leaked duplicates", "A", "= leaked duplicate spans per service/tool (their sum: the double refunds)", nil,
		By(leakedBySvcTool, "service_name", "gen_ai_tool_name"))
	add(attr, "Attribution matrix", "A", "= annotated duplicate spans by service/tool/cause/effect", nil,
		By(matrix, "service_name", "gen_ai_tool_name", "idemkit_duplicate_cause", "idemkit_duplicate_effect"))
	if len(f.GapBounds) == 0 {
		return nil, fmt.Errorf("no gap histogram bucket bounds")
	}
	bounds := QuantileBounds(gaps, f.GapBounds)
	gapTitle := "Gap between original and duplicate, by cause (p50 / p90 / p99)"
	for ref, q := range map[string]string{"A": "p50", "B": "p90", "C": "p99"} {
		add(attr, gapTitle, ref, q+" inside the gap buckets of the spans' idemkit.duplicate.gap_ms per cause", nil,
			Within("idemkit_duplicate_cause", bounds))
	}
	add(attr, gapTitle, "D", "= duplicate spans with a gap, per cause", nil,
		By(Count(spans, func(s ToolSpan) (string, bool) { return s.Cause, annotated(s) && s.HasGap }), "idemkit_duplicate_cause"))
	cumulative := map[string]float64{}
	for _, le := range f.GapBounds {
		n := 0.0
		for _, g := range allGaps {
			if g <= le {
				n++
			}
		}
		name := strconv.FormatFloat(le, 'g', -1, 64)
		if math.IsInf(le, 1) {
			name = "+Inf"
		}
		cumulative[name] = n
	}
	add(attr, "Gap distribution (all causes)", "A", "= spans' gaps at or under each bucket bound", nil, By(cumulative, "le"))

	// Guard: the protected server, from the Collector's spans and the
	// manifest, and the exercised server, from its own spans.
	ps := []ToolSpan{}
	for _, s := range spans {
		if s.Service == protected.Name {
			ps = append(ps, s)
		}
	}
	outcomes := Count(ps, func(s ToolSpan) (string, bool) { return s.Outcome, true })
	protectedCalls := float64(len(ps)) - outcomes["bypassed"]
	protDups := Count(protected.Duplicates, func(d CauseEffect) (string, bool) { return d.Effect, true })
	rows := 0
	for _, n := range protected.Rows {
		rows += n
	}
	if protectedCalls != float64(protected.Requests) {
		return nil, fmt.Errorf("evidence disagrees with itself: %g protected execute_tool spans, the manifest sends %d issue_refund requests", protectedCalls, protected.Requests)
	}
	if mm := float64(protected.Requests-rows) - protDups["suppressed"] - protDups["blocked"]; mm != outcomes["mismatch"] {
		return nil, fmt.Errorf("evidence disagrees with itself: requests - refunds - suppressed - blocked = %g, but %g mismatch spans", mm, outcomes["mismatch"])
	}
	if outcomes["replayed"] != protDups["suppressed"] || outcomes["in_progress"] != protDups["blocked"] {
		return nil, fmt.Errorf("evidence disagrees with itself: %g replayed and %g in_progress spans, the manifest expects %g suppressed and %g blocked duplicates",
			outcomes["replayed"], outcomes["in_progress"], protDups["suppressed"], protDups["blocked"])
	}
	var protReqs []RequestSpan
	for _, r := range ev.Requests {
		if r.Service == protected.Name {
			protReqs = append(protReqs, r)
		}
	}
	servers := []guardEvidence{{
		service: protected.Name, tools: ps, requests: protReqs, sessions: distinctSessions(protReqs),
		why: "the protected server's spans written by the Collector",
	}}
	if g := f.Guard; g != nil {
		servers = append(servers, guardEvidence{
			service: g.Service, tools: ToolSpans(g.Spans), requests: RequestSpans(g.Spans), sessions: float64(g.Sessions),
			why: "the exercised server's own spans",
		})
	}
	for _, e := range servers {
		guardExpectations(add, e)
	}

	// Processor health: the demo's Collector, then the exercised one.
	const proc = "idemkit-dup-processor"
	if len(f.DemoInstances) == 0 {
		return nil, fmt.Errorf("no telemetry instance of the demo's dup processors")
	}
	demo := map[string][]string{"instance": f.DemoInstances}
	classifiedWant := Count(spans, func(s ToolSpan) (string, bool) {
		if !tracked(s) {
			return "", false
		}
		if s.Cause == "" {
			return "none", true
		}
		return s.Cause, true
	})
	nTracked := 0.0
	for _, n := range classifiedWant {
		nTracked += n
	}
	add(proc, "Classified by cause", "A", "= demo Collector's tracked execute_tool spans by cause written", demo, By(classifiedWant, "cause"))
	add(proc, "Ignored by reason", "A", "= demo Collector's execute_tool spans that are reads (read_only) or mismatches and refusals (excluded_outcome)", demo,
		By(map[string]float64{
			"read_only":        Count(spans, func(s ToolSpan) (string, bool) { return "", s.ReadOnly() })[""],
			"excluded_outcome": Count(spans, func(s ToolSpan) (string, bool) { return "", s.Excluded() })[""],
		}, "reason"))
	copies := 0.0
	if f.EvidenceCopies {
		copies = float64(ev.InferenceSpans)
	}
	copiesBy := map[string]float64{}
	for _, in := range f.DemoInstances {
		copiesBy[in] = copies
	}
	copiesWhy := "= 0: no tier 1 copies inference spans to this deployment's Collectors"
	if f.EvidenceCopies {
		copiesWhy = fmt.Sprintf("= the %d inference spans the Collectors wrote, received by each of the %d tier-2 Collectors", ev.InferenceSpans, len(f.DemoInstances))
	}
	add(proc, "Evidence copies received", "A", copiesWhy, demo, Scalar(copies*float64(len(f.DemoInstances))))
	add(proc, "Evidence copies by Collector", "A", copiesWhy, demo, By(copiesBy, "instance"))
	add(proc, "Duplicate share of decided spans", "A", "= annotated / tracked spans of the demo", demo, Scalar(spanDups/nTracked))
	if x := f.Exercise; x != nil {
		exer := map[string][]string{"instance": {f.ExerciserInstance}}
		if x.Evictions <= 0 || x.LateSpans["tool"] <= 0 || x.LateSpans["chat"] <= 0 {
			return nil, fmt.Errorf("the exercise did not cause evictions and late tool and chat spans: %+v", x)
		}
		add(proc, "Evictions", "A", "= evictions the exercised Collector reported on its endpoint", exer, Scalar(x.Evictions))
		add(proc, "Late spans", "A", "= late spans the exercised Collector reported", exer, Scalar(x.LateSpans["tool"]+x.LateSpans["chat"]))
		add(proc, "Late spans by kind", "A", "= late tool and chat spans the exercised Collector reported", exer, By(x.LateSpans, "span"))
		add(proc, "Classified by cause", "A", "= spans the exercised Collector reported classified", exer, By(x.Classified, "cause"))
		add(proc, "Evictions by Collector", "A", "has the exercised Collector", nil, Covers("instance", []string{f.ExerciserInstance}))
		add(proc, "Late spans by Collector and kind", "A", "has tool and chat", nil, Covers("span", []string{"tool", "chat"}))
	}
	add(proc, "Groups tracked by Collector", "A", "has every dup processor of the demo", nil, Covers("instance", f.DemoInstances))
	add(proc, "Tool spans classified by cause", "A", "covers all four causes", nil, Covers("cause", Causes))
	return exp, nil
}

// guardEvidence is what one MCP server did, for the Guard dashboard.
type guardEvidence struct {
	service  string
	tools    []ToolSpan    // its execute_tool spans
	requests []RequestSpan // its request spans, every method
	sessions float64       // the sessions that ended
	why      string        // where the spans come from
}

// distinctSessions counts the session IDs of requests.
func distinctSessions(reqs []RequestSpan) float64 {
	return float64(len(Count(reqs, func(r RequestSpan) (string, bool) { return r.Session, r.Session != "" })))
}

// guardExpectations adds the Guard dashboard's value assertions for one
// server, with $job set to it.
func guardExpectations(add func(uid, panel, ref, why string, vars map[string][]string, check func([]Sample) error), e guardEvidence) {
	const guard = "idemkit-guard"
	job := map[string][]string{"job": {e.service}}
	why := func(what string) string { return "= " + what + " (" + e.why + ")" }
	outcomes := Count(e.tools, func(s ToolSpan) (string, bool) { return s.Outcome, true })
	protectedCalls := float64(len(e.tools)) - outcomes["bypassed"]
	refusals := Count(e.tools, func(s ToolSpan) (string, bool) { return s.Refusal, s.Refusal != "" })
	refused := 0.0
	for _, n := range refusals {
		refused += n
	}
	notRecorded := Count(e.tools, func(s ToolSpan) (string, bool) { return s.Tool + "/" + s.FinishError, s.FinishError != "" })
	nNotRecorded := 0.0
	for _, n := range notRecorded {
		nNotRecorded += n
	}
	// A replay answers a duplicate with the stored result; a refusal that
	// carries outcome replayed (a result that cannot be replayed) is not one.
	replayed := Count(e.tools, func(s ToolSpan) (string, bool) { return "", s.Outcome == "replayed" && s.Refusal == "" })[""]
	add(guard, "Protected calls", "A", why("execute_tool spans whose outcome is not bypassed"), job, Scalar(protectedCalls))
	add(guard, "Replayed", "A", why("execute_tool spans replayed"), job, Scalar(replayed))
	add(guard, "Answered in progress", "A", why("execute_tool spans answered in_progress"), job, Scalar(outcomes["in_progress"]))
	if protectedCalls > 0 {
		add(guard, "Replay share of protected calls", "A", why("replayed / protected calls"), job, Scalar(replayed/protectedCalls))
	}
	add(guard, "Refused calls", "A", why("execute_tool spans with idemkit.refusal.reason"), job, Scalar(refused))
	add(guard, "Key mismatches", "A", why("execute_tool spans with outcome mismatch"), job, Scalar(outcomes["mismatch"]))
	add(guard, "Bypassed calls", "A", why("execute_tool spans with outcome bypassed"), job, Scalar(outcomes["bypassed"]))
	add(guard, "Outcomes not recorded", "A", why("execute_tool spans with idemkit.finish.error"), job, Scalar(nNotRecorded))
	add(guard, "Refused calls by reason", "A", why("execute_tool spans by idemkit.refusal.reason"), job, By(refusals, "idemkit_refusal_reason"))
	add(guard, "Outcomes not recorded by tool and reason", "A", why("execute_tool spans by tool/idemkit.finish.error"), job,
		By(notRecorded, "gen_ai_tool_name", "idemkit_finish_error"))
	if len(outcomes) > 0 {
		// The panel names the calls refused before a claim (no outcome).
		shown := Count(e.tools, func(s ToolSpan) (string, bool) {
			if s.Outcome == "" {
				return "refused before claim", true
			}
			return s.Outcome, true
		})
		add(guard, "Tool calls by outcome", "A", "covers every outcome of "+e.why, job, Covers("idemkit_outcome", SortedKeys(shown)))
	}
	add(guard, "Calls by tool, outcome and reason", "A", why("execute_tool spans by tool/outcome/bypass reason/refusal reason"), job,
		By(Count(e.tools, func(s ToolSpan) (string, bool) {
			return strings.Join([]string{e.service, s.Tool, s.Outcome, s.BypassReason, s.Refusal}, "/"), true
		}), "job", "gen_ai_tool_name", "idemkit_outcome", "idemkit_bypass_reason", "idemkit_refusal_reason"))
	add(guard, "MCP requests by service and method", "A", why("request spans by method"), job,
		By(Count(e.requests, func(r RequestSpan) (string, bool) { return e.service + "/" + r.Method, true }), "job", "mcp_method_name"))
	add(guard, "MCP requests by method", "A", "covers every method of "+e.why, job,
		Covers("mcp_method_name", SortedKeys(Count(e.requests, func(r RequestSpan) (string, bool) { return r.Method, true }))))
	add(guard, "MCP sessions ended by service", "A", fmt.Sprintf("= %g sessions (%s)", e.sessions, e.why), job,
		By(map[string]float64{e.service: e.sessions}, "job"))
}
