// Package dupprocessor is a Collector traces processor that finds duplicate
// tool executions in the span stream, names the layer that caused each one
// (transport retry, harness retry, model re-issue, reconnect replay) and
// annotates the duplicate spans with the idemkit.duplicate.* attributes of
// the span contract. See README.md for the decision procedure.
//
//go:generate ../../scripts/collector-mdatagen.sh metadata.yaml
package dupprocessor // import "github.com/idemkit-mcp/idemkit/collector/dupprocessor"
