// Command modpublish publishes the working tree's modules to a file-system
// module proxy, at one release version, the way the Go module proxy would
// serve them once they are tagged: a directory that `GOPROXY=file://DIR`
// reads, holding for each module its go.mod, its zip (the files git would
// commit: tracked and untracked-but-not-ignored, without nested modules) and
// its .info.
//
// It first checks what a release needs: every published go.mod requires
// each of its idemkit siblings at exactly the release version, requires no
// development module, and has no replace directive (replace directives are
// ignored in dependencies, so a go.mod that needs one is broken for every
// user).
//
//	go run ./internal/devtools/cmd/modpublish -proxy DIR [-version v0.1.0] [-purge-cache] [-all]
//
// With -purge-cache it also removes that version of the idemkit modules from
// the Go module cache, so that the next build reads the freshly published
// content instead of an older copy cached under the same version. It prints
// the environment a build needs to read the proxy (GOPROXY, GONOSUMDB,
// GOFLAGS, and GODEBUG=goindex=0 so that a republished version's new file
// list is read), one assignment per line, for `eval`.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/mod/module"
	"golang.org/x/mod/semver"
	modzip "golang.org/x/mod/zip"

	"github.com/idemkit-mcp/idemkit/internal/devtools"
)

func main() {
	var (
		proxy   = flag.String("proxy", "", "directory of the file-system module proxy to write (created when missing)")
		version = flag.String("version", devtools.ReleaseVersion, "the release version to publish the modules at")
		purge   = flag.Bool("purge-cache", false, "remove this version of the idemkit modules from the Go module cache")
		all     = flag.Bool("all", false, "publish the development modules too (never released; for local builds only)")
		root    = flag.String("root", ".", "the repository root")
	)
	flag.Parse()
	if *proxy == "" {
		fatal(errors.New("-proxy is required"))
	}
	if !semver.IsValid(*version) {
		fatal(fmt.Errorf("-version %q is not a valid semantic version", *version))
	}
	r, err := filepath.Abs(*root)
	if err != nil {
		fatal(err)
	}
	dir, err := filepath.Abs(*proxy)
	if err != nil {
		fatal(err)
	}
	mods, err := devtools.LoadModules(r)
	if err != nil {
		fatal(err)
	}
	var errs []error
	for _, m := range mods {
		if !m.Published && !*all {
			continue
		}
		if err := devtools.CheckRelease(m, mods, *version); err != nil && m.Published {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		fatal(err)
	}
	if *purge {
		if err := purgeCache(mods, *version); err != nil {
			fatal(err)
		}
	}
	for _, m := range mods {
		if !m.Published && !*all {
			continue
		}
		if err := publish(dir, m, *version); err != nil {
			fatal(fmt.Errorf("%s: %w", m.Path, err))
		}
		fmt.Fprintf(os.Stderr, "modpublish: %s@%s\n", m.Path, *version)
	}
	upstream := os.Getenv("GOPROXY")
	if upstream == "" {
		upstream = "https://proxy.golang.org,direct"
	}
	if !strings.HasPrefix(upstream, "file://"+dir) {
		upstream = "file://" + dir + "," + upstream
	}
	fmt.Printf("export GOPROXY=%q\n", upstream)
	fmt.Printf("export GONOSUMDB=%q\n", devtools.ModulePrefix)
	fmt.Printf("export GOFLAGS=%q\n", strings.TrimSpace(os.Getenv("GOFLAGS")+" -mod=mod"))
	// The go command indexes a module-cache directory once per path@version,
	// trusting that its content never changes; after a republication of the
	// same version that adds or removes files it would compile the old file
	// list. goindex=0 turns the index off for the builds that read the proxy.
	godebug := "goindex=0"
	if old := os.Getenv("GODEBUG"); old != "" {
		godebug = old + "," + godebug
	}
	fmt.Printf("export GODEBUG=%q\n", godebug)
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "modpublish:", err)
	os.Exit(1)
}

