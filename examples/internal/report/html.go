package report

import (
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"math"
	"sort"
	"strings"
	"time"

	sc "github.com/idemkit/idemkit/spancontract"
)

// HTMLMeta describes the run in the HTML report's header.
type HTMLMeta struct {
	// Deployment names the Collector deployment the run went through.
	Deployment string
	// Generated is when the report was written.
	Generated time.Time
	// WorkDir is where the run's logs and data are.
	WorkDir string
}

// Colors of the report, one per effect or kind of mark; the browser test
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
)

// WriteHTML writes the report as one self-contained HTML page: nothing is
// fetched when it is viewed, the charts are inline SVG. Every chart mark
// carries data-* attributes (its series and value) for the browser test.
func (r *Report) WriteHTML(w io.Writer, meta HTMLMeta) error {
	if meta.Generated.IsZero() {
		meta.Generated = time.Now()
	}
	scenarios, byScenario := r.byScenario()
	type runView struct {
		Target, Mark, Counts, Got, Want, Outcomes string
		OK                                        bool
		Evidence, Problems                        []string
		Story                                     []storyLine
	}
	type scenarioView struct {
		N                      int
		Name, Layer, Title, ID string
		Timeline               template.HTML
		Runs                   []runView
	}
	var sv []scenarioView
	for i, name := range scenarios {
		runs := byScenario[name]
		v := scenarioView{N: i + 1, Name: name, Title: runs[0].Run.Title, ID: "scenario-" + name, Timeline: timeline(name, runs)}
		v.Layer = "control: no duplicate"
		if l := runs[0].Run.Layer; l != "" {
			v.Layer = "layer: " + l
		}
		for _, run := range runs {
			rv := runView{Target: run.Run.Target.Name, OK: len(run.Problems) == 0, Mark: "✓",
				Counts: fmt.Sprintf("%d issue_refund %s → %d %s", len(run.Calls), plural(len(run.Calls), "call", "calls"),
					run.Writes, plural(run.Writes, "refund", "refunds")),
				Got: dupList(run.Got), Want: dupList(run.Run.Expect.Duplicates), Outcomes: strings.Join(run.Outcomes, ", "),
				Problems: run.Problems}
			if !rv.OK {
				rv.Mark = "✗"
			}
			for _, p := range run.Pairs {
				rv.Evidence = append(rv.Evidence, p.Evidence.String())
			}
			rv.Story = story(run)
			v.Runs = append(v.Runs, rv)
		}
		sv = append(sv, v)
	}
	type serverView struct {
		Name, Service, Stopped, Leaked  string
		Protected                       bool
		Requests, Writes, Intended, Dbl int
	}
	var servers []serverView
	for _, s := range r.Servers {
		v := serverView{Name: s.Target.Name, Service: s.Target.Service, Protected: s.Target.Protected,
			Requests: s.Requests, Writes: s.Writes, Intended: s.Intended, Dbl: s.Writes - s.Intended}
		if n := int(sum(s.Stopped)); n > 0 {
			v.Stopped = fmt.Sprintf("%d %s stopped: %s", n, plural(n, "duplicate", "duplicates"), formatCounts(s.Stopped, []string{sc.EffectSuppressed, sc.EffectBlocked}))
		}
		if len(s.Leaked) > 0 {
			v.Leaked = "each attributed: " + formatCounts(s.Leaked, causeOrder)
		}
		servers = append(servers, v)
	}
	data := map[string]any{
		"Meta": meta, "OK": r.OK(), "Problems": r.Problems, "Servers": servers, "Scenarios": sv,
		"Attribution": r.Attribution, "LateSpans": r.LateSpans,
		"ByLayer": byLayerChart(r), "Gaps": gapChart(r), "Legend": legend(),
		"Generated": meta.Generated.Format("2006-01-02 15:04:05 MST"),
		"Colors": map[string]string{
			"executed": ColorExecuted, "suppressed": EffectColors[sc.EffectSuppressed], "blocked": EffectColors[sc.EffectBlocked],
			"leaked": EffectColors[sc.EffectLeaked], "mismatch": ColorMismatch, "chat": ColorChat, "other": ColorOther,
		},
	}
	return pageTemplate.Execute(w, data)
}

