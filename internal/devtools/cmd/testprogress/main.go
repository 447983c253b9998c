// Command testprogress turns the `go test -json` stream into progress a
// person can follow, for scripts/test.sh (make test):
//
//	go test -json -race ./... | go run ./internal/devtools/cmd/testprogress [-skips FILE] [-heartbeat 60s]
//
// Without -json, go test prints each package's result only once every
// package named before it has printed: one slow package early in the list
// holds back every line behind it, for minutes. With -json the events
// stream as they happen, and testprogress prints:
//
//   - a line per package as it finishes: its result, its time, how many
//     tests passed and skipped;
//   - the whole output of a failing test as soon as its package finishes
//     (and build errors as they come);
//   - a line naming the packages and tests still running, and for how
//     long, whenever nothing was printed for -heartbeat (also while the
//     test binaries are still compiling);
//   - at the end, the totals, then go test's own result lines (ok, FAIL,
//     ? … [no test files]) sorted by package, then "FAIL" when anything
//     failed, as go test ends.
//
// Every skipped test is named with its reason: appended to -skips FILE
// ("PACKAGE TEST: reason" per line, for the script to list at its end), or
// printed before go test's lines when -skips is not given. Lines of the
// stream that are not JSON are passed through. It exits 1 when a test or
// package failed, 0 otherwise.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"time"
)

func main() {
	skips := flag.String("skips", "", "append every skipped test to this file (PACKAGE TEST: reason), instead of printing them")
	heartbeat := flag.Duration("heartbeat", time.Minute, "print what is still running after this long without a line (0: never)")
	totals := flag.String("totals", "", "append this run's counts to this file, one line \"PASSED FAILED SKIPPED\" (scripts/test.sh sums them into its closing line)")
	flag.Parse()

	p := newPrinter(os.Stdout, time.Now)
	if *heartbeat > 0 {
		stop := p.heartbeat(*heartbeat)
		defer stop()
	}
	if err := p.read(os.Stdin); err != nil {
		fmt.Fprintln(os.Stderr, "testprogress: reading the go test stream:", err)
		os.Exit(1)
	}
	var skipOut io.Writer
	if *skips != "" {
		f, err := os.OpenFile(*skips, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			fmt.Fprintln(os.Stderr, "testprogress:", err)
			os.Exit(1)
		}
		defer f.Close()
		skipOut = f
	}
	ok := p.finish(skipOut)
	if *totals != "" {
		f, err := os.OpenFile(*totals, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err == nil {
			_, err = fmt.Fprintf(f, "%d %d %d\n", p.passed, p.failed, p.skipped)
			err = errors.Join(err, f.Close())
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "testprogress:", err)
			os.Exit(1)
		}
	}
	if !ok {
		os.Exit(1)
	}
}

// event is one line of `go test -json` (cmd/test2json, plus the go
// command's build events).
type event struct {
	Time       time.Time
	Action     string
	Package    string
	Test       string
	Elapsed    float64
	Output     string
	ImportPath string
}

// test is one test (or subtest) of a package.
type test struct {
	name    string
	started time.Time
	out     []string // kept while it runs; dropped when it passes
	done    bool
	result  string
}

// pkg is one package of the run.
type pkg struct {
	name    string
	started time.Time
	tests   map[string]*test
	order   []*test  // by start
	out     []string // package-level output (TestMain, panics, timeouts)
	final   string   // go test's own result line ("ok  \tpkg\t1.2s")
	result  string   // pass, fail, skip (no test files); "" while it runs
	elapsed float64
	passed  int
	failed  int
	skipped int
}

// skip is a skipped test and its reason.
type skip struct{ pkg, test, reason string }

// printer keeps the state of a run and prints it.
type printer struct {
	mu      sync.Mutex
	w       io.Writer
	now     func() time.Time
	start   time.Time
	last    time.Time // when a line was last printed
	pkgs    map[string]*pkg
	skips   []skip
	anyFail bool
	// passed, failed and skipped are the run's totals, set by finish.
	passed, failed, skipped int
}

func newPrinter(w io.Writer, now func() time.Time) *printer {
	t := now()
	return &printer{w: w, now: now, start: t, last: t, pkgs: map[string]*pkg{}}
}

