// Command dashtest proves that every panel of the Grafana dashboards in
// dashboards/ reads a metric the system really emits, with a real
// Prometheus that scraped the real demo pipeline, once through each
// Collector deployment: the demo's examples/demo/collector.yaml and the
// shipped collector/examples/single and two-tier. scripts/dashboards-test.sh
// (make test) runs it. For each deployment it
//
//  1. starts a second otelcol-idemkit with a tiny dup processor
//     (dashboards/testdata/exerciser-collector.yaml) and a Prometheus
//     (installed from Debian's package when missing) on free local ports,
//     scraping every second the deployment's Prometheus exporters (with
//     honor_labels) and every Collector's own telemetry; the dashboards'
//     time range starts before Prometheus holds any sample;
//  2. runs the demo (examples/demo) through the deployment; once the
//     Collectors listen it waits for Prometheus to scrape them, and after
//     the report, before anything stops, exercises what the demo never
//     causes: it makes the second Collector evict groups and count late
//     spans (dashtest.Exercise), and runs an instrumented MCP server,
//     exporting its metrics to the deployment, whose outcomes cannot be
//     recorded (a lost lease, a locked store) and whose calls are refused
//     (dashtest.ExportGuardExercise); then it waits for two more scrapes and
//     ends the time range;
//  3. checks every target of every dashboard against Prometheus over that
//     range (internal/dashtest: every query succeeds and returns series,
//     every selector matches, every label is there, metrics.json matches
//     what Prometheus holds, the headline panels show what the run's
//     evidence predicts) and that nine broken panels each fail.
//
// It prints where the logs are (check.txt per deployment has every check)
// and exits 1 when a check failed, 2 when a run could not be carried out.
//
//	go run ./dashboards/cmd/dashtest [-dir DIR] [-topology all|demo|single|two-tier]
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/idemkit-mcp/idemkit/dashboards"
	"github.com/idemkit-mcp/idemkit/dashboards/internal/dashtest"
	"github.com/idemkit-mcp/idemkit/dashboards/internal/metrics"
	"github.com/idemkit-mcp/idemkit/examples/demo"
	"github.com/idemkit-mcp/idemkit/internal/testing/harness"
)

func main() {
	dir := flag.String("dir", os.Getenv("IDEMKIT_DASHBOARDS_DIR"), "work directory (default: a new temporary directory; $IDEMKIT_DASHBOARDS_DIR)")
	topology := flag.String("topology", "all", "Collector deployment to run through: all, demo, single or two-tier")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, *dir, *topology))
}

func run(ctx context.Context, dir, topology string) int {
	fail := func(err error) int {
		fmt.Fprintf(os.Stderr, "\ndashtest: %v\n", err)
		return 2
	}
	var topologies []demo.Topology
	if topology == "all" {
		topologies = demo.Topologies
	} else {
		t, err := demo.ParseTopology(topology)
		if err != nil {
			return fail(err)
		}
		topologies = []demo.Topology{t}
	}
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "idemkit-dashboards."); err != nil {
			return fail(err)
		}
	}
	root, err := harness.RepoRoot()
	if err != nil {
		return fail(err)
	}
	started := time.Now()
	fmt.Println("==> Building the Collector (scripts/collector-build.sh, cached)")
	bin, err := harness.CollectorBinary(ctx, root, os.Stderr)
	if err != nil {
		return fail(err)
	}
	rc := 0
	for _, t := range topologies {
		passed, failed, err := runTopology(ctx, root, bin, filepath.Join(dir, string(t)), t)
		switch {
		case err != nil:
			fmt.Fprintf(os.Stderr, "\ndashtest: %s: %v\n", t, err)
			rc = 2
		case failed > 0:
			fmt.Printf("dashboards through %s: %d passed, %d failed (every check: %s)\n", t, passed, failed, filepath.Join(dir, string(t), "check.txt"))
			rc = max(rc, 1)
		default:
			fmt.Printf("dashboards through %s: %d passed, 0 failed\n", t, passed)
		}
	}
	fmt.Printf("\nLogs: %s\n  <deployment>/check.txt (every check), demo.log, logs/*.log (Prometheus, the Collectors, the servers), demo/ (the demo's data)\n", dir)
	fmt.Printf("Dashboards test took %.0fs.\n", time.Since(started).Seconds())
	return rc
}