var pageTemplate = template.Must(template.New("report").Parse(`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>idemkit demo report</title>
<style>
:root { --ink:#0f172a; --muted:#64748b; --line:#e2e8f0; --bg:#f8fafc; --ok:#16a34a; --bad:#dc2626; }
* { box-sizing: border-box; }
body { margin:0; background:var(--bg); color:var(--ink); font:15px/1.5 system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif; }
main { max-width:1120px; margin:0 auto; padding:32px 24px 64px; }
h1 { font-size:28px; margin:0 0 4px; letter-spacing:-0.01em; }
h2 { font-size:19px; margin:40px 0 4px; }
h3 { font-size:16px; margin:0; }
p.lead { color:var(--muted); margin:0 0 20px; max-width:760px; }
p.note, .sub { color:var(--muted); font-size:13.5px; margin:2px 0 12px; }
.badge { display:inline-block; font-weight:700; font-size:13px; letter-spacing:.06em; padding:4px 12px; border-radius:999px; color:#fff; vertical-align:middle; }
.badge.ok { background:var(--ok); } .badge.bad { background:var(--bad); }
.cards { display:grid; grid-template-columns:repeat(auto-fit,minmax(300px,1fr)); gap:16px; margin:20px 0 8px; }
.card { background:#fff; border:1px solid var(--line); border-radius:12px; padding:18px 20px; box-shadow:0 1px 2px rgba(15,23,42,.04); }
.card .big { font-size:34px; font-weight:700; line-height:1.1; }
.card .big.bad { color:var(--bad); } .card .big.ok { color:var(--ok); }
.card .label { color:var(--muted); font-size:13px; text-transform:uppercase; letter-spacing:.05em; }
.figure { background:#fff; border:1px solid var(--line); border-radius:12px; padding:16px 20px 12px; margin-top:12px; }
.figure svg { display:block; width:100%; height:auto; }
.legend { display:flex; flex-wrap:wrap; gap:16px; font-size:13px; color:var(--muted); margin:4px 0 8px; }
.legend span.sw { display:inline-block; width:12px; height:12px; border-radius:3px; margin-right:6px; vertical-align:-1px; }
table { border-collapse:collapse; width:100%; font-size:14px; }
th { text-align:left; color:var(--muted); font-weight:600; font-size:12.5px; text-transform:uppercase; letter-spacing:.04em; border-bottom:1px solid var(--line); padding:6px 8px; }
td { border-bottom:1px solid var(--line); padding:6px 8px; vertical-align:top; }
td.num, th.num { text-align:right; font-variant-numeric:tabular-nums; }
details { margin-top:8px; font-size:13px; color:#334155; }
details summary { cursor:pointer; color:var(--muted); }
details ol { margin:6px 0 0; padding-left:22px; }
details li { margin:2px 0; }
details .who { display:inline-block; min-width:84px; color:var(--muted); }
.mark-ok { color:var(--ok); font-weight:700; } .mark-bad { color:var(--bad); font-weight:700; }
.scenario { background:#fff; border:1px solid var(--line); border-radius:12px; padding:16px 20px; margin-top:14px; }
.scenario .head { display:flex; justify-content:space-between; align-items:baseline; gap:12px; flex-wrap:wrap; }
.pill { font-size:12px; color:#334155; background:#f1f5f9; border-radius:999px; padding:2px 10px; }
.evidence { color:var(--muted); font-size:12.5px; }
.problem { color:var(--bad); font-size:13px; }
code { font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace; font-size:12.5px; background:#f1f5f9; padding:1px 5px; border-radius:4px; }
footer { color:var(--muted); font-size:12.5px; margin-top:40px; }
</style>
</head>
<body>
<main>
<h1>idemkit demo <span class="badge {{if .OK}}ok{{else}}bad{{end}}" id="result">{{if .OK}}PASS{{else}}FAIL{{end}}</span></h1>
<p class="lead">An agent's refund calls were duplicated by each of the four layers that retry tool calls: a proxy (transport retry), the harness, the model, and the MCP client reconnecting. The same calls went to a refund server protected by idemkit and to one without it; the OpenTelemetry Collector's <code>dup</code> processor named the layer behind every duplicate.</p>

<div class="cards">
{{range .Servers}}<div class="card" data-server="{{.Name}}">
  <div class="label">{{.Name}} server · {{.Service}}</div>
  {{if .Dbl}}<div class="big bad">{{.Dbl}} double refunds</div>{{else}}<div class="big ok">0 double refunds</div>{{end}}
  <div class="sub">{{.Requests}} issue_refund requests · {{.Writes}} refunds written for {{.Intended}} intended{{if .Protected}} · protected by idemkit{{else}} · no idemkit{{end}}</div>
  {{if .Stopped}}<div>{{.Stopped}}</div>{{end}}{{if .Leaked}}<div>{{.Leaked}}</div>{{end}}
</div>
{{end}}</div>
{{if .Problems}}<div class="card"><h3 class="problem">Problems</h3><ul>{{range .Problems}}<li class="problem">{{.}}</li>{{end}}</ul></div>{{end}}

<h2>Duplicates by layer and effect</h2>
<p class="note">Every duplicate the Collector attributed (<code>idemkit_duplicate_calls_total</code>), by the layer that produced it and what it did. idemkit answers a duplicate with the stored result (suppressed) or tells the caller the first call is still running (blocked); without idemkit the refund runs again (leaked).</p>
<div class="figure" id="chart-by-layer">{{.Legend}}{{.ByLayer}}</div>

<h2>How long after the first call duplicates arrive</h2>
<p class="note">The gap from a call to its duplicate, per cause, on a log scale. Retries below the network and the harness come within milliseconds; a model re-issues after it has thought. The dup processor's <code>harness_threshold</code> separates a harness retry from a model re-issue when no model turn is seen between the calls; its <code>window</code> and the Guard's key retention must exceed the slowest cause you want caught.</p>
<div class="figure" id="chart-gaps">{{.Gaps}}</div>

<h2>Each scenario, call by call</h2>
<p class="note">The agent's trace per scenario and server: model turns, every tool call the server ran (<code>issue_refund</code> coloured by what idemkit did with it; other tools grey), and the verdict the Collector wrote on each duplicate.</p>
<div class="legend"><span><span class="sw" style="background:{{index .Colors "executed"}}"></span>executed</span><span><span class="sw" style="background:{{index .Colors "suppressed"}}"></span>replayed (suppressed)</span><span><span class="sw" style="background:{{index .Colors "blocked"}}"></span>in progress (blocked)</span><span><span class="sw" style="background:{{index .Colors "leaked"}}"></span>ran again (leaked)</span><span><span class="sw" style="background:{{index .Colors "mismatch"}}"></span>key mismatch</span><span><span class="sw" style="background:{{index .Colors "chat"}}"></span>model turn</span><span><span class="sw" style="background:{{index .Colors "other"}}"></span>other tool</span></div>
{{range .Scenarios}}<section class="scenario" id="{{.ID}}">
  <div class="head"><h3>{{.N}}. {{.Name}}</h3><span class="pill">{{.Layer}}</span></div>
  <div class="sub">{{.Title}}</div>
  {{.Timeline}}
  <table><tr><th></th><th>server</th><th>calls → refunds</th><th>attributed</th><th>expected</th></tr>
  {{range .Runs}}<tr data-run="{{.Target}}"><td class="{{if .OK}}mark-ok{{else}}mark-bad{{end}}">{{.Mark}}</td><td>{{.Target}}</td><td>{{.Counts}}</td><td>{{.Got}}</td><td>{{.Want}}</td></tr>
  {{if or .Evidence .Outcomes .Problems}}<tr><td></td><td colspan="4">{{range .Evidence}}<div class="evidence">evidence: {{.}}</div>{{end}}{{if .Outcomes}}<div class="evidence">idemkit outcomes: {{.Outcomes}}</div>{{end}}{{range .Problems}}<div class="problem">{{.}}</div>{{end}}</td></tr>{{end}}
  {{end}}</table>
  {{range .Runs}}{{if .Story}}<details><summary>What the agent did ({{.Target}} server)</summary><ol>{{range .Story}}<li><span class="who">{{.Who}}</span>{{.What}}</li>{{end}}</ol></details>{{end}}{{end}}
</section>
{{end}}

<h2>Attribution metrics</h2>
<p class="note"><code>idemkit_duplicate_calls_total</code> as the Collector's Prometheus exporter served it, against what the scenarios must produce.</p>
<div class="figure"><table id="attribution"><tr><th></th><th>service_name</th><th>cause</th><th>effect</th><th class="num">calls</th><th class="num">expected</th></tr>
{{range .Attribution}}<tr><td class="{{if eq .Got .Want}}mark-ok{{else}}mark-bad{{end}}">{{if eq .Got .Want}}✓{{else}}✗{{end}}</td><td>{{.Service}}</td><td>{{.Cause}}</td><td>{{.Effect}}</td><td class="num">{{.Got}}</td><td class="num">{{.Want}}</td></tr>
{{end}}</table></div>
{{if .LateSpans}}<p class="note">The dup processor counted {{.LateSpans}} late spans: spans that arrived after a decision they would have changed.</p>{{end}}

<footer>Collector deployment: {{.Meta.Deployment}} · written {{.Generated}}{{if .Meta.WorkDir}} · logs and data: <code>{{.Meta.WorkDir}}</code>{{end}}</footer>
</main>
</body>
</html>
`))