// read consumes the stream until EOF.
func (p *printer) read(r io.Reader) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 64*1024*1024)
	for sc.Scan() {
		line := sc.Bytes()
		var e event
		if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &e) != nil || (e.Action == "" && e.ImportPath == "") {
			p.mu.Lock()
			p.println(string(line))
			p.mu.Unlock()
			continue
		}
		p.handle(e)
	}
	return sc.Err()
}

func (p *printer) pkg(name string) *pkg {
	k := p.pkgs[name]
	if k == nil {
		k = &pkg{name: name, started: p.now(), tests: map[string]*test{}}
		p.pkgs[name] = k
	}
	return k
}

// handle applies one event.
func (p *printer) handle(e event) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch e.Action {
	case "build-output":
		p.print(e.Output)
		return
	case "build-fail":
		p.anyFail = true
		return
	}
	if e.Package == "" {
		return
	}
	k := p.pkg(e.Package)
	if e.Test == "" {
		switch e.Action {
		case "start":
			k.started = p.now()
		case "output":
			if isFinal(e.Output) {
				k.final = strings.TrimRight(e.Output, "\n")
			} else if e.Output != "PASS\n" && e.Output != "FAIL\n" {
				k.out = append(k.out, e.Output)
			}
		case "pass", "fail", "skip":
			k.result, k.elapsed = e.Action, e.Elapsed
			p.finished(k)
		}
		return
	}
	t := k.tests[e.Test]
	if t == nil {
		t = &test{name: e.Test, started: p.now()}
		k.tests[e.Test] = t
		k.order = append(k.order, t)
	}
	switch e.Action {
	case "output":
		t.out = append(t.out, e.Output)
	case "pass":
		t.done, t.result, t.out = true, "pass", nil
		k.passed++
	case "fail":
		t.done, t.result = true, "fail"
		k.failed++
	case "skip":
		t.done, t.result = true, "skip"
		k.skipped++
		p.skips = append(p.skips, skip{pkg: k.name, test: t.name, reason: skipReason(t.out)})
		t.out = nil
	}
}

// isFinal reports go test's result line of a package.
func isFinal(out string) bool {
	return strings.HasPrefix(out, "ok  \t") || strings.HasPrefix(out, "FAIL\t") || strings.HasPrefix(out, "?   \t")
}

// skipReason is what a skipped test logged, without the framing lines.
func skipReason(out []string) string {
	var parts []string
	for _, l := range out {
		s := strings.TrimSpace(l)
		if s == "" || strings.HasPrefix(s, "=== ") || strings.HasPrefix(s, "--- SKIP") {
			continue
		}
		parts = append(parts, s)
	}
	if len(parts) == 0 {
		return "(no reason given)"
	}
	return strings.Join(parts, " ")
}

// finished prints a package's line, and the output of its failures.
func (p *printer) finished(k *pkg) {
	if k.result == "fail" {
		p.anyFail = true
		for _, t := range k.order {
			if t.result != "fail" {
				continue
			}
			for _, l := range t.out {
				p.print(l)
			}
		}
		for _, l := range k.out {
			p.print(l)
		}
	}
	if k.result == "skip" && k.passed+k.failed+k.skipped == 0 {
		return // no test files: only in the final lines
	}
	result := map[string]string{"pass": "ok  ", "fail": "FAIL", "skip": "?   "}[k.result]
	running := 0
	for _, o := range p.pkgs {
		if o.result == "" {
			running++
		}
	}
	c := counts(k.passed, k.failed, k.skipped)
	if k.passed+k.failed+k.skipped == 0 && k.result == "fail" {
		c = "no test ran"
		if strings.Contains(k.final, "[build failed]") {
			c = "build failed"
		}
	}
	p.println(fmt.Sprintf("[%7s] %s %s  %.1fs  (%s)  %d done, %d running",
		clock(p.now().Sub(p.start)), result, k.name, k.elapsed, c, p.done(), running))
}

func counts(passed, failed, skipped int) string {
	s := fmt.Sprintf("%d passed", passed)
	if failed > 0 {
		s += fmt.Sprintf(", %d FAILED", failed)
	}
	if skipped > 0 {
		s += fmt.Sprintf(", %d skipped", skipped)
	}
	return s
}

func (p *printer) done() int {
	n := 0
	for _, k := range p.pkgs {
		if k.result != "" {
			n++
		}
	}
	return n
}

