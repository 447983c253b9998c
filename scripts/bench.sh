#!/usr/bin/env bash
# bench.sh runs the project's benchmarks and prints each candidate beside
# the baseline that did the same work in the same run, as medians of
# BENCH_COUNT repetitions (default 5). Spec: bench/ratios.txt. The raw
# output is kept in bench/last-run.txt. The machine is shared and noisy:
# compare ratios, not absolute times.
# Usage: make bench   (BENCH_COUNT=3 make bench for a quicker look)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
count="${BENCH_COUNT:-5}"
scripts/ensure-postgres.sh
out=bench/last-run.txt
: >"$out"
run() { go test -run '^$' -benchmem -count "$count" "$@" 2>&1 | tee -a "$out" | grep -E '^(Benchmark|ok|FAIL|---)' >&2; }
run -bench 'BenchmarkMemoryStore|BenchmarkNewKey|BenchmarkGuard_' ./idemkit
run -bench 'BenchmarkPostgres' -benchtime 3000x ./idemkit/pgstore
run -bench 'BenchmarkDoVsBaselineRawSQL' -benchtime 3000x ./idemkit/sqlitestore
run -bench 'BenchmarkCallTool/paired|BenchmarkListTools/paired|BenchmarkInitialize/paired' -benchtime 20000x -cpu 1 ./instrument/mcpgo
# The gateway's added latency: the idemkit command is its own module, in
# go.work, so the root names its packages.
run -bench 'BenchmarkGateway$' -benchtime 2000x ./cmd/idemkit/internal/gateway
# The dup processor is its own module: run its benchmarks from its folder.
# Each pairs its candidate with its baseline, interleaved.
(cd collector/dupprocessor && go test -run '^$' -count "$count" \
  -bench 'BenchmarkVsSpanMetrics|BenchmarkStores_ArenaVsMaps' -benchtime 10000x . ./internal/state 2>&1) |
  tee -a "$out" | grep -E '^(Benchmark|ok|FAIL|---)' >&2
go run ./internal/testing/benchreport -spec bench/ratios.txt <"$out" 2>/dev/null