// legend is the effect legend of the layer chart.
func legend() template.HTML {
	var b strings.Builder
	b.WriteString(`<div class="legend">`)
	for _, e := range []string{sc.EffectSuppressed, sc.EffectBlocked, sc.EffectLeaked} {
		fmt.Fprintf(&b, `<span><span class="sw" style="background:%s"></span>%s</span>`, EffectColors[e], e)
	}
	b.WriteString(`</div>`)
	return template.HTML(b.String())
}

func esc(s string) string { return template.HTMLEscapeString(s) }

// byLayerChart draws, per cause, one bar for each server stacked by
// effect, from the attribution metrics.
func byLayerChart(r *Report) template.HTML {
	targetOf := map[string]string{}
	var targets []string
	for _, s := range r.Servers {
		targetOf[s.Target.Service] = s.Target.Name
		targets = append(targets, s.Target.Name)
	}
	count := map[[3]string]int{} // target, cause, effect
	causes := map[string]bool{}
	for _, a := range r.Attribution {
		t := targetOf[a.Service]
		if t == "" || a.Got == 0 {
			continue
		}
		count[[3]string{t, a.Cause, a.Effect}] += a.Got
		causes[a.Cause] = true
	}
	var rows []string
	for _, c := range causeOrder {
		if causes[c] || c != sc.CauseUnknown {
			rows = append(rows, c)
		}
	}
	for c := range causes {
		if causeRank(c) == len(causeOrder) {
			rows = append(rows, c)
		}
	}
	effects := []string{sc.EffectSuppressed, sc.EffectBlocked, sc.EffectLeaked}
	maxTotal := 1
	for _, c := range rows {
		for _, t := range targets {
			n := 0
			for _, e := range effects {
				n += count[[3]string{t, c, e}]
			}
			maxTotal = max(maxTotal, n)
		}
	}
	const (
		width, left, right, barH, gap, groupGap, top = 760.0, 250.0, 40.0, 20.0, 6.0, 18.0, 8.0
	)
	groupH := float64(len(targets))*(barH+gap) - gap
	height := top + float64(len(rows))*(groupH+groupGap) + 24
	scale := (width - left - right) / float64(maxTotal)
	var b strings.Builder
	fmt.Fprintf(&b, `<svg viewBox="0 0 %g %g" role="img" aria-label="Duplicates by layer and effect" data-chart="by-layer">`, width, height)
	// Grid.
	for v := 0; v <= maxTotal; v++ {
		x := left + float64(v)*scale
		fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%g" y2="%g" stroke="#e2e8f0"/>`, x, x, top-4, height-20)
		fmt.Fprintf(&b, `<text x="%.1f" y="%g" font-size="11" fill="#64748b" text-anchor="middle">%d</text>`, x, height-6, v)
	}
	y := top
	for _, c := range rows {
		fmt.Fprintf(&b, `<text x="0" y="%.1f" font-size="14" font-weight="600" fill="#0f172a">%s</text>`, y+groupH/2+5, esc(c))
		for _, t := range targets {
			fmt.Fprintf(&b, `<text x="%g" y="%.1f" font-size="12" fill="#64748b" text-anchor="end">%s</text>`, left-10, y+barH/2+4, esc(t))
			x := left
			total := 0
			for _, e := range effects {
				n := count[[3]string{t, c, e}]
				if n == 0 {
					continue
				}
				w := float64(n) * scale
				fmt.Fprintf(&b, `<rect class="bar" data-series="%s/%s/%s" data-value="%d" x="%.1f" y="%.1f" width="%.1f" height="%g" rx="3" fill="%s"><title>%s server, %s: %d %s</title></rect>`,
					esc(t), esc(c), esc(e), n, x, y, w-1, barH, EffectColors[e], esc(t), esc(c), n, esc(e))
				if w > 90 {
					fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-size="11.5" fill="#fff" font-weight="600">%d %s</text>`, x+8, y+barH/2+4, n, esc(e))
				}
				x += w
				total += n
			}
			if total == 0 {
				fmt.Fprintf(&b, `<text x="%g" y="%.1f" font-size="12" fill="#94a3b8">none</text>`, left+6, y+barH/2+4)
			}
			y += barH + gap
		}
		y += groupGap - gap
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

// gapChart draws every duplicate's gap on a log axis, one row per cause,
// coloured by effect, with the harness threshold marked.
func gapChart(r *Report) template.HTML {
	type dot struct {
		target, effect string
		gap            time.Duration
	}
	byCause := map[string][]dot{}
	lo, hi := 10*time.Millisecond, 10*time.Second
	threshold := 2 * time.Second
	for _, run := range r.Runs {
		for _, p := range run.Pairs {
			cause, effect, ok := p.M.Duplicate()
			if !ok {
				cause, effect = p.Evidence.Cause(threshold), "unattributed"
			}
			g := max(p.Evidence.Gap, time.Millisecond)
			byCause[cause] = append(byCause[cause], dot{run.Run.Target.Name, effect, g})
			lo, hi = min(lo, g/2), max(hi, g*2)
		}
	}
	var rows []string
	for _, c := range causeOrder {
		if len(byCause[c]) > 0 || c != sc.CauseUnknown {
			rows = append(rows, c)
		}
	}
	const width, left, right, rowH, top = 760.0, 170.0, 30.0, 56.0, 26.0
	height := top + float64(len(rows))*rowH + 30
	lmin, lmax := math.Log10(float64(lo)), math.Log10(float64(hi))
	x := func(d time.Duration) float64 {
		return left + (math.Log10(float64(d))-lmin)/(lmax-lmin)*(width-left-right)
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg viewBox="0 0 %g %g" role="img" aria-label="Gap between a call and its duplicate, per cause" data-chart="gaps">`, width, height)
	for _, t := range []struct {
		d    time.Duration
		name string
	}{{time.Millisecond, "1 ms"}, {10 * time.Millisecond, "10 ms"}, {100 * time.Millisecond, "100 ms"}, {time.Second, "1 s"}, {10 * time.Second, "10 s"}, {time.Minute, "1 min"}, {10 * time.Minute, "10 min"}} {
		if t.d < lo || t.d > hi {
			continue
		}
		fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%g" y2="%g" stroke="#e2e8f0"/><text x="%.1f" y="%g" font-size="11" fill="#64748b" text-anchor="middle">%s</text>`,
			x(t.d), x(t.d), top-6, height-24, x(t.d), height-8, t.name)
	}
	tx := x(threshold)
	fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%g" y2="%g" stroke="#475569" stroke-dasharray="4 4"/><text x="%.1f" y="%g" font-size="11" fill="#475569" text-anchor="middle">harness_threshold 2 s</text>`,
		tx, tx, top-6, height-24, tx, top-12)
	for i, c := range rows {
		cy := top + float64(i)*rowH + rowH/2
		fmt.Fprintf(&b, `<line x1="%g" x2="%g" y1="%.1f" y2="%.1f" stroke="#f1f5f9" stroke-width="14" stroke-linecap="round"/>`, left, width-right, cy, cy)
		fmt.Fprintf(&b, `<text x="0" y="%.1f" font-size="14" font-weight="600" fill="#0f172a">%s</text>`, cy+5, esc(c))
		dots := byCause[c]
		sort.Slice(dots, func(i, j int) bool { return dots[i].gap < dots[j].gap })
		for _, d := range dots {
			color := EffectColors[d.effect]
			if color == "" {
				color = "#94a3b8"
			}
			// The protected server's duplicates above the line, the
			// unprotected one's below: close gaps do not hide each other.
			dy, ly := -7.0, cy-17
			if d.target != "protected" {
				dy, ly = 7, cy+27
			}
			fmt.Fprintf(&b, `<circle class="dot" data-series="gap/%s" data-target="%s" data-ms="%d" cx="%.1f" cy="%.1f" r="6" fill="%s" stroke="#fff" stroke-width="1.5"><title>%s server: %s after the first call (%s)</title></circle>`,
				esc(c), esc(d.target), d.gap.Milliseconds(), x(d.gap), cy+dy, color, esc(d.target), fmtGap(d.gap), esc(d.effect))
			fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-size="11" fill="#334155" text-anchor="middle" stroke="#fff" stroke-width="3" paint-order="stroke">%s</text>`, x(d.gap), ly, fmtGap(d.gap))
		}
		if len(dots) == 0 {
			fmt.Fprintf(&b, `<text x="%g" y="%.1f" font-size="12" fill="#94a3b8">no duplicate</text>`, left+8, cy+4)
		}
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

func fmtGap(d time.Duration) string {
	if d < time.Second {
		return fmt.Sprintf("%d ms", d.Milliseconds())
	}
	return fmt.Sprintf("%.1f s", d.Seconds())
}

// callColor is the colour of a tool span in the timeline.
func callColor(s *Span) (color, label string) {
	if s.Str(sc.GenAIToolName) != "issue_refund" {
		return ColorOther, s.Str(sc.GenAIToolName)
	}
	if _, effect, ok := s.Duplicate(); ok {
		return EffectColors[effect], effect
	}
	switch s.Str(sc.Outcome) {
	case sc.OutcomeReplayed:
		return EffectColors[sc.EffectSuppressed], "replayed"
	case sc.OutcomeInProgress:
		return EffectColors[sc.EffectBlocked], "in progress"
	case sc.OutcomeMismatch:
		return ColorMismatch, "mismatch"
	}
	return ColorExecuted, "executed"
}

// timeline draws one scenario's runs, one lane per server, on a shared
// time axis from each run's start.
func timeline(scenario string, runs []*RunResult) template.HTML {
	var span time.Duration
	for _, run := range runs {
		start := run.Run.Started.UnixNano()
		end := run.Run.Ended.UnixNano()
		for _, s := range append(append([]*Span{}, run.Tools...), run.Chats...) {
			end = max(end, s.End)
		}
		span = max(span, time.Duration(end-start))
	}
	span = max(span, 100*time.Millisecond)
	const width, left, right, laneH, top = 760.0, 110.0, 20.0, 52.0, 8.0
	height := top + float64(len(runs))*laneH + 26
	x := func(run *RunResult, ns int64) float64 {
		return left + float64(ns-run.Run.Started.UnixNano())/float64(span)*(width-left-right)
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg viewBox="0 0 %g %g" role="img" aria-label="Timeline of %s" data-chart="timeline" data-scenario="%s">`, width, height, esc(scenario), esc(scenario))
	step := niceStep(span)
	for t := time.Duration(0); t <= span; t += step {
		px := left + float64(t)/float64(span)*(width-left-right)
		fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%g" y2="%g" stroke="#eef2f7"/><text x="%.1f" y="%g" font-size="10.5" fill="#64748b" text-anchor="middle">%s</text>`,
			px, px, top, height-20, px, height-6, fmtTick(t))
	}
	for i, run := range runs {
		y := top + float64(i)*laneH
		fmt.Fprintf(&b, `<text x="0" y="%.1f" font-size="12.5" fill="#334155">%s</text>`, y+laneH/2+4, esc(run.Run.Target.Name))
		fmt.Fprintf(&b, `<rect x="%g" y="%.1f" width="%g" height="%g" rx="4" fill="#f8fafc"/>`, left, y+6, width-left-right, laneH-12)
		for _, c := range run.Chats {
			x0, x1 := x(run, c.Start), x(run, c.End)
			fmt.Fprintf(&b, `<rect class="chat" data-run="%s/%s" x="%.1f" y="%.1f" width="%.1f" height="%g" rx="3" fill="%s" opacity="0.55"><title>model turn, %s</title></rect>`,
				esc(scenario), esc(run.Run.Target.Name), x0, y+10, math.Max(x1-x0, 2), laneH-20, ColorChat, fmtGap(time.Duration(c.End-c.Start)))
			if x1-x0 > 90 {
				fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-size="10.5" fill="#5b21b6">model %s</text>`, x0+6, y+laneH/2+4, fmtGap(time.Duration(c.End-c.Start)))
			}
		}
		// Calls that overlap in time (a retry while the first call still
		// runs) go on separate tracks.
		var trackEnd []float64
		track := make([]int, len(run.Tools))
		for j, s := range run.Tools {
			x0 := x(run, s.Start)
			k := 0
			for k < len(trackEnd) && x0 < trackEnd[k]+2 {
				k++
			}
			if k == len(trackEnd) {
				trackEnd = append(trackEnd, 0)
			}
			trackEnd[k] = max(x(run, s.End), x0+4)
			track[j] = k
		}
		tracks := float64(max(len(trackEnd), 1))
		th := (laneH - 20) / tracks
		for j, s := range run.Tools {
			color, label := callColor(s)
			x0, x1 := x(run, s.Start), x(run, s.End)
			w := math.Max(x1-x0, 4)
			ty := y + 10 + float64(track[j])*th
			stroke := ""
			if _, _, dup := s.Duplicate(); dup {
				stroke = ` stroke="#0f172a" stroke-width="1.5"`
			}
			fmt.Fprintf(&b, `<rect class="call" data-run="%s/%s" data-tool="%s" data-outcome="%s" x="%.1f" y="%.1f" width="%.1f" height="%.1f" rx="2" fill="%s"%s><title>%s %s, %s</title></rect>`,
				esc(scenario), esc(run.Run.Target.Name), esc(s.Str(sc.GenAIToolName)), esc(label), x0, ty+1, w, th-2, color, stroke,
				esc(s.Str(sc.GenAIToolName)), esc(label), fmtGap(time.Duration(s.End-s.Start)))
		}
		for _, st := range run.Run.Steps {
			if st.Kind != "reconnect" {
				continue
			}
			px := x(run, st.At.UnixNano())
			fmt.Fprintf(&b, `<line class="reconnect" x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#0f172a" stroke-dasharray="3 3"/>`, px, px, y+2, y+laneH-2)
			fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-size="10" fill="#0f172a" text-anchor="end" stroke="#fff" stroke-width="3" paint-order="stroke">new session</text>`, px-3, y+laneH-3)
		}
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

// niceStep is a tick step giving about six ticks over span.
func niceStep(span time.Duration) time.Duration {
	for _, s := range []time.Duration{10 * time.Millisecond, 20 * time.Millisecond, 50 * time.Millisecond, 100 * time.Millisecond,
		200 * time.Millisecond, 500 * time.Millisecond, time.Second, 2 * time.Second, 5 * time.Second, 10 * time.Second} {
		if span/s <= 7 {
			return s
		}
	}
	return 30 * time.Second
}

func fmtTick(t time.Duration) string {
	if t == 0 {
		return "0"
	}
	if t < time.Second {
		return fmt.Sprintf("%d ms", t.Milliseconds())
	}
	return strings.TrimSuffix(fmt.Sprintf("%.1f", t.Seconds()), ".0") + " s"
}

// storyLine is one thing the agent did, for the page.
type storyLine struct{ Who, What string }

// story is the agent's record of a run (dupgen's manifest), one line a
// step.
func story(run *RunResult) []storyLine {
	var out []storyLine
	for _, st := range run.Run.Steps {
		switch st.Kind {
		case "chat":
			out = append(out, storyLine{"model", st.Says})
		case "call":
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
			out = append(out, storyLine{"tools/call", what})
		default:
			out = append(out, storyLine{st.Kind, st.Says})
		}
	}
	return out
}

func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}
