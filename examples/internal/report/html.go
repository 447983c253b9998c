package report

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	htmlreport "github.com/idemkit-mcp/idemkit/cmd/idemkit/report"
	"github.com/idemkit-mcp/idemkit/examples/internal/agent"
	sc "github.com/idemkit-mcp/idemkit/spancontract"
)

// HTMLMeta describes the run in the HTML report's footer.
type HTMLMeta struct {
	// Deployment names the Collector deployment the run went through.
	Deployment string
	// Generated is when the report was written.
	Generated time.Time
	// WorkDir is where the run's logs and data are.
	WorkDir string
}

// WriteHTML writes the report as one self-contained HTML page (the page
// idemkit attribute --html writes too, see internal/report).
func (r *Report) WriteHTML(w io.Writer, meta HTMLMeta) error {
	return r.Page(meta).WriteHTML(w)
}

// Expect is what the report's HTML page must show in a browser (see
// CheckInBrowser).
func (r *Report) Expect() htmlreport.Expect { return r.Page(HTMLMeta{}).Expect() }

// Page returns the report as the shared HTML page's model: a lane per
// refund server, a timeline per scenario.
func (r *Report) Page(meta HTMLMeta) *htmlreport.Page {
	if meta.Generated.IsZero() {
		meta.Generated = time.Now()
	}
	p := &htmlreport.Page{
		Title:            "idemkit demo",
		Lead:             lead(r) + sentence(r.foldedNote()),
		Verdict:          htmlreport.Verdict{Text: "FAIL"},
		Problems:         r.Problems,
		Expected:         true,
		AttributionNote:  "`" + seriesDupCalls + "` as the Collector's Prometheus exporter served it, against what the scenarios must produce." + sentence(r.foldedNote()),
		HarnessThreshold: 2 * time.Second,
		TimelinesTitle:   "Each scenario, call by call",
		TimelinesNote: "The agent's trace per scenario and server: model turns, every tool call the server ran (`issue_refund` coloured by what idemkit did with it; other tools grey), " +
			"and the verdict the Collector wrote on each duplicate.",
		LateSpans: r.LateSpans,
		Footer:    "Collector deployment: " + meta.Deployment + " · written " + meta.Generated.Format("2006-01-02 15:04:05 MST"),
	}
	if meta.WorkDir != "" {
		p.Footer += " · logs and data: " + meta.WorkDir
	}
	if r.OK() {
		p.Verdict = htmlreport.Verdict{Text: "PASS", OK: true}
	}
	laneOf := map[string]string{}
	for _, s := range r.Servers {
		laneOf[s.Target.Service] = s.Target.Name
		p.Lanes = append(p.Lanes, s.Target.Name)
		dbl := s.Writes - s.Intended
		c := htmlreport.Card{
			Lane: s.Target.Name, Label: s.Target.Name + " server · " + s.Target.Service,
			Big: fmt.Sprintf("%d double %s", dbl, plural(dbl, "refund", "refunds")), BigOK: dbl == 0,
			Sub: fmt.Sprintf("%d issue_refund requests · %d refunds written for %d intended · %s", s.Requests, s.Writes, s.Intended, s.Target.Describe()),
		}
		if n := int(sum(s.Stopped)); n > 0 {
			c.Lines = append(c.Lines, fmt.Sprintf("%d %s stopped: %s", n, plural(n, "duplicate", "duplicates"), formatCounts(s.Stopped, []string{sc.EffectSuppressed, sc.EffectBlocked})))
		}
		if len(s.Leaked) > 0 {
			c.Lines = append(c.Lines, "each attributed: "+formatCounts(s.Leaked, causeOrder))
		}
		p.Cards = append(p.Cards, c)
	}
	for _, a := range r.Attribution {
		p.Attribution = append(p.Attribution, htmlreport.AttributionRow{Lane: laneOf[a.Service], Service: a.Service, Cause: a.Cause, Effect: a.Effect, Got: a.Got, Want: a.Want})
	}
	scenarios, byScenario := r.byScenario()
	for _, name := range scenarios {
		runs := byScenario[name]
		t := htmlreport.Timeline{Name: name, Title: runs[0].Run.Title, Pill: "control: no duplicate",
			Table: htmlreport.Table{Header: []string{"server", "calls → refunds", "attributed", "expected"}}}
		if l := runs[0].Run.Layer; l != "" {
			t.Pill = "layer: " + l
			if l != name {
				t.Pill += " (counted as " + l + ")"
			}
		}
		for _, run := range runs {
			for _, pair := range run.Pairs {
				cause, effect, ok := pair.M.Duplicate()
				if !ok {
					cause, effect = pair.Evidence.Cause(2*time.Second), ""
				}
				p.Duplicates = append(p.Duplicates, htmlreport.Duplicate{Lane: run.Run.Target.Name, Cause: cause, Effect: effect, Gap: pair.Evidence.Gap})
			}
			t.Lanes = append(t.Lanes, lane(run))
			row := htmlreport.Row{Key: run.Run.Target.Name, Checked: true, OK: len(run.Problems) == 0,
				Cells: []string{run.Run.Target.Name,
					fmt.Sprintf("%d issue_refund %s → %d %s", len(run.Calls), plural(len(run.Calls), "call", "calls"), run.Writes, plural(run.Writes, "refund", "refunds")),
					dupList(run.Got), dupList(run.Run.Expect.Duplicates)},
				Problems: run.Problems}
			for _, pair := range run.Pairs {
				row.Notes = append(row.Notes, "evidence: "+pair.Evidence.String())
			}
			if len(run.Outcomes) > 0 {
				row.Notes = append(row.Notes, "idemkit outcomes: "+strings.Join(run.Outcomes, ", "))
			}
			t.Table.Rows = append(t.Table.Rows, row)
			if st := story(run); len(st) > 0 {
				t.Stories = append(t.Stories, htmlreport.Story{Summary: "What the agent did (" + run.Run.Target.Name + " server)", Lines: st})
			}
		}
		p.Timelines = append(p.Timelines, t)
	}
	return p
}