// runTopology runs the demo through one deployment with Prometheus
// scraping it and checks the dashboards against what Prometheus holds.
func runTopology(ctx context.Context, root, bin, dir string, t demo.Topology) (passed, failed int, err error) {
	fmt.Printf("\n==> Deployment %s: the demo with a Prometheus scraping it (%s)\n", t, dir)
	if err := os.RemoveAll(dir); err != nil {
		return 0, 0, err
	}
	g := &harness.Group{Dir: filepath.Join(dir, "logs")}
	defer func() { _ = g.StopAll(10 * time.Second) }()
	demoLog, err := os.Create(filepath.Join(mkdir(dir), "demo.log"))
	if err != nil {
		return 0, 0, err
	}
	defer demoLog.Close()
	p, err := demo.New(ctx, demo.Options{Root: root, Dir: filepath.Join(dir, "demo"), Collector: bin, Topology: t, Out: demoLog,
		// The expectations are written for one protected server.
		NoGateway: true})
	if err != nil {
		return 0, 0, err
	}
	defer func() { _ = p.Close() }()

	// A second Collector whose dup processor the exercise drives into
	// evictions and late spans.
	exOTLP, err := harness.FreeAddr()
	if err != nil {
		return 0, 0, err
	}
	exTel, err := harness.FreeAddr()
	if err != nil {
		return 0, 0, err
	}
	ex, err := g.Start("exerciser-collector", []string{"OTLP_HTTP_ENDPOINT=" + exOTLP, "TELEMETRY_PORT=" + exTel[strings.LastIndexByte(exTel, ':')+1:]},
		bin, "--config", filepath.Join(root, "dashboards", "testdata", "exerciser-collector.yaml"))
	if err != nil {
		return 0, 0, err
	}
	for _, a := range []string{exOTLP, exTel} {
		if err := ex.WaitReady(ctx, "a listener on "+a, 60*time.Second, harness.Listening(a)); err != nil {
			return 0, 0, err
		}
	}

	// The time range starts before Prometheus holds any sample: then
	// "x offset $__range" finds nothing and every range panel counts
	// exactly (no increase() extrapolation).
	start := time.Now().UTC()
	telemetry := append(p.Telemetry(), exTel)
	targets := append(p.Exporters(), telemetry...)
	prom, err := harness.StartPrometheus(ctx, g, harness.PrometheusConfig{
		Dir:            filepath.Join(dir, "prometheus"),
		ScrapeInterval: time.Second,
		Jobs: []harness.ScrapeJob{
			// The Collectors' prometheus exporters: attribution metrics and
			// the servers' metrics; honor_labels keeps the servers'
			// service.name in job.
			{Name: "otelcol-idemkit", HonorLabels: true, Targets: p.Exporters()},
			// The Collectors' own telemetry (the dup processor's health).
			{Name: "otelcol-idemkit-telemetry", Targets: telemetry},
		},
	})
	if err != nil {
		return 0, 0, err
	}
	fmt.Printf("    Prometheus %s (config %s)\n", prom.URL, prom.ConfigFile)

	var exercise *dashtest.ExerciseResult
	var guardEx *dashtest.GuardExerciseResult
	var end time.Time
	scraped := func(ctx context.Context, scrapes int) error {
		for range scrapes {
			wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			err := harness.WaitScraped(wctx, prom.API, targets, time.Now())
			cancel()
			if err != nil {
				return err
			}
		}
		return nil
	}
	hooks := demo.Hooks{
		// No traffic before Prometheus has scraped every Collector once.
		CollectorsReady: func(ctx context.Context, _ *demo.Pipeline) error { return scraped(ctx, 1) },
		AfterReport: func(ctx context.Context, _ *demo.Pipeline) error {
			ectx, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			var err error
			if exercise, err = dashtest.Exercise(ectx, "http://"+exOTLP, "http://"+exTel+"/metrics", 4); err != nil {
				return err
			}
			// An MCP server whose outcomes cannot be recorded, exporting
			// its metrics like the demo's servers.
			guardLog, err := os.Create(filepath.Join(mkdir(filepath.Join(dir, "logs")), "guard-exercise.log"))
			if err != nil {
				return err
			}
			defer guardLog.Close()
			if guardEx, err = dashtest.ExportGuardExercise(ectx, dashtest.GuardExerciseConfig{
				Dir: mkdir(filepath.Join(dir, "guard-exercise")), OTLP: p.Entry(), Exporters: p.Exporters(), Log: guardLog,
			}); err != nil {
				return err
			}
			// Two scrapes: a counter born in the exercise needs two samples
			// for rate(). The samples of those scrapes are stamped at their
			// start, before now: now is the time that includes them.
			if err := scraped(ctx, 2); err != nil {
				return err
			}
			end = time.Now().UTC()
			return nil
		},
	}
	res, err := p.Run(ctx, hooks)
	if err != nil {
		return 0, 0, fmt.Errorf("the demo failed (%s): %w", demoLog.Name(), err)
	}
	if !res.OK {
		return 0, 0, fmt.Errorf("the demo's report failed (see %s)", res.Text)
	}
	fmt.Printf("    demo: PASS (%s); exercise: %g evictions, late spans %v; %s: finish errors %v, refusals %v\n",
		res.HTML, exercise.Evictions, exercise.LateSpans, guardEx.Service, guardEx.FinishErrors, guardEx.Refusals)

	out, err := os.Create(filepath.Join(dir, "check.txt"))
	if err != nil {
		return 0, 0, err
	}
	defer out.Close()
	passed, failed, err = check(ctx, io.MultiWriter(out, summary{os.Stdout}), prom.URL, start, end, p, exTel, exercise, guardEx)
	return passed, failed, err
}

