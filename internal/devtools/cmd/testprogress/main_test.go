package main

import (
	"bufio"
	"bytes"
	"os"
	"strings"
	"testing"
	"time"
)

// fakeClock is a settable clock.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time { return c.t }

// stream returns the lines of testdata/stream.jsonl (a real `go test -json
// -count=1 ./...` of six packages: a slow passing one, one with a skipped
// test, a build failure, a failing test, no test files, a failing subtest;
// preceded by a go command line that is not JSON) for which keep is true.
func stream(t *testing.T, keep func(line string) bool) string {
	t.Helper()
	f, err := os.Open("testdata/stream.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var b strings.Builder
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if keep(sc.Text()) {
			b.WriteString(sc.Text() + "\n")
		}
	}
	return b.String()
}

func TestPrinter_FailingRun(t *testing.T) {
	clock := &fakeClock{t: time.Unix(0, 0)}
	var out, skips bytes.Buffer
	p := newPrinter(&out, clock.now)
	if err := p.read(strings.NewReader(stream(t, func(string) bool { return true }))); err != nil {
		t.Fatal(err)
	}
	if p.finish(&skips) {
		t.Error("finish reported success for a run with failures")
	}
	want := `go: downloading example.com/x v1.0.0
# example.com/order/c [example.com/order/c.test]
c/c.go:2:23: cannot use "a" (untyped string constant) as int value in return statement
[     0s] ok   example.com/order/b  0.0s  (1 passed, 1 skipped)  1 done, 1 running
[     0s] FAIL example.com/order/c  0.0s  (build failed)  2 done, 1 running
=== RUN   TestFail
hello out
    d_test.go:3: log
    d_test.go:3: boom
--- FAIL: TestFail (0.00s)
[     0s] FAIL example.com/order/d  0.0s  (1 passed, 1 FAILED)  3 done, 1 running
=== RUN   TestParent
    f_test.go:3: parent log
--- FAIL: TestParent (0.00s)
=== RUN   TestParent/bad
    f_test.go:3: sub broke
--- FAIL: TestParent/bad (0.00s)
[     0s] FAIL example.com/order/f  0.0s  (1 passed, 2 FAILED)  5 done, 1 running
[     0s] ok   example.com/order/a  2.0s  (1 passed)  6 done, 0 running

go test: 4 passed, 3 FAILED, 1 skipped, in 6 packages (1 without tests), 0s
ok  	example.com/order/a	2.003s
ok  	example.com/order/b	0.002s
FAIL	example.com/order/c [build failed]
FAIL	example.com/order/d	0.002s
?   	example.com/order/e	[no test files]
FAIL	example.com/order/f	0.002s
FAIL
`
	if got := out.String(); got != want {
		t.Errorf("output:\n%s\nwant:\n%s", got, want)
	}
	if got, want := skips.String(), "example.com/order/b TestSkip: b_test.go:4: no chromium\n"; got != want {
		t.Errorf("skips file: %q, want %q", got, want)
	}
}

// A run where everything passes ends with go test's own result lines, and
// names its skipped tests when no skips file takes them.
func TestPrinter_PassingRunEndsWithGoTestLines(t *testing.T) {
	clock := &fakeClock{t: time.Unix(0, 0)}
	var out bytes.Buffer
	p := newPrinter(&out, clock.now)
	passing := func(l string) bool {
		return strings.Contains(l, `"example.com/order/a"`) || strings.Contains(l, `"example.com/order/b"`) ||
			strings.Contains(l, `"example.com/order/e"`)
	}
	if err := p.read(strings.NewReader(stream(t, passing))); err != nil {
		t.Fatal(err)
	}
	clock.t = clock.t.Add(75 * time.Second)
	if !p.finish(nil) {
		t.Fatalf("finish reported failure for a passing run:\n%s", out.String())
	}
	lines := strings.Split(strings.TrimRight(out.String(), "\n"), "\n")
	wantEnd := []string{
		"go test: 2 passed, 1 skipped, in 3 packages (1 without tests), 1m15s",
		"SKIPPED (1):",
		"  example.com/order/b TestSkip: b_test.go:4: no chromium",
		"ok  \texample.com/order/a\t2.003s",
		"ok  \texample.com/order/b\t0.002s",
		"?   \texample.com/order/e\t[no test files]",
	}
	if len(lines) < len(wantEnd) {
		t.Fatalf("output too short:\n%s", out.String())
	}
	got := lines[len(lines)-len(wantEnd):]
	for i := range wantEnd {
		if got[i] != wantEnd[i] {
			t.Errorf("line %d from the end: %q, want %q", len(wantEnd)-i, got[i], wantEnd[i])
		}
	}
}

// A stream that ends while a package runs (go test killed) is a failure,
// and the package is named.
func TestPrinter_StreamCutShortFails(t *testing.T) {
	clock := &fakeClock{t: time.Unix(0, 0)}
	var out bytes.Buffer
	p := newPrinter(&out, clock.now)
	cut := func(l string) bool {
		return strings.Contains(l, `"example.com/order/a"`) && !strings.Contains(l, `"Action":"pass"`) &&
			!strings.Contains(l, `ok  \t`)
	}
	if err := p.read(strings.NewReader(stream(t, cut))); err != nil {
		t.Fatal(err)
	}
	if p.finish(nil) {
		t.Fatal("finish reported success for a package that never finished")
	}
	if !strings.Contains(out.String(), "FAIL\texample.com/order/a\t[did not finish]\nFAIL\n") {
		t.Errorf("the unfinished package is not reported:\n%s", out.String())
	}
}

// The heartbeat's line says what is compiling or running, and for how long.
func TestStatus_NamesWhatIsRunning(t *testing.T) {
	clock := &fakeClock{t: time.Unix(0, 0)}
	p := newPrinter(&bytes.Buffer{}, clock.now)
	clock.t = clock.t.Add(time.Minute)
	if got, want := p.status(), "[  1m00s] compiling the test binaries (with -race this takes minutes); no package has started yet"; got != want {
		t.Errorf("before any package: %q, want %q", got, want)
	}
	p.handle(event{Action: "start", Package: "example.com/slow"})
	p.handle(event{Action: "run", Package: "example.com/slow", Test: "TestChaos"})
	p.handle(event{Action: "run", Package: "example.com/slow", Test: "TestChaos/restart"})
	clock.t = clock.t.Add(30 * time.Second)
	p.handle(event{Action: "start", Package: "example.com/quick"})
	p.handle(event{Action: "run", Package: "example.com/quick", Test: "TestA"})
	p.handle(event{Action: "pass", Package: "example.com/quick", Test: "TestA"})
	p.handle(event{Action: "pass", Package: "example.com/quick", Elapsed: 0.1})
	clock.t = clock.t.Add(3 * time.Minute)
	if got, want := p.status(), "[  4m30s] 1 done, still running: example.com/slow for 3m30s (TestChaos 3m30s)"; got != want {
		t.Errorf("while one runs: %q, want %q", got, want)
	}
	p.handle(event{Action: "pass", Package: "example.com/slow", Test: "TestChaos/restart"})
	p.handle(event{Action: "pass", Package: "example.com/slow", Test: "TestChaos"})
	p.handle(event{Action: "pass", Package: "example.com/slow", Elapsed: 210})
	if got, want := p.status(), "[  4m30s] 2 done, none running: compiling the next test binaries"; got != want {
		t.Errorf("between packages: %q, want %q", got, want)
	}
}
