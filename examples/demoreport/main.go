// Command demoreport prints the demo's report and checks it: it waits until
// the Collector has decided on every tool call dupgen made, then reads
//
//   - dupgen's manifest (what each scenario did and must produce),
//   - the Collector's Prometheus exporter (attribution metrics and the
//     servers' own metrics) and its own telemetry (late spans),
//   - the spans the Collector wrote out after the dup processor (the
//     per-scenario verdicts),
//   - each refund server's SQLite database (the refunds really written),
//
// prints per scenario the expected and attributed cause and effect, the
// totals and the side effects, and exits 1 when any expectation failed.
//
//	demoreport -manifest manifest.json -prometheus http://127.0.0.1:9464/metrics \
//	  -spans spans.jsonl -protected-db p/refunds.db -unprotected-db u/refunds.db
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"time"

	"github.com/idemkit/idemkit/examples/internal/agent"
	"github.com/idemkit/idemkit/examples/internal/refunds"
	"github.com/idemkit/idemkit/examples/internal/report"
)

func main() {
	var (
		manifest, prom, telemetry, spans string
		protectedDB, unprotectedDB       string
		wait, harness                    time.Duration
	)
	flag.StringVar(&manifest, "manifest", "manifest.json", "dupgen's manifest")
	flag.StringVar(&prom, "prometheus", "http://127.0.0.1:9464/metrics", "the Collector's Prometheus exporter")
	flag.StringVar(&telemetry, "telemetry", "", "the Collector's own metrics endpoint (optional)")
	flag.StringVar(&spans, "spans", "spans.jsonl", "the Collector's file exporter output")
	flag.StringVar(&protectedDB, "protected-db", "", "orders database of the protected server")
	flag.StringVar(&unprotectedDB, "unprotected-db", "", "orders database of the unprotected server")
	flag.DurationVar(&wait, "wait", 45*time.Second, "how long to wait for the Collector's decisions")
	flag.DurationVar(&harness, "harness-threshold", 2*time.Second, "the dup processor's harness_threshold")
	flag.Parse()
	ok, err := run(manifest, prom, telemetry, spans, map[string]string{"protected": protectedDB, "unprotected": unprotectedDB}, wait, harness)
	if err != nil {
		fmt.Fprintln(os.Stderr, "demoreport:", err)
		os.Exit(2)
	}
	if !ok {
		os.Exit(1)
	}
}

func run(manifestPath, promURL, telURL, spansPath string, dbs map[string]string, wait, harness time.Duration) (bool, error) {
	ctx := context.Background()
	m, err := agent.ReadManifest(manifestPath)
	if err != nil {
		return false, err
	}
	in := report.Inputs{Manifest: m, HarnessThreshold: harness, Refunds: map[string][]refunds.Refund{}}

	// Wait for the Collector: decision_wait, the batch, the connector's flush.
	start := time.Now()
	for {
		in.Metrics, err = report.Scrape(ctx, promURL)
		if err == nil {
			in.Spans, err = report.ReadSpans(spansPath)
		}
		var pending []string
		if err == nil {
			pending = report.Pending(m, in.Metrics, in.Spans)
			if len(pending) == 0 {
				break
			}
		}
		if time.Since(start) > wait {
			if err != nil {
				return false, fmt.Errorf("after %s: %w", wait, err)
			}
			fmt.Printf("demoreport: gave up waiting after %s: %s\n", wait, strings.Join(pending, "; "))
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	fmt.Printf("Collector decisions complete %.1fs after dupgen ended.\n\n", time.Since(m.Ended).Seconds())
	if telURL != "" {
		if in.Telemetry, err = report.Scrape(ctx, telURL); err != nil {
			return false, fmt.Errorf("Collector telemetry: %w", err)
		}
	}
	for target, path := range dbs {
		if path == "" {
			continue
		}
		if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
			return false, fmt.Errorf("%s server's database %s does not exist", target, path)
		}
		db, err := refunds.OpenDB(ctx, path)
		if err != nil {
			return false, err
		}
		in.Refunds[target], err = db.Refunds(ctx, "")
		db.Close()
		if err != nil {
			return false, fmt.Errorf("%s: %w", path, err)
		}
	}
	rep := report.Build(in)
	rep.Render(os.Stdout)
	return rep.OK(), nil
}
