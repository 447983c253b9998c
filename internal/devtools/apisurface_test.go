package devtools

import (
	"go/ast"
	"go/doc"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// exportBudgets bounds the exported surface of the packages a tool author
// imports (issue 23: a stranger reads the whole of it before depending on
// it). A package over its budget fails TestExportedSurface_WithinBudget,
// which lists what it counts; move what serves internal callers to an
// internal package instead of raising the budget.
var exportBudgets = map[string]int{
	"idemkit":    100,
	"instrument": 45,
}

// exported returns the exported API of the package in dir (relative to
// the repository root), one entry per top-level constant, variable, type
// and function, and per method of an exported type, as go doc lists them.
// Test files are not part of it.
func exported(t *testing.T, dir string) []string {
	t.Helper()
	dir = filepath.Join("..", "..", filepath.FromSlash(dir))
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var files []*ast.File
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	if len(files) == 0 {
		t.Fatalf("no Go files in %s", dir)
	}
	pkg, err := doc.NewFromFiles(fset, files, "example.com/"+filepath.Base(dir))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	values := func(prefix string, vs []*doc.Value) {
		for _, v := range vs {
			for _, n := range v.Names {
				names = append(names, prefix+n)
			}
		}
	}
	funcs := func(prefix string, fs []*doc.Func) {
		for _, f := range fs {
			names = append(names, prefix+f.Name+"()")
		}
	}
	values("const ", pkg.Consts)
	values("var ", pkg.Vars)
	funcs("func ", pkg.Funcs)
	for _, typ := range pkg.Types {
		names = append(names, "type "+typ.Name)
		values("const ", typ.Consts)
		values("var ", typ.Vars)
		funcs("func ", typ.Funcs)
		funcs("method "+typ.Name+".", typ.Methods)
	}
	sort.Strings(names)
	return names
}

func TestExportedSurface_WithinBudget(t *testing.T) {
	for dir, budget := range exportBudgets {
		names := exported(t, dir)
		t.Logf("%s exports %d (budget %d)", dir, len(names), budget)
		if len(names) > budget {
			t.Errorf("%s exports %d identifiers, over its budget of %d:\n  %s", dir, len(names), budget, strings.Join(names, "\n  "))
		}
	}
}

// TestExportedSurface_CountsEveryKind checks the counter on a package it
// knows: devtools itself.
func TestExportedSurface_CountsEveryKind(t *testing.T) {
	got := strings.Join(exported(t, "internal/devtools"), ",")
	want := "const ModulePrefix,const ReleaseVersion,func CheckRelease(),func LoadModules(),type Module,var Published"
	if got != want {
		t.Errorf("exported(internal/devtools) = %s, want %s", got, want)
	}
}
