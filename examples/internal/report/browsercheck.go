package report

import (
	"context"
	"errors"
	"fmt"
	"image"
	"os"
	"path/filepath"
	"strconv"

	htmlreport "github.com/idemkit-mcp/idemkit/cmd/idemkit/report"
	"github.com/idemkit-mcp/idemkit/internal/testing/harness/browser"
)

// BrowserAvailable reports whether headless Chromium is installed for
// CheckInBrowser.
func BrowserAvailable() bool { return browser.Available() }

// rendered is what the page says, once Chromium rendered it, about each
// chart and each mark of the charts (positions in page pixels).
type rendered struct {
	Result string `json:"result"`
	Charts []struct {
		Kind     string       `json:"kind"`
		Scenario string       `json:"scenario"`
		Rect     browser.Rect `json:"rect"`
	} `json:"charts"`
	Marks []struct {
		Class  string       `json:"class"`
		Series string       `json:"series"`
		Run    string       `json:"run"`
		Value  string       `json:"value"`
		Fill   string       `json:"fill"`
		Rect   browser.Rect `json:"rect"`
	} `json:"marks"`
}

// renderedScript collects the charts and their marks from the live DOM:
// getBoundingClientRect gives what the browser laid out and drew, not what
// the file says.
const renderedScript = `(() => {
  const box = el => { const r = el.getBoundingClientRect(); return {X: r.left + window.scrollX, Y: r.top + window.scrollY, Width: r.width, Height: r.height}; };
  const visible = el => { const s = getComputedStyle(el); return s.display !== 'none' && s.visibility !== 'hidden' && Number(s.opacity) > 0; };
  return {
    result: (document.getElementById('result') || {}).textContent || '',
    charts: [...document.querySelectorAll('svg[data-chart]')].filter(visible).map(el => ({kind: el.dataset.chart, scenario: el.dataset.scenario || '', rect: box(el)})),
    marks: [...document.querySelectorAll('svg [data-series], svg rect.call')].filter(visible).map(el => ({
      class: el.getAttribute('class') || '', series: el.dataset.series || '', run: el.dataset.run || '',
      value: el.dataset.value || el.dataset.ms || '', fill: el.getAttribute('fill') || '', rect: box(el)})),
  };
})()`

// CheckInBrowser loads the HTML report at htmlPath (the page
// internal/report writes, for the demo or for idemkit attribute) in
// headless Chromium, writes a screenshot to pngPath and checks that the
// charts rendered what want says: the result badge; a bar of the right
// value for every attributed (lane, cause, effect), its colour on screen;
// a dot for every duplicate in the gap chart; in each timeline, a visible
// mark for every tool call of each lane, in its colour. It returns a
// summary of what it found.
func CheckInBrowser(ctx context.Context, htmlPath, pngPath string, want htmlreport.Expect) (string, error) {
	abs, err := filepath.Abs(htmlPath)
	if err != nil {
		return "", err
	}
	var got rendered
	shot, err := browser.Load(ctx, "file://"+abs, renderedScript, &got, browser.Options{Width: 1200, Height: 900})
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(pngPath, shot, 0o644); err != nil {
		return "", err
	}
	img, err := browser.Image(shot)
	if err != nil {
		return "", fmt.Errorf("screenshot: %w", err)
	}
	var errs []error
	fail := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }

	if got.Result != want.Result {
		fail("the result badge says %q, the report %s", got.Result, want.Result)
	}
	charts := map[string]int{}
	for _, c := range got.Charts {
		if c.Rect.Width < 100 || c.Rect.Height < 40 {
			fail("chart %s %s is %gx%g pixels: not drawn", c.Kind, c.Scenario, c.Rect.Width, c.Rect.Height)
		}
		charts[c.Kind]++
	}
	if charts["by-layer"] != 1 || charts["gaps"] != 1 || charts["timeline"] != want.Timelines {
		fail("charts rendered %v, want by-layer 1, gaps 1, timeline %d", charts, want.Timelines)
	}

	// onScreen checks that at least half of a mark's pixels have its colour.
	onScreen := func(what, fill string, rect browser.Rect) {
		if rect.Area() < 4 {
			fail("%s is %gx%g pixels: not visible", what, rect.Width, rect.Height)
			return
		}
		c, err := browser.ParseHex(fill)
		if err != nil {
			fail("%s: %v", what, err)
			return
		}
		inner := browser.Rect{X: rect.X + 1, Y: rect.Y + 1, Width: rect.Width - 2, Height: rect.Height - 2}
		if n, area := browser.CountColor(img, inner, c, 24), inner.Area(); float64(n) < area/2 {
			fail("%s: %d of %.0f pixels in its colour %s on the screenshot: not drawn", what, n, area, fill)
		}
	}

	// Bars: every attributed (lane, cause, effect), with its value.
	bars := map[string]int{}
	for _, m := range got.Marks {
		if m.Class == "bar" {
			v, _ := strconv.Atoi(m.Value)
			bars[m.Series] += v
			onScreen("bar "+m.Series, m.Fill, m.Rect)
		}
	}
	for series, n := range want.Bars {
		if bars[series] != n {
			fail("by-layer chart: bar %s shows %d, the report says %d", series, bars[series], n)
		}
	}
	for series, n := range bars {
		if _, ok := want.Bars[series]; !ok {
			fail("by-layer chart: bar %s shows %d, the report has no such series", series, n)
		}
	}

	// Dots: one per duplicate, per cause.
	gotDots, ndots := map[string]int{}, 0
	for _, m := range got.Marks {
		if m.Class == "dot" {
			gotDots[m.Series]++
			ndots++
			onScreen("gap dot "+m.Series, m.Fill, browser.Rect{X: m.Rect.X + m.Rect.Width/4, Y: m.Rect.Y + m.Rect.Height/4, Width: m.Rect.Width / 2, Height: m.Rect.Height / 2})
		}
	}
	for s, n := range want.Dots {
		if gotDots[s] != n {
			fail("gap chart: %d dots for %s, want %d (one per duplicate)", gotDots[s], s, n)
		}
	}
	for s, n := range gotDots {
		if _, ok := want.Dots[s]; !ok {
			fail("gap chart: %d dots for %s, the report has none", n, s)
		}
	}

	// Timelines: a mark per tool call of each lane.
	calls := map[string]int{}
	for _, m := range got.Marks {
		if m.Class == "call" {
			calls[m.Run]++
			onScreen("call of "+m.Run, m.Fill, m.Rect)
		}
	}
	ncalls := 0
	for key, n := range want.Calls {
		ncalls += n
		if calls[key] != n {
			fail("timeline %s: %d calls drawn, the report has %d tool calls", key, calls[key], n)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return "", err
	}
	return fmt.Sprintf("%d charts, %d bars, %d gap dots, %d calls in %d timelines, all on screen (%s)",
		len(got.Charts), len(bars), ndots, ncalls, charts["timeline"], size(img)), nil
}

func size(img image.Image) string {
	b := img.Bounds()
	return fmt.Sprintf("%dx%d screenshot", b.Dx(), b.Dy())
}
