package main

import (
	"bytes"
	"os"
	"testing"
)

// TestHeaderUpToDate fails when include/tirastore.h no longer matches the
// exported functions and status codes of capi.
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
