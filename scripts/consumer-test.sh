#!/usr/bin/env bash
# consumer-test.sh installs idemkit the way a stranger does, from outside the
# repository, and fails if any step needs a replace directive:
#
#   1. publishes the working tree's published modules (RELEASING.md) at the
#      release version to a file-system module proxy, checking first that
#      every published go.mod requires its siblings at exactly that version
#      and has no replace directive (internal/devtools/cmd/modpublish), and
#      removes that version from the Go module cache so nothing stale is read;
#   2. in a fresh module in a temporary directory, with GOPROXY reading that
#      proxy first and the normal proxy after, and no go.work:
#      - `go get`s the library module and builds every one of its packages;
#      - compiles and runs the README's integration snippet
#        (instrument/mcpgo/example_readme_test.go, taken from the downloaded
#        module, turned into a program);
#   3. in a second fresh module, `go get`s the Collector component module and
#      builds its packages;
#   4. `go install`s every command the project ships (cmd/idemkit@version)
#      and runs it;
#   5. builds the otelcol-idemkit distribution from builder-config.yaml,
#      which names idemkit's Collector components by version, and checks
#      that the binary lists the dup processor and connector.
#
# Usage: scripts/consumer-test.sh   (make test runs it; about a minute with
# warm caches, plus the Collector's cold build on a fresh machine)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
. scripts/lib-modpath.sh
step() { printf '\n==> consumer test: %s\n' "$*"; }
fail() { printf '\nconsumer-test.sh: FAIL: %s\n' "$*" >&2; exit 1; }

version="$(sed -n 's/^const ReleaseVersion = "\(.*\)"$/\1/p' internal/devtools/modules.go)"
[[ -n "$version" ]] || fail "cannot read ReleaseVersion from internal/devtools/modules.go"
# Publishing removes this version of the idemkit modules from the shared Go
# module cache: one publish-and-build at a time per machine (checkouts and
# worktrees share the cache). scripts/lib-lock.sh says who holds the lock
# while this waits for it.
. scripts/lib-lock.sh
modcache_lock consumer-test
tmp="$(mktemp -d "${TMPDIR:-/tmp}/idemkit-consumer.XXXXXX")"
trap 'chmod -R u+w "$tmp" 2>/dev/null; rm -rf "$tmp"' EXIT

step "publishing the modules at $version to a file-system proxy ($tmp/proxy)"
env_lines="$(cd internal/devtools && go run ./cmd/modpublish -root "$root" -proxy "$tmp/proxy" -purge-cache)"
eval "$env_lines"
# modpublish's environment includes GODEBUG=goindex=0: the go command's
# index of a module-cache directory trusts path@version never to change,
# and republishing the working tree at the same version does change it.
export GOWORK=off GOFLAGS="-mod=mod" GOBIN="$tmp/bin"
echo "$env_lines"

no_replace() { # no_replace FILE: a go.mod or builder config must not need a replace
  if grep -nE '^\s*replace\b|=>\s*\.{0,2}/' "$1" | grep -v 'servicediscovery' >&2; then
    fail "$1 uses a replace directive"
  fi
}

step "a fresh module outside the repository: go get ${modpath}@$version"
mkdir -p "$tmp/app" && cd "$tmp/app"
go mod init example.com/consumer/app >/dev/null 2>&1
go get "${modpath}@$version" "${modpath}/spancontract@$version"
go build ${modpath}/... ${modpath}/spancontract
echo "built every package of ${modpath}@$version"

step "the README's integration snippet, as a program"
moddir="$(go list -m -f '{{.Dir}}' ${modpath})"
snippet="$moddir/instrument/mcpgo/example_readme_test.go"
[[ -f "$snippet" ]] || fail "the published module has no instrument/mcpgo/example_readme_test.go"
sed -e '1s/^package mcpgo_test$/package main/' "$snippet" >main.go
head -1 main.go | grep -qx 'package main' || fail "example_readme_test.go does not start with 'package mcpgo_test'"
printf '\nfunc main() { Example_readme(); println("README snippet: server built") }\n' >>main.go
go mod tidy
go build -o "$tmp/readme" . || fail "the README snippet does not compile outside the repository"
(cd "$tmp" && ./readme) || fail "the README snippet fails at run time"
no_replace go.mod

step "a fresh module: go get ${modpath}/collector/dupprocessor@$version"
mkdir -p "$tmp/component" && cd "$tmp/component"
go mod init example.com/consumer/component >/dev/null 2>&1
go get "${modpath}/collector/dupprocessor@$version"
go build ${modpath}/collector/dupprocessor/...
no_replace go.mod

step "go install ${modpath}/cmd/idemkit@$version"
cd "$tmp"
go install "${modpath}/cmd/idemkit@$version"
"$GOBIN/idemkit" version | tee "$tmp/idemkit-version.txt"
grep -q "${version#v}" "$tmp/idemkit-version.txt" || fail "idemkit version does not print $version"

step "the otelcol-idemkit distribution from builder-config.yaml (components by version)"
mkdir -p "$tmp/dist" && cp "$root/builder-config.yaml" "$tmp/dist/"
no_replace "$tmp/dist/builder-config.yaml"
grep -qE '^\s*-?\s*path:' "$tmp/dist/builder-config.yaml" && fail "builder-config.yaml uses path:"
grep -qF "${modpath}/collector/dupprocessor $version" "$tmp/dist/builder-config.yaml" ||
  fail "builder-config.yaml does not name ${modpath}/collector/dupprocessor $version"
gobin="$(GOBIN= go env GOPATH)/bin"
builder="$gobin/builder"
if [[ ! -x "$builder" ]] || ! "$builder" version 2>&1 | grep -qF v0.161.0; then
  GOBIN="$gobin" go install go.opentelemetry.io/collector/cmd/builder@v0.161.0
fi
cd "$tmp/dist"
if ! GOFLAGS= "$builder" --config builder-config.yaml >"$tmp/builder.log" 2>&1; then
  tail -n 40 "$tmp/builder.log" >&2
  fail "the distribution does not build from builder-config.yaml"
fi
bin="$tmp/dist/otelcol-idemkit/otelcol-idemkit"
"$bin" components >"$tmp/components.txt"
grep -A200 '^processors:' "$tmp/components.txt" | grep -q 'name: dup$' || fail "otelcol-idemkit lists no dup processor"
grep -A200 '^connectors:' "$tmp/components.txt" | grep -q 'name: dup$' || fail "otelcol-idemkit lists no dup connector"
no_replace "$tmp/dist/otelcol-idemkit/go.mod"
echo "otelcol-idemkit built outside the repository; it lists the dup processor and connector"

step "passed: every public module installs and builds from outside the repository with no replace"
