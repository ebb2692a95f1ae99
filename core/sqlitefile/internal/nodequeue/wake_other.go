//go:build !linux

package nodequeue

import (
	"errors"
	"os"
	"time"
)

// wakeWords: without futex(2), waits block in fcntl(F_SETLKW) on a
// goroutine of their own (see wake_linux.go).
type wakeWords struct{}

func mapWakeWords(*os.File) (*wakeWords, error) { return nil, errors.ErrUnsupported }

func (w *wakeWords) unmap()     {}
func (w *wakeWords) wake(int64) {}

func (w *wakeWords) sleep(int64, time.Duration, func() error) error { return errNoWords }

// Sleepers: no wake words here (see wake_linux.go).
func Sleepers(string) (int, error) { return 0, errors.ErrUnsupported }
