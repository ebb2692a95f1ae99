package nodelocal

import (
	"os"

	"golang.org/x/sys/unix"
)

// # Inspecting a database's node-local files
//
// Inspect is for an operator's check (tirastore check): which node-local
// files of a database exist on this node and whether each passes the
// checks that its users apply. It creates, opens for writing, locks or
// removes nothing: the private directory is opened read-only (O_NOFOLLOW,
// checked with fstat) only to look at the names in it, and the names are
// looked at with fstatat without following links.

// FileState is what Inspect found at one node-local name.
type FileState struct {
	Role    string // "private directory", "gate file", "spool", "change log"
	Serves  string // the speed-up that is off while the name fails its checks
	Path    string
	Present bool
	// Problem says what is wrong ("" when the name is absent or passes the
	// checks): "a symbolic link, not a regular file", "owned by uid
	// 65534, not 0", ...
	Problem string
	// Entries is the number of names in a spool that passes its checks
	// (requests being handed over; left by dead processes if the count
	// stays above 0 while no process of this database runs), else 0.
	Entries int
}

// Inspect looks at the private directory and at the node-local files of
// the database whose lock is at lockPath (see FileState). The private
// directory comes first; if it fails its checks, it is the only entry
// (what is in it is not looked at).
func Inspect(lockPath string) []FileState {
	p := PrivatePath()
	dir := FileState{Role: "private directory", Serves: "node queue, group commit, change log", Path: p}
	files := []struct {
		role, serves, prefix string
		typ, perm            uint32
	}{
		{"gate file", "node queue", GatePrefix, unix.S_IFREG, filePerm},
		{"spool", "group commit", SpoolPrefix, unix.S_IFDIR, dirPerm},
		{"change log", "change log", ChangeLogPrefix, unix.S_IFREG, filePerm},
	}
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		out := []FileState{dir}
		for _, f := range files {
			out = append(out, FileState{Role: f.role, Serves: f.serves, Path: p + "/" + Name(f.prefix, lockPath)})
		}
		return out
	}
	dir.Present = true
	if dir.Problem = check(&st, unix.S_IFDIR, dirPerm, false); dir.Problem != "" {
		return []FileState{dir}
	}
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err == nil {
		err = unix.Fstat(fd, &st)
	}
	if err != nil {
		if fd >= 0 {
			unix.Close(fd)
		}
		dir.Problem = "cannot be opened: " + err.Error()
		return []FileState{dir}
	}
	defer unix.Close(fd)
	if dir.Problem = check(&st, unix.S_IFDIR, dirPerm, false); dir.Problem != "" {
		return []FileState{dir} // replaced between the lstat and the open
	}
	out := []FileState{dir}
	for _, f := range files {
		name := Name(f.prefix, lockPath)
		fs := FileState{Role: f.role, Serves: f.serves, Path: p + "/" + name}
		if unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil {
			fs.Present = true
			fs.Problem = check(&st, f.typ, f.perm, false)
			if fs.Problem == "" && f.typ == unix.S_IFDIR {
				fs.Entries, fs.Problem = countEntries(fd, name)
			}
		}
		out = append(out, fs)
	}
	return out
}

// countEntries counts the names in the directory name in dirfd, opened
// without following a link and checked again through its descriptor.
func countEntries(dirfd int, name string) (int, string) {
	sfd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, "cannot be opened: " + err.Error()
	}
	f := os.NewFile(uintptr(sfd), name)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(sfd, &st); err != nil {
		return 0, "cannot be examined: " + err.Error()
	}
	if what := check(&st, unix.S_IFDIR, dirPerm, false); what != "" {
		return 0, what
	}
	names, err := f.Readdirnames(-1)
	if err != nil {
		return 0, "cannot be listed: " + err.Error()
	}
	return len(names), ""
}
