package report

import (
	"fmt"
	"html/template"
	"io"
	"math"
	"sort"
	"strings"
	"time"

	sc "github.com/idemkit-mcp/idemkit/spancontract"
)

// prose escapes s for HTML and sets the text between backquotes as code.
func prose(s string) template.HTML {
	parts := strings.Split(s, "`")
	var b strings.Builder
	for i, p := range parts {
		if i%2 == 1 && i < len(parts)-1 {
			b.WriteString("<code>" + template.HTMLEscapeString(p) + "</code>")
			continue
		}
		if i%2 == 1 {
			b.WriteString("`")
		}
		b.WriteString(template.HTMLEscapeString(p))
	}
	return template.HTML(b.String())
}

// WriteHTML writes the page as one self-contained HTML document: nothing
// is fetched when it is viewed, the charts are inline SVG.
func (p *Page) WriteHTML(w io.Writer) error {
	threshold := p.HarnessThreshold
	if threshold <= 0 {
		threshold = 2 * time.Second
	}
	type timelineView struct {
		N       int
		Name    string
		Pill    string
		Title   string
		ID      string
		Chart   template.HTML
		Table   Table
		Cols    int
		Stories []Story
	}
	tvs := make([]timelineView, 0, len(p.Timelines))
	for i := range p.Timelines {
		t := &p.Timelines[i]
		tvs = append(tvs, timelineView{N: i + 1, Name: t.Name, Pill: t.Pill, Title: t.Title, ID: "timeline-" + t.Name,
			Chart: timeline(t), Table: t.Table, Cols: len(t.Table.Header), Stories: t.Stories})
	}
	data := map[string]any{
		"P": p, "Lead": prose(p.Lead), "AttributionNote": prose(p.AttributionNote), "TimelinesNote": prose(p.TimelinesNote),
		"Timelines": tvs, "ByLayer": byLayerChart(p), "Gaps": gapChart(p, threshold), "Legend": legend(),
		"Threshold": fmtGap(threshold),
		"Colors": map[string]string{
			"executed": ColorExecuted, "suppressed": EffectColors[sc.EffectSuppressed], "blocked": EffectColors[sc.EffectBlocked],
			"leaked": EffectColors[sc.EffectLeaked], "mismatch": ColorMismatch, "bypassed": ColorBypassed, "chat": ColorChat, "other": ColorOther,
		},
	}
	return pageTemplate.Execute(w, data)
}

