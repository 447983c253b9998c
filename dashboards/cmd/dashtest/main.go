// Command dashtest checks the idemkit dashboards against a real Prometheus
// that scraped the real demo pipeline. scripts/dashboards-test.sh runs it:
//
//	dashtest wait -prometheus URL -targets H:P,H:P [-timeout D]
//	    waits until Prometheus scraped every target after now, prints the time
//	dashtest exercise -otlp URL -telemetry URL -max-groups N -out FILE
//	    makes a small dup processor evict groups and count late spans
//	dashtest check -prometheus URL -start T -end T -demo-dir DIR ...
//	    static checks, then every panel target against Prometheus, then the
//	    values the headline panels must show; exits 1 on any failure
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/idemkit/idemkit/dashboards/dashtest"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch os.Args[1] {
	case "wait":
		err = wait(os.Args[2:])
	case "exercise":
		err = exercise(os.Args[2:])
	case "check":
		var failed bool
		failed, err = check(os.Args[2:])
		if err == nil && failed {
			os.Exit(1)
		}
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "dashtest:", err)
		os.Exit(2)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: dashtest wait|exercise|check [flags] (see the package comment)")
	os.Exit(2)
}

func wait(args []string) error {
	fl := flag.NewFlagSet("wait", flag.ExitOnError)
	promURL := fl.String("prometheus", "", "Prometheus base URL")
	targets := fl.String("targets", "", "comma-separated host:port of the scrape targets to wait for")
	timeout := fl.Duration("timeout", 30*time.Second, "how long to wait")
	scrapes := fl.Int("scrapes", 1, "how many scrapes of each target after now to wait for (rate() needs two samples of a new series)")
	_ = fl.Parse(args)
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	p := &dashtest.Prom{URL: *promURL}
	for i := 0; i < *scrapes; i++ {
		if err := p.WaitScraped(ctx, strings.Split(*targets, ","), time.Now()); err != nil {
			return err
		}
	}
	// The samples of those scrapes are stamped at their start, after since
	// and before now: now is the time that includes them.
	fmt.Println(time.Now().UTC().Format(time.RFC3339Nano))
	return nil
}