// status says what is still running, for the heartbeat.
func (p *printer) status() string {
	now := p.now()
	var running []*pkg
	for _, k := range p.pkgs {
		if k.result == "" {
			running = append(running, k)
		}
	}
	head := fmt.Sprintf("[%7s] ", clock(now.Sub(p.start)))
	if len(running) == 0 {
		if len(p.pkgs) == 0 {
			return head + "compiling the test binaries (with -race this takes minutes); no package has started yet"
		}
		return head + fmt.Sprintf("%d done, none running: compiling the next test binaries", p.done())
	}
	slices.SortFunc(running, func(a, b *pkg) int { return a.started.Compare(b.started) })
	var parts []string
	for _, k := range running {
		s := fmt.Sprintf("%s for %s", k.name, clock(now.Sub(k.started)))
		var tests []string
		for _, t := range k.order {
			if !t.done && !strings.Contains(t.name, "/") {
				tests = append(tests, fmt.Sprintf("%s %s", t.name, clock(now.Sub(t.started))))
			}
		}
		if len(tests) > 3 {
			tests = append(tests[:3], fmt.Sprintf("and %d more", len(tests)-3))
		}
		if len(tests) > 0 {
			s += " (" + strings.Join(tests, ", ") + ")"
		}
		parts = append(parts, s)
	}
	return head + fmt.Sprintf("%d done, still running: %s", p.done(), strings.Join(parts, "; "))
}

// heartbeat prints the status whenever nothing was printed for every; the
// returned function stops it.
func (p *printer) heartbeat(every time.Duration) func() {
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(min(every, 5*time.Second))
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				p.mu.Lock()
				if p.now().Sub(p.last) >= every {
					p.println(p.status())
				}
				p.mu.Unlock()
			}
		}
	}()
	return func() { close(stop); wg.Wait() }
}

// finish prints the totals, the skips (unless skipOut takes them) and go
// test's result lines; it reports whether everything passed.
func (p *printer) finish(skipOut io.Writer) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	var passed, failed, skipped, noTests int
	names := make([]string, 0, len(p.pkgs))
	for name, k := range p.pkgs {
		names = append(names, name)
		passed, failed, skipped = passed+k.passed, failed+k.failed, skipped+k.skipped
		if k.result == "skip" && k.passed+k.failed+k.skipped == 0 {
			noTests++
		}
		if k.result == "" {
			// The stream ended before the package did (go test was killed).
			p.anyFail = true
			if k.final == "" {
				k.final = "FAIL\t" + k.name + "\t[did not finish]"
			}
		}
	}
	slices.Sort(names)
	p.passed, p.failed, p.skipped = passed, failed, skipped
	p.println("")
	p.println(fmt.Sprintf("go test: %s, in %d packages (%d without tests), %s",
		counts(passed, failed, skipped), len(names), noTests, clock(p.now().Sub(p.start))))
	if skipOut != nil {
		for _, s := range p.skips {
			fmt.Fprintf(skipOut, "%s %s: %s\n", s.pkg, s.test, s.reason)
		}
	} else if len(p.skips) > 0 {
		p.println(fmt.Sprintf("SKIPPED (%d):", len(p.skips)))
		for _, s := range p.skips {
			p.println(fmt.Sprintf("  %s %s: %s", s.pkg, s.test, s.reason))
		}
	}
	for _, name := range names {
		if f := p.pkgs[name].final; f != "" {
			p.println(f)
		}
	}
	if p.anyFail || failed > 0 {
		p.println("FAIL")
		return false
	}
	return true
}

func (p *printer) print(s string) {
	io.WriteString(p.w, s)
	p.last = p.now()
}

func (p *printer) println(s string) { p.print(s + "\n") }

// clock formats a duration to the second: 1h02m03s, 2m03s, 3s.
func clock(d time.Duration) string {
	d = d.Round(time.Second)
	h, m, s := int(d.Hours()), int(d.Minutes())%60, int(d.Seconds())%60
	switch {
	case h > 0:
		return fmt.Sprintf("%dh%02dm%02ds", h, m, s)
	case m > 0:
		return fmt.Sprintf("%dm%02ds", m, s)
	default:
		return fmt.Sprintf("%ds", s)
	}
}
