// Package migrations reads numbered schema migrations from an embedded file
// system, for the SQL stores: files NNN_name.up.sql and NNN_name.down.sql.
package migrations

import (
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"
)

// Migration is one numbered schema change.
type Migration struct {
	Version int
	Name    string
	Up      string
	Down    string
}

// Load returns the migrations in dir of fsys in version order. Every up
// file needs its down file; versions are positive and unique.
func Load(fsys fs.FS, dir string) ([]Migration, error) {
	ups, err := fs.Glob(fsys, path.Join(dir, "*.up.sql"))
	if err != nil {
		return nil, err
	}
	all, err := fs.Glob(fsys, path.Join(dir, "*.sql"))
	if err != nil {
		return nil, err
	}
	var ms []Migration
	for _, n := range ups {
		base := strings.TrimSuffix(path.Base(n), ".up.sql")
		num, name, ok := strings.Cut(base, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v <= 0 {
			return nil, fmt.Errorf("migration file %s is not named NNN_name.up.sql", n)
		}
		up, err := fs.ReadFile(fsys, n)
		if err != nil {
			return nil, err
		}
		down, err := fs.ReadFile(fsys, strings.TrimSuffix(n, ".up.sql")+".down.sql")
		if err != nil {
			return nil, fmt.Errorf("migration %s has no .down.sql: %w", n, err)
		}
		ms = append(ms, Migration{Version: v, Name: name, Up: string(up), Down: string(down)})
	}
	for _, n := range all {
		if !strings.HasSuffix(n, ".up.sql") && !strings.HasSuffix(n, ".down.sql") {
			return nil, fmt.Errorf("migration file %s is neither .up.sql nor .down.sql", n)
		}
		if up := strings.TrimSuffix(n, ".down.sql") + ".up.sql"; strings.HasSuffix(n, ".down.sql") && !slices.Contains(ups, up) {
			return nil, fmt.Errorf("migration %s has no .up.sql", n)
		}
	}
	slices.SortFunc(ms, func(a, b Migration) int { return a.Version - b.Version })
	for i := 1; i < len(ms); i++ {
		if ms[i].Version == ms[i-1].Version {
			return nil, fmt.Errorf("two migrations numbered %03d", ms[i].Version)
		}
	}
	return ms, nil
}
