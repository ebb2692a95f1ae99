package main

import (
	"bytes"
	"fmt"
	"os"
	"regexp"
	"testing"

	"github.com/tirastore/tirastore/core/apierr"
)

// TestHeaderUpToDate fails when include/tirastore.h no longer matches the
// exported functions of capi and the error table.
func TestHeaderUpToDate(t *testing.T) {
	want, err := Generate("..")
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile("../../include/tirastore.h")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("include/tirastore.h is out of date: run `go run ./capi/genheader`")
	}
}

// TestStatusMacrosAreTheTable: the header's status macros are exactly
// TIRASTORE_OK and the rows of apierr.Table, with their codes.
func TestStatusMacrosAreTheTable(t *testing.T) {
	h, err := Generate("..")
	if err != nil {
		t.Fatal(err)
	}
	got := regexp.MustCompile(`(?m)^#define (TIRASTORE_\w+) +(\d+) /\*`).FindAllSubmatch(h, -1)
	want := []string{"TIRASTORE_OK=0"}
	for _, e := range apierr.Table {
		want = append(want, fmt.Sprintf("%s=%d", e.CName, e.Status))
	}
	if len(got) != len(want) {
		t.Fatalf("%d status macros, want %d", len(got), len(want))
	}
	for i, m := range got {
		if s := fmt.Sprintf("%s=%s", m[1], m[2]); s != want[i] {
			t.Errorf("macro %d: %s, want %s", i, s, want[i])
		}
	}
}
