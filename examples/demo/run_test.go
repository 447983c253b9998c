package demo

import (
	"testing"
	"time"
)

// The closing line counts from when scripts/demo.sh started, so the demo
// command's own compilation is in the total and named; without that start
// it says what it leaves out.
func TestTookLine_NamesWhatTheTimeWentTo(t *testing.T) {
	began := time.Unix(1000, 0)
	started, built, now := began.Add(40*time.Second), began.Add(100*time.Second), began.Add(385*time.Second)
	if got, want := tookLine(began, started, built, now),
		"Demo took 385s in all: 40s compiling the demo command, 60s building the Collector and the demo programs, 285s running the scenarios and writing the report."; got != want {
		t.Errorf("with the script's start:\n got %q\nwant %q", got, want)
	}
	if got, want := tookLine(time.Time{}, started, built, now),
		"Demo took 345s: 60s building the Collector and the demo programs, 285s running the scenarios and writing the report (the compilation of the demo command itself not included)."; got != want {
		t.Errorf("without it:\n got %q\nwant %q", got, want)
	}
}
