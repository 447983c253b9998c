// Package report renders idemkit's duplicate report as one self-contained
// HTML page: the demo's report (examples/demo) and `idemkit attribute
// --html` (cmd/idemkit) fill the same Page, each from its own evidence.
//
// The page shows, per lane (a server or a service), the duplicates the dup
// processor attributed by cause and effect, the gap from each call to its
// duplicate, and, per trace or scenario, a timeline of the tool calls and
// model turns. Charts are inline SVG; nothing is fetched when the page is
// viewed. Every chart mark carries data-* attributes (its series and value)
// so that a browser test can check what was drawn against Page.Expect.
//
// It depends on the standard library and the span contract only. It lives
// with the command, its first user; the demo's module requires the
// command's module for it. It is the command's own code, not an API: it
// may change in any release.
package report

import (
	"time"

	sc "github.com/idemkit-mcp/idemkit/spancontract"
)

// Page is one report.
type Page struct {
	// Title heads the page ("idemkit demo").
	Title string
	// Lead is the paragraph under the title. Text in backquotes is set as
	// code.
	Lead string
	// Verdict is the badge beside the title.
	Verdict Verdict
	// Cards are the summary cards, one per lane.
	Cards []Card
	// Problems are listed in a card of their own when there are any.
	Problems []string

	// Lanes are the servers or services the charts compare, in order.
	Lanes []string
	// Attribution counts the attributed duplicates by lane, cause and
	// effect.
	Attribution []AttributionRow
	// Expected says whether the Attribution rows carry expectations (Want)
	// to compare with.
	Expected bool
	// AttributionNote says where the Attribution counts come from.
	AttributionNote string
	// Duplicates are every duplicate, for the gap chart.
	Duplicates []Duplicate
	// HarnessThreshold is the dup processor's harness_threshold, marked on
	// the gap chart. Defaults to 2s.
	HarnessThreshold time.Duration

	// TimelinesTitle and TimelinesNote head the timelines.
	TimelinesTitle, TimelinesNote string
	// Timelines show one scenario or trace each.
	Timelines []Timeline
	// MoreTimelines says what was left out of Timelines, or "".
	MoreTimelines string

	// LateSpans is the dup processor's count of spans that arrived after a
	// decision they would have changed.
	LateSpans int
	// Footer closes the page.
	Footer string
}

// Verdict is the page's badge: green when OK, red otherwise.
type Verdict struct {
	Text string
	OK   bool
}

// Card summarises one lane.
type Card struct {
	// Lane is the lane it describes (data-lane).
	Lane string
	// Label is the small heading; Big the headline figure, in green when
	// BigOK and red otherwise; Sub the line under it; Lines more lines.
	Label, Big, Sub string
	BigOK           bool
	Lines           []string
}

// AttributionRow counts the duplicates of one lane, cause and effect.
type AttributionRow struct {
	Lane, Service, Cause, Effect string
	// Got is the count; Want the expectation, when Page.Expected.
	Got, Want int
}

// Duplicate is one duplicate call: its lane, the cause and effect the dup
// processor attributed ("" effect: none), and the gap from the call before
// it in its group.
type Duplicate struct {
	Lane, Cause, Effect string
	Gap                 time.Duration
}

// Timeline is one scenario or trace: a lane per server or service, on a
// shared time axis from each lane's start.
type Timeline struct {
	// Name identifies it (data-scenario, and the first half of each call
	// mark's data-run); Pill, Title and Heading describe it.
	Name, Pill, Title string
	// Lanes are drawn top to bottom.
	Lanes []TimelineLane
	// Table lists what each lane did.
	Table Table
	// Stories are collapsible step-by-step accounts.
	Stories []Story
}

// TimelineLane is one lane of a timeline.
type TimelineLane struct {
	// Label names the lane: its call marks' data-run is
	// Timeline.Name/Label.
	Label string
	// Start is the lane's time origin; End at least its last event.
	Start, End time.Time
	// Calls are the tool calls; Chats the model turns; Marks instants
	// worth a dashed line (a new session), with their label.
	Calls []CallMark
	Chats []Interval
	Marks []Instant
}

