#!/usr/bin/env bash
# dashboards-test.sh proves that every panel of the Grafana dashboards in
# dashboards/ reads a metric the system really emits, with a real Prometheus
# that scraped the real demo pipeline (make test runs it):
#
#   1. installs Prometheus when missing (Debian package; fails if it cannot);
#   2. builds the checker (dashboards/cmd/dashtest) and runs the dashboards
#      module's static tests (go vet, go test: JSON, data source input,
#      titles, descriptions, units, legends, PromQL syntax, every metric and
#      label against dashboards/metrics.json);
#   3. starts a second otelcol-idemkit with a tiny dup processor
#      (dashboards/testdata/exerciser-collector.yaml) and a Prometheus on a
#      free local port that scrapes, every second, the demo Collector's
#      prometheus exporter and the telemetry endpoints of both Collectors;
#   4. runs scripts/demo.sh with IDEMKIT_DEMO_HOOK pointing back here: once
#      the demo Collector listens, Prometheus is pointed at it (the run's
#      time range started with Prometheus, before any sample); after the
#      demo's report, before anything stops, `dashtest exercise` makes the
#      second Collector evict groups and count late spans (the demo causes
#      neither, and those counters only exist after their first event),
#      Prometheus scrapes everything twice more and the time range ends;
#   5. `dashtest check` runs every target of every dashboard against
#      Prometheus over that time range, with "All" both as .* and as the
#      list of every value, and fails when a query errors, returns no series
#      or only NaN, when any selector in it matches nothing, when a label it
#      groups by or shows in its legend is missing, when metrics.json does
#      not match what Prometheus holds, or when a headline panel's value
#      differs from the evidence of the run (the servers' refund databases,
#      dupgen's manifest, the spans the Collector wrote, the exercise).
#
# Every process it starts is stopped on exit. Logs stay in the directory it
# prints (IDEMKIT_DASHBOARDS_DIR to choose it). The Collector build is
# scripts/collector-build.sh's (minutes the first time, cached after).
set -euo pipefail
self="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")"
root="$(cd "$(dirname "$self")/.." && pwd)"
cd "$root"

die() { printf '\ndashboards-test.sh: %s\n' "$*" >&2; exit 2; }

# --hook PHASE: called by scripts/demo.sh (IDEMKIT_DEMO_HOOK) with the live
# demo pipeline in IDEMKIT_DEMO_*; DASHTEST_* come from the main run below.
if [[ ${1:-} == --hook ]]; then
  : "${DASHTEST_WORK:?} ${DASHTEST_PROMETHEUS:?} ${DASHTEST_EXERCISER_TELEMETRY:?}"
  bin="$DASHTEST_WORK/bin/dashtest"
  case "${2:-}" in
    collector-ready)
      echo "$IDEMKIT_DEMO_TELEMETRY" >"$DASHTEST_WORK/demo-instance"
      printf '[{"targets":["%s"]}]\n' "$IDEMKIT_DEMO_PROMETHEUS" >"$DASHTEST_WORK/sd/exporter.json.tmp"
      printf '[{"targets":["%s"]}]\n' "$IDEMKIT_DEMO_TELEMETRY" >"$DASHTEST_WORK/sd/demo-telemetry.json.tmp"
      mv "$DASHTEST_WORK/sd/exporter.json.tmp" "$DASHTEST_WORK/sd/exporter.json"
      mv "$DASHTEST_WORK/sd/demo-telemetry.json.tmp" "$DASHTEST_WORK/sd/demo-telemetry.json"
      # No traffic before Prometheus has scraped the demo Collector once.
      "$bin" wait -prometheus "$DASHTEST_PROMETHEUS" \
        -targets "$IDEMKIT_DEMO_PROMETHEUS,$IDEMKIT_DEMO_TELEMETRY,$DASHTEST_EXERCISER_TELEMETRY" >/dev/null
      echo "    Prometheus $DASHTEST_PROMETHEUS scrapes the demo Collector"
      ;;
    after-report)
      "$bin" exercise -otlp "http://$DASHTEST_EXERCISER_OTLP" -telemetry "http://$DASHTEST_EXERCISER_TELEMETRY/metrics" \
        -max-groups 4 -out "$DASHTEST_WORK/exercise.json"
      # Two scrapes: a counter born in the exercise needs two samples for rate().
      "$bin" wait -prometheus "$DASHTEST_PROMETHEUS" -scrapes 2 \
        -targets "$IDEMKIT_DEMO_PROMETHEUS,$IDEMKIT_DEMO_TELEMETRY,$DASHTEST_EXERCISER_TELEMETRY" >"$DASHTEST_WORK/end"
      echo "    Prometheus scraped the final values; time range ends $(cat "$DASHTEST_WORK/end")"
      ;;
    *) die "unknown hook phase ${2:-}" ;;
  esac
  exit 0
