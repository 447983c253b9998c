#!/usr/bin/env bash
# set-version.sh VERSION makes VERSION (vX.Y.Z) the version every idemkit
# module is released at (see RELEASING.md): the sibling requirements in
# every go.mod, the replace directives of go.work, builder-config.yaml's
# component versions, idemkit.Version and devtools.ReleaseVersion.
# Usage: scripts/set-version.sh v0.2.0
set -euo pipefail
new="${1:?usage: scripts/set-version.sh vX.Y.Z}"
[[ "$new" =~ ^v[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$ ]] || { echo "set-version: $new is not vX.Y.Z" >&2; exit 2; }
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
. scripts/lib-modpath.sh
old="$(sed -n 's/^const ReleaseVersion = "\(.*\)"$/\1/p' internal/devtools/modules.go)"
[[ -n "$old" ]] || { echo "set-version: cannot read the current version" >&2; exit 1; }
for gomod in $(git ls-files -co --exclude-standard '*go.mod'); do
  sed -i -E "s#^(\s*(require\s+)?${modpath_re}(/[^ ]+)?) ${old//./\\.}( |$)#\1 $new\4#" "$gomod"
done
sed -i -E "s#^(\s*${modpath_re}(/[^ ]+)?) ${old//./\\.} =>#\1 $new =>#" go.work
sed -i -E "s#(${modpath_re}/collector/dupprocessor) ${old//./\\.}#\1 $new#" builder-config.yaml
sed -i -E "s#^const ReleaseVersion = \".*\"#const ReleaseVersion = \"$new\"#" internal/devtools/modules.go
sed -i -E "s#^const Version = \".*\"#const Version = \"${new#v}\"#" idemkit/version.go
echo "set-version: $old -> $new; review with git diff"
