#!/usr/bin/env bash
# collector-build.sh builds the otelcol-idemkit Collector distribution
# described by builder-config.yaml into collector/_build/otelcol-idemkit/,
# exactly as a user builds it: builder-config.yaml names idemkit's Collector
# components by version (no path replaces), and this script serves that
# version from the working tree. It publishes the published modules at the
# release version to a local file-system module proxy
# (internal/devtools/cmd/modpublish; collector/_build/proxy), removes that
# version from the Go module cache so that no stale copy is used, and runs
# the OpenTelemetry Collector Builder (v0.161.0, installed when missing)
# with GOPROXY reading the local proxy first.
#
# A cold build (empty module and build caches) takes about 6 minutes and
# 1.2 GB of memory on 2 cores; with warm caches, seconds. The builder's
# output goes to collector/_build/build.log, and a progress line with the
# log's path goes to stderr every 30 seconds. The path of the binary is the
# last line on stdout.
set -euo pipefail
BUILDER_VERSION=v0.161.0
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
. scripts/lib-modpath.sh
gobin="$(go env GOBIN)"
[[ -n "$gobin" ]] || gobin="$(go env GOPATH)/bin"
builder="$gobin/builder"
# ocb prints its version ("ocb version v0.161.0") on stderr.
if [[ ! -x "$builder" ]] || ! "$builder" version 2>&1 | grep -qF "$BUILDER_VERSION"; then
  echo "collector-build: installing go.opentelemetry.io/collector/cmd/builder@$BUILDER_VERSION" >&2
  go install "go.opentelemetry.io/collector/cmd/builder@$BUILDER_VERSION"
fi

# Publishing removes this version of the idemkit modules from the shared Go
# module cache: one publish-and-build at a time per machine (checkouts and
# worktrees share the cache). scripts/lib-lock.sh says who holds the lock
# while this waits for it.
. scripts/lib-lock.sh
modcache_lock collector-build
mkdir -p collector/_build
proxy="$root/collector/_build/proxy"
echo "collector-build: publishing the idemkit modules to $proxy" >&2
eval "$(cd internal/devtools && go run ./cmd/modpublish -root "$root" -proxy "$proxy" -purge-cache)"
out="$root/collector/_build/otelcol-idemkit"
# A checksum of the previous publication of the same version would not match.
[[ -f "$out/go.sum" ]] && sed -i "\#^${modpath_re}[/ ]#d" "$out/go.sum"

log="$root/collector/_build/build.log"
echo "collector-build: running the builder (log: $log; ~6 min on a cold machine, seconds when cached)" >&2
start=$SECONDS
# The build output lies inside the repository: keep it out of go.work.
# GODEBUG=goindex=0: the go command indexes a module-cache directory once
# per path@version (it assumes the content never changes), so after a
# republication that adds or removes files it would compile the old file
# list ("open .../arena.go: no such file or directory").
(cd collector/_build && GOWORK=off GODEBUG=goindex=0 "$builder" --config "$root/builder-config.yaml") >"$log" 2>&1 &
pid=$!
trap 'kill "$pid" 2>/dev/null || true' EXIT
while kill -0 "$pid" 2>/dev/null; do
  for _ in $(seq 30); do
    sleep 1
    kill -0 "$pid" 2>/dev/null || break
  done
  if kill -0 "$pid" 2>/dev/null; then
    echo "collector-build: still building after $((SECONDS - start))s: $(tail -n 1 "$log" | cut -c1-160) (log: $log)" >&2
  fi
done
trap - EXIT
if ! wait "$pid"; then
  echo "collector-build: the builder failed after $((SECONDS - start))s; the end of $log:" >&2
  tail -n 40 "$log" >&2
  exit 1
fi
bin="$out/otelcol-idemkit"
test -x "$bin"
echo "collector-build: built in $((SECONDS - start))s" >&2
echo "$bin"