var pageTemplate = template.Must(template.New("report").Parse(`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{.P.Title}}</title>
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
<h1>{{.P.Title}} <span class="badge {{if .P.Verdict.OK}}ok{{else}}bad{{end}}" id="result">{{.P.Verdict.Text}}</span></h1>
<p class="lead">{{.Lead}}</p>

<div class="cards">
{{range .P.Cards}}<div class="card" data-lane="{{.Lane}}">
  <div class="label">{{.Label}}</div>
  <div class="big {{if .BigOK}}ok{{else}}bad{{end}}">{{.Big}}</div>
  <div class="sub">{{.Sub}}</div>
  {{range .Lines}}<div>{{.}}</div>{{end}}
</div>
{{end}}</div>
{{if .P.Problems}}<div class="card"><h3 class="problem">Problems</h3><ul>{{range .P.Problems}}<li class="problem">{{.}}</li>{{end}}</ul></div>{{end}}

<h2>Duplicates by layer and effect</h2>
<p class="note">Every duplicate the dup processor attributed, by the layer that produced it and what it did. idemkit answers a duplicate with the stored result (suppressed) or tells the caller the first call is still running (blocked); without idemkit the call runs again (leaked).</p>
<div class="figure" id="chart-by-layer">{{.Legend}}{{.ByLayer}}</div>

<h2>How long after the first call duplicates arrive</h2>
<p class="note">The gap from a call to its duplicate, per cause, on a log scale: a dot per duplicate, coloured by its effect as above, each server (or service) on its own line of the cause's row, named at the left. Retries below the network and the harness come within milliseconds; a model re-issues after it has thought. The dup processor's <code>harness_threshold</code> ({{.Threshold}}) separates a harness retry from a model re-issue when no model turn is seen between the calls; its <code>window</code> and the Guard's key retention must exceed the slowest cause you want caught.</p>
<div class="figure" id="chart-gaps">{{.Gaps}}</div>

{{if .Timelines}}<h2>{{.P.TimelinesTitle}}</h2>
<p class="note">{{.TimelinesNote}}</p>
<div class="legend"><span><span class="sw" style="background:{{index .Colors "executed"}}"></span>executed</span><span><span class="sw" style="background:{{index .Colors "suppressed"}}"></span>replayed (suppressed)</span><span><span class="sw" style="background:{{index .Colors "blocked"}}"></span>in progress (blocked)</span><span><span class="sw" style="background:{{index .Colors "leaked"}}"></span>ran again (leaked)</span><span><span class="sw" style="background:{{index .Colors "mismatch"}}"></span>key mismatch</span><span><span class="sw" style="background:{{index .Colors "bypassed"}}"></span>not protected (bypassed)</span><span><span class="sw" style="background:{{index .Colors "chat"}}"></span>model turn</span><span><span class="sw" style="background:{{index .Colors "other"}}"></span>other tool</span></div>
{{range .Timelines}}<section class="scenario" id="{{.ID}}">
  <div class="head"><h3>{{.N}}. {{.Name}}</h3>{{if .Pill}}<span class="pill">{{.Pill}}</span>{{end}}</div>
  {{if .Title}}<div class="sub">{{.Title}}</div>{{end}}
  {{.Chart}}
  {{if .Table.Rows}}<table><tr><th></th>{{range .Table.Header}}<th>{{.}}</th>{{end}}</tr>
  {{$cols := .Cols}}{{range .Table.Rows}}<tr data-run="{{.Key}}"><td class="{{if .OK}}mark-ok{{else}}mark-bad{{end}}">{{if .Checked}}{{if .OK}}✓{{else}}✗{{end}}{{end}}</td>{{range .Cells}}<td>{{.}}</td>{{end}}</tr>
  {{if or .Notes .Problems}}<tr><td></td><td colspan="{{$cols}}">{{range .Notes}}<div class="evidence">{{.}}</div>{{end}}{{range .Problems}}<div class="problem">{{.}}</div>{{end}}</td></tr>{{end}}
  {{end}}</table>{{end}}
  {{range .Stories}}<details><summary>{{.Summary}}</summary><ol>{{range .Lines}}<li><span class="who">{{.Who}}</span>{{.What}}</li>{{end}}</ol></details>{{end}}
</section>
{{end}}{{if .P.MoreTimelines}}<p class="note">{{.P.MoreTimelines}}</p>{{end}}{{end}}

<h2>Attribution counts</h2>
<p class="note">{{.AttributionNote}}</p>
<div class="figure"><table id="attribution"><tr>{{if .P.Expected}}<th></th>{{end}}<th>service_name</th><th>cause</th><th>effect</th><th class="num">calls</th>{{if .P.Expected}}<th class="num">expected</th>{{end}}</tr>
{{$exp := .P.Expected}}{{range .P.Attribution}}<tr>{{if $exp}}<td class="{{if eq .Got .Want}}mark-ok{{else}}mark-bad{{end}}">{{if eq .Got .Want}}✓{{else}}✗{{end}}</td>{{end}}<td>{{.Service}}</td><td>{{.Cause}}</td><td>{{.Effect}}</td><td class="num">{{.Got}}</td>{{if $exp}}<td class="num">{{.Want}}</td>{{end}}</tr>
{{end}}</table></div>
{{if .P.LateSpans}}<p class="note">The dup processor counted {{.P.LateSpans}} late spans: spans that arrived after a decision they would have changed.</p>{{end}}

<footer>{{.P.Footer}}</footer>
</main>
</body>
</html>
`))

// legend is the effect legend of the layer chart.
func legend() template.HTML {
	var b strings.Builder
	b.WriteString(`<div class="legend">`)
	for _, e := range Effects {
		fmt.Fprintf(&b, `<span><span class="sw" style="background:%s"></span>%s</span>`, EffectColors[e], e)
	}
	b.WriteString(`</div>`)
	return template.HTML(b.String())
}

func esc(s string) string { return template.HTMLEscapeString(s) }

