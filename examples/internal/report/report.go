// Package report computes the demo's report: for every scenario the
// duplicate generator ran, what the Collector's dup processor attributed
// (from the annotated spans the Collector wrote out), what the Prometheus
// metrics say in total, and what each refund server's database holds, all
// checked against the scenarios' expectations. Nothing in it is hard-coded:
// the expectations come from the generator's manifest, the results from
// the Collector and the databases.
package report

import (
	"fmt"
	"sort"
	"time"

	"github.com/idemkit-mcp/idemkit/examples/internal/agent"
	"github.com/idemkit-mcp/idemkit/examples/internal/refunds"
	"github.com/idemkit-mcp/idemkit/internal/testing/harness"
	sc "github.com/idemkit-mcp/idemkit/spancontract"
)

// Prometheus series the report reads.
const (
	seriesDupCalls   = "idemkit_duplicate_calls_total"
	seriesCandidates = "idemkit_duplicate_candidates_total"
	seriesToolCalls  = "idemkit_tool_calls_total"
	seriesOpCount    = "mcp_server_operation_duration_seconds_count"
	seriesLateSpans  = "otelcol_processor_dup_late_spans"
)

// Inputs is what the report is computed from.
type Inputs struct {
	Manifest *agent.Manifest
	// Metrics is a scrape of the Collectors' Prometheus exporters.
	Metrics harness.Samples
	// Telemetry is a scrape of the Collectors' own metrics endpoints (may
	// be nil).
	Telemetry harness.Samples
	// Spans are the spans the Collector exported after the dup processor.
	Spans []Span
	// Refunds holds every refund row of each server's database, by target
	// name.
	Refunds map[string][]refunds.Refund
	// HarnessThreshold is the dup processor's harness_threshold.
	HarnessThreshold time.Duration
}

// RunResult is one scenario run's outcome.
type RunResult struct {
	Run      *agent.ScenarioRun
	Calls    []*Span     // the server's issue_refund spans in the run's trace, by start
	Tools    []*Span     // every execute_tool span of the run's trace, by start
	Chats    []*Span     // the agent's chat spans in the run's trace, by start
	Writes   int         // refund rows of the run's order
	Got      []agent.Dup // duplicate annotations on the trace's tool spans, by start
	Pairs    []Pair      // the duplicates by the evidence, with what differs
	Outcomes []string    // idemkit.outcome of each issue_refund span (protected server)
	Problems []string
}

// ServerResult is one server's totals.
type ServerResult struct {
	Target           agent.Target
	Requests         int                // issue_refund calls, from the server's own metrics
	ExpectedRequests int                // from the manifest
	Outcomes         map[string]float64 // idemkit_tool_calls_total by outcome (protected)
	Writes, Intended int                // refund rows; refunds the agent meant
	ExpectedWrites   int
	Leaked           map[string]float64 // idemkit_duplicate_calls_total{effect="leaked"} by cause
	Stopped          map[string]float64 // idemkit_duplicate_calls_total of non-leaked effects, by effect
}

// AttributionRow is one series of idemkit_duplicate_calls_total.
type AttributionRow struct {
	Service, Cause, Effect string
	Got, Want              int
}

// Report is the computed report.
type Report struct {
	Runs        []*RunResult
	Servers     []*ServerResult
	Attribution []AttributionRow
	LateSpans   int
	Problems    []string
}

// OK reports whether every expectation held.
func (r *Report) OK() bool {
	if len(r.Problems) > 0 {
		return false
	}
	for _, run := range r.Runs {
		if len(run.Problems) > 0 {
			return false
		}
	}
	return true
}

// Build computes the report.
func Build(in Inputs) *Report {
	if in.HarnessThreshold <= 0 {
		in.HarnessThreshold = 2 * time.Second
	}
	rep := &Report{}
	byTrace := map[string][]*Span{}
	for i := range in.Spans {
		s := &in.Spans[i]
		byTrace[s.TraceID] = append(byTrace[s.TraceID], s)
	}
	for _, run := range in.Manifest.Runs {
		rep.Runs = append(rep.Runs, checkRun(run, byTrace[run.TraceID], in))
	}
	for _, t := range targets(in.Manifest) {
		rep.Servers = append(rep.Servers, serverTotals(t, in, rep))
	}
	rep.Attribution = attribution(in, rep)
	rep.LateSpans = int(in.Telemetry.Total(seriesLateSpans, nil))
	return rep
}

