#!/usr/bin/env bash
# collector-mdatagen.sh runs mdatagen v0.161.0 (the Collector release the
# collector/ modules are pinned to) on the metadata.yaml given as $1, in the
# current directory. Usage, from a component folder:
#   ../../scripts/collector-mdatagen.sh metadata.yaml      (or: go generate ./...)
#
# `go run go.opentelemetry.io/collector/cmd/mdatagen@v0.161.0` does not work
# through the module proxy here: the proxy does not list mdatagen's versions
# and does not serve its dependency go.opentelemetry.io/collector/internal/schemagen
# at v0.161.0. So this builds mdatagen once in a throwaway module that pins
# schemagen to v0.159.0 (served, same API), and caches the binary.
set -euo pipefail
MDATAGEN_VERSION=v0.161.0
CACHE_DIR="${IDEMKIT_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/idemkit-tools}"
BIN="$CACHE_DIR/mdatagen-$MDATAGEN_VERSION"
if [[ ! -x "$BIN" ]]; then
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
  cat >"$tmp/go.mod" <<MOD
module mdatagenbuild

go 1.26.0

replace go.opentelemetry.io/collector/internal/schemagen => go.opentelemetry.io/collector/internal/schemagen v0.159.0
MOD
  (cd "$tmp" && go get "go.opentelemetry.io/collector/cmd/mdatagen@$MDATAGEN_VERSION" >/dev/null 2>&1 \
    && mkdir -p "$CACHE_DIR" && go build -o "$BIN" go.opentelemetry.io/collector/cmd/mdatagen)
fi
exec "$BIN" "${1:-metadata.yaml}"
