package report

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemkit-mcp/idemkit/internal/testing/harness"
)

// demoInputs are the inputs of a real demo run (the demo writes them to
// inputs.json; regenerate with go run ./examples/demo/cmd/demo -dir DIR and
// a copy of DIR/inputs.json).
func demoInputs(t *testing.T) Inputs {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "demo-inputs.json"))
	if err != nil {
		t.Fatal(err)
	}
	var in Inputs
	if err := json.Unmarshal(b, &in); err != nil {
		t.Fatal(err)
	}
	return in
}

// TestHTML_RendersInChromium writes the HTML report of a real demo run,
// loads it in headless Chromium and checks every chart on screen; then
// breaks the page three ways a template change could and requires the
// check to notice each.
func TestHTML_RendersInChromium(t *testing.T) {
	if !BrowserAvailable() && !harness.CI() {
		t.Skip("no chromium (apt-get install chromium); under CI=true this test installs it or fails")
	}
	rep := Build(demoInputs(t))
	if !rep.OK() {
		var b bytes.Buffer
		rep.Render(&b)
		t.Fatalf("the recorded demo run does not pass:\n%s", b.String())
	}
	var page bytes.Buffer
	if err := rep.WriteHTML(&page, HTMLMeta{Deployment: "demo (recorded run)"}); err != nil {
		t.Fatal(err)
	}
	html := page.String()
	want := rep.Expect()
	if len(want.Bars) == 0 || len(want.Dots) == 0 || want.Timelines == 0 {
		t.Fatalf("the recorded run has nothing to draw: %+v", want)
	}
	for run, n := range want.Calls {
		if n == 0 {
			t.Fatalf("timeline %s has no tool call to draw", run)
		}
	}
	// Nothing is fetched when the page is viewed (URLs in the text, such
	// as an error the agent saw, are only text).
	for _, banned := range []string{`src="`, `href="`, "url(", "@import", "<script", "<link ", "<img", "<iframe"} {
		if strings.Contains(html, banned) {
			t.Errorf("the page is not self-contained: it contains %q", banned)
		}
	}
	dir := t.TempDir()
	check := func(name, html string) (string, error) {
		path := filepath.Join(dir, name+".html")
		if err := os.WriteFile(path, []byte(html), 0o644); err != nil {
			t.Fatal(err)
		}
		return CheckInBrowser(context.Background(), path, filepath.Join(dir, name+".png"), want)
	}
	summary, err := check("report", html)
	if err != nil {
		t.Fatalf("the report did not render: %v", err)
	}
	t.Logf("%s; screenshot %s", summary, filepath.Join(dir, "report.png"))
	if out := os.Getenv("IDEMKIT_REPORT_SCREENSHOT"); out != "" {
		b, _ := os.ReadFile(filepath.Join(dir, "report.png"))
		_ = os.WriteFile(out, b, 0o644)
	}

	for _, c := range []struct {
		name, from, to, want string
	}{
		{"hidden-bars", "</style>", "rect.bar { display:none }</style>", "bar protected/transport_retry/suppressed shows 0"},
		{"blank-bars", "</style>", "rect.bar { fill:#ffffff }</style>", "not drawn"},
		{"lost-series", `data-series="unprotected/model_reissue/leaked"`, `data-series="unprotected/model_reissue/suppressed"`, "unprotected/model_reissue/leaked shows 0"},
		{"collapsed-timeline", "</style>", "svg[data-chart=timeline] { display:none }</style>", "timeline"},
	} {
		if !strings.Contains(html, c.from) {
			t.Fatalf("%s: %q is not in the page any more: update the case", c.name, c.from)
		}
		_, err := check(c.name, strings.Replace(html, c.from, c.to, 1))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: CheckInBrowser = %v, want an error containing %q", c.name, err, c.want)
		}
	}
}
