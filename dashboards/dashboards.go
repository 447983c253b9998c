// Package dashboards holds idemkit's Grafana dashboards (idemkit-*.json,
// importable as they are) and metrics.json, the one list of the metrics the
// system emits that the dashboards may read.
//
// The dashboards are built in Go with Grafana's Foundation SDK by
// internal/build (go generate writes the files); internal/dashtest checks
// the files: statically in go test, and against a real Prometheus that
// scraped the real demo pipeline, through each shipped Collector
// configuration, in cmd/dashtest (scripts/dashboards-test.sh). See
// README.md.
package dashboards

import "embed"

//go:generate go run ./cmd/gendash -out .

// Files holds the dashboards (idemkit-*.json) and metrics.json.
//
//go:embed idemkit-*.json metrics.json
var Files embed.FS

// Registry is the name of the list of emitted metrics in Files.
const Registry = "metrics.json"
