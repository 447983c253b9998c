package browser

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/idemkit-mcp/idemkit/internal/testing/harness"
)

// TestLoad_RendersAndScreenshots renders a page with an SVG rectangle and
// a script-made element, and finds both in the evaluated DOM and the
// screenshot's pixels.
func TestLoad_RendersAndScreenshots(t *testing.T) {
	if !Available() && !harness.CI() {
		t.Skip("no chromium (apt-get install chromium); under CI=true this test installs it or fails")
	}
	page := filepath.Join(t.TempDir(), "page.html")
	html := `<!doctype html><html><body style="margin:0;background:#fff">
<svg width="400" height="200"><rect id="bar" x="50" y="40" width="200" height="60" fill="#dc2626"/></svg>
<div id="made"></div><script>document.getElementById('made').textContent = 'drawn by script';</script>
</body></html>`
	if err := os.WriteFile(page, []byte(html), 0o644); err != nil {
		t.Fatal(err)
	}
	var got struct {
		Bar  Rect   `json:"bar"`
		Made string `json:"made"`
	}
	shot, err := Load(context.Background(), "file://"+page, `(() => {
  const r = document.getElementById('bar').getBoundingClientRect();
  return {bar: {X: r.x, Y: r.y, Width: r.width, Height: r.height}, made: document.getElementById('made').textContent};
})()`, &got, Options{Width: 640, Height: 400})
	if err != nil {
		t.Fatal(err)
	}
	if got.Made != "drawn by script" || got.Bar.Width != 200 || got.Bar.Height != 60 {
		t.Fatalf("evaluated %+v", got)
	}
	img, err := Image(shot)
	if err != nil {
		t.Fatal(err)
	}
	red, _ := ParseHex("#dc2626")
	if n := CountColor(img, got.Bar, red, 8); n < 200*60*9/10 {
		t.Errorf("%d red pixels inside the bar, want about %d", n, 200*60)
	}
	if n := CountColor(img, Rect{X: 300, Y: 0, Width: 300, Height: 30}, red, 8); n != 0 {
		t.Errorf("%d red pixels outside the bar", n)
	}
}
