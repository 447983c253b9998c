#!/usr/bin/env bash
# collector-test.sh runs every test of the Collector components:
#   1. collector/dupprocessor (processor, connector, golden, randomised,
#      fuzz seed corpus, generated lifecycle tests), with -race;
#   2. collector/e2e: builds otelcol-idemkit from builder-config.yaml
#      (scripts/collector-build.sh, ~6 min cold) and runs it as a process.
#      Under CI=true a build failure fails the run; IDEMKIT_E2E=0 skips it.
# Usage: scripts/collector-test.sh   (from anywhere)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
. "$root/scripts/lib-modpath.sh"
# The package results stream through testprogress as they finish (see
# scripts/test.sh, which passes IDEMKIT_TESTPROGRESS and IDEMKIT_TEST_SKIPS).
tp="${IDEMKIT_TESTPROGRESS:-}"
if [[ -z "$tp" ]]; then
  tpdir="$(mktemp -d "${TMPDIR:-/tmp}/idemkit-testprogress.XXXXXX")"
  trap 'rm -rf "$tpdir"' EXIT
  tp="$tpdir/testprogress"
  (cd "$root" && go build -o "$tp" ./internal/devtools/cmd/testprogress)
fi
(cd "$root/collector/dupprocessor" && go test -json -race -count=1 ./...) | "$tp" ${IDEMKIT_TEST_SKIPS:+-skips "$IDEMKIT_TEST_SKIPS"} ${IDEMKIT_TEST_TOTALS:+-totals "$IDEMKIT_TEST_TOTALS"}
if [[ "${IDEMKIT_E2E:-1}" != "0" ]]; then
  # -v: one package, whose tests log each stage as it happens.
  (cd "$root/collector/e2e" && IDEMKIT_E2E=1 go test -count=1 -timeout 40m -v ./...)
elif [[ -n "${IDEMKIT_TEST_SKIPS:-}" ]]; then
  echo "$modpath/collector/e2e (every test): IDEMKIT_E2E=0" >>"$IDEMKIT_TEST_SKIPS"
fi
