package devtools

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/mod/modfile"
)

// ModulePrefix is the path prefix of every idemkit module.
const ModulePrefix = "github.com/idemkit-mcp/idemkit"

// ReleaseVersion is the version the next release tags every published
// module with, and the version at which each published go.mod requires its
// siblings (see RELEASING.md). scripts/set-version.sh changes both.
const ReleaseVersion = "v0.1.0"

// Published lists the modules a release tags, by folder relative to the
// repository root, in the order RELEASING.md tags them (a module after the
// siblings it requires). Every other module of go.work is a development
// module: never tagged, never required by a published one.
var Published = []string{
	"spancontract",
	".",
	"collector/dupprocessor",
	"cmd/idemkit",
}

// Module is one module of the workspace.
type Module struct {
	// Path is the module path; Dir its folder (absolute); Rel the folder
	// relative to the repository root, slash-separated.
	Path, Dir, Rel string
	// Published reports a module that releases tag.
	Published bool
	// File is its parsed go.mod.
	File *modfile.File
}

// LoadModules reads go.work at root and every module it uses, published
// modules first, in Published order.
func LoadModules(root string) ([]Module, error) {
	data, err := os.ReadFile(filepath.Join(root, "go.work"))
	if err != nil {
		return nil, err
	}
	wf, err := modfile.ParseWork("go.work", data, nil)
	if err != nil {
		return nil, err
	}
	var pub, dev []Module
	byRel := map[string]Module{}
	for _, u := range wf.Use {
		rel := filepath.ToSlash(filepath.Clean(u.Path))
		dir := filepath.Join(root, filepath.FromSlash(rel))
		gm, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err != nil {
			return nil, err
		}
		f, err := modfile.Parse(filepath.Join(dir, "go.mod"), gm, nil)
		if err != nil {
			return nil, err
		}
		m := Module{Path: f.Module.Mod.Path, Dir: dir, Rel: rel, File: f}
		byRel[rel] = m
	}
	for _, rel := range Published {
		m, ok := byRel[rel]
		if !ok {
			return nil, fmt.Errorf("published module %q is not in go.work", rel)
		}
		m.Published = true
		pub = append(pub, m)
		delete(byRel, rel)
	}
	for _, u := range wf.Use {
		if m, ok := byRel[filepath.ToSlash(filepath.Clean(u.Path))]; ok {
			dev = append(dev, m)
		}
	}
	return append(pub, dev...), nil
}

// CheckRelease returns an error naming every way m's go.mod is unfit for a
// release at version: a sibling required at another version, a development
// module required by a published one, a replace directive.
func CheckRelease(m Module, all []Module, version string) error {
	kind := map[string]bool{} // module path -> published
	for _, o := range all {
		kind[o.Path] = o.Published
	}
	var problems []string
	for _, r := range m.File.Require {
		pub, ours := kind[r.Mod.Path]
		if !ours {
			if strings.HasPrefix(r.Mod.Path, ModulePrefix+"/") || r.Mod.Path == ModulePrefix {
				problems = append(problems, fmt.Sprintf("requires %s, which is not a module of go.work", r.Mod.Path))
			}
			continue
		}
		if m.Published && !pub {
			problems = append(problems, fmt.Sprintf("requires the development module %s, which is never released", r.Mod.Path))
		}
		if r.Mod.Version != version {
			problems = append(problems, fmt.Sprintf("requires %s %s, not the release version %s", r.Mod.Path, r.Mod.Version, version))
		}
	}
	for _, r := range m.File.Replace {
		problems = append(problems, fmt.Sprintf("has a replace directive for %s (ignored for everyone who depends on it)", r.Old.Path))
	}
	if len(problems) == 0 {
		return nil
	}
	return fmt.Errorf("%s (%s/go.mod): %s", m.Path, m.Rel, strings.Join(problems, "; "))
}