func checkRun(run *agent.ScenarioRun, spans []*Span, in Inputs) *RunResult {
	res := &RunResult{Run: run}
	problem := func(format string, args ...any) { res.Problems = append(res.Problems, fmt.Sprintf(format, args...)) }
	if run.Error != "" {
		problem("the agent could not carry the scenario out: %s", run.Error)
	}
	var tools, chats []*Span
	for _, s := range spans {
		switch {
		case s.IsTool():
			tools = append(tools, s)
		case s.IsChat():
			chats = append(chats, s)
		}
	}
	sort.Slice(tools, func(i, j int) bool { return tools[i].Start < tools[j].Start })
	sort.Slice(chats, func(i, j int) bool { return chats[i].Start < chats[j].Start })
	res.Tools, res.Chats = tools, chats
	for _, s := range tools {
		if s.Str(sc.GenAIToolName) == "issue_refund" {
			res.Calls = append(res.Calls, s)
			if o := s.Str(sc.Outcome); o != "" {
				res.Outcomes = append(res.Outcomes, o)
			}
		}
		if cause, effect, ok := s.Duplicate(); ok {
			res.Got = append(res.Got, agent.Dup{Cause: cause, Effect: effect})
		}
	}
	res.Pairs = Duplicates(tools, chats)
	for _, r := range in.Refunds[run.Target.Name] {
		if r.OrderID == run.OrderID {
			res.Writes++
		}
	}

	want := run.Expect
	if len(res.Calls) != want.Requests {
		problem("%d issue_refund calls reached the server, expected %d", len(res.Calls), want.Requests)
	}
	if res.Writes != want.Writes {
		problem("%d refunds written for %s, expected %d", res.Writes, run.OrderID, want.Writes)
	}
	if !sameDups(res.Got, want.Duplicates) {
		problem("attributed %s, expected %s", dupList(res.Got), dupList(want.Duplicates))
	}
	if len(res.Pairs) != len(want.Duplicates) {
		problem("the spans' evidence shows %d duplicates, the scenario makes %d (a group key the report could not read?)", len(res.Pairs), len(want.Duplicates))
	}
	for _, p := range res.Pairs {
		cause, _, ok := p.M.Duplicate()
		if !ok {
			problem("the Collector left a duplicate unannotated (%s)", p.Evidence)
			continue
		}
		if table := p.Evidence.Cause(in.HarnessThreshold); table != cause {
			problem("the Collector said %s, but the decision table gives %s for this evidence (%s)", cause, table, p.Evidence)
		}
	}
	return res
}

func serverTotals(t agent.Target, in Inputs, rep *Report) *ServerResult {
	sr := &ServerResult{
		Target:   t,
		Requests: int(in.Metrics.Total(seriesOpCount, map[string]string{"job": t.Service, "gen_ai_tool_name": "issue_refund"})),
		Writes:   len(in.Refunds[t.Name]),
		Leaked:   in.Metrics.By(seriesDupCalls, "idemkit_duplicate_cause", map[string]string{"service_name": t.Service, "idemkit_duplicate_effect": sc.EffectLeaked}),
		Stopped:  map[string]float64{},
	}
	if t.Protected {
		sr.Outcomes = in.Metrics.By(seriesToolCalls, "idemkit_outcome", map[string]string{"job": t.Service, "gen_ai_tool_name": "issue_refund"})
	}
	for effect, n := range in.Metrics.By(seriesDupCalls, "idemkit_duplicate_effect", map[string]string{"service_name": t.Service}) {
		if effect != sc.EffectLeaked {
			sr.Stopped[effect] = n
		}
	}
	toolCalls := 0
	for _, run := range in.Manifest.Runs {
		if run.Target.Name != t.Name {
			continue
		}
		sr.ExpectedRequests += run.Expect.Requests
		sr.ExpectedWrites += run.Expect.Writes
		sr.Intended += run.Expect.Intended
		toolCalls += len(run.Wire)
	}
	problem := func(format string, args ...any) {
		rep.Problems = append(rep.Problems, fmt.Sprintf("%s server: ", t.Name)+fmt.Sprintf(format, args...))
	}
	if sr.Requests != sr.ExpectedRequests {
		problem("its metrics count %d issue_refund calls (%s), expected %d", sr.Requests, seriesOpCount, sr.ExpectedRequests)
	}
	if sr.Writes != sr.ExpectedWrites {
		problem("its database holds %d refunds, expected %d", sr.Writes, sr.ExpectedWrites)
	}
	if leaked := int(sum(sr.Leaked)); leaked != sr.Writes-sr.Intended {
		problem("%d double refunds in its database, but %s{idemkit_duplicate_effect=%q} counts %d", sr.Writes-sr.Intended, seriesDupCalls, sc.EffectLeaked, leaked)
	}
	if seen := int(in.Metrics.Total(seriesCandidates, map[string]string{"service_name": t.Service})); seen != toolCalls {
		problem("the Collector saw %d of its %d tool calls (%s)", seen, toolCalls, seriesCandidates)
	}
	return sr
}