// byLayerChart draws, per cause, one bar for each lane stacked by effect.
func byLayerChart(p *Page) template.HTML {
	lanes := p.Lanes
	known := map[string]bool{}
	for _, l := range lanes {
		known[l] = true
	}
	count := map[[3]string]int{} // lane, cause, effect
	causes := map[string]bool{}
	for _, a := range p.Attribution {
		if !known[a.Lane] || a.Got == 0 {
			continue
		}
		count[[3]string{a.Lane, a.Cause, a.Effect}] += a.Got
		causes[a.Cause] = true
	}
	var rows []string
	for _, c := range Causes {
		if causes[c] || c != sc.CauseUnknown {
			rows = append(rows, c)
		}
	}
	var extra []string
	for c := range causes {
		if CauseRank(c) == len(Causes) {
			extra = append(extra, c)
		}
	}
	sort.Strings(extra)
	rows = append(rows, extra...)
	maxTotal := 1
	for _, c := range rows {
		for _, l := range lanes {
			n := 0
			for _, e := range Effects {
				n += count[[3]string{l, c, e}]
			}
			maxTotal = max(maxTotal, n)
		}
	}
	const (
		width, left, right, barH, gap, groupGap, top = 760.0, 250.0, 40.0, 20.0, 6.0, 18.0, 8.0
	)
	groupH := float64(max(len(lanes), 1))*(barH+gap) - gap
	height := top + float64(len(rows))*(groupH+groupGap) + 24
	scale := (width - left - right) / float64(maxTotal)
	// Grid lines at 1, 2 or 5 times a power of ten: at most ten.
	tick := 1
	for m := 1; maxTotal/tick > 10; m *= 10 {
		for _, f := range []int{1, 2, 5} {
			if tick = f * m; maxTotal/tick <= 10 {
				break
			}
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg viewBox="0 0 %g %g" role="img" aria-label="Duplicates by layer and effect" data-chart="by-layer">`, width, height)
	for v := 0; v <= maxTotal; v += tick {
		x := left + float64(v)*scale
		fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%g" y2="%g" stroke="#e2e8f0"/>`, x, x, top-4, height-20)
		fmt.Fprintf(&b, `<text x="%.1f" y="%g" font-size="11" fill="#64748b" text-anchor="middle">%d</text>`, x, height-6, v)
	}
	y := top
	for _, c := range rows {
		fmt.Fprintf(&b, `<text x="0" y="%.1f" font-size="14" font-weight="600" fill="#0f172a">%s</text>`, y+groupH/2+5, esc(c))
		for _, l := range lanes {
			fmt.Fprintf(&b, `<text x="%g" y="%.1f" font-size="12" fill="#64748b" text-anchor="end">%s</text>`, left-10, y+barH/2+4, esc(clip(l, 22)))
			x := left
			total := 0
			for _, e := range Effects {
				n := count[[3]string{l, c, e}]
				if n == 0 {
					continue
				}
				w := float64(n) * scale
				fmt.Fprintf(&b, `<rect class="bar" data-series="%s/%s/%s" data-value="%d" x="%.1f" y="%.1f" width="%.1f" height="%g" rx="3" fill="%s"><title>%s, %s: %d %s</title></rect>`,
					esc(l), esc(c), esc(e), n, x, y, w-1, barH, EffectColors[e], esc(l), esc(c), n, esc(e))
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

// clip shortens a label to n characters.
func clip(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

// gapChart draws every duplicate's gap on a log axis, one row per cause,
// coloured by effect, each lane at its own height, with the harness
// threshold marked.
func gapChart(p *Page, threshold time.Duration) template.HTML {
	laneIndex := map[string]int{}
	for i, l := range p.Lanes {
		laneIndex[l] = i
	}
	nlanes := max(len(p.Lanes), 1)
	byCause := map[string][]Duplicate{}
	lo, hi := 10*time.Millisecond, 10*time.Second
	for _, d := range p.Duplicates {
		d.Gap = max(d.Gap, time.Millisecond)
		byCause[d.Cause] = append(byCause[d.Cause], d)
		lo, hi = min(lo, d.Gap/2), max(hi, d.Gap*2)
	}
	var rows []string
	for _, c := range Causes {
		if len(byCause[c]) > 0 || c != sc.CauseUnknown {
			rows = append(rows, c)
		}
	}
	var extra []string
	for c := range byCause {
		if CauseRank(c) == len(Causes) {
			extra = append(extra, c)
		}
	}
	sort.Strings(extra)
	rows = append(rows, extra...)
	// left leaves room for the cause's name and, right-aligned beside the
	// dots, the name of each lane's line.
	const width, left, right, top, laneGap = 760.0, 250.0, 30.0, 26.0, 15.0
	rowH := 32 + laneGap*float64(nlanes)
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
	fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%g" y2="%g" stroke="#475569" stroke-dasharray="4 4"/><text x="%.1f" y="%g" font-size="11" fill="#475569" text-anchor="middle">harness_threshold %s</text>`,
		tx, tx, top-6, height-24, tx, top-12, fmtGap(threshold))
	for i, c := range rows {
		cy := top + float64(i)*rowH + rowH/2
		fmt.Fprintf(&b, `<line x1="%g" x2="%g" y1="%.1f" y2="%.1f" stroke="#f1f5f9" stroke-width="%g" stroke-linecap="round"/>`, left, width-right, cy, cy, laneGap*float64(nlanes))
		fmt.Fprintf(&b, `<text x="0" y="%.1f" font-size="14" font-weight="600" fill="#0f172a">%s</text>`, cy+5, esc(c))
		if nlanes > 1 {
			for li, l := range p.Lanes {
				off := (float64(li) - float64(nlanes-1)/2) * laneGap
				fmt.Fprintf(&b, `<text class="gap-lane" data-lane="%s" x="%g" y="%.1f" font-size="10.5" fill="#64748b" text-anchor="end">%s</text>`,
					esc(l), left-laneGap*float64(nlanes)/2-6, cy+off+3.5, esc(l)) // clear of the row's rounded end
			}
		}
		dots := byCause[c]
		sort.SliceStable(dots, func(i, j int) bool { return dots[i].Gap < dots[j].Gap })
		for _, d := range dots {
			color := EffectColors[d.Effect]
			if color == "" {
				color = "#94a3b8"
			}
			// Each lane at its own height, so that close gaps of different
			// lanes do not hide each other; labels outward from the
			// middle.
			li := laneIndex[d.Lane]
			off := (float64(li) - float64(nlanes-1)/2) * laneGap
			dx, ly, anchor := x(d.Gap), cy+off-9, "middle"
			switch {
			case nlanes == 1:
			case off > 0:
				ly = cy + off + 18
			case off == 0:
				dx, ly, anchor = x(d.Gap)+9, cy+4, "start"
			}
			fmt.Fprintf(&b, `<circle class="dot" data-series="gap/%s" data-lane="%s" data-ms="%d" cx="%.1f" cy="%.1f" r="6" fill="%s" stroke="#fff" stroke-width="1.5"><title>%s: %s after the first call (%s)</title></circle>`,
				esc(c), esc(d.Lane), d.Gap.Milliseconds(), x(d.Gap), cy+off, color, esc(d.Lane), fmtGap(d.Gap), esc(orDash(d.Effect)))
			fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-size="11" fill="#334155" text-anchor="%s" stroke="#fff" stroke-width="3" paint-order="stroke">%s</text>`, dx, ly, anchor, fmtGap(d.Gap))
		}
		if len(dots) == 0 {
			fmt.Fprintf(&b, `<text x="%g" y="%.1f" font-size="12" fill="#94a3b8">no duplicate</text>`, left+8, cy+4)
		}
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

func orDash(s string) string {
	if s == "" {
		return "unattributed"
	}
	return s
}

func fmtGap(d time.Duration) string {
	if d < time.Second {
		return fmt.Sprintf("%d ms", d.Milliseconds())
	}
	return fmt.Sprintf("%.1f s", d.Seconds())
}

// timeline draws one timeline, a lane per server or service, on a shared
// time axis from each lane's start.
func timeline(t *Timeline) template.HTML {
	var span time.Duration
	for _, l := range t.Lanes {
		end := l.End.UnixNano()
		for _, c := range l.Calls {
			end = max(end, c.End)
		}
		for _, c := range l.Chats {
			end = max(end, c.End)
		}
		span = max(span, time.Duration(end-l.Start.UnixNano()))
	}
	span = max(span, 100*time.Millisecond)
	const width, left, right, laneH, top = 760.0, 110.0, 20.0, 52.0, 8.0
	height := top + float64(len(t.Lanes))*laneH + 26
	var b strings.Builder
	fmt.Fprintf(&b, `<svg viewBox="0 0 %g %g" role="img" aria-label="Timeline of %s" data-chart="timeline" data-scenario="%s">`, width, height, esc(t.Name), esc(t.Name))
	step := niceStep(span)
	for at := time.Duration(0); at <= span; at += step {
		px := left + float64(at)/float64(span)*(width-left-right)
		fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%g" y2="%g" stroke="#eef2f7"/><text x="%.1f" y="%g" font-size="10.5" fill="#64748b" text-anchor="middle">%s</text>`,
			px, px, top, height-20, px, height-6, fmtTick(at))
	}
	for i := range t.Lanes {
		l := &t.Lanes[i]
		start := l.Start.UnixNano()
		x := func(ns int64) float64 { return left + float64(ns-start)/float64(span)*(width-left-right) }
		y := top + float64(i)*laneH
		fmt.Fprintf(&b, `<text x="0" y="%.1f" font-size="12.5" fill="#334155">%s</text>`, y+laneH/2+4, esc(clip(l.Label, 16)))
		fmt.Fprintf(&b, `<rect x="%g" y="%.1f" width="%g" height="%g" rx="4" fill="#f8fafc"/>`, left, y+6, width-left-right, laneH-12)
		for _, c := range l.Chats {
			x0, x1 := x(c.Start), x(c.End)
			fmt.Fprintf(&b, `<rect class="chat" data-run="%s/%s" x="%.1f" y="%.1f" width="%.1f" height="%g" rx="3" fill="%s" opacity="0.55"><title>model turn, %s</title></rect>`,
				esc(t.Name), esc(l.Label), x0, y+10, math.Max(x1-x0, 2), laneH-20, ColorChat, fmtGap(time.Duration(c.End-c.Start)))
			if x1-x0 > 90 {
				fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-size="10.5" fill="#5b21b6">model %s</text>`, x0+6, y+laneH/2+4, fmtGap(time.Duration(c.End-c.Start)))
			}
		}
		// Calls that overlap in time (a retry while the first call still
		// runs) go on separate tracks.
		var trackEnd []float64
		track := make([]int, len(l.Calls))
		for j, c := range l.Calls {
			x0 := x(c.Start)
			k := 0
			for k < len(trackEnd) && x0 < trackEnd[k]+2 {
				k++
			}
			if k == len(trackEnd) {
				trackEnd = append(trackEnd, 0)
			}
			trackEnd[k] = max(x(c.End), x0+4)
			track[j] = k
		}
		tracks := float64(max(len(trackEnd), 1))
		th := (laneH - 20) / tracks
		for j, c := range l.Calls {
			x0, x1 := x(c.Start), x(c.End)
			w := math.Max(x1-x0, 4)
			ty := y + 10 + float64(track[j])*th
			stroke := ""
			if c.Duplicate {
				stroke = ` stroke="#0f172a" stroke-width="1.5"`
			}
			fmt.Fprintf(&b, `<rect class="call" data-run="%s/%s" data-tool="%s" data-outcome="%s" x="%.1f" y="%.1f" width="%.1f" height="%.1f" rx="2" fill="%s"%s><title>%s %s, %s</title></rect>`,
				esc(t.Name), esc(l.Label), esc(c.Tool), esc(c.Label), x0, ty+1, w, th-2, c.Color, stroke,
				esc(c.Tool), esc(c.Label), fmtGap(time.Duration(c.End-c.Start)))
		}
		for _, m := range l.Marks {
			px := x(m.At.UnixNano())
			fmt.Fprintf(&b, `<line class="reconnect" x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#0f172a" stroke-dasharray="3 3"/>`, px, px, y+2, y+laneH-2)
			fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-size="10" fill="#0f172a" text-anchor="end" stroke="#fff" stroke-width="3" paint-order="stroke">%s</text>`, px-3, y+laneH-3, esc(m.Label))
		}
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

// niceStep is a tick step giving about six ticks over span.
func niceStep(span time.Duration) time.Duration {
	for _, s := range []time.Duration{10 * time.Millisecond, 20 * time.Millisecond, 50 * time.Millisecond, 100 * time.Millisecond,
		200 * time.Millisecond, 500 * time.Millisecond, time.Second, 2 * time.Second, 5 * time.Second, 10 * time.Second,
		30 * time.Second, time.Minute, 2 * time.Minute, 5 * time.Minute, 10 * time.Minute} {
		if span/s <= 7 {
			return s
		}
	}
	return span / 6
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
