//go:build !linux

package changelog

// Mark marks the log as used by one store (see hold_linux.go). Without
// open-file-description locks the log is never removed.
type Mark struct{}

// MarkUsed returns nil: nothing marks the log.
func MarkUsed(dir *nodelocal.Dir, name string) (*Mark, error) { return nil, nil }

// Release does nothing.
func (h *Mark) Release() {}

// Sweep does nothing: without holders' marks a log in use cannot be told
// from a leftover.
func Sweep(dir *nodelocal.Dir, name string) {}
