//go:build linux

package main

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Names, sizes and contents changed via mount A are seen at once via mount
// B, and the operations the hard-link lock relies on are atomic across
// mounts.
func TestCoherence(t *testing.T) {
	bed := startBed(t, 2)
	a, b := 0, 1

	t.Run("write then read", func(t *testing.T) {
		for i := 0; i < 200; i++ {
			data := make([]byte, rand.IntN(20000))
			for j := range data {
				data[j] = byte(rand.Uint32())
			}
			if err := os.WriteFile(bed.path(a, "w"), data, 0o644); err != nil {
				t.Fatal(err)
			}
			got, err := os.ReadFile(bed.path(b, "w"))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, data) {
				t.Fatalf("round %d: read %d bytes via B, wrote %d via A (contents differ)", i, len(got), len(data))
			}
			if st, err := os.Stat(bed.path(b, "w")); err != nil || st.Size() != int64(len(data)) {
				t.Fatalf("round %d: stat via B: %v, size %v, want %d", i, err, st, len(data))
			}
		}
	})

	// As SQLite does: both sides keep the file open; each write via A is
	// read via B's old descriptor.
	t.Run("kept-open descriptors", func(t *testing.T) {
		if err := os.WriteFile(bed.path(a, "open"), make([]byte, 64<<10), 0o644); err != nil {
			t.Fatal(err)
		}
		w, err := os.OpenFile(bed.path(a, "open"), os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		r, err := os.OpenFile(bed.path(b, "open"), os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		page := make([]byte, 4096)
		got := make([]byte, 4096)
		for i := 0; i < 2000; i++ {
			off := int64(4096 * (i % 16))
			for j := range page {
				page[j] = byte(i + j)
			}
			if _, err := w.WriteAt(page, off); err != nil {
				t.Fatal(err)
			}
			if _, err := r.ReadAt(got, off); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, page) {
				t.Fatalf("write %d at %d via A: B's open descriptor read stale data", i, off)
			}
			// and the other way round
			if _, err := r.WriteAt(page[:100], off+7); err != nil {
				t.Fatal(err)
			}
			if _, err := w.ReadAt(got[:100], off+7); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got[:100], page[:100]) {
				t.Fatalf("write %d via B: A's open descriptor read stale data", i)
			}
		}
	})

	t.Run("rename link unlink", func(t *testing.T) {
		if err := os.WriteFile(bed.path(a, "old"), []byte("payload"), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(bed.path(b, "old")); err != nil {
			t.Fatalf("created via A, stat via B: %v", err)
		}
		if err := os.Rename(bed.path(a, "old"), bed.path(a, "new")); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(bed.path(b, "old")); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("renamed away via A, stat old name via B: %v, want ENOENT", err)
		}
		if got, err := os.ReadFile(bed.path(b, "new")); err != nil || string(got) != "payload" {
			t.Fatalf("renamed via A, read new name via B: %q, %v", got, err)
		}
		if err := os.Link(bed.path(a, "new"), bed.path(a, "second")); err != nil {
			t.Fatal(err)
		}
		stB1, stB2, stA, stBack := statT(t, bed.path(b, "new")), statT(t, bed.path(b, "second")), statT(t, bed.path(a, "second")), statT(t, filepath.Join(bed.backing, "second"))
		if stB1.Ino != stB2.Ino || stB1.Ino != stA.Ino || stA.Ino != stBack.Ino {
			t.Errorf("inode numbers: B new %d, B second %d, A second %d, backing %d; want all equal", stB1.Ino, stB2.Ino, stA.Ino, stBack.Ino)
		}
		if stB1.Nlink != 2 {
			t.Errorf("linked via A: nlink via B = %d, want 2", stB1.Nlink)
		}
		if got, err := os.ReadFile(bed.path(b, "second")); err != nil || string(got) != "payload" {
			t.Fatalf("linked via A, read via B: %q, %v", got, err)
		}
		if err := os.Remove(bed.path(a, "new")); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(bed.path(b, "new")); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("unlinked via A, stat via B: %v, want ENOENT", err)
		}
		if st := statT(t, bed.path(b, "second")); st.Nlink != 1 {
			t.Errorf("after unlink via A: nlink via B = %d, want 1", st.Nlink)
		}
		if err := os.Mkdir(bed.path(a, "dir"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Mkdir(bed.path(b, "dir"), 0o755); !errors.Is(err, syscall.EEXIST) {
			t.Errorf("mkdir via B of a directory made via A: %v, want EEXIST", err)
		}
	})

	t.Run("link to existing name", func(t *testing.T) {
		if err := os.WriteFile(bed.path(a, "lock"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(bed.path(b, "claim"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		err := os.Link(bed.path(b, "claim"), bed.path(b, "lock"))
		if !errors.Is(err, syscall.EEXIST) {
			t.Fatalf("link via B onto a name made via A: %v, want EEXIST", err)
		}
	})

	// Contenders spread over both mounts; in each round exactly one wins.
	t.Run("link race", func(t *testing.T) {
		const rounds, contenders = 100, 8
		for r := 0; r < rounds; r++ {
			lock := fmt.Sprintf("race%d.lock", r)
			claims := make([]string, contenders)
			for c := range claims {
				claims[c] = bed.path(c%2, fmt.Sprintf("race%d.claim%d", r, c))
				if err := os.WriteFile(claims[c], nil, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			errs := race(contenders, func(c int) error {
				return os.Link(claims[c], bed.path(c%2, lock))
			})
			winner := oneWinner(t, r, errs)
			if winner >= 0 && statT(t, bed.path(b, lock)).Ino != statT(t, claims[winner]).Ino {
				t.Fatalf("round %d: the lock is not the winner's claim", r)
			}
		}
	})

	t.Run("O_EXCL race", func(t *testing.T) {
		const rounds, contenders = 100, 8
		for r := 0; r < rounds; r++ {
			name := fmt.Sprintf("excl%d", r)
			errs := race(contenders, func(c int) error {
				f, err := os.OpenFile(bed.path(c%2, name), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
				if err == nil {
					_, err = fmt.Fprintf(f, "%d", c)
					if cerr := f.Close(); err == nil {
						err = cerr
					}
				}
				return err
			})
			winner := oneWinner(t, r, errs)
			if got, err := os.ReadFile(bed.path((winner+1)%2, name)); err != nil || string(got) != fmt.Sprint(winner) {
				t.Fatalf("round %d: file read via the other mount: %q, %v; want %d", r, got, err, winner)
			}
		}
	})
}

// race runs f(0..n-1) at once and returns their errors.
func race(n int, f func(c int) error) []error {
	errs := make([]error, n)
	var start, done sync.WaitGroup
	start.Add(1)
	for c := 0; c < n; c++ {
		done.Add(1)
		go func() {
			defer done.Done()
			start.Wait()
			errs[c] = f(c)
		}()
	}
	start.Done()
	done.Wait()
	return errs
}

// oneWinner checks that exactly one contender succeeded and the others
// failed with EEXIST, and returns the winner.
func oneWinner(t *testing.T, round int, errs []error) int {
	t.Helper()
	winner := -1
	for c, err := range errs {
		switch {
		case err == nil && winner >= 0:
			t.Fatalf("round %d: contenders %d and %d both won", round, winner, c)
		case err == nil:
			winner = c
		case !errors.Is(err, syscall.EEXIST):
			t.Fatalf("round %d: contender %d: %v, want EEXIST", round, c, err)
		}
	}
	if winner < 0 {
		t.Fatalf("round %d: no contender won", round)
	}
	return winner
}

func statT(t *testing.T, p string) *syscall.Stat_t {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(p, &st); err != nil {
		t.Fatalf("stat %s: %v", p, err)
	}
	return &st
}

// --latency slows every metadata request; each stat is at least one.
func TestLatency(t *testing.T) {
	const n = 50
	measure := func(latency string) time.Duration {
		bed := startBed(t, 1, "--latency", latency)
		if err := os.WriteFile(bed.path(0, "f"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		for i := 0; i < n; i++ {
			statT(t, bed.path(0, "f"))
		}
		per := time.Since(start) / n
		bed.stop()
		return per
	}
	base := measure("0s")
	slow := measure("2ms")
	t.Logf("stat of a file: %v without latency, %v with --latency 2ms", base, slow)
	if slow < 2*time.Millisecond {
		t.Errorf("stat with --latency 2ms took %v, want >= 2ms", slow)
	}
}
