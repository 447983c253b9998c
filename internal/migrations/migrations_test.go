package migrations

import (
	"strings"
	"testing"
	"testing/fstest"
)

func TestLoad(t *testing.T) {
	fsys := fstest.MapFS{
		"m/002_b.up.sql":   {Data: []byte("up2")},
		"m/002_b.down.sql": {Data: []byte("down2")},
		"m/001_a.up.sql":   {Data: []byte("up1")},
		"m/001_a.down.sql": {Data: []byte("down1")},
	}
	ms, err := Load(fsys, "m")
	if err != nil || len(ms) != 2 || ms[0].Version != 1 || ms[0].Name != "a" || ms[0].Up != "up1" || ms[1].Down != "down2" {
		t.Fatalf("Load = %+v, %v", ms, err)
	}
	for name, bad := range map[string]fstest.MapFS{
		"no down":   {"m/001_a.up.sql": {}},
		"no up":     {"m/001_a.up.sql": {}, "m/001_a.down.sql": {}, "m/002_b.down.sql": {}},
		"bad name":  {"m/x_a.up.sql": {}, "m/x_a.down.sql": {}},
		"duplicate": {"m/001_a.up.sql": {}, "m/001_a.down.sql": {}, "m/1_b.up.sql": {}, "m/1_b.down.sql": {}},
		"stray":     {"m/001_a.up.sql": {}, "m/001_a.down.sql": {}, "m/notes.sql": {}},
	} {
		if _, err := Load(bad, "m"); err == nil || !strings.Contains(err.Error(), "migration") {
			t.Errorf("%s: err = %v", name, err)
		}
	}
}
