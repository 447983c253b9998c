#!/usr/bin/env bash
# lint.sh checks every module of the repository (what `make lint` and CI
# run): gofmt, go vet and staticcheck over every module go.work lists (the
# library, spancontract, the Collector module collector/dupprocessor,
# collector/e2e, cmd/idemkit, dashboards, examples, internal/devtools).
# `./...` stops at a module's edge, so each module is named by its own
# pattern. It installs staticcheck (honnef.co/go/tools, STATICCHECK_VERSION)
# into GOBIN when it is missing or another version. Any finding fails.
# A false positive gets a targeted `//lint:ignore CHECK reason` on its line.
# Usage: make lint   (or scripts/lint.sh from anywhere)
set -euo pipefail
STATICCHECK_VERSION=v0.8.2
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
step() { printf '\n==> lint: %s\n' "$*"; }
start=$SECONDS

# Every workspace module, as a package pattern relative to the root.
pkgs=()
while IFS= read -r dir; do
  rel="${dir#"$root"}"
  pkgs+=(".${rel}/...")
done < <(go list -m -f '{{.Dir}}')
[[ ${#pkgs[@]} -gt 1 ]] || { echo "lint: go list -m found no workspace modules (is go.work there, and GOWORK not off?)" >&2; exit 1; }

step "gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './collector/_build/*'))
if [[ -n "$unformatted" ]]; then
  echo "gofmt would change:"; echo "$unformatted"; exit 1
fi

step "go vet ${pkgs[*]}"
go vet "${pkgs[@]}"

gobin="$(go env GOBIN)"
[[ -n "$gobin" ]] || gobin="$(go env GOPATH)/bin"
staticcheck="$gobin/staticcheck"
# staticcheck -version prints "staticcheck 2026.2.2 (0.8.2)".
if [[ ! -x "$staticcheck" ]] || ! "$staticcheck" -version 2>/dev/null | grep -qF "(${STATICCHECK_VERSION#v})"; then
  step "installing honnef.co/go/tools/cmd/staticcheck@$STATICCHECK_VERSION"
  go install "honnef.co/go/tools/cmd/staticcheck@$STATICCHECK_VERSION"
fi
step "staticcheck ($("$staticcheck" -version)) ${pkgs[*]}  (a few minutes on 2 cores with a cold cache, under a minute warm)"
"$staticcheck" "${pkgs[@]}"

step "clean in $((SECONDS - start))s"
