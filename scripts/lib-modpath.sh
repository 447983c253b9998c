# lib-modpath.sh, sourced by the scripts: sets modpath to the idemkit module
# path prefix (ModulePrefix in internal/devtools/modules.go, its one place;
# scripts/set-module-path.sh changes it) and modpath_re to the same as a
# regular expression.
modpath="$(sed -n 's/^const ModulePrefix = "\(.*\)"$/\1/p' "$(dirname "${BASH_SOURCE[0]}")/../internal/devtools/modules.go")"
[[ -n "$modpath" ]] || { echo "cannot read ModulePrefix from internal/devtools/modules.go" >&2; exit 1; }
modpath_re="${modpath//./\\.}"
