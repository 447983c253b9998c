// Package demo runs idemkit's demo end to end (scripts/demo.sh, make demo):
// the otelcol-idemkit Collector in one of the deployments users copy (the
// demo's own examples/demo/collector.yaml, or collector/examples/single or
// two-tier), refund servers on free local ports with fresh databases (one
// protected by idemkit, one without it, and another one without it behind
// idemkit gateway, which protects it from outside: cmd/idemkit), and the
// duplicate generator (examples/dupgen), an agent whose tool calls are
// duplicated by each of the four layers. It then checks and reports what
// the Collector attributed, in text and as a self-contained HTML page.
//
// The dashboards test (dashboards/cmd/dashtest) runs the same pipeline with
// a Prometheus scraping it, through Hooks. Every process runs through the
// shared harness (internal/testing/harness). The scenarios' in-process
// tests are in this folder too (no Collector: real servers and agent).
package demo
