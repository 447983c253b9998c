// Package demo holds the demo's Collector configuration (collector.yaml,
// used by scripts/demo.sh) and its tests: the scenarios run in-process
// against real refund servers without a Collector. The whole demo, with the
// built Collector, is scripts/demo.sh, which make test runs too.
package demo
