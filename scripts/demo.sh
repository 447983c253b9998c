#!/usr/bin/env bash
# demo.sh runs the idemkit demo end to end (what `make demo` runs):
#
#   1. builds the otelcol-idemkit Collector (scripts/collector-build.sh; about
#      6 minutes the first time on a fresh machine, seconds afterwards) and
#      the demo programs (examples/refundserver, dupgen, demoreport);
#   2. starts the Collector with examples/demo/collector.yaml and two refund
#      servers on free local ports with fresh databases: one protected by
#      idemkit (SQLite store), one without idemkit;
#   3. runs dupgen, an agent that makes refunds run twice the way each of the
#      four layers does (transport retry, harness retry, model re-issue,
#      reconnect replay) plus two controls, against both servers;
#   4. stops the servers (which flushes their telemetry), waits for the
#      Collector's decisions and prints the report computed from the
#      Collector's Prometheus metrics, its annotated spans and the servers'
#      databases.
#
# It exits non-zero when any attribution or side-effect count is not as
# expected, so it doubles as the end-to-end check (CI: bash scripts/demo.sh).
# Every process it starts is stopped on exit. Logs, databases, the manifest
# and the annotated spans stay in the work directory it prints
# (IDEMKIT_DEMO_DIR to choose it).
#
# IDEMKIT_DEMO_HOOK (optional, unset by default): a shell command run against
# the live pipeline, twice, with the phase as its argument:
#   collector-ready  once the Collector listens, before any server or traffic;
#   after-report     after the report, before anything is stopped.
# Its environment has IDEMKIT_DEMO_WORK, IDEMKIT_DEMO_OTLP (host:port),
# IDEMKIT_DEMO_PROMETHEUS and IDEMKIT_DEMO_TELEMETRY (host:port of the
# Collector's Prometheus exporter and of its own metrics) and
# IDEMKIT_DEMO_COLLECTOR (the binary). A failing hook fails the demo.
# scripts/dashboards-test.sh uses it to scrape the demo with a real Prometheus.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

work="${IDEMKIT_DEMO_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/idemkit-demo.XXXXXX")}"
mkdir -p "$work"
# A reused IDEMKIT_DEMO_DIR: start from fresh databases and outputs.
rm -rf "$work/protected" "$work/unprotected" "$work/protected.url" "$work/unprotected.url" \
  "$work/spans.jsonl" "$work/manifest.json" "$work/report.txt"
bold() { if [[ -t 1 ]]; then printf '\033[1m%s\033[0m\n' "$*"; else printf '%s\n' "$*"; fi; }
step() { printf '\n'; bold "==> $*"; }
die() { printf '\ndemo.sh: %s\n' "$*" >&2; exit 2; }

