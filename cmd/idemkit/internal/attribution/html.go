package attribution

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/idemkit-mcp/idemkit/cmd/idemkit/report"
	sc "github.com/idemkit-mcp/idemkit/spancontract"
)

// MaxTimelines bounds the traces Page draws call by call.
const MaxTimelines = 40

// toolSpan is a tool-call (or inference) span of the released traces, as
// the page needs it.
type toolSpan struct {
	service, tool, outcome string
	cause, effect          string
	dup, chat              bool
	start, end             int64
}

// traceSpans gathers the tool and chat spans of each trace.
func (r *Result) traceSpans() map[string][]toolSpan {
	out := map[string][]toolSpan{}
	for _, td := range r.Traces {
		rss := td.ResourceSpans()
		for i := 0; i < rss.Len(); i++ {
			rs := rss.At(i)
			service := ""
			if v, ok := rs.Resource().Attributes().Get("service.name"); ok {
				service = v.AsString()
			}
			sss := rs.ScopeSpans()
			for j := 0; j < sss.Len(); j++ {
				spans := sss.At(j).Spans()
				for k := 0; k < spans.Len(); k++ {
					s := spans.At(k)
					chat := isChatSpan(s)
					if !chat && !isToolSpan(s) {
						continue
					}
					a := s.Attributes()
					ts := toolSpan{service: service, tool: str(a, sc.GenAIToolName), outcome: str(a, sc.Outcome), chat: chat,
						start: int64(s.StartTimestamp()), end: int64(s.EndTimestamp())}
					if v, ok := a.Get(sc.Duplicate); ok && v.Bool() {
						ts.dup, ts.cause, ts.effect = true, str(a, sc.DuplicateCause), str(a, sc.DuplicateEffect)
					}
					id := traceID(s.TraceID())
					out[id] = append(out[id], ts)
				}
			}
		}
	}
	for _, spans := range out {
		sort.SliceStable(spans, func(i, j int) bool { return spans[i].start < spans[j].start })
	}
	return out
}

func isChatSpan(s ptrace.Span) bool {
	v, ok := s.Attributes().Get(sc.GenAIOperationName)
	return ok && v.Str() == sc.OperationChat
}

// Page returns the result as the HTML report's model (the page the demo
// writes too): a lane per service with duplicates, the attribution by
// cause and effect, every duplicate's gap, and the traces with duplicates
// call by call (at most MaxTimelines). source names the input file.
func (r *Result) Page(source string, generated time.Time) *report.Page {
	leaked := 0
	counts := map[[3]string]int{} // service, cause, effect
	perService := map[string]map[string]int{}
	for _, d := range r.Duplicates {
		counts[[3]string{d.Service, d.Cause, d.Effect}]++
		if perService[d.Service] == nil {
			perService[d.Service] = map[string]int{}
		}
		perService[d.Service][d.Effect]++
		if d.Effect == sc.EffectLeaked {
			leaked++
		}
	}
	p := &report.Page{
		Title: "idemkit attribute",
		Lead: fmt.Sprintf("`idemkit attribute` ran the Collector's `dup` processor offline over %s: %d spans from %d %s, %d tool calls, %d of them duplicates. "+
			"Each duplicate is attributed to the layer that re-sent the call (cause) and what it did (effect).",
			source, r.Spans, r.Services, plural(r.Services, "service", "services"), r.ToolSpans, len(r.Duplicates)),
		Verdict:          report.Verdict{Text: fmt.Sprintf("%d LEAKED", leaked), OK: leaked == 0},
		AttributionNote:  "Counted from the annotations the dup processor wrote on the spans (`idemkit.duplicate.cause`, `idemkit.duplicate.effect`).",
		HarnessThreshold: r.HarnessThreshold,
		TimelinesTitle:   "Each trace with a duplicate, call by call",
		TimelinesNote: "Per trace and service: every tool call (coloured by what the dup processor and idemkit said of it; outlined when it is a duplicate) " +
			"and the model turns (`chat` spans) of the trace.",
		Footer: fmt.Sprintf("idemkit attribute %s · dup processor window %s, harness_threshold %s · written %s",
			source, r.Window, r.HarnessThreshold, generated.Format("2006-01-02 15:04:05 MST")),
	}
	if leaked == 0 {
		p.Verdict.Text = "NO LEAKED DUPLICATE"
	}

	// Lanes: the services with duplicates, most first.
	for s := range perService {
		p.Lanes = append(p.Lanes, s)
	}
	total := func(s string) int {
		n := 0
		for _, v := range perService[s] {
			n += v
		}
		return n
	}
	sort.Slice(p.Lanes, func(i, j int) bool {
		a, b := p.Lanes[i], p.Lanes[j]
		if total(a) != total(b) {
			return total(a) > total(b)
		}
		return a < b
	})
	spans := r.traceSpans()
	toolCalls := map[string]int{}
	for _, ss := range spans {
		for _, s := range ss {
			if !s.chat {
				toolCalls[s.service]++
			}
		}
	}
	for _, s := range p.Lanes {
		e := perService[s]
		c := report.Card{Lane: s, Label: s + " · " + fmt.Sprint(toolCalls[s]) + " tool calls",
			Big: fmt.Sprintf("%d leaked", e[sc.EffectLeaked]), BigOK: e[sc.EffectLeaked] == 0,
			Sub: fmt.Sprintf("%d %s: suppressed %d, blocked %d, leaked %d", total(s), plural(total(s), "duplicate", "duplicates"),
				e[sc.EffectSuppressed], e[sc.EffectBlocked], e[sc.EffectLeaked])}
		var byCause []string
		for _, cause := range causesOf(counts, s) {
			n := counts[[3]string{s, cause, sc.EffectLeaked}]
			if n > 0 {
				byCause = append(byCause, fmt.Sprintf("%s %d", cause, n))
			}
		}
		if len(byCause) > 0 {
			c.Lines = append(c.Lines, "leaked by cause: "+strings.Join(byCause, ", "))
		}
		p.Cards = append(p.Cards, c)
	}
	for k, n := range counts {
		p.Attribution = append(p.Attribution, report.AttributionRow{Lane: k[0], Service: k[0], Cause: k[1], Effect: k[2], Got: n})
	}
	sort.Slice(p.Attribution, func(i, j int) bool {
		a, b := p.Attribution[i], p.Attribution[j]
		if a.Service != b.Service {
			return a.Service < b.Service
		}
		if ca, cb := report.CauseRank(a.Cause), report.CauseRank(b.Cause); ca != cb {
			return ca < cb
		}
		return a.Effect < b.Effect
	})
	for _, d := range r.Duplicates {
		p.Duplicates = append(p.Duplicates, report.Duplicate{Lane: d.Service, Cause: d.Cause, Effect: d.Effect, Gap: time.Duration(d.GapMS) * time.Millisecond})
	}

	// Timelines: the traces with duplicates, in the order of their first
	// duplicate.
	var traces []string
	seen := map[string]bool{}
	for _, d := range r.Duplicates {
		if d.TraceID != "" && !seen[d.TraceID] {
			seen[d.TraceID] = true
			traces = append(traces, d.TraceID)
		}
	}
	if len(traces) > MaxTimelines {
		p.MoreTimelines = fmt.Sprintf("%d more traces with duplicates are not drawn; --format json lists every duplicate, --spans-out writes every annotated span.", len(traces)-MaxTimelines)
		traces = traces[:MaxTimelines]
	}
	for _, id := range traces {
		p.Timelines = append(p.Timelines, timelineOf(id, spans[id]))
	}
	return p
}

