// Package browser loads pages in a real headless Chromium (the Debian
// package chromium, driven over the DevTools protocol with chromedp) for
// the repository's browser tests: it evaluates a script in the rendered
// page and takes a full-page screenshot, which PNG helpers then inspect.
package browser

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/idemkit-mcp/idemkit/internal/testing/harness"
)

// Command is the Chromium of Debian's chromium package.
const Command = "chromium"

// Available reports whether Chromium is installed.
func Available() bool {
	_, err := exec.LookPath(Command)
	return err == nil
}

// Ensure returns Chromium's path, installing the Debian package chromium
// when it is missing and this process runs as root.
func Ensure(ctx context.Context) (string, error) {
	return harness.EnsureCommand(ctx, Command, "chromium", os.Stderr)
}

// Options configures Load.
type Options struct {
	// Width and Height are the window's size in CSS pixels. Default to
	// 1280 and 900.
	Width, Height int
	// Timeout bounds the whole load. Defaults to 60s.
	Timeout time.Duration
}

// Load starts a fresh headless Chromium (as root: --no-sandbox; no GPU, no
// network of its own, a new empty profile), opens url, waits until the
// document is ready, evaluates script (its JSON result goes into result,
// which may be nil) and returns a full-page screenshot (PNG, one image
// pixel per CSS pixel).
func Load(ctx context.Context, url, script string, result any, o Options) ([]byte, error) {
	path, err := Ensure(ctx)
	if err != nil {
		return nil, err
	}
	if o.Width == 0 {
		o.Width, o.Height = 1280, 900
	}
	if o.Timeout == 0 {
		o.Timeout = 60 * time.Second
	}
	profile, err := os.MkdirTemp("", "idemkit-chromium-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(profile)
	actx, cancel := chromedp.NewExecAllocator(ctx,
		chromedp.ExecPath(path),
		chromedp.Flag("headless", true),
		chromedp.Flag("no-sandbox", true),
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("no-first-run", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("hide-scrollbars", true),
		chromedp.UserDataDir(profile),
		chromedp.WindowSize(o.Width, o.Height),
	)
	defer cancel()
	bctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	// The first action starts the browser: no timeout on its context (it
	// would stop the browser); the timeout bounds the load that follows.
	if err := chromedp.Do(bctx); err != nil {
		return nil, fmt.Errorf("start chromium: %w", err)
	}
	tctx, cancel := context.WithTimeout(bctx, o.Timeout)
	defer cancel()
	if err := chromedp.Do(tctx, chromedp.Navigate(url), chromedp.WaitReady(chromedp.CSS("body"))); err != nil {
		return nil, fmt.Errorf("chromium %s: %w", url, err)
	}
	if script != "" {
		raw, err := chromedp.Run(tctx, chromedp.Evaluate[json.RawMessage](script))
		if err != nil {
			return nil, fmt.Errorf("chromium %s: evaluate: %w", url, err)
		}
		if result != nil {
			if err := json.Unmarshal(raw, result); err != nil {
				return nil, fmt.Errorf("chromium %s: the script's result: %w", url, err)
			}
		}
	}
	shot, err := chromedp.Run(tctx, chromedp.FullScreenshot(100))
	if err != nil {
		return nil, fmt.Errorf("chromium %s: screenshot: %w", url, err)
	}
	return shot, nil
}

// Rect is a rectangle of the page in CSS pixels, as getBoundingClientRect
// gives it (plus the scroll offset).
type Rect struct {
	X, Y, Width, Height float64
}

// Area is the rectangle's area.
func (r Rect) Area() float64 { return r.Width * r.Height }

func (r Rect) image() image.Rectangle {
	return image.Rect(int(r.X), int(r.Y), int(r.X+r.Width+0.5), int(r.Y+r.Height+0.5))
}

// Image decodes a PNG screenshot.
func Image(b []byte) (image.Image, error) { return png.Decode(bytes.NewReader(b)) }

// ParseHex parses #rrggbb.
func ParseHex(s string) (color.RGBA, error) {
	s = strings.TrimPrefix(s, "#")
	if len(s) != 6 {
		return color.RGBA{}, fmt.Errorf("color %q: want #rrggbb", s)
	}
	v, err := strconv.ParseUint(s, 16, 32)
	if err != nil {
		return color.RGBA{}, fmt.Errorf("color %q: %w", s, err)
	}
	return color.RGBA{R: uint8(v >> 16), G: uint8(v >> 8), B: uint8(v), A: 255}, nil
}

// CountColor counts the pixels of img inside r whose colour is within tol
// (per channel, 0-255) of c.
func CountColor(img image.Image, r Rect, c color.RGBA, tol int) int {
	n := 0
	b := r.image().Intersect(img.Bounds())
	// Screenshots decode as NRGBA or RGBA (opaque): read their bytes.
	var pix []uint8
	var offset func(x, y int) int
	switch m := img.(type) {
	case *image.NRGBA:
		pix, offset = m.Pix, m.PixOffset
	case *image.RGBA:
		pix, offset = m.Pix, m.PixOffset
	}
	if pix != nil {
		for y := b.Min.Y; y < b.Max.Y; y++ {
			for x := b.Min.X; x < b.Max.X; x++ {
				i := offset(x, y)
				if near(int(pix[i]), int(c.R), tol) && near(int(pix[i+1]), int(c.G), tol) && near(int(pix[i+2]), int(c.B), tol) {
					n++
				}
			}
		}
		return n
	}
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			pr, pg, pb, _ := img.At(x, y).RGBA()
			if near(int(pr>>8), int(c.R), tol) && near(int(pg>>8), int(c.G), tol) && near(int(pb>>8), int(c.B), tol) {
				n++
			}
		}
	}
	return n
}

func near(a, b, tol int) bool { return a-b <= tol && b-a <= tol }