// publish writes m at version into the proxy directory.
func publish(proxy string, m devtools.Module, version string) error {
	esc, err := module.EscapePath(m.Path)
	if err != nil {
		return err
	}
	vdir := filepath.Join(proxy, filepath.FromSlash(esc), "@v")
	if err := os.MkdirAll(vdir, 0o755); err != nil {
		return err
	}
	files, err := moduleFiles(m.Dir)
	if err != nil {
		return err
	}
	var zbuf bytes.Buffer
	if err := modzip.Create(&zbuf, module.Version{Path: m.Path, Version: version}, files); err != nil {
		return err
	}
	gomod, err := os.ReadFile(filepath.Join(m.Dir, "go.mod"))
	if err != nil {
		return err
	}
	info, _ := json.Marshal(struct {
		Version string
		Time    time.Time
	}{version, time.Now().UTC().Truncate(time.Second)})
	for name, data := range map[string][]byte{version + ".zip": zbuf.Bytes(), version + ".mod": gomod, version + ".info": info} {
		if err := writeFile(filepath.Join(vdir, name), data); err != nil {
			return err
		}
	}
	list := filepath.Join(vdir, "list")
	old, _ := os.ReadFile(list)
	versions := strings.Fields(string(old))
	if !slices.Contains(versions, version) {
		versions = append(versions, version)
	}
	return writeFile(list, []byte(strings.Join(versions, "\n")+"\n"))
}

func writeFile(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// moduleFiles lists the files of the module in dir that a commit would hold:
// git's tracked and untracked-but-not-ignored files, minus those of nested
// modules and those deleted from the working tree.
func moduleFiles(dir string) ([]modzip.File, error) {
	cmd := exec.Command("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", ".")
	cmd.Dir = dir
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("git ls-files in %s: %w", dir, err)
	}
	nested := map[string]bool{} // directory (slash, relative to dir) -> holds a go.mod
	isNested := func(rel string) bool {
		for d := filepath.ToSlash(filepath.Dir(rel)); d != "." && d != "/"; d = filepath.ToSlash(filepath.Dir(d)) {
			v, ok := nested[d]
			if !ok {
				_, err := os.Stat(filepath.Join(dir, filepath.FromSlash(d), "go.mod"))
				v = err == nil
				nested[d] = v
			}
			if v {
				return true
			}
		}
		return false
	}
	seen := map[string]bool{}
	var files []modzip.File
	for _, rel := range strings.Split(string(out), "\x00") {
		if rel == "" || seen[rel] || isNested(rel) {
			continue
		}
		seen[rel] = true
		abs := filepath.Join(dir, filepath.FromSlash(rel))
		st, err := os.Lstat(abs)
		if errors.Is(err, fs.ErrNotExist) {
			continue // deleted in the working tree
		}
		if err != nil {
			return nil, err
		}
		if !st.Mode().IsRegular() {
			continue
		}
		files = append(files, dirFile{rel: rel, abs: abs, info: st})
	}
	return files, nil
}

type dirFile struct {
	rel, abs string
	info     fs.FileInfo
}

func (f dirFile) Path() string                 { return f.rel }
func (f dirFile) Lstat() (fs.FileInfo, error)  { return f.info, nil }
func (f dirFile) Open() (io.ReadCloser, error) { return os.Open(f.abs) }

// purgeCache removes version of every idemkit module from the Go module
// cache.
func purgeCache(mods []devtools.Module, version string) error {
	out, err := exec.Command("go", "env", "GOMODCACHE").Output()
	if err != nil {
		return fmt.Errorf("go env GOMODCACHE: %w", err)
	}
	cache := strings.TrimSpace(string(out))
	if cache == "" {
		return nil
	}
	for _, m := range mods {
		esc, err := module.EscapePath(m.Path)
		if err != nil {
			return err
		}
		paths := []string{filepath.Join(cache, filepath.FromSlash(esc)+"@"+version)}
		dl := filepath.Join(cache, "cache", "download", filepath.FromSlash(esc), "@v")
		for _, ext := range []string{".zip", ".mod", ".info", ".ziphash", ".lock"} {
			paths = append(paths, filepath.Join(dl, version+ext))
		}
		for _, p := range paths {
			if err := removeAll(p); err != nil {
				return err
			}
		}
	}
	return nil
}

// removeAll removes a path of the module cache, whose files and folders are
// read-only.
func removeAll(p string) error {
	if _, err := os.Lstat(p); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	_ = filepath.WalkDir(p, func(path string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			_ = os.Chmod(path, 0o755)
		}
		return nil
	})
	return os.RemoveAll(p)
}
