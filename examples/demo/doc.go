// Package demo holds the demo's Collector configuration (collector.yaml,
// used by scripts/demo.sh) and its tests: the scenarios run in-process
// against real refund servers without a Collector, and, with
// IDEMKIT_DEMO_E2E=1, the whole demo with the built Collector.
package demo
