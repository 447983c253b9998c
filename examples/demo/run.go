package demo

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/idemkit-mcp/idemkit/examples/internal/report"
)

// Hooks are called against the live pipeline; an error fails the run.
type Hooks struct {
	// CollectorsReady runs once every Collector listens, before any server
	// starts or any call is made.
	CollectorsReady func(ctx context.Context, p *Pipeline) error
	// AfterReport runs after the report is written, before anything is
	// stopped.
	AfterReport func(ctx context.Context, p *Pipeline) error
}

// Result is what a run produced.
type Result struct {
	// OK reports whether every attribution and side effect was as the
	// scenarios expect.
	OK bool
	// Text and HTML are the paths of the reports.
	Text, HTML string
	// Report is the computed report.
	Report *report.Report
}

// Run runs the whole demo: it builds what is missing, starts the
// Collectors and the servers, runs the agent, stops the servers (which
// flushes their telemetry), waits for the Collectors' decisions, and writes
// the report as text (printed too) and as HTML. The processes keep running
// until Close. An error means the run could not be carried out; a report
// that is not OK is Result.OK false.
func (p *Pipeline) Run(ctx context.Context, hooks Hooks) (*Result, error) {
	started := time.Now()
	if err := p.Build(ctx); err != nil {
		return nil, err
	}
	built := time.Now()
	if err := p.StartCollectors(ctx); err != nil {
		return nil, err
	}
	if hooks.CollectorsReady != nil {
		if err := hooks.CollectorsReady(ctx, p); err != nil {
			return nil, fmt.Errorf("collectors-ready hook: %w", err)
		}
	}
	if err := p.StartServers(ctx); err != nil {
		return nil, err
	}
	if err := p.RunAgent(ctx); err != nil {
		return nil, err
	}
	if err := p.StopServers(); err != nil {
		return nil, err
	}
	p.Step("Waiting for the Collector's decisions (decision_wait %s) and writing the report", p.Opts.DecisionWait)
	in, err := p.Inputs(ctx, 45*time.Second)
	if err != nil {
		return nil, err
	}
	if b, err := json.MarshalIndent(in, "", " "); err == nil {
		// Everything the report was computed from, to recompute it offline.
		_ = os.WriteFile(filepath.Join(p.Opts.Dir, InputsFile), b, 0o644)
	}
	rep := report.Build(in)
	res := &Result{OK: rep.OK(), Report: rep,
		Text: filepath.Join(p.Opts.Dir, TextReport), HTML: filepath.Join(p.Opts.Dir, HTMLReport)}
	var text bytes.Buffer
	rep.Render(&text)
	p.say("%s", text.String())
	var html bytes.Buffer
	if err := rep.WriteHTML(&html, report.HTMLMeta{Deployment: string(p.Opts.Topology) + " (" + p.configNames() + ")", WorkDir: p.Opts.Dir}); err != nil {
		return nil, err
	}
	if err := errors.Join(os.WriteFile(res.Text, text.Bytes(), 0o644), os.WriteFile(res.HTML, html.Bytes(), 0o644)); err != nil {
		return nil, err
	}
	p.say("%s", tookLine(p.Opts.Started, started, built, time.Now()))
	if hooks.AfterReport != nil {
		if err := hooks.AfterReport(ctx, p); err != nil {
			return res, fmt.Errorf("after-report hook: %w", err)
		}
	}
	return res, nil
}

// tookLine says how long the demo took and what the time went to: the
// command's own compilation (from began, when known), the builds of the
// Collector and the demo programs, and the run with its report.
func tookLine(began, started, built, now time.Time) string {
	secs := func(a, b time.Time) float64 { return b.Sub(a).Seconds() }
	if began.IsZero() || began.After(started) {
		return fmt.Sprintf("Demo took %.0fs: %.0fs building the Collector and the demo programs, %.0fs running the scenarios and writing the report (the compilation of the demo command itself not included).",
			secs(started, now), secs(started, built), secs(built, now))
	}
	return fmt.Sprintf("Demo took %.0fs in all: %.0fs compiling the demo command, %.0fs building the Collector and the demo programs, %.0fs running the scenarios and writing the report.",
		secs(began, now), secs(began, started), secs(started, built), secs(built, now))
}
