package lock

import (
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// sweepTickets removes the ticket files that killed processes left behind
// (SIGKILL and an unhandled SIGTERM run no cleanup), so that a long-lived
// shared directory does not fill up with them. It runs once per Lock, on
// the first successful Acquire, so it costs one directory listing (and an
// lstat per leftover) per process, not per operation. A ticket is removed
// only when its link count is 1 (it is not the lock, nor the break lock)
// and either
//
//   - its name carries our host name and it holds a Go record of this
//     kernel and pid namespace whose process is dead (the dead-holder
//     rule, deadOnThisHost): removed at once; or
//   - it is provably old: unchanged (mtime and ctime) for longer than
//     StaleTimeout by our clock. That covers other hosts' tickets and old
//     Python workers' ones. A live Go process rewrites its ticket at every
//     acquisition; one idle for that long that loses its ticket makes a new
//     one at its next acquisition (acquireFile), so a misjudged ticket costs
//     its owner one create, never the lock.
//
// The files a breaker moved aside (<lock>.stale.*, <lock>.break.stale.*),
// which exist for microseconds unless the breaker was killed, are removed
// by the same age rule. Before removing, the file's stamp is compared
// again: a link made since (it became the lock) changes its ctime.
func (l *Lock) sweepTickets() { l.leftovers(true) }

// Leftovers lists the ticket and moved-aside files that the sweep would
// remove now (see sweepTickets), without removing them: tirastore check.
func (l *Lock) Leftovers() []string { return l.leftovers(false) }

// Sweep removes them and lists what it removed: tirastore check --repair.
func (l *Lock) Sweep() []string { return l.leftovers(true) }

// leftovers finds the sweep's files and, if remove, removes them.
func (l *Lock) leftovers(remove bool) []string {
	var found []string
	dir := filepath.Dir(l.path)
	here := ticketStart + l.opt.Hostname + "_"
	asides := filepath.Base(l.path) + "."
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	now := l.clock()
	for _, e := range entries {
		name := e.Name()
		ticketName := strings.HasPrefix(name, ticketStart)
		aside := strings.HasPrefix(name, asides) && strings.Contains(name[len(asides):], "stale.")
		if e.IsDir() || !(ticketName || aside) {
			continue
		}
		p := filepath.Join(dir, name)
		if l.own != nil && p == l.own.path {
			continue
		}
		var st unix.Stat_t
		if unix.Lstat(p, &st) != nil || st.Nlink != 1 || st.Mode&unix.S_IFMT != unix.S_IFREG {
			continue // the lock itself, the break lock, gone, or not ours to judge
		}
		stamp := stampOf(&st)
		if !l.provablyOld(&st, now) {
			if !ticketName || !strings.HasPrefix(name, here) || !l.deadTicket(p, stamp) {
				continue
			}
		}
		if !remove {
			found = append(found, p)
			continue
		}
		// A link made since we looked would have changed its ctime.
		if cur, err := lstatStamp(p); err == nil && cur == stamp && os.Remove(p) == nil {
			l.stats.swept.Add(1)
			found = append(found, p)
		}
	}
	return found
}

// provablyOld: a leftover unchanged for longer than StaleTimeout by our
// wall clock (never, for a Lock that never breaks locks).
func (l *Lock) provablyOld(st *unix.Stat_t, now time.Time) bool {
	if l.opt.StaleTimeout <= 0 {
		return false
	}
	return now.Sub(lastChange(st)) > l.opt.StaleTimeout
}

// lastChange is when the file of st was last written, linked, renamed or
// chmod'ed: the later of its mtime and ctime (no user can set a ctime).
func lastChange(st *unix.Stat_t) time.Time {
	last := time.Unix(st.Mtim.Unix())
	if c := time.Unix(st.Ctim.Unix()); c.After(last) {
		last = c
	}
	return last
}

// deadTicket: the ticket at p (in state stamp) holds the record of a
// process of this host that is dead (deadOnThisHost).
func (l *Lock) deadTicket(p string, stamp stamp) bool {
	h, st, err := readHolder(p)
	return err == nil && st.stamp == stamp && l.deadOnThisHost(h)
}