func exercise(args []string) error {
	fl := flag.NewFlagSet("exercise", flag.ExitOnError)
	otlp := fl.String("otlp", "", "OTLP/HTTP base URL of the Collector to exercise")
	tel := fl.String("telemetry", "", "its telemetry endpoint URL (…/metrics)")
	maxGroups := fl.Int("max-groups", 4, "its dup processor's max_groups")
	out := fl.String("out", "", "write the result (JSON) there")
	_ = fl.Parse(args)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := dashtest.Exercise(ctx, *otlp, *tel, *maxGroups)
	if err != nil {
		return err
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	fmt.Printf("exercise: %d spans sent; the processor counted %g evictions, late spans %v, classified %v\n",
		r.Spans, r.Evictions, r.LateSpans, r.Classified)
	return os.WriteFile(*out, b, 0o644)
}

func check(args []string) (failed bool, err error) {
	fl := flag.NewFlagSet("check", flag.ExitOnError)
	dir := fl.String("dir", "dashboards", "the dashboards folder (idemkit-*.json, metrics.json)")
	promURL := fl.String("prometheus", "", "Prometheus base URL")
	start := fl.String("start", "", "start of the run (RFC 3339): the dashboards' time range starts there")
	end := fl.String("end", "", "end of the run (RFC 3339): instant queries run there")
	scrape := fl.Duration("scrape-interval", time.Second, "Prometheus's scrape interval")
	demoDir := fl.String("demo-dir", "", "the demo's work directory (manifest.json, spans.jsonl, */refunds.db)")
	demoInstance := fl.String("demo-instance", "", "instance label of the demo Collector's telemetry target")
	exerciserInstance := fl.String("exerciser-instance", "", "instance label of the exercised Collector's telemetry target")
	exerciseFile := fl.String("exercise", "", "dashtest exercise's result")
	_ = fl.Parse(args)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	fsys := os.DirFS(*dir)
	regData, err := fs.ReadFile(fsys, "metrics.json")
	if err != nil {
		return false, err
	}
	reg, err := dashtest.ParseRegistry(regData)
	if err != nil {
		return false, err
	}
	ds, err := dashtest.LoadAll(fsys, "idemkit-*.json")
	if err != nil {
		return false, err
	}
	fmt.Printf("== static checks (%d dashboards)\n", len(ds))
	problems := dashtest.LintAll(ds, reg)
	for _, p := range problems {
		fmt.Println("FAIL  static:", p)
	}
	if len(problems) == 0 {
		fmt.Println("PASS  static: JSON, data source input, titles, descriptions, units, legends, PromQL syntax, metrics and labels against metrics.json")
	}

	t0, err := time.Parse(time.RFC3339Nano, *start)
	if err != nil {
		return false, fmt.Errorf("-start: %w", err)
	}
	t1, err := time.Parse(time.RFC3339Nano, *end)
	if err != nil {
		return false, fmt.Errorf("-end: %w", err)
	}
	ev, err := dashtest.LoadEvidence(ctx, *demoDir)
	if err != nil {
		return false, err
	}
	var ex *dashtest.ExerciseResult
	if *exerciseFile != "" {
		b, err := os.ReadFile(*exerciseFile)
		if err != nil {
			return false, err
		}
		ex = &dashtest.ExerciseResult{}
		if err := json.Unmarshal(b, ex); err != nil {
			return false, fmt.Errorf("%s: %w", *exerciseFile, err)
		}
	}
	prom := &dashtest.Prom{URL: *promURL}
	// The gap histogram's bucket bounds, as exported (not as configured).
	series, err := prom.Series(ctx, "idemkit_duplicate_gap_milliseconds_bucket", t0, t1)
	if err != nil {
		return false, err
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
		Evidence: ev, Exercise: ex, DemoInstance: *demoInstance, ExerciserInstance: *exerciserInstance, GapBounds: les,
	})
	if err != nil {
		return false, err
	}
	fmt.Printf("\nEvidence from %s:\n", *demoDir)
	for _, name := range sortedKeys(ev.Services) {
		s := ev.Services[name]
		fmt.Printf("  %-26s protected=%-5v issue_refund requests %d, duplicates expected %d, double refunds in its database %d\n",
			name, s.Protected, s.Requests, len(s.Duplicates), s.DoubleRefunds())
	}
	fmt.Printf("  %d execute_tool spans written by the Collector\n", len(ev.ToolSpans))
	if ex != nil {
		fmt.Printf("  exercised Collector %s: evictions %g, late spans %v\n", *exerciserInstance, ex.Evictions, ex.LateSpans)
	}
	fmt.Println()

	live := &dashtest.Live{Prom: prom, Reg: reg, Start: t0, End: t1, ScrapeInterval: *scrape, Expect: exp, Out: os.Stdout}
	passed, nfailed := live.Run(ctx, ds)

	// The checks must be able to fail on this very data: break one panel at
	// a time the way a dashboard author could, and demand that the live run
	// (not only the static checks) catches it.
	fmt.Printf("\n== mutants: each broken panel must fail the live checks\n")
	for _, m := range mutants {
		what := fmt.Sprintf("mutant %s: %s", m.panel, m.what)
		caught, detail, err := runMutant(ctx, fsys, m, live, exp)
		switch {
		case err != nil:
			nfailed++
			fmt.Printf("FAIL  %s: %v\n", what, err)
		case !caught:
			nfailed++
			fmt.Printf("FAIL  %s: not caught: %s\n", what, detail)
		default:
			passed++
			fmt.Printf("PASS  %s: caught (%s)\n", what, detail)
		}
	}
	if len(problems) > 0 {
		nfailed += len(problems)
	} else {
		passed++
	}
	targets := 0
	for _, d := range ds {
		for _, p := range d.Panels {
			targets += len(p.Targets)
		}
	}
	fmt.Printf("\n%d dashboards, %d panel targets, %d value expectations\n", len(ds), targets, len(exp))
	fmt.Printf("dashboards: %d passed, %d failed\n", passed, nfailed)
	return nfailed > 0, nil
}

// mutant is a plausible mistake in one panel target.
type mutant struct {
	file, panel, ref string
	what             string
	from, to         string // replaced in the expression; from "" sets it to to
	want             string // a FAIL line must contain it
}

var mutants = []mutant{
	{"idemkit-duplicate-attribution.json", "Duplicates by cause", "A",
		"plain increase() over the range (loses every series born in it)", "",
		`sum by (idemkit_duplicate_cause) (increase(idemkit_duplicate_calls_total{service_name=~"$service", gen_ai_tool_name=~"$tool"}[$__range]))`,
		"want"},
	{"idemkit-duplicate-attribution.json", "Leaked duplicates (double side effects)", "A",
		"reads idemkit_duplicate_calls_total instead of idemkit_duplicate_leaked_total",
		"idemkit_duplicate_leaked_total", "idemkit_duplicate_calls_total", "want 4"},
	{"idemkit-duplicate-attribution.json", "Stopped by idemkit (suppressed + blocked)", "A",
		"misspelt label value in a regex (only blocked matches)", `suppressed|blocked`, `supressed|blocked`, "want 4"},
	{"idemkit-duplicate-attribution.json", "Gap between original and duplicate, by cause (p50 / p90 / p99)", "D",
		"_sum instead of _count", "idemkit_duplicate_gap_milliseconds_count", "idemkit_duplicate_gap_milliseconds_sum", "want"},
	{"idemkit-guard.json", "Key mismatches", "A",
		"outcome value that does not exist (mismatched)", `idemkit_outcome="mismatch"`, `idemkit_outcome="mismatched"`, "matches no series"},
	{"idemkit-guard.json", "Tool calls by outcome", "A",
		"service_name label instead of job: .* hides it, the explicit All does not", `job=~"$job"`, `service_name=~"$job"`, "[All=(every value)]"},
	{"idemkit-dup-processor.json", "Evictions by Collector", "A",
		"the _total suffix the Collector's own telemetry does not have", "otelcol_processor_dup_evictions", "otelcol_processor_dup_evictions_total", "no series"},
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

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
