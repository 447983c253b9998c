// Command demo runs idemkit's demo end to end (make demo, scripts/demo.sh):
//
//  1. builds the otelcol-idemkit Collector (scripts/collector-build.sh;
//     about 6 minutes the first time on a fresh machine, seconds afterwards)
//     and the demo programs (examples/refundserver, examples/dupgen,
//     cmd/idemkit);
//  2. starts the Collector (examples/demo/collector.yaml, or with -topology
//     the shipped collector/examples/single or two-tier) and three targets
//     on free local ports with fresh databases: a refund server protected by
//     idemkit (SQLite store), one without idemkit, and idemkit gateway
//     (SQLite store) in front of another one without idemkit;
//  3. runs dupgen, an agent that makes refunds run twice the way each of the
//     four layers does (transport retry, harness retry, model re-issue,
//     reconnect replay) plus two controls, against every target;
//  4. stops the servers (which flushes their telemetry), waits for the
//     Collector's decisions, prints the report and writes it as a
//     self-contained HTML page (report.html, its path printed last), which
//     it then checks in headless Chromium when Chromium is installed (always
//     under CI=true: then it installs it, or fails).
//
// It exits 1 when any attribution or side-effect count is not as expected,
// so it doubles as the end-to-end check; 130 when Ctrl-C cuts a run short,
// and with -keep, where Ctrl-C is how it ends, the run's status. Every process it starts is stopped
// on exit, unless -keep: then it also runs a Prometheus that scrapes the
// pipeline from before the first call, prints its URL and how to import the
// dashboards into your Grafana, and keeps everything running until Ctrl-C
// (make demo-up).
//
//	go run ./examples/demo/cmd/demo [-dir DIR] [-topology demo|single|two-tier] [-keep]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/idemkit-mcp/idemkit/examples/demo"
	"github.com/idemkit-mcp/idemkit/examples/internal/report"
	"github.com/idemkit-mcp/idemkit/internal/testing/harness"
)

func main() {
	dir := flag.String("dir", os.Getenv("IDEMKIT_DEMO_DIR"), "work directory (default: a new temporary directory; $IDEMKIT_DEMO_DIR)")
	topology := flag.String("topology", "demo", "Collector deployment: demo (examples/demo/collector.yaml), single or two-tier (collector/examples)")
	keep := flag.Bool("keep", false, "keep the pipeline running with a Prometheus scraping it, until Ctrl-C")
	browser := flag.String("browser-check", "auto", "check report.html in headless Chromium: auto (when installed; always under CI=true), on, off")
	flag.Parse()
	os.Exit(run(*dir, *topology, *keep, *browser))
}

