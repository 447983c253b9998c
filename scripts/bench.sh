#!/usr/bin/env bash
# bench.sh runs the project's benchmarks and prints each candidate beside
# the baseline that did the same work in the same run, as medians of
# BENCH_COUNT repetitions (default 5). Spec: bench/ratios.txt. The raw
# output is kept in bench/last-run.txt. The machine is shared and noisy:
# compare ratios, not absolute times.
# Usage: make bench   (BENCH_COUNT=3 make bench for a quicker look;
#        BENCH_SOAK=3m make bench adds the refund desk's soak)
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
# The refund desk under load over Streamable HTTP (examples module, in
# go.work): fixed-time phases whose rounds interleave the protected desk,
# the bare desk and the Guard.Do ceiling, so one run (-count 1) gives the
# medians; then 500 connections at once. BENCH_SOAK=3m adds the soak.
# DESK_FLAGS passes more (-desk.phase=5s -desk.rounds=5).
desk() { go test -run '^$' -benchtime 1x -count 1 "$@" ./examples/internal/refunds ${DESK_FLAGS:-} 2>&1 | tee -a "$out" | grep -E '^(Benchmark|ok|FAIL|---)' >&2; }
desk -bench 'BenchmarkDesk$|BenchmarkDeskConnections'
if [ -n "${BENCH_SOAK:-}" ]; then
  desk -bench 'BenchmarkDeskSoak' -timeout 60m -desk.soak="$BENCH_SOAK"
fi
# The dup processor is its own module: run its benchmarks from its folder.
# Each pairs its candidate with its baseline, interleaved.
(cd collector/dupprocessor && go test -run '^$' -count "$count" \
  -bench 'BenchmarkVsSpanMetrics|BenchmarkStores_ArenaVsMaps' -benchtime 10000x . ./internal/state 2>&1) |
  tee -a "$out" | grep -E '^(Benchmark|ok|FAIL|---)' >&2
go run ./internal/testing/benchreport -spec bench/ratios.txt <"$out" 2>/dev/null
