// Package harness is the end-to-end harness of idemkit's own tests and
// demo: it starts processes and stops them, picks free local ports, waits
// for readiness, installs the Debian packages a run needs, runs a real
// Prometheus and queries it (client_golang's API client), scrapes
// Prometheus expositions (prometheus/common/expfmt) and reads the OTLP/JSON
// files the Collector's file exporter writes (the Collector's pdata).
//
// collector/e2e, the dashboards test (dashboards/cmd/dashtest,
// dashboards/internal/dashtest) and the demo (examples/demo,
// examples/internal/report) use it; scripts/demo.sh and
// scripts/dashboards-test.sh only run their Go programs. Subpackage browser
// drives a headless Chromium for browser tests. It is a development module
// of its own (internal/testing/harness, beside the root module's test
// packages in internal/testing) so that its dependencies never reach a
// published go.mod; it is the project's tool, not an API.
package harness