func mkdir(dir string) string {
	_ = os.MkdirAll(dir, 0o755)
	return dir
}

// summary passes on the lines worth seeing on the terminal: failures, the
// mutants and the evidence (check.txt has every line).
type summary struct{ w io.Writer }

func (s summary) Write(b []byte) (int, error) {
	for _, line := range strings.SplitAfter(string(b), "\n") {
		if strings.HasPrefix(line, "FAIL") || strings.HasPrefix(line, "PASS  mutant") ||
			strings.HasPrefix(line, "  ") && !strings.HasPrefix(line, "      ") {
			t := line
			if len(t) > 200 {
				t = t[:197] + "…\n"
			}
			fmt.Fprint(s.w, "    "+t)
		}
	}
	return len(b), nil
}

// check runs the static checks, every panel target against Prometheus,
// the value expectations and the mutants.
func check(ctx context.Context, w io.Writer, promURL string, start, end time.Time, p *demo.Pipeline, exTel string, ex *dashtest.ExerciseResult, guardEx *dashtest.GuardExerciseResult) (passed, failed int, err error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	reg, err := metrics.Load()
	if err != nil {
		return 0, 0, err
	}
	ds, err := dashtest.LoadAll(dashboards.Files, "idemkit-*.json")
	if err != nil {
		return 0, 0, err
	}
	fmt.Fprintf(w, "== static checks (%d dashboards)\n", len(ds))
	problems := dashtest.LintAll(ds, reg)
	for _, p := range problems {
		fmt.Fprintln(w, "FAIL  static:", p)
	}
	if len(problems) == 0 {
		fmt.Fprintln(w, "PASS  static: JSON, data source input, titles, descriptions, units, legends, PromQL syntax, metrics and labels against metrics.json")
	}
	ev, err := dashtest.LoadEvidence(ctx, p.Opts.Dir, p.SpansFiles())
	if err != nil {
		return 0, 0, err
	}
	prom, err := dashtest.NewProm(promURL)
	if err != nil {
		return 0, 0, err
	}
	// The gap histogram's bucket bounds, as exported (not as configured).
	gap, err := reg.ByID("dup_gap")
	if err != nil {
		return 0, 0, err
	}
	series, err := prom.Series(ctx, gap.Name+"_bucket", start, end)
	if err != nil {
		return 0, 0, err
	}
	leSet := map[float64]bool{}
	for _, s := range series {
		if le, err := dashtest.ParseLe(s["le"]); err == nil {
			leSet[le] = true
		}
	}
	var les []float64
	for le := range leSet {
		les = append(les, le)
	}
	sort.Float64s(les)
	exp, err := dashtest.IdemkitExpectations(dashtest.Facts{
		Evidence: ev, Exercise: ex, DemoInstances: p.ProcessorTelemetry(), ExerciserInstance: exTel,
		GapBounds: les, GapUnit: gap.Unit,
		EvidenceCopies: p.Opts.Topology == demo.TopologyTwoTier, Guard: guardEx,
	})
	if err != nil {
		return 0, 0, err
	}
	fmt.Fprintf(w, "\nEvidence from %s:\n", p.Opts.Dir)
	for _, name := range dashtest.SortedKeys(ev.Services) {
		s := ev.Services[name]
		fmt.Fprintf(w, "  %-26s protected=%-5v issue_refund requests %d, duplicates expected %d, double refunds in its database %d\n",
			name, s.Protected, s.Requests, len(s.Duplicates), s.DoubleRefunds())
	}
	fmt.Fprintf(w, "  %d execute_tool spans, %d MCP request spans and %d inference spans written by the Collectors\n", len(ev.ToolSpans), len(ev.Requests), ev.InferenceSpans)
	fmt.Fprintf(w, "  exercised Collector %s: evictions %g, late spans %v\n", exTel, ex.Evictions, ex.LateSpans)
	fmt.Fprintf(w, "  exercised MCP server %s: %d spans, %d session(s); outcomes not recorded %v, refusals %v\n\n",
		guardEx.Service, len(guardEx.Spans), guardEx.Sessions, guardEx.FinishErrors, guardEx.Refusals)

	live := &dashtest.Live{Prom: prom, Reg: reg, Start: start, End: end, ScrapeInterval: time.Second, Expect: exp, Out: w}
	passed, failed = live.Run(ctx, ds)

	// The checks must be able to fail on this very data: break one panel at
	// a time the way a dashboard author could, and demand that the live run
	// (not only the static checks) catches it.
	fmt.Fprintf(w, "\n== mutants: each broken panel must fail the live checks\n")
	for _, m := range mutants(reg) {
		what := fmt.Sprintf("mutant %s: %s", m.panel, m.what)
		caught, detail, err := runMutant(ctx, dashboards.Files, m, live, exp)
		switch {
		case err != nil:
			failed++
			fmt.Fprintf(w, "FAIL  %s: %v\n", what, err)
		case !caught:
			failed++
			fmt.Fprintf(w, "FAIL  %s: not caught: %s\n", what, detail)
		default:
			passed++
			fmt.Fprintf(w, "PASS  %s: caught (%s)\n", what, detail)
		}
	}
	if len(problems) > 0 {
		failed += len(problems)
	} else {
		passed++
	}
	targets := 0
	for _, d := range ds {
		for _, p := range d.Panels {
			targets += len(p.Targets)
		}
	}
	fmt.Fprintf(w, "\n%d dashboards, %d panel targets, %d value expectations\n", len(ds), targets, len(exp))
	fmt.Fprintf(w, "dashboards: %d passed, %d failed\n", passed, failed)
	return passed, failed, nil
}