fi

started=$SECONDS
work="${IDEMKIT_DASHBOARDS_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/idemkit-dashboards.XXXXXX")}"
mkdir -p "$work"
rm -rf "$work/sd" "$work/prometheus-data" "$work/demo" "$work/start" "$work/end" "$work/exercise.json" "$work/demo-instance"
mkdir -p "$work/sd" "$work/bin"

. scripts/lib/procs.sh # start, stop_all, free_port, wait_for, listening
cleanup() {
  local rc=$?
  stop_all 10
  printf '\nLogs: %s\n' "$work"
  printf '  check.txt (every check), demo.log (scripts/demo.sh), prometheus.log, prometheus.yml, exerciser-collector.log, exercise.json, demo/ (the demo'"'"'s own logs and data)\n'
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

echo "==> Prometheus"
if ! command -v prometheus >/dev/null; then
  ((EUID == 0)) || die "prometheus is not installed and this is not root: apt-get install prometheus (Debian package), then rerun"
  echo "    installing the Debian package (apt-get install prometheus)"
  export DEBIAN_FRONTEND=noninteractive
  if ! apt-get install -y --no-install-recommends prometheus >"$work/apt.log" 2>&1; then
    apt-get update >>"$work/apt.log" 2>&1 || true
    apt-get install -y --no-install-recommends prometheus >>"$work/apt.log" 2>&1 ||
      { tail -n 20 "$work/apt.log" >&2; die "could not install prometheus (log: $work/apt.log)"; }
  fi
fi
command -v prometheus >/dev/null || die "prometheus is still not on PATH after installing it"
echo "    $(prometheus --version 2>&1 | head -n 1)"

echo "==> Building the Collector (scripts/collector-build.sh, cached) and the checker (dashboards/cmd/dashtest)"
# The build prints its progress on stderr (a line every 30 s while it runs).
if ! collector="$(scripts/collector-build.sh | tail -n 1)" || [[ ! -x "$collector" ]]; then
  die "the Collector build failed (its log: collector/_build/build.log)"
fi
(cd dashboards && go build -o "$work/bin/dashtest" ./cmd/dashtest)
built=$SECONDS

echo "==> Static checks of the dashboards module (go vet, go test: no Prometheus needed)"
(cd dashboards && go vet ./... && go test -count=1 ./...)

echo "==> Starting a second Collector for the processor-health counters, and Prometheus"
free_port port && ex_otlp="127.0.0.1:$port"
free_port port && ex_tel="127.0.0.1:$port"
start exerciser-collector "$work/exerciser-collector.log" env OTLP_HTTP_ENDPOINT="$ex_otlp" TELEMETRY_PORT="${ex_tel##*:}" \
  "$collector" --config dashboards/testdata/exerciser-collector.yaml
wait_for "the exerciser Collector" 60 "${pids[-1]}" "$work/exerciser-collector.log" listening "${ex_otlp##*:}"
wait_for "the exerciser Collector's telemetry" 30 "${pids[-1]}" "$work/exerciser-collector.log" listening "${ex_tel##*:}"

free_port prom_port
prom="http://127.0.0.1:$prom_port"
printf '[{"targets":["%s"]}]\n' "$ex_tel" >"$work/sd/exerciser-telemetry.json"
echo '[]' >"$work/sd/exporter.json"
echo '[]' >"$work/sd/demo-telemetry.json"
cat >"$work/prometheus.yml" <<EOF
# Generated by scripts/dashboards-test.sh. The demo's ports are chosen at
# run time: its hook writes the file_sd target files.
global:
  scrape_interval: 1s
  scrape_timeout: 900ms
  evaluation_interval: 1s
scrape_configs:
  # The Collector's prometheus exporter: attribution metrics and the servers'
  # metrics. honor_labels keeps the servers' service.name in job.
  - job_name: otelcol-idemkit
    honor_labels: true
    file_sd_configs:
      - files: ['$work/sd/exporter.json']
        refresh_interval: 1s
  # The Collectors' own telemetry (the dup processor's health).
  - job_name: otelcol-idemkit-telemetry
    file_sd_configs:
      - files: ['$work/sd/demo-telemetry.json', '$work/sd/exerciser-telemetry.json']
        refresh_interval: 1s
EOF
# The dashboards' time range starts before Prometheus holds any sample:
# then "x offset $__range" finds nothing and every range panel counts
# exactly (no increase() extrapolation), whether the Collectors export a
# counter from its first event or from 0 at start-up.
date -u +%Y-%m-%dT%H:%M:%S.%NZ >"$work/start"
start prometheus "$work/prometheus.log" prometheus --config.file="$work/prometheus.yml" \
  --storage.tsdb.path="$work/prometheus-data" --storage.tsdb.retention.time=1d \
  --web.listen-address="127.0.0.1:$prom_port" --log.level=warn
wait_for "Prometheus" 60 "${pids[-1]}" "$work/prometheus.log" curl -sf "$prom/-/ready" -o /dev/null
echo "    $prom (config: $work/prometheus.yml)"

echo "==> Running the demo (scripts/demo.sh) with the hook; its output: $work/demo.log"
demo_rc=0
DASHTEST_WORK="$work" DASHTEST_PROMETHEUS="$prom" DASHTEST_EXERCISER_OTLP="$ex_otlp" DASHTEST_EXERCISER_TELEMETRY="$ex_tel" \
  IDEMKIT_DEMO_DIR="$work/demo" IDEMKIT_DEMO_HOOK="$(printf '%q' "$self") --hook" \
  scripts/demo.sh >"$work/demo.log" 2>&1 || demo_rc=$?
grep -E '^(RESULT|Demo took|    Prometheus|exercise:)' "$work/demo.log" | sed 's/^/    /' || true
if ((demo_rc != 0)); then
  tail -n 60 "$work/demo.log" >&2
  die "the demo failed (exit $demo_rc): see $work/demo.log"
fi
[[ -s $work/start && -s $work/end && -s $work/exercise.json ]] || die "the demo hook did not run (no start/end/exercise files in $work)"

echo "==> Every panel target of every dashboard against Prometheus ($work/check.txt)"
check_rc=0
"$work/bin/dashtest" check -dir dashboards -prometheus "$prom" -start "$(cat "$work/start")" -end "$(cat "$work/end")" \
  -scrape-interval 1s -demo-dir "$work/demo" -demo-instance "$(cat "$work/demo-instance")" \
  -exerciser-instance "$ex_tel" -exercise "$work/exercise.json" >"$work/check.txt" 2>&1 || check_rc=$?
sed -n '/^Evidence from/,/^$/p' "$work/check.txt"
echo "Value assertions (the evidence above against what the panels show):"
grep -E '^(PASS|FAIL) .* value: ' "$work/check.txt" | cut -c1-220 || true
echo
grep -E '^(PASS|FAIL)  mutant' "$work/check.txt" | cut -c1-220 || true
if ((check_rc != 0)); then
  echo
  echo "Failures:"
  grep -E '^(FAIL|dashtest:)' -A 1 "$work/check.txt" | grep -v '^--$' | head -n 80 || true
fi
echo
tail -n 2 "$work/check.txt"
printf '\nDashboards test took %ds (%ds after the builds).\n' $((SECONDS - started)) $((SECONDS - built))
((check_rc == 0)) || die "dashboard checks failed (every check: $work/check.txt)"
