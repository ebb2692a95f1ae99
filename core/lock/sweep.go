package lock

import (
	"os"
	"path/filepath"
	"strings"
)

// sweepClaims removes the claim files that processes of this host left
// behind when they were killed (SIGKILL runs no cleanup), so that a
// long-lived shared directory does not fill up with them. A claim is removed
// only when all of these hold: its name carries our host name, it holds a
// Go record of this kernel and pid namespace whose process is dead (the
// dead-holder rule, deadOnThisHost), and its link count is 1 (it is not the
// lock). Python claims carry no boot id and are never touched. It runs once
// per Lock, on the first successful Acquire, so it costs one directory
// listing per process, not per operation.
func (l *Lock) sweepClaims() {
	dir := filepath.Dir(l.path)
	prefix := ".lock_" + l.opt.Hostname + "_"
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), prefix) || e.IsDir() {
			continue
		}
		p := filepath.Join(dir, e.Name())
		if n, err := linkCount(p); err != nil || n != 1 {
			continue // the lock itself, or gone
		}
		f, err := os.Open(p)
		if err != nil {
			continue
		}
		h, st, err := readHolderFile(f, p)
		f.Close()
		if err != nil || !l.deadOnThisHost(h) {
			continue
		}
		// A link made since we read it would have changed its ctime.
		if cur, err := lstatStamp(p); err == nil && cur == st.stamp {
			os.Remove(p)
			l.stats.swept.Add(1)
		}
	}
}