// mutant is a plausible mistake in one panel target.
type mutant struct {
	file, panel, ref string
	what             string
	from, to         string // replaced in the expression; from "" sets it to to
	want             string // a FAIL line must contain it ("want": the panel's value differs from the run's evidence)
}

func mutants(reg *metrics.Registry) []mutant {
	calls, gap, evictions := reg.Name("dup_calls"), reg.Name("dup_gap"), reg.Name("proc_evictions")
	finish := reg.Name("finish_errors")
	return []mutant{
		{"idemkit-duplicate-attribution.json", "Duplicates by cause", "A",
			"plain increase() over the range (loses every series born in it)", "",
			`sum by (idemkit_duplicate_cause) (increase(` + calls + `{service_name=~"$service", gen_ai_tool_name=~"$tool"}[$__range]))`,
			"want"},
		{"idemkit-duplicate-attribution.json", "Leaked duplicates (double side effects)", "A",
			"counts every duplicate, not only the leaked ones", `, idemkit_duplicate_effect="leaked"`, ``, "want"},
		{"idemkit-duplicate-attribution.json", "Stopped by idemkit (suppressed + blocked)", "A",
			"misspelt label value in a regex (only blocked matches)", `suppressed|blocked`, `supressed|blocked`, "want"},
		{"idemkit-duplicate-attribution.json", "Gap between original and duplicate, by cause (p50 / p90 / p99)", "D",
			"_sum instead of _count", gap + "_count", gap + "_sum", "want"},
		{"idemkit-guard.json", "Key mismatches", "A",
			"outcome value that does not exist (mismatched)", `idemkit_outcome="mismatch"`, `idemkit_outcome="mismatched"`, "matches no series"},
		{"idemkit-guard.json", "Tool calls by outcome", "A",
			"service_name label instead of job: .* hides it, the explicit All does not", `job=~"$job"`, `service_name=~"$job"`, "[All=(every value)]"},
		{"idemkit-guard.json", "Outcomes not recorded", "A",
			"counts one finish error only (lease_lost), not every reason", finish + `{job=~"$job", gen_ai_tool_name=~"$tool"}`,
			finish + `{job=~"$job", gen_ai_tool_name=~"$tool", idemkit_finish_error="lease_lost"}`, "want 2"},
		{"idemkit-guard.json", "Refused calls by reason", "A",
			"only the calls refused before a claim (no outcome), losing in_progress and mismatch", `idemkit_refusal_reason!=""`, `idemkit_outcome=""`, "want"},
		{"idemkit-dup-processor.json", "Evictions by Collector", "A",
			"a _total suffix the Collector's own telemetry does not have", evictions, evictions + "_total", "no series"},
	}
}

