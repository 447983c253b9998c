#!/usr/bin/env bash
# set-module-path.sh NEWPATH moves every idemkit module to the path prefix
# NEWPATH (for example github.com/you/idemkit): the module lines and sibling
# requirements of every go.mod, go.work, every import, the Collector's
# metadata and builder configuration, the golden files' scope names, the
# scripts and the docs. The one place the path is kept is ModulePrefix in
# internal/devtools/modules.go; every script reads it from there.
# Usage: scripts/set-module-path.sh github.com/you/idemkit
set -euo pipefail
new="${1:?usage: scripts/set-module-path.sh NEWPATH}"
[[ "$new" =~ ^[a-z0-9.-]+\.[a-z]+(/[A-Za-z0-9._~-]+)+$ ]] || { echo "set-module-path: $new is not a module path" >&2; exit 2; }
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
old="$(sed -n 's/^const ModulePrefix = "\(.*\)"$/\1/p' internal/devtools/modules.go)"
[[ -n "$old" ]] || { echo "set-module-path: cannot read ModulePrefix from internal/devtools/modules.go" >&2; exit 1; }
[[ "$old" != "$new" ]] || { echo "set-module-path: already $new"; exit 0; }
oldre="${old//./\\.}"
oldproj="${old#*/}"            # the repository's owner/name, as metadata.yaml's github_project
newproj="${new#*/}"
git ls-files -co --exclude-standard -z | while IFS= read -r -d '' f; do
  [[ -f "$f" && ! -L "$f" ]] || continue
  case "$f" in *.sum|LICENSE) continue ;; esac
  grep -Iq . "$f" 2>/dev/null || continue # text files only
  if grep -qF "$old" "$f" || grep -qE "^github_project: $oldproj\$" "$f"; then
    sed -i -e "s#${oldre}#${new}#g" -e "s#^github_project: ${oldproj}\$#github_project: ${newproj}#" "$f"
  fi
done
# Sums of the old path's modules are meaningless now (they were never served).
git ls-files -co --exclude-standard '*go.sum' | xargs -r sed -i "\\#^${oldre}[/ ]#d"
echo "set-module-path: $old -> $new; review with git diff"