func run(dir, topology string, keep bool, browser string) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	fail := func(err error) int {
		fmt.Fprintf(os.Stderr, "\ndemo: %v\n", err)
		return 2
	}
	topo, err := demo.ParseTopology(topology)
	if err != nil {
		return fail(err)
	}
	if dir == "" {
		if dir, err = os.MkdirTemp("", "idemkit-demo."); err != nil {
			return fail(err)
		}
	}
	p, err := demo.New(ctx, demo.Options{Dir: dir, Topology: topo, Started: startedAt()})
	if err != nil {
		return fail(err)
	}
	defer func() {
		if err := p.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "demo:", err)
		}
	}()
	logs := func() {
		fmt.Printf("\nLogs and data: %s\n  logs/*.log, report.txt, report.html, inputs.json, manifest.json, collector/*-spans.jsonl, */refunds.db\n", p.Opts.Dir)
	}

	var prom *harness.Prometheus
	hooks := demo.Hooks{}
	if keep {
		hooks.CollectorsReady = func(ctx context.Context, p *demo.Pipeline) error {
			var err error
			prom, err = harness.StartPrometheus(ctx, &harness.Group{Dir: filepath.Join(p.Opts.Dir, "logs")}, harness.PrometheusConfig{
				Dir:            filepath.Join(p.Opts.Dir, "prometheus"),
				ScrapeInterval: time.Second,
				Jobs: []harness.ScrapeJob{
					{Name: "otelcol-idemkit", HonorLabels: true, Targets: p.Exporters()},
					{Name: "otelcol-idemkit-telemetry", Targets: p.Telemetry()},
				},
			})
			if err != nil {
				return err
			}
			wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			return harness.WaitScraped(wctx, prom.API, append(p.Exporters(), p.Telemetry()...), time.Now())
		}
	}
	res, err := p.Run(ctx, hooks)
	if prom != nil {
		defer prom.Proc.Stop(0)
	}
	if err != nil && ctx.Err() != nil {
		// Ctrl-C: with -keep the way to stop (exit 0); otherwise the run
		// was cut short (exit 130, as a shell reports an interrupt).
		fmt.Fprintln(os.Stderr, "\ndemo: interrupted before the report; stopping everything it started")
		logs()
		if keep {
			return 0
		}
		return 130
	}
	if err != nil {
		logs()
		return fail(err)
	}
	rc := 0
	if !res.OK {
		rc = 1
	}
	if err := checkInBrowser(ctx, browser, res); err != nil {
		fmt.Fprintf(os.Stderr, "\ndemo: the HTML report did not render as it must: %v\n", err)
		rc = max(rc, 1)
	}
	logs()
	if keep && prom != nil {
		printExplore(p, prom)
	}
	// The report's path is the last line.
	fmt.Printf("\nHTML report: %s\n", res.HTML)
	if keep && prom != nil {
		<-ctx.Done()
		// Ctrl-C is how -keep ends: the status is the run's (0 when every
		// attribution was right), never the interrupt's.
		fmt.Println("\nstopping (Ctrl-C)")
	}
	return rc
}

// startedAt is when scripts/demo.sh started, before it compiled this
// program (IDEMKIT_DEMO_STARTED, Unix time in nanoseconds); zero when unset.
func startedAt() time.Time {
	n, err := strconv.ParseInt(os.Getenv("IDEMKIT_DEMO_STARTED"), 10, 64)
	if err != nil || n <= 0 {
		return time.Time{}
	}
	return time.Unix(0, n)
}

// checkInBrowser loads report.html in headless Chromium, takes a screenshot
// beside it and checks that every chart rendered its series.
func checkInBrowser(ctx context.Context, mode string, res *demo.Result) error {
	switch mode {
	case "off":
		return nil
	case "auto":
		if !harness.CI() && !report.BrowserAvailable() {
			fmt.Println("\n(no Chromium: the HTML report was not checked in a browser; apt-get install chromium, or -browser-check on)")
			return nil
		}
	case "on":
	default:
		return errors.New("-browser-check: auto, on or off")
	}
	png := filepath.Join(filepath.Dir(res.HTML), "report.png")
	got, err := report.CheckInBrowser(ctx, res.HTML, png, res.Report.Expect())
	if err != nil {
		return err
	}
	fmt.Printf("\nChecked report.html in headless Chromium: %s; screenshot %s\n", got, png)
	return nil
}

func printExplore(p *demo.Pipeline, prom *harness.Prometheus) {
	fmt.Printf(`
The pipeline keeps running (Ctrl-C stops it):
  Prometheus     %s   (it scraped the Collector every second from before the first call)
  Collector      OTLP/gRPC %s: send more traffic with
                   go run ./examples/dupgen -otlp-endpoint %s -protected URL -unprotected URL [-gateway URL]
                 (start refund servers first: go run ./examples/refundserver -otlp-endpoint %s, and for
                 -gateway: go run ./cmd/idemkit gateway --upstream URL --store memory --otlp-endpoint %s)

See it in Grafana (10.4 or newer, one you run; it must reach %s):
  1. Connections → Data sources → Add → Prometheus, URL %s, Save & test.
  2. Dashboards → New → Import → upload each of
       %s
     and choose that data source for "Prometheus".
`, prom.URL, p.Entry(), p.Entry(), p.Entry(), p.Entry(), prom.URL, prom.URL,
		filepath.Join(p.Opts.Root, "dashboards", "idemkit-*.json"))
}
