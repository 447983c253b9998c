#!/usr/bin/env bash
# tidy.sh runs `go mod tidy` in every module of go.work. The modules require
# their idemkit siblings at the coming release version (RELEASING.md), which
# no proxy serves before the release, so the siblings are published from
# this working tree to a local file-system proxy
# (internal/devtools/cmd/modpublish) before each module is tidied, and tidy
# reads them from there. Their go.sum lines are then removed: the workspace
# builds the siblings from their folders and never checks them, and a
# checksum of unreleased content would only mislead.
# Usage: scripts/tidy.sh   (from anywhere)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
. scripts/lib-modpath.sh
proxy="$(mktemp -d "${TMPDIR:-/tmp}/idemkit-proxy.XXXXXX")"
trap 'rm -rf "$proxy"' EXIT
(cd internal/devtools && go build -o "$proxy/modpublish" ./cmd/modpublish)
for dir in $(sed -n 's/^\t\(\.[^ ]*\)$/\1/p' go.work); do
  echo "==> go mod tidy in $dir"
  env="$("$proxy/modpublish" -root "$root" -proxy "$proxy/mods" -all -purge-cache 2>/dev/null)"
  (eval "$env" && cd "$dir" && GOWORK=off go mod tidy)
  if [[ -f "$dir/go.sum" ]]; then sed -i "\#^${modpath_re}[/ ]#d" "$dir/go.sum"; fi
done
