//go:build failpoints

package failpoint

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/tirastore/tirastore/core/environ"
)

// Compiled reports whether this build honours TIRASTORE_FAILPOINTS.
const Compiled = true

var (
	mu      sync.Mutex
	loaded  string
	actions map[string]string
)

// current parses TIRASTORE_FAILPOINTS, re-reading it when it changes so a
// test can arm points in a process that already loaded the library.
func current() map[string]string {
	spec := environ.Get("TIRASTORE_FAILPOINTS")
	mu.Lock()
	defer mu.Unlock()
	if actions == nil || spec != loaded {
		actions = map[string]string{}
		for _, item := range strings.Split(spec, ";") {
			if name, action, ok := strings.Cut(strings.TrimSpace(item), "="); ok {
				actions[strings.TrimSpace(name)] = strings.TrimSpace(action)
			}
		}
		loaded = spec
	}
	return actions
}

// Enabled reports whether a switch is set to "on".
func Enabled(name string) bool { return current()[name] == "on" }

// Inject performs the action armed for name, if any.
func Inject(name string) {
	action, ok := current()[name]
	if !ok {
		return
	}
	switch {
	case action == "kill":
		kill()
	case strings.HasPrefix(action, "kill@"):
		p, err := strconv.ParseFloat(strings.TrimPrefix(action, "kill@"), 64)
		if err == nil && rand.Float64() < p {
			kill()
		}
	case action == "exit":
		os.Exit(77)
	case strings.HasPrefix(action, "sleep(") && strings.HasSuffix(action, ")"):
		ms, err := strconv.Atoi(action[len("sleep(") : len(action)-1])
		if err == nil {
			time.Sleep(time.Duration(ms) * time.Millisecond)
		}
	case action == "panic":
		panic(fmt.Sprintf("failpoint %s", name))
	case action == "stop":
		mu.Lock()
		first := !stopped[name]
		stopped[name] = true
		mu.Unlock()
		if first {
			syscall.Kill(os.Getpid(), syscall.SIGSTOP)
		}
	}
}

// stopped are the points whose stop action already ran (once each).
var stopped = map[string]bool{}

func kill() {
	syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // SIGKILL is delivered before this returns in practice
}