. scripts/lib/procs.sh # start, stop_all, free_port, wait_for, listening
cleanup() {
  local rc=$?
  stop_all 15
  printf '\nLogs and data: %s\n' "$work"
  printf '  collector.log, protected.log, unprotected.log, dupgen.log, report.txt, manifest.json, spans.jsonl, */refunds.db\n'
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# run_hook PHASE: runs IDEMKIT_DEMO_HOOK (see the top of this file), if set.
run_hook() {
  [[ -n ${IDEMKIT_DEMO_HOOK:-} ]] || return 0
  step "Hook ($1): $IDEMKIT_DEMO_HOOK"
  IDEMKIT_DEMO_WORK="$work" IDEMKIT_DEMO_OTLP="$otlp" IDEMKIT_DEMO_PROMETHEUS="127.0.0.1:$prom_port" \
    IDEMKIT_DEMO_TELEMETRY="127.0.0.1:$tel_port" IDEMKIT_DEMO_COLLECTOR="$collector" \
    bash -c "$IDEMKIT_DEMO_HOOK \"\$1\"" demo-hook "$1"
}

started=$SECONDS
step "Building the Collector distribution (scripts/collector-build.sh; ~6 min on a fresh machine, seconds when cached)"
# The build prints its progress on stderr (a line every 30 s while it runs).
if ! collector="$(scripts/collector-build.sh | tail -n 1)" || [[ ! -x "$collector" ]]; then
  die "the Collector build failed (its log: collector/_build/build.log)"
fi
echo "    $collector"

step "Building the demo programs (examples/refundserver, examples/dupgen, examples/demoreport)"
mkdir -p "$work/bin"
go build -o "$work/bin/" ./examples/refundserver ./examples/dupgen ./examples/demoreport
built=$SECONDS

step "Starting the Collector (examples/demo/collector.yaml)"
free_port otlp_port
free_port prom_port
free_port tel_port
otlp="127.0.0.1:$otlp_port"
start collector "$work/collector.log" env \
  OTLP_GRPC_ENDPOINT="$otlp" PROMETHEUS_ENDPOINT="127.0.0.1:$prom_port" TELEMETRY_PORT="$tel_port" \
  SPANS_FILE="$work/spans.jsonl" DUP_DECISION_WAIT=2s DUP_FLUSH_INTERVAL=1s \
  "$collector" --config examples/demo/collector.yaml
collector_pid=${pids[-1]}
wait_for "the Collector" 60 "$collector_pid" "$work/collector.log" listening "$otlp_port"
wait_for "the Collector's Prometheus exporter" 30 "$collector_pid" "$work/collector.log" listening "$prom_port"
echo "    OTLP/gRPC $otlp, Prometheus http://127.0.0.1:$prom_port/metrics, own metrics http://127.0.0.1:$tel_port/metrics"
run_hook collector-ready || die "IDEMKIT_DEMO_HOOK failed (collector-ready)"

step "Starting the refund servers (fresh databases)"
mkdir -p "$work/protected" "$work/unprotected"
start protected "$work/protected.log" "$work/bin/refundserver" -addr 127.0.0.1:0 -ready-file "$work/protected.url" \
  -db "$work/protected/refunds.db" -store sqlite -store-db "$work/protected/idemkit.db" \
  -otlp-endpoint "$otlp" -service-name refundserver
protected_pid=${pids[-1]}
start unprotected "$work/unprotected.log" "$work/bin/refundserver" -unprotected -addr 127.0.0.1:0 -ready-file "$work/unprotected.url" \
  -db "$work/unprotected/refunds.db" -otlp-endpoint "$otlp" -service-name refundserver-unprotected
unprotected_pid=${pids[-1]}
wait_for "the protected server" 30 "$protected_pid" "$work/protected.log" test -s "$work/protected.url"
wait_for "the unprotected server" 30 "$unprotected_pid" "$work/unprotected.log" test -s "$work/unprotected.url"
echo "    protected   (idemkit, SQLite store)  $(cat "$work/protected.url")"
echo "    unprotected (before idemkit)         $(cat "$work/unprotected.url")"

step "Running the duplicate generator (an agent whose tool calls are duplicated by each layer)"
gen_rc=0
"$work/bin/dupgen" -protected "$(cat "$work/protected.url")" -unprotected "$(cat "$work/unprotected.url")" \
  -protected-service refundserver -unprotected-service refundserver-unprotected \
  -otlp-endpoint "$otlp" -manifest "$work/manifest.json" 2>&1 | tee "$work/dupgen.log" || gen_rc=$?
((gen_rc == 0)) || die "dupgen failed (exit $gen_rc); see $work/dupgen.log and the server logs"

step "Stopping the servers (graceful: in-flight calls finish, telemetry is flushed)"
stop_process "$protected_pid" protected
stop_process "$unprotected_pid" unprotected
echo "    stopped"

step "Waiting for the Collector's decisions (decision_wait 2s) and printing the report"
report_rc=0
"$work/bin/demoreport" -manifest "$work/manifest.json" \
  -prometheus "http://127.0.0.1:$prom_port/metrics" -telemetry "http://127.0.0.1:$tel_port/metrics" \
  -spans "$work/spans.jsonl" -protected-db "$work/protected/refunds.db" -unprotected-db "$work/unprotected/refunds.db" \
  -harness-threshold 2s 2>&1 | tee "$work/report.txt" || report_rc=$?

printf '\nDemo took %ds (%ds after the builds).\n' $((SECONDS - started)) $((SECONDS - built))
hook_rc=0
run_hook after-report || hook_rc=$?
((hook_rc == 0)) || printf '\ndemo.sh: IDEMKIT_DEMO_HOOK failed (after-report, exit %d)\n' "$hook_rc" >&2
((report_rc != 0)) && exit "$report_rc"
((hook_rc == 0)) || exit 2
exit 0
