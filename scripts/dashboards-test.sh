#!/usr/bin/env bash
# dashboards-test.sh proves that every panel of the Grafana dashboards in
# dashboards/ reads a metric the system really emits (make test runs it):
#   1. the dashboards module's static tests (go vet, go test: the files are
#      what internal/build renders with Grafana's Foundation SDK; JSON, data
#      source input, titles, descriptions, units, legends, PromQL syntax,
#      every metric and label against dashboards/metrics.json);
#   2. dashboards/cmd/dashtest: for each Collector deployment (the demo's,
#      and the shipped collector/examples/single and two-tier), the demo
#      with a real Prometheus scraping it (installed from Debian's package
#      when missing), plus what a healthy demo never causes (evictions and
#      late spans in a second Collector; an instrumented MCP server whose
#      outcomes cannot be recorded), then every target of every dashboard
#      against what Prometheus holds, the values the run's evidence predicts
#      and nine mutants that must fail (see its doc comment).
# Arguments go to dashtest (-topology single, -dir DIR); it prints where its
# logs are. Every process it starts is stopped on exit.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
echo "==> Static checks of the dashboards module (go vet, go test: no Prometheus needed)"
(cd dashboards && go vet ./... && go test -count=1 ./...)
exec go run ./dashboards/cmd/dashtest "$@"
