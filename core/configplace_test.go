package core

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tirastore/tirastore/core/storage"
)

// locate is LocateConfigCache of opname with an optional path, failing the
// test on an error.
func locate(t *testing.T, opname string, path ...string) *ConfigPlace {
	t.Helper()
	a := ConfigPlaceArgs{Opname: opname}
	if len(path) > 0 {
		a.Path, a.PathGiven = path[0], true
	}
	pl, err := LocateConfigCache(a)
	if err != nil {
		t.Fatalf("LocateConfigCache(%+v): %v", a, err)
	}
	return pl
}

// The released class's places, with pathlib's spelling, and nothing created.
func TestLocateConfigCacheFindsTheReleasedClassesPlaces(t *testing.T) {
	base := t.TempDir()
	home := filepath.Join(base, "home")
	if err := os.Mkdir(home, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("HOME", home)
	os.Unsetenv(configDirEnv)
	chdir(t, base)

	pl := locate(t, "flash-attn")
	dir := filepath.Join(home, "ejkernel-presistent-cache")
	if pl.Path != filepath.Join(dir, "flash-attn.json") || pl.DBPath != filepath.Join(dir, ConfigDBName) ||
		pl.JSONPath != filepath.Join(dir, "flash-attn.json") || pl.Namespace != "flash-attn" || pl.DBExists || pl.ImportJSON {
		t.Errorf("default place: %+v", pl)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("locating created %s: %v", dir, err)
	}
	// An absolute opname replaces the directory, as pathlib's "/" does.
	if pl := locate(t, filepath.Join(base, "kernels", "k")); pl.Path != filepath.Join(base, "kernels", "k.json") || pl.Namespace != "k" {
		t.Errorf("absolute opname: %+v", pl)
	}
	for _, c := range []struct{ env, path, ns string }{
		{"~/c", filepath.Join(home, "c", "mm.json"), "mm"},
		{base + "//x/./", filepath.Join(base, "x", "mm.json"), "mm"},
		{"", "mm.json", "mm"}, // Path("") is "."
	} {
		t.Setenv(configDirEnv, c.env)
		if pl := locate(t, "mm"); pl.Path != c.path || pl.Namespace != c.ns {
			t.Errorf("%s=%q: %+v, want path %s", configDirEnv, c.env, pl, c.path)
		}
	}
	if pl := locate(t, "mm"); pl.JSONPath != filepath.Join(base, "mm.json") {
		t.Errorf("a relative place is the working directory's: %+v", pl)
	}
	os.Unsetenv(configDirEnv)
	if pl := locate(t, "x", "~/tuning/matmul.json"); pl.Path != filepath.Join(home, "tuning", "matmul.json") || pl.Namespace != "matmul" ||
		pl.DBPath != filepath.Join(home, "tuning", ConfigDBName) {
		t.Errorf("a JSON path: %+v", pl)
	}
	for _, p := range []string{"/data/shared.db", "/data/mm.JSON", "/data/.json"} {
		if pl := locate(t, "x", p); pl.DBPath != p || pl.JSONPath != "" || pl.Namespace != "" {
			t.Errorf("database path %s: %+v", p, pl)
		}
	}
	if pl := locate(t, "x", "postgresql://u@h/db"); pl.DBPath != "postgresql://u@h/db" || pl.JSONPath != "" {
		t.Errorf("a URL: %+v", pl)
	}
	if _, err := LocateConfigCache(ConfigPlaceArgs{Opname: "a\x00b"}); KindOf(err) != KindValue {
		t.Fatalf("NUL in opname: %v", err)
	}
}

// A directory that cannot be made falls back as the released class does,
// with a notice; with no usable directory the cache is disabled.
func TestLocateConfigCacheFallsBack(t *testing.T) {
	base := t.TempDir()
	file := filepath.Join(base, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("HOME", filepath.Join(file, "home")) // under a file: mkdir fails
	os.Unsetenv(configDirEnv)
	work := filepath.Join(base, "work")
	tmp := filepath.Join(base, "tmp")
	for _, d := range []string{work, tmp} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	chdir(t, work)
	t.Setenv("TMPDIR", tmp)

	pl := locate(t, "mm")
	if want := filepath.Join(work, ".ejkernel-presistent-cache", "mm.json"); pl.Path != want || len(pl.Notices) != 1 ||
		!strings.Contains(pl.Notices[0], "not a directory") {
		t.Fatalf("first fallback: %+v, want %s and a notice", pl, want)
	}
	if err := os.WriteFile(filepath.Join(work, ".ejkernel-presistent-cache"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if pl := locate(t, "mm"); pl.Path != filepath.Join(tmp, "ejkernel-presistent-cache", "mm.json") {
		t.Fatalf("second fallback: %+v", pl)
	}
	if err := os.WriteFile(filepath.Join(tmp, "ejkernel-presistent-cache"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if pl := locate(t, "mm"); pl.Disabled == "" || pl.DBPath != "" {
		t.Fatalf("no directory: %+v", pl)
	}
}

// Who may use the files: private unless the directory is a group's or the
// caller shares; a private cache refuses another user's database and does
// not import another user's JSON file.
func TestLocateConfigCacheSharing(t *testing.T) {
	t.Parallel()
	base := t.TempDir()
	yes, no := true, false
	for _, c := range []struct {
		mode   os.FileMode
		shared *bool
		want   storage.Sharing
	}{
		{0o755, nil, storage.SharePrivate},
		{0o770, nil, storage.ShareGroup},
		{0o777 | os.ModeSticky, nil, storage.SharePrivate},
		{0o777, nil, storage.SharePrivate},
		{0o755, &yes, storage.ShareAll},
		{0o770, &no, storage.SharePrivate},
	} {
		dir := filepath.Join(base, strings.ReplaceAll(c.mode.String(), "-", "_"))
		os.Mkdir(dir, 0o700)
		if err := os.Chmod(dir, c.mode); err != nil {
			t.Fatal(err)
		}
		pl, err := LocateConfigCache(ConfigPlaceArgs{Opname: "mm", Path: filepath.Join(dir, "mm.json"), PathGiven: true, Shared: c.shared})
		if err != nil || pl.Sharing != c.want {
			t.Errorf("directory %v, shared %v: %+v, %v; want %v", c.mode, c.shared, pl, err, c.want)
		}
	}

	if os.Geteuid() != 0 {
		t.Skip("giving a file to another user needs root")
	}
	dir := filepath.Join(base, "sticky")
	os.Mkdir(dir, 0o700)
	os.Chmod(dir, 0o777|os.ModeSticky)
	json := filepath.Join(dir, "mm.json")
	if err := os.WriteFile(json, []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	pl := locate(t, "mm", json)
	if !pl.ImportJSON || len(pl.Notices) != 0 {
		t.Fatalf("the caller's JSON file is imported: %+v", pl)
	}
	os.Chown(json, 65534, 65534)
	pl = locate(t, "mm", json)
	if pl.ImportJSON || len(pl.Notices) != 1 || !strings.Contains(pl.Notices[0], "uid 65534") ||
		!strings.Contains(pl.Notices[0], "config import-ejkernel") {
		t.Fatalf("another user's JSON file: %+v", pl)
	}
	if pl, err := LocateConfigCache(ConfigPlaceArgs{Opname: "mm", Path: json, PathGiven: true, Shared: &yes}); err != nil || !pl.ImportJSON {
		t.Fatalf("a shared cache imports it: %+v, %v", pl, err)
	}
	db := filepath.Join(dir, ConfigDBName)
	if err := os.WriteFile(db, nil, 0o666); err != nil {
		t.Fatal(err)
	}
	if pl := locate(t, "mm", json); !pl.DBExists {
		t.Fatalf("root's own database: %+v", pl)
	}
	os.Chown(db, 65534, 65534)
	_, err := LocateConfigCache(ConfigPlaceArgs{Opname: "mm", Path: json, PathGiven: true})
	if KindOf(err) != KindPermission || !strings.Contains(err.Error(), db) || !strings.Contains(err.Error(), "uid 65534") {
		t.Fatalf("another user's database in a private cache: %v", err)
	}
}

// chdir changes the working directory for the rest of the test (the
// module's Go version predates testing.T.Chdir).
func chdir(t *testing.T, dir string) {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chdir(dir); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Chdir(wd) })
}
