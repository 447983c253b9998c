package report

import (
	"fmt"
	"io"
	"sort"
	"strings"

	sc "github.com/idemkit-mcp/idemkit/spancontract"
)

// Render writes the report for a person to read.
func (r *Report) Render(w io.Writer) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format+"\n", args...) }
	rule := strings.Repeat("─", 100)
	p("%s", rule)
	p("idemkit demo: agents retry tool calls from four layers; idemkit runs the refund once,")
	p("and the Collector names the layer behind every duplicate.")
	p("%s", rule)

	p("\nPER SCENARIO  (issue_refund calls in the scenario's trace; verdicts from the dup processor's span")
	p("              annotations; refunds counted in each server's database)")
	scenarios, byScenario := r.byScenario()
	for i, name := range scenarios {
		runs := byScenario[name]
		layer := runs[0].Run.Layer
		if layer == "" {
			layer = "control: must not be flagged"
		} else {
			layer = "layer: " + layer
		}
		p("\n %d. %s (%s)\n    %s", i+1, name, layer, runs[0].Run.Title)
		for _, run := range runs {
			mark := "✓"
			if len(run.Problems) > 0 {
				mark = "✗"
			}
			got := "no duplicate"
			if len(run.Got) > 0 {
				got = "duplicate: " + dupList(run.Got)
			}
			want := dupList(run.Run.Expect.Duplicates)
			counts := fmt.Sprintf("%d %s → %d %s", len(run.Calls), plural(len(run.Calls), "call", "calls"),
				run.Writes, plural(run.Writes, "refund", "refunds"))
			p("    %s %-11s %-20s %-39s expected %s", mark, run.Run.Target.Name, counts, got, want)
			for _, pair := range run.Pairs {
				p("                  evidence: %s", pair.Evidence)
			}
			if len(run.Outcomes) > 0 {
				p("                  idemkit outcomes: %s", strings.Join(run.Outcomes, ", "))
			}
			for _, prob := range run.Problems {
				p("                  PROBLEM: %s", prob)
			}
		}
	}

	p("\nATTRIBUTION METRICS  (%s, emitted by the dup connector, scraped from the Collector)", seriesDupCalls)
	p("    %-26s %-18s %-11s %5s %9s", "service_name", "cause", "effect", "calls", "expected")
	for _, a := range r.Attribution {
		mark := "✓"
		if a.Got != a.Want {
			mark = "✗"
		}
		p("  %s %-26s %-18s %-11s %5d %9d", mark, a.Service, a.Cause, a.Effect, a.Got, a.Want)
	}

	p("\nSERVERS  (requests: %s; outcomes: %s; both exported by the servers over OTLP)", seriesOpCount, seriesToolCalls)
	for _, s := range r.Servers {
		line := fmt.Sprintf("  %-12s %-26s %2d issue_refund requests", s.Target.Name, s.Target.Service, s.Requests)
		if len(s.Outcomes) > 0 {
			line += "; idemkit outcomes: " + formatCounts(s.Outcomes, outcomeOrder)
		}
		p("%s", line)
	}

	p("\nSIDE EFFECTS  (rows in each server's refunds table)")
	for _, s := range r.Servers {
		doubles := s.Writes - s.Intended
		line := fmt.Sprintf("  %-12s %d refund requests, %d refunds written for %d intended: %d double %s",
			s.Target.Name+":", s.Requests, s.Writes, s.Intended, doubles, plural(doubles, "refund", "refunds"))
		switch {
		case doubles > 0 && len(s.Leaked) > 0:
			line += ", each attributed: " + formatCounts(s.Leaked, causeOrder)
		case doubles == 0 && len(s.Stopped) > 0:
			line += fmt.Sprintf("; %d duplicates stopped (%s)", int(sum(s.Stopped)), formatCounts(s.Stopped, []string{sc.EffectSuppressed, sc.EffectBlocked}))
		}
		p("%s", line)
	}

	if note := r.foldedNote(); note != "" {
		p("\nNOTE: %s", note)
	}

	if r.LateSpans > 0 {
		p("\nNOTE: the dup processor counted %d late spans (%s): spans that arrived after a decision", r.LateSpans, seriesLateSpans)
		p("      they would have changed. Raise decision_wait in examples/demo/collector.yaml if verdicts are off.")
	}
	if len(r.Problems) > 0 {
		p("\nPROBLEMS")
		for _, prob := range r.Problems {
			p("  ✗ %s", prob)
		}
	}
	p("")
	if r.OK() {
		p("RESULT: PASS: every duplicate was attributed to the layer that produced it; each protected server")
		p("        wrote each refund once, and every double refund of the unprotected one is accounted for.")
	} else {
		p("RESULT: FAIL: see the ✗ lines above.")
	}
}

// foldedNote says which scenarios are another layer's duplicates and are
// counted under that layer's name (task_retry is a harness retry), or "".
// The dup processor names layers, not scenarios: every count by cause
// folds such a scenario in.
func (r *Report) foldedNote() string {
	scenarios, by := r.byScenario()
	var parts []string
	for _, name := range scenarios {
		if l := by[name][0].Run.Layer; l != "" && l != name {
			parts = append(parts, fmt.Sprintf("the scenario %s is a %s, counted as %s", name, l, l))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return "the Collector names the layer, not the scenario: " + strings.Join(parts, "; ") + " in every count by cause."
}

func (r *Report) byScenario() ([]string, map[string][]*RunResult) {
	var order []string
	by := map[string][]*RunResult{}
	for _, run := range r.Runs {
		if _, ok := by[run.Run.Scenario]; !ok {
			order = append(order, run.Run.Scenario)
		}
		by[run.Run.Scenario] = append(by[run.Run.Scenario], run)
	}
	for _, runs := range by {
		sort.SliceStable(runs, func(i, j int) bool { return runs[i].Run.Target.Rank() < runs[j].Run.Target.Rank() })
	}
	return order, by
}

var outcomeOrder = []string{sc.OutcomeExecuted, sc.OutcomeReplayed, sc.OutcomeInProgress, sc.OutcomeTakeover, sc.OutcomeMismatch, sc.OutcomeBypassed}

// formatCounts formats "k n, k n" in the given key order, then the rest.
func formatCounts(m map[string]float64, order []string) string {
	var parts []string
	done := map[string]bool{}
	for _, k := range order {
		if v, ok := m[k]; ok && v != 0 {
			parts = append(parts, fmt.Sprintf("%s %d", k, int(v)))
			done[k] = true
		}
	}
	var rest []string
	for k := range m {
		if !done[k] && m[k] != 0 {
			rest = append(rest, k)
		}
	}
	sort.Strings(rest)
	for _, k := range rest {
		parts = append(parts, fmt.Sprintf("%s %d", k, int(m[k])))
	}
	return strings.Join(parts, ", ")
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