// sentence turns a note into a sentence appended to a paragraph: " The
// note…", or "" for none.
func sentence(note string) string {
	if note == "" {
		return ""
	}
	return " " + strings.ToUpper(note[:1]) + note[1:]
}

// lead is the page's opening paragraph: what the agent did, and to which
// servers.
func lead(r *Report) string {
	gateway := false
	for _, s := range r.Servers {
		gateway = gateway || s.Target.Gateway
	}
	var servers []string
	for _, s := range r.Servers {
		switch {
		case s.Target.Gateway:
			servers = append(servers, "to the same server without idemkit, behind `idemkit gateway`")
		case s.Target.Protected:
			servers = append(servers, "to a refund server protected by idemkit")
		case gateway:
			servers = append(servers, "and to that server alone")
		default:
			servers = append(servers, "and to the same server without idemkit")
		}
	}
	return "An agent's refund calls were duplicated by each of the four layers that retry tool calls: a proxy (transport retry), the harness, the model, " +
		"and the MCP client reconnecting. The same calls went " + strings.Join(servers, ", ") +
		"; the OpenTelemetry Collector's `dup` processor named the layer behind every duplicate."
}

// lane is one run's lane of its scenario's timeline.
func lane(run *RunResult) htmlreport.TimelineLane {
	l := htmlreport.TimelineLane{Label: run.Run.Target.Name, Start: run.Run.Started, End: run.Run.Ended}
	for _, s := range run.Tools {
		color, label := htmlreport.ColorOther, s.Str(sc.GenAIToolName)
		if s.Str(sc.GenAIToolName) == "issue_refund" {
			_, effect, _ := s.Duplicate()
			color, label = htmlreport.OutcomeColor(effect, s.Str(sc.Outcome))
		}
		_, _, dup := s.Duplicate()
		l.Calls = append(l.Calls, htmlreport.CallMark{Tool: s.Str(sc.GenAIToolName), Label: label, Color: color, Start: s.Start, End: s.End, Duplicate: dup})
	}
	for _, c := range run.Chats {
		l.Chats = append(l.Chats, htmlreport.Interval{Start: c.Start, End: c.End})
	}
	for _, st := range run.Run.Steps {
		if st.Kind == "reconnect" {
			l.Marks = append(l.Marks, htmlreport.Instant{At: st.At, Label: "new session"})
		}
	}
	return l
}

// story is the agent's record of a run (dupgen's manifest), one line a
// step.
func story(run *RunResult) []htmlreport.StoryLine {
	var out []htmlreport.StoryLine
	for _, st := range run.Run.Steps {
		switch st.Kind {
		case "chat":
			out = append(out, htmlreport.StoryLine{Who: "model", What: st.Says})
		case "call":
			out = append(out, htmlreport.StoryLine{Who: "tools/call", What: callStep(st)})
		default:
			out = append(out, htmlreport.StoryLine{Who: st.Kind, What: st.Says})
		}
	}
	return out
}

func callStep(st agent.Step) string {
	args, _ := json.Marshal(st.Args)
	what := fmt.Sprintf("%s %s", st.Tool, args)
	switch {
	case st.Error != "":
		what += " → error: " + st.Error
	case st.Result != nil && st.Result.Replayed:
		what += " → replayed by idemkit"
	case st.Result != nil && st.Result.IsError:
		what += " → " + oneLine(st.Result.Text, 140)
	case st.Result != nil:
		what += " → ok"
	}
	return what
}

func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}
