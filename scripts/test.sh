#!/usr/bin/env bash
# test.sh runs every test of the project, on a fresh machine too: it installs
# what the tests need (PostgreSQL's server programs, the Collector builder),
# then runs the Go tests of every module against a real PostgreSQL (a
# throwaway cluster, or TEST_DATABASE_URL), the Collector components and the
# end-to-end tests. Under CI=true (.ci/run) no test skips: one that cannot
# get what it needs (Chromium, Prometheus, Node.js) installs it or fails.
# Elsewhere such a test skips, and every skipped test is listed, with its
# reason, at the end.
#
# The Go tests run with -json through internal/devtools/cmd/testprogress:
# plain go test prints a package's result only after every package before
# it in the list has printed, so one slow package held back every line for
# minutes. Now a line is printed as each package finishes, a line naming
# what still runs after a minute of silence, a failing test's output as soon
# as its package ends, and, last, go test's own result lines.
# Each step's time is printed as it ends, and all of them at the end.
# Usage: make test   (or scripts/test.sh from anywhere)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

work="$(mktemp -d "${TMPDIR:-/tmp}/idemkit-test.XXXXXX")"
# Every skipped test, one "PACKAGE TEST: reason" per line (testprogress
# -skips, and scripts/collector-test.sh through the same variables).
export IDEMKIT_TEST_SKIPS="$work/skipped.txt"
export IDEMKIT_TESTPROGRESS="$work/testprogress"
# Every go test run's counts, one "PASSED FAILED SKIPPED" per line
# (testprogress -totals): the summary's closing line sums them.
export IDEMKIT_TEST_TOTALS="$work/totals.txt"
: >"$IDEMKIT_TEST_SKIPS"
: >"$IDEMKIT_TEST_TOTALS"

started=$SECONDS
step_name="" step_start=$SECONDS times=()
end_step() {
  if [[ -n "$step_name" ]]; then
    times+=("$(printf '%6ds  %s' $((SECONDS - step_start)) "$step_name")")
    printf '    (took %ds)\n' $((SECONDS - step_start))
  fi
  step_name=""
}
step() { end_step; step_name="$*" step_start=$SECONDS; printf '\n==> %s\n' "$*"; }
# summary prints each step's time and the skipped tests; it runs on exit,
# after a failure too.
summary() {
  local rc=$?
  end_step
  if [[ $rc -eq 0 ]]; then
    printf '\n==> all tests passed in %ds:\n' $((SECONDS - started))
  else
    printf '\n==> make test FAILED (exit %d) after %ds:\n' "$rc" $((SECONDS - started))
  fi
  printf '%s\n' "${times[@]}"
  if [[ -s "$IDEMKIT_TEST_SKIPS" ]]; then
    printf '\nSKIPPED: %d tests did not run (under CI=true each would install what it needs or fail):\n' "$(wc -l <"$IDEMKIT_TEST_SKIPS")"
    sed 's/^/  /' "$IDEMKIT_TEST_SKIPS"
  else
    printf '\nSKIPPED: none\n'
  fi
  # The closing line: every Go test of the run, summed over its go test runs.
  awk '{p+=$1; f+=$2; s+=$3} END {printf "\ngo tests: %d passed, %d failed, %d skipped\n", p, f, s}' "$IDEMKIT_TEST_TOTALS"
  rm -rf "$work"
}
trap summary EXIT

step "prerequisites"
go version
scripts/ensure-postgres.sh

step "format, vet and staticcheck (make lint)"
scripts/lint.sh

# The library module, the examples, the idemkit command and the development
# tools (go.work ties the modules together; ./... stops at a module's edge).
pkgs=(./... ./examples/... ./cmd/idemkit/... ./internal/devtools/... ./internal/testing/harness/... ./spancontract/...)

go build -o "$IDEMKIT_TESTPROGRESS" ./internal/devtools/cmd/testprogress

step "idemkit, stores, instrument, examples, cmd/idemkit (race detector on)"
go test -json -race -count=1 -timeout 30m "${pkgs[@]}" | "$IDEMKIT_TESTPROGRESS" -skips "$IDEMKIT_TEST_SKIPS" -totals "$IDEMKIT_TEST_TOTALS"

step "installable by strangers: every public module from a file-system proxy, outside the repository"
scripts/consumer-test.sh

step "Collector components and end-to-end pipeline"
scripts/collector-test.sh

if [[ -x scripts/dashboards-test.sh ]]; then
  step "dashboards against a real Prometheus"
  scripts/dashboards-test.sh
fi

step "demo, end to end (real servers, agent and Collector; fails on any misattribution)"
scripts/demo.sh

