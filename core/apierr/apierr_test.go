package apierr

import (
	"errors"
	"fmt"
	"testing"
)

// The table is the ABI: one row per kind, codes 1..n without gaps or
// repeats, one C name per code.
func TestTableIsComplete(t *testing.T) {
	seenKind := map[Kind]bool{}
	seenName := map[string]bool{}
	for i, e := range Table {
		if e.Status != i+1 {
			t.Errorf("row %d (%s): status %d, want %d (rows in status order, no gaps)", i, e.CName, e.Status, i+1)
		}
		if seenKind[e.Kind] || seenName[e.CName] {
			t.Errorf("row %d: kind %d or name %s repeated", i, e.Kind, e.CName)
		}
		seenKind[e.Kind], seenName[e.CName] = true, true
		if e.Python == "" || e.Doc == "" {
			t.Errorf("row %d (%s): Python class and Doc are required", i, e.CName)
		}
	}
	for k := KindInternal; k <= KindLockLost; k++ {
		if !seenKind[k] {
			t.Errorf("kind %d has no row", k)
		}
	}
	if got := Kind(999).Status(); got != KindInternal.Status() {
		t.Errorf("an unknown kind maps to status %d, want the internal one", got)
	}
}

// TestClassified: nil stays a nil error (not a typed nil *Error, which
// would read as a failure), an *Error wrapped by a lower layer is found
// and passed on, and any other error is left to the caller.
func TestClassified(t *testing.T) {
	if e, done := Classified(nil); !done || e != nil {
		t.Errorf("Classified(nil) = %#v, %v; want nil, true", e, done)
	}
	inner := New(KindValue, "bad")
	if e, done := Classified(fmt.Errorf("context: %w", inner)); !done || e != error(inner) {
		t.Errorf("wrapped *Error: %v, %v; want the *Error, true", e, done)
	}
	if e, done := Classified(errors.New("plain")); done || e != nil {
		t.Errorf("plain error: %v, %v; want nil, false", e, done)
	}
}
