#!/usr/bin/env bash
# demo.sh runs the idemkit demo end to end (what `make demo` runs): it builds
# the Collector and the demo programs, runs an agent whose refund calls are
# duplicated by each of the four layers against a server protected by
# idemkit, one without it, and idemkit gateway in front of another one
# without it, checks what the Collector attributed, prints
# the report and writes it as a self-contained HTML page (its path is the
# last line). It exits non-zero on any misattribution, so it doubles as the
# end-to-end check (CI: bash scripts/demo.sh).
#
# Everything is the Go program examples/demo/cmd/demo (see its doc comment);
# arguments are passed on, e.g.
#   scripts/demo.sh -keep                  keep the pipeline running, with a
#                                          Prometheus (make demo-up)
#   scripts/demo.sh -topology two-tier     through collector/examples/two-tier
#   IDEMKIT_DEMO_DIR=DIR scripts/demo.sh   keep logs and data in DIR
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
exec go run ./examples/demo/cmd/demo "$@"
