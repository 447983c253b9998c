#!/usr/bin/env bash
# test.sh runs every test of the project, on a fresh machine too: it installs
# what the tests need (PostgreSQL's server programs, the Collector builder),
# then runs vet, the Go tests of every module against a real PostgreSQL (a
# throwaway cluster, or TEST_DATABASE_URL), the Collector components and the
# end-to-end tests. It never skips a test it cannot run: it fails.
# Usage: make test   (or scripts/test.sh from anywhere)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

step() { printf '\n==> %s\n' "$*"; }

step "prerequisites"
go version
scripts/ensure-postgres.sh

step "format and vet"
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './collector/_build/*'))
if [[ -n "$unformatted" ]]; then
  echo "gofmt would change:"; echo "$unformatted"; exit 1
fi
# The library module, the examples, the idemkit command and the development
# tools (go.work ties the modules together; ./... stops at a module's edge).
pkgs=(./... ./examples/... ./cmd/idemkit/... ./internal/devtools/... ./internal/testing/harness/... ./spancontract/...)
go vet "${pkgs[@]}"

step "idemkit, stores, instrument, examples, cmd/idemkit (race detector on)"
go test -race -count=1 -timeout 30m "${pkgs[@]}"

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

step "all tests passed"
