package main

import (
	"context"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/tirastore/tirastore/core/failpoint"
	"github.com/tirastore/tirastore/core/tuning"
)

// Ctrl-C during a lock wait.
//
// A Python program blocked in a library call cannot run its SIGINT handler
// until the call returns, so a wait for a contended lock would ignore
// Ctrl-C until the lock timeout (600 s by default). While some call has been
// waiting for the lock longer than tuning.ArmDelay, the library therefore
// catches SIGINT itself (os/signal in a c-shared library saves the host's
// handler and Reset restores it). On SIGINT it cancels every wait in progress,
// each of which returns TIRASTORE_ERR_INTERRUPTED with its lock ticket file
// removed, restores the host's handler and sends SIGINT to the process again,
// so the host reacts as it would have: Python raises KeyboardInterrupt (or runs
// the user's handler), a C program's default action ends it. An ignored SIGINT
// (SIG_IGN, e.g. under nohup) stays ignored. Uncontended operations never touch
// signal handling.

var interrupts struct {
	sync.Mutex
	waits map[*waiter]struct{}
	ch    chan os.Signal // non-nil while our SIGINT handler is installed
}

type waiter struct {
	cancel context.CancelFunc
	armed  bool
	done   bool
}

// interruptible is core.Options.Interruptible for stores opened through the
// C ABI.
func interruptible(ctx context.Context) (context.Context, func()) {
	ctx, cancel := context.WithCancel(ctx)
	w := &waiter{cancel: cancel}
	t := time.AfterFunc(tuning.ArmDelay, func() { arm(w) })
	return ctx, func() {
		t.Stop()
		disarm(w)
		cancel()
	}
}

func arm(w *waiter) {
	interrupts.Lock()
	defer interrupts.Unlock()
	if w.done || signal.Ignored(os.Interrupt) || failpoint.Enabled(failpoint.InterruptDisabled) {
		return
	}
	w.armed = true
	if interrupts.waits == nil {
		interrupts.waits = map[*waiter]struct{}{}
	}
	interrupts.waits[w] = struct{}{}
	if interrupts.ch == nil {
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, os.Interrupt)
		interrupts.ch = ch
		go deliver(ch)
	}
}

func disarm(w *waiter) {
	interrupts.Lock()
	defer interrupts.Unlock()
	w.done = true
	if !w.armed {
		return
	}
	delete(interrupts.waits, w)
	if len(interrupts.waits) == 0 && interrupts.ch != nil {
		uninstall()
	}
}

// uninstall gives SIGINT back to the host; the caller holds interrupts.
func uninstall() {
	signal.Stop(interrupts.ch)
	signal.Reset(os.Interrupt)
	close(interrupts.ch)
	interrupts.ch = nil
}

// deliver cancels every armed wait when SIGINT arrives, then hands the
// signal to the host.
func deliver(ch chan os.Signal) {
	for range ch {
		interrupts.Lock()
		if interrupts.ch != ch {
			interrupts.Unlock()
			return
		}
		for w := range interrupts.waits {
			w.cancel()
			delete(interrupts.waits, w)
		}
		uninstall()
		interrupts.Unlock()
		syscall.Kill(os.Getpid(), syscall.SIGINT)
		return
	}
}