// runMutant breaks one target of a copy of its dashboard and runs the live
// checks on that dashboard alone.
func runMutant(ctx context.Context, fsys fs.FS, m mutant, base *dashtest.Live, exp map[string][]dashtest.Expectation) (bool, string, error) {
	b, err := fs.ReadFile(fsys, m.file)
	if err != nil {
		return false, "", err
	}
	d, err := dashtest.Parse(m.file, b)
	if err != nil {
		return false, "", err
	}
	p := d.PanelByTitle(m.panel)
	if p == nil {
		return false, "", fmt.Errorf("no panel %q in %s", m.panel, m.file)
	}
	var t *dashtest.Target
	for _, x := range p.Targets {
		if x.RefID == m.ref {
			t = x
		}
	}
	if t == nil {
		return false, "", fmt.Errorf("panel %q has no target %s", m.panel, m.ref)
	}
	switch {
	case m.from == "":
		t.Expr = m.to
	case !strings.Contains(t.Expr, m.from):
		return false, "", fmt.Errorf("%q is not in the expression any more: update the mutant", m.from)
	default:
		t.Expr = strings.ReplaceAll(t.Expr, m.from, m.to)
	}
	// Only this dashboard's expectations, and only failures of this panel.
	own := map[string][]dashtest.Expectation{}
	for k, v := range exp {
		if strings.HasPrefix(k, d.UID+" | ") {
			own[k] = v
		}
	}
	var out strings.Builder
	l := *base
	l.Out, l.Expect = &out, own
	l.Reg = &dashtest.Registry{Endpoints: base.Reg.Endpoints} // the registry was checked already
	l.Run(ctx, []*dashtest.Dashboard{d})
	prefix := fmt.Sprintf("FAIL  %s #%d %q %s", d.UID, p.ID, p.Title, m.ref)
	for _, line := range strings.Split(out.String(), "\n") {
		if strings.HasPrefix(line, prefix) && strings.Contains(line, m.want) {
			return true, strings.TrimSpace(strings.TrimPrefix(line, prefix)), nil
		}
	}
	var fails []string
	for _, line := range strings.Split(out.String(), "\n") {
		if strings.HasPrefix(line, "FAIL") {
			fails = append(fails, line)
		}
	}
	return false, fmt.Sprintf("no failure of %s %s mentions %q; failures: %s", m.panel, m.ref, m.want, strings.Join(fails, " | ")), nil
}