// CallMark is one tool call in a timeline.
type CallMark struct {
	Tool string
	// Label says what happened to it (data-outcome); Color is its fill.
	Label, Color string
	// Start and End are Unix nanoseconds.
	Start, End int64
	// Duplicate outlines the mark: the dup processor flagged the call.
	Duplicate bool
}

// Interval is a span of time in Unix nanoseconds.
type Interval struct{ Start, End int64 }

// Instant is a labelled moment.
type Instant struct {
	At    time.Time
	Label string
}

// Table is a small table under a timeline.
type Table struct {
	Header []string
	Rows   []Row
}

// Row is one row of a Table, marked ✓ or ✗ when it has a check.
type Row struct {
	// Key identifies the row (data-run).
	Key string
	// Checked rows get a mark: ✓ when OK, ✗ otherwise.
	Checked, OK bool
	Cells       []string
	// Notes and Problems go in a row of their own under it.
	Notes, Problems []string
}

// Story is a collapsible list of steps.
type Story struct {
	Summary string
	Lines   []StoryLine
}

// StoryLine is one step: who did what.
type StoryLine struct{ Who, What string }

// Colours of the report, one per effect or kind of mark; the browser test
// looks for them in the screenshot.
var (
	EffectColors = map[string]string{
		sc.EffectSuppressed: "#16a34a",
		sc.EffectBlocked:    "#f59e0b",
		sc.EffectLeaked:     "#dc2626",
	}
	ColorExecuted = "#2563eb"
	ColorChat     = "#a78bfa"
	ColorOther    = "#cbd5e1"
	ColorMismatch = "#64748b"
	ColorBypassed = "#94a3b8"
)

// OutcomeColor returns the colour and label of a tool call in a timeline
// from what the dup processor and idemkit said about it: a duplicate by
// its effect, otherwise by its idemkit.outcome.
func OutcomeColor(effect, outcome string) (color, label string) {
	if c, ok := EffectColors[effect]; ok {
		return c, effect
	}
	switch outcome {
	case sc.OutcomeReplayed:
		return EffectColors[sc.EffectSuppressed], "replayed"
	case sc.OutcomeInProgress:
		return EffectColors[sc.EffectBlocked], "in progress"
	case sc.OutcomeMismatch:
		return ColorMismatch, "mismatch"
	case sc.OutcomeBypassed:
		return ColorBypassed, "bypassed"
	}
	return ColorExecuted, "executed"
}

// Causes are the dup processor's causes in the order the page shows them.
var Causes = []string{sc.CauseTransportRetry, sc.CauseHarnessRetry, sc.CauseModelReissue, sc.CauseReconnectReplay, sc.CauseUnknown}

// Effects are the dup processor's effects in the order the page stacks
// them.
var Effects = []string{sc.EffectSuppressed, sc.EffectBlocked, sc.EffectLeaked}

// CauseRank orders causes as Causes does, unknown names last.
func CauseRank(c string) int {
	for i, x := range Causes {
		if x == c {
			return i
		}
	}
	return len(Causes)
}

// Expect is what a browser must show of a page: the badge's text, the
// value of each bar (by "lane/cause/effect"), the number of gap dots per
// cause (by "gap/cause"), the number of timelines, and the call marks of
// each timeline lane (by "timeline/lane").
type Expect struct {
	Result    string
	Bars      map[string]int
	Dots      map[string]int
	Timelines int
	Calls     map[string]int
}

// Expect returns what the page must show.
func (p *Page) Expect() Expect {
	e := Expect{Result: p.Verdict.Text, Bars: map[string]int{}, Dots: map[string]int{}, Calls: map[string]int{}, Timelines: len(p.Timelines)}
	lanes := map[string]bool{}
	for _, l := range p.Lanes {
		lanes[l] = true
	}
	for _, a := range p.Attribution {
		if a.Got > 0 && lanes[a.Lane] {
			e.Bars[a.Lane+"/"+a.Cause+"/"+a.Effect] += a.Got
		}
	}
	for _, d := range p.Duplicates {
		e.Dots["gap/"+d.Cause]++
	}
	for _, t := range p.Timelines {
		for _, l := range t.Lanes {
			e.Calls[t.Name+"/"+l.Label] += len(l.Calls)
		}
	}
	return e
}
