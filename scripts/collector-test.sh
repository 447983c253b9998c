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
(cd "$root/collector/dupprocessor" && go test -race -count=1 ./...)
if [[ "${IDEMKIT_E2E:-1}" != "0" ]]; then
  (cd "$root/collector/e2e" && IDEMKIT_E2E=1 go test -count=1 -timeout 40m -v ./...)
fi