// attribution compares idemkit_duplicate_calls_total with the expectations.
func attribution(in Inputs, rep *Report) []AttributionRow {
	type key struct{ service, cause, effect string }
	rows := map[key]*AttributionRow{}
	row := func(k key) *AttributionRow {
		if rows[k] == nil {
			rows[k] = &AttributionRow{Service: k.service, Cause: k.cause, Effect: k.effect}
		}
		return rows[k]
	}
	services := map[string]bool{}
	for _, run := range in.Manifest.Runs {
		services[run.Target.Service] = true
		for _, d := range run.Expect.Duplicates {
			row(key{run.Target.Service, d.Cause, d.Effect}).Want++
		}
	}
	for _, s := range in.Metrics {
		if s.Name != seriesDupCalls || !services[s.Labels["service_name"]] {
			continue
		}
		row(key{s.Labels["service_name"], s.Labels["idemkit_duplicate_cause"], s.Labels["idemkit_duplicate_effect"]}).Got += int(s.Value)
	}
	out := make([]AttributionRow, 0, len(rows))
	for _, r := range rows {
		out = append(out, *r)
		if r.Got != r.Want {
			rep.Problems = append(rep.Problems, fmt.Sprintf("%s{service_name=%q, cause=%q, effect=%q} is %d, expected %d",
				seriesDupCalls, r.Service, r.Cause, r.Effect, r.Got, r.Want))
		}
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Service != b.Service {
			return a.Service < b.Service
		}
		if ca, cb := causeRank(a.Cause), causeRank(b.Cause); ca != cb {
			return ca < cb
		}
		return a.Effect < b.Effect
	})
	return out
}

// Pending says what has not reached the Collector's outputs yet: the
// report waits until every tool call the agent made is counted by the dup
// connector (which sees a span only after the processor decided on it) and
// written out by the file exporter.
func Pending(m *agent.Manifest, metrics harness.Samples, spans []Span) []string {
	var out []string
	for _, t := range targets(m) {
		want := 0
		traces := map[string]bool{}
		for _, run := range m.Runs {
			if run.Target.Name == t.Name {
				want += len(run.Wire)
				traces[run.TraceID] = true
			}
		}
		if seen := int(metrics.Total(seriesCandidates, map[string]string{"service_name": t.Service})); seen < want {
			out = append(out, fmt.Sprintf("%s: %d of %d tool calls decided", t.Service, seen, want))
		}
		written := 0
		for i := range spans {
			if spans[i].IsTool() && spans[i].Service == t.Service && traces[spans[i].TraceID] {
				written++
			}
		}
		if written < want {
			out = append(out, fmt.Sprintf("%s: %d of %d tool spans written out", t.Service, written, want))
		}
	}
	return out
}

func targets(m *agent.Manifest) []agent.Target {
	var out []agent.Target
	seen := map[string]bool{}
	for _, run := range m.Runs {
		if !seen[run.Target.Name] {
			seen[run.Target.Name] = true
			out = append(out, run.Target)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Rank() < out[j].Rank() })
	return out
}

func sameDups(a, b []agent.Dup) bool {
	if len(a) != len(b) {
		return false
	}
	count := map[agent.Dup]int{}
	for _, d := range a {
		count[d]++
	}
	for _, d := range b {
		count[d]--
	}
	for _, n := range count {
		if n != 0 {
			return false
		}
	}
	return true
}

func dupList(ds []agent.Dup) string {
	if len(ds) == 0 {
		return "no duplicate"
	}
	s := ""
	for i, d := range ds {
		if i > 0 {
			s += ", "
		}
		s += d.String()
	}
	return s
}

func sum(m map[string]float64) float64 {
	t := 0.0
	for _, v := range m {
		t += v
	}
	return t
}

var causeOrder = []string{sc.CauseTransportRetry, sc.CauseHarnessRetry, sc.CauseModelReissue, sc.CauseReconnectReplay, sc.CauseUnknown}

func causeRank(c string) int {
	for i, x := range causeOrder {
		if x == c {
			return i
		}
	}
	return len(causeOrder)
}
