#!/usr/bin/env bash
# collector-build.sh builds the otelcol-idemkit Collector distribution
# described by builder-config.yaml into collector/_build/otelcol-idemkit/.
# It installs the OpenTelemetry Collector Builder v0.161.0 first when it is
# missing. Run it from anywhere; it works from the repository root.
#
# A cold build (empty module and build caches) takes about 6 minutes and
# 1.2 GB of memory on 2 cores; with warm caches, seconds. It prints the path
# of the binary on its last line.
set -euo pipefail
BUILDER_VERSION=v0.161.0
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
gobin="$(go env GOBIN)"
[[ -n "$gobin" ]] || gobin="$(go env GOPATH)/bin"
builder="$gobin/builder"
if [[ ! -x "$builder" ]] || ! "$builder" version 2>/dev/null | grep -q "${BUILDER_VERSION#v}"; then
  echo "installing go.opentelemetry.io/collector/cmd/builder@$BUILDER_VERSION" >&2
  go install "go.opentelemetry.io/collector/cmd/builder@$BUILDER_VERSION"
fi
mkdir -p collector/_build
"$builder" --config builder-config.yaml >&2
bin="$root/collector/_build/otelcol-idemkit/otelcol-idemkit"
test -x "$bin"
echo "$bin"
