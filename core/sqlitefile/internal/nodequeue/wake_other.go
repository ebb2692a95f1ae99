//go:build !linux

package nodequeue

import (
	"errors"
	"os"
	"time"
)

// gateMap: without futex(2), waits block in fcntl(F_SETLKW) on a
// goroutine of their own, and the head is read and written by pread and
// pwrite (see wake_linux.go).
type gateMap struct{}

func mapGate(*os.File) (*gateMap, error) { return nil, errors.ErrUnsupported }

func (w *gateMap) unmap()                   {}
func (w *gateMap) wake(int64)               {}
func (w *gateMap) read([]byte, int64) bool  { return false }
func (w *gateMap) write([]byte, int64) bool { return false }

func (w *gateMap) sleep(int64, time.Duration, func() error) error { return errNoWords }

// Sleepers: no wake words here (see wake_linux.go).
func Sleepers(string) (int, error) { return 0, errors.ErrUnsupported }
