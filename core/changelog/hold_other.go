//go:build !linux

package changelog

// Holder marks the log as used by one store (see hold_linux.go). Without
// open-file-description locks the log is never removed.
type Holder struct{}

// Hold returns nil: nothing marks the log.
func Hold(dir *nodelocal.Dir, name string) (*Holder, error) { return nil, nil }

// Release does nothing.
func (h *Holder) Release() {}

// Sweep does nothing: without holders' marks a log in use cannot be told
// from a leftover.
func Sweep(dir *nodelocal.Dir, name string) {}
