// Package dupconnector is a Collector traces-to-metrics connector (component
// type "dup") that aggregates the idemkit.duplicate.* annotations written by
// the dup processor into attribution metrics for Prometheus and dashboards.
// See README.md for the metric names and the Prometheus series they become.
//
//go:generate ../../../scripts/collector-mdatagen.sh metadata.yaml
package dupconnector // import "github.com/idemkit-mcp/idemkit/collector/dupprocessor/dupconnector"
