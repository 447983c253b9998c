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
#
# It compiles the demo command first and runs the binary rather than `go
# run` it: go run exits 1 whenever it is interrupted, so Ctrl-C, which is
# how make demo-up ends, made make report "Error 1" although the demo
# stopped cleanly. The demo's closing "Demo took" line counts from the start
# of this script, the compilation included (IDEMKIT_DEMO_STARTED).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export IDEMKIT_DEMO_STARTED="$(date +%s%N)"
bin="$(mktemp -d "${TMPDIR:-/tmp}/idemkit-demo-bin.XXXXXX")"
trap 'rm -rf "$bin"' EXIT
echo "==> Compiling the demo command (examples/demo/cmd/demo; a minute on a cold build cache, a second when cached)"
go build -o "$bin/demo" ./examples/demo/cmd/demo
# Not exec: the trap removes the binary. Ctrl-C reaches the demo directly
# (same process group); bash waits for it and exits with its status.
rc=0
"$bin/demo" "$@" || rc=$?
exit "$rc"