// timelineOf draws one trace: a lane per service with tool calls, the
// trace's model turns on each.
func timelineOf(id string, spans []toolSpan) report.Timeline {
	t := report.Timeline{Name: id, Table: report.Table{Header: []string{"service", "tool calls", "duplicates"}}}
	if len(spans) == 0 {
		return t
	}
	start := time.Unix(0, spans[0].start)
	var chats []report.Interval
	var services []string
	lanes := map[string]*report.TimelineLane{}
	dups := map[string][]string{}
	tools := map[string]bool{}
	for _, s := range spans {
		if s.chat {
			chats = append(chats, report.Interval{Start: s.start, End: s.end})
			continue
		}
		l := lanes[s.service]
		if l == nil {
			l = &report.TimelineLane{Label: s.service, Start: start, End: start}
			lanes[s.service] = l
			services = append(services, s.service)
		}
		color, label := report.OutcomeColor(s.effect, s.outcome)
		l.Calls = append(l.Calls, report.CallMark{Tool: s.tool, Label: label, Color: color, Start: s.start, End: s.end, Duplicate: s.dup})
		tools[s.tool] = true
		if s.dup {
			dups[s.service] = append(dups[s.service], fmt.Sprintf("%s %s/%s", s.tool, s.cause, s.effect))
		}
	}
	var toolNames []string
	for n := range tools {
		toolNames = append(toolNames, n)
	}
	sort.Strings(toolNames)
	t.Title = "trace " + id + " · tools: " + strings.Join(toolNames, ", ")
	for _, svc := range services {
		l := lanes[svc]
		l.Chats = chats
		t.Lanes = append(t.Lanes, *l)
		t.Table.Rows = append(t.Table.Rows, report.Row{Key: svc, Cells: []string{svc, fmt.Sprint(len(l.Calls)), dash(strings.Join(dups[svc], ", "))}})
	}
	for _, d := range dupCauses(spans) {
		if t.Pill == "" {
			t.Pill = d
		} else {
			t.Pill += ", " + d
		}
	}
	return t
}

// dupCauses lists the distinct causes of a trace's duplicates, in cause
// order.
func dupCauses(spans []toolSpan) []string {
	set := map[string]bool{}
	for _, s := range spans {
		if s.dup {
			set[s.cause] = true
		}
	}
	var out []string
	for c := range set {
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool {
		return report.CauseRank(out[i]) < report.CauseRank(out[j]) || (report.CauseRank(out[i]) == report.CauseRank(out[j]) && out[i] < out[j])
	})
	return out
}

func causesOf(counts map[[3]string]int, service string) []string {
	set := map[string]bool{}
	for k := range counts {
		if k[0] == service {
			set[k[1]] = true
		}
	}
	var out []string
	for c := range set {
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool {
		return report.CauseRank(out[i]) < report.CauseRank(out[j]) || (report.CauseRank(out[i]) == report.CauseRank(out[j]) && out[i] < out[j])
	})
	return out
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
