package operator

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/tirastore/tirastore/core"
)

var ctx = context.Background()

// src and sched are a program and a schedule of the tests.
const (
	src   = "void blur() { /* c */ }"
	sched = "S(L0,L1,4,8,comps=['c1'])"
)

// openTemp opens a new store in a test's directory (CPU model "Test CPU"
// unless opts says another).
func openTemp(t *testing.T, opts core.Options) *core.Store {
	t.Helper()
	if opts.CPUModel == "" {
		opts.CPUModel = "Test CPU"
	}
	st, err := core.Open(ctx, filepath.Join(t.TempDir(), "cache.db"), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}
