package core

import (
	"database/sql"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tirastore/tirastore/core/storage"
)

// A database that only holds records never gets the config table: reads
// find it empty.
func TestConfigReadsOfARecordsDatabase(t *testing.T) {
	t.Parallel()
	st := openTemp(t, Options{CPUModel: "X"})
	if e, err := st.ConfigGet(ctx, "", "gpu:0", "matmul@v1", "k", false); err != nil || e != nil {
		t.Fatalf("get: %v, %v", e, err)
	}
	if n, err := st.ConfigLen(ctx, ""); err != nil || n != 0 {
		t.Fatalf("len: %d, %v", n, err)
	}
	if es, err := st.ConfigEntries(ctx, ConfigFilter{}); err != nil || len(es) != 0 {
		t.Fatalf("entries: %v, %v", es, err)
	}
	if ok, err := st.ConfigDelete(ctx, "", "gpu:0", "matmul@v1", "k"); err != nil || ok {
		t.Fatalf("delete: %v, %v", ok, err)
	}
	if n, err := st.ConfigClear(ctx, ""); err != nil || n != 0 {
		t.Fatalf("clear: %d, %v", n, err)
	}
	raw, err := sql.Open("sqlite3", st.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	var n int
	if err := raw.QueryRow("SELECT count(*) FROM sqlite_master WHERE name = 'config_entries'").Scan(&n); err != nil || n != 0 {
		t.Fatalf("the reads created the config table (%d, %v)", n, err)
	}
}

func TestConfigPutGetOverwrite(t *testing.T) {
	t.Parallel()
	st := openTemp(t, Options{CPUModel: "X"})
	const v1 = `{"block_m":128,"block_n":64,"score":NaN}`
	if ok, err := st.ConfigPut(ctx, "", "gpu:0", "matmul@v1", "sig1", v1, true); err != nil || !ok {
		t.Fatalf("put: %v, %v", ok, err)
	}
	e, err := st.ConfigGet(ctx, "", "gpu:0", "matmul@v1", "sig1", false)
	if err != nil || e == nil || e.ValueJSON != v1 || e.Key != "gpu:0|matmul@v1|sig1" || e.CreationDate == "" || e.UpdateDate != e.CreationDate {
		t.Fatalf("get: %+v, %v", e, err)
	}
	// Without overwrite the first value stays.
	if ok, err := st.ConfigPut(ctx, "", "gpu:0", "matmul@v1", "sig1", `1`, false); err != nil || ok {
		t.Fatalf("put without overwrite: %v, %v; want false", ok, err)
	}
	if e2, _ := st.ConfigGet(ctx, "", "gpu:0", "matmul@v1", "sig1", false); e2.ValueJSON != v1 {
		t.Fatalf("value after a put without overwrite: %s", e2.ValueJSON)
	}
	time.Sleep(2 * time.Millisecond)
	if ok, err := st.ConfigPut(ctx, "", "gpu:0", "matmul@v1", "sig1", `[1,2]`, true); err != nil || !ok {
		t.Fatalf("overwrite: %v, %v", ok, err)
	}
	e3, _ := st.ConfigGet(ctx, "", "gpu:0", "matmul@v1", "sig1", false)
	if e3.ValueJSON != `[1,2]` || e3.CreationDate != e.CreationDate || e3.UpdateDate == e.UpdateDate {
		t.Fatalf("after overwrite: %+v (first %+v)", e3, e)
	}
	if n, _ := st.ConfigLen(ctx, ""); n != 1 {
		t.Fatalf("len %d, want 1", n)
	}
	// A value that is not one JSON value is refused, naming the key.
	for _, bad := range []string{``, `{"a":`, `1 2`, `nan`} {
		_, err := st.ConfigPut(ctx, "", "gpu:0", "matmul@v1", "sig2", bad, true)
		if KindOf(err) != KindValue || !strings.Contains(err.Error(), "gpu:0|matmul@v1|sig2") {
			t.Errorf("value %q: %v, want a ValueError naming the key", bad, err)
		}
	}
}

func TestConfigEntriesDeleteClear(t *testing.T) {
	t.Parallel()
	st := openTemp(t, Options{CPUModel: "X"})
	for _, k := range [][3]string{{"gpu:1", "attn", "b"}, {"gpu:0", "matmul", "a"}, {"gpu:0", "attn", "a"}, {"gpu:0", "attn", "c"}} {
		if _, err := st.ConfigPut(ctx, "", k[0], k[1], k[2], `true`, true); err != nil {
			t.Fatal(err)
		}
	}
	keys := func(device, op string) (out []string) {
		es, err := st.ConfigEntries(ctx, ConfigFilter{Device: device, OpID: op})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range es {
			out = append(out, e.Key)
		}
		return out
	}
	if got := fmt.Sprint(keys("gpu:0", "attn")); got != "[gpu:0|attn|a gpu:0|attn|c]" {
		t.Errorf("entries of gpu:0 attn: %s", got)
	}
	if got := fmt.Sprint(keys("", "attn")); got != "[gpu:0|attn|a gpu:0|attn|c gpu:1|attn|b]" {
		t.Errorf("entries of attn: %s", got)
	}
	if got := fmt.Sprint(keys("gpu:0", "")); got != "[gpu:0|attn|a gpu:0|attn|c gpu:0|matmul|a]" {
		t.Errorf("entries of gpu:0: %s", got)
	}
	if ok, err := st.ConfigDelete(ctx, "", "gpu:0", "attn", "a"); err != nil || !ok {
		t.Fatalf("delete: %v, %v", ok, err)
	}
	if n, err := st.ConfigClear(ctx, ""); err != nil || n != 3 {
		t.Fatalf("clear: %d, %v; want 3", n, err)
	}
	if n, _ := st.ConfigLen(ctx, ""); n != 0 {
		t.Fatalf("len after clear: %d", n)
	}
}

// Concurrent putters lose nothing: 8 stores on one file (as 8 processes,
// each with its own connection and lock ticket) put 200 distinct keys each.
// The cross-process version, with the seed's write pattern as its negative
// control, is in the Python suite.
func TestConfigConcurrentPutsKeepEverything(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "configs.db")
	const writers, each = 8, 200
	stores := make([]*Store, writers)
	for i := range stores {
		st, err := Open(ctx, path, Options{CPUModel: "X"})
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		stores[i] = st
	}
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for i, st := range stores {
		wg.Add(1)
		go func(i int, st *Store) {
			defer wg.Done()
			for j := 0; j < each; j++ {
				if _, err := st.ConfigPut(ctx, "", "gpu:0", "op", fmt.Sprintf("w%d-k%d", i, j), fmt.Sprint(j), true); err != nil {
					errs <- err
					return
				}
			}
		}(i, st)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if n, err := stores[0].ConfigLen(ctx, ""); err != nil || n != writers*each {
		t.Fatalf("%d entries after %d puts (%v)", n, writers*each, err)
	}
}

// A CPU device's fingerprint ("cpu|") names no CPU: an entry tuned on
// another CPU model is refused unless asked; a GPU's names its hardware,
// and an entry of unknown context is served as before. Asked, a miss is
// served the most recent entry of the operation and call signature under
// another device.
func TestConfigDeviceFingerprints(t *testing.T) {
	t.Parallel()
	st := openTemp(t, Options{})
	ours, _ := st.capture.Current()
	plant := func(device, callKey string, cpuModel string) {
		t.Helper()
		other := ours
		other.CPUModel = cpuModel
		fp := other.Fingerprint()
		if cpuModel == "" {
			fp = "" // unknown context
		}
		err := st.Backend().Update(ctx, "plant", func(w storage.Writer) error {
			if fp != "" {
				if err := w.PutContext(storage.RunContext{Fingerprint: fp, JSON: other.JSON()}); err != nil {
					return err
				}
			}
			_, err := w.PutConfig(&storage.ConfigEntry{Key: ConfigKey(device, "mm", callKey), Device: device, OpID: "mm",
				CallKey: callKey, ValueJSON: `"` + cpuModel + `"`, Hostname: "h", Username: "u", CreationDate: "2026-01-01",
				UpdateDate: "2026-01-01", Context: fp}, true)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	get := func(device, callKey string, other bool) string {
		t.Helper()
		e, err := st.ConfigGet(ctx, "", device, "mm", callKey, other)
		if err != nil {
			t.Fatal(err)
		}
		if e == nil {
			return "miss"
		}
		return e.ValueJSON
	}
	plant("cpu|", "a", "Some Other CPU")
	if got := get("cpu|", "a", false); got != "miss" {
		t.Errorf("a CPU entry tuned on another CPU model: %s, want a miss", got)
	}
	if got := get("cpu|", "a", true); got != `"Some Other CPU"` {
		t.Errorf("asked for other devices: %s", got)
	}
	// The negative control: the same entry tuned on this CPU model.
	plant("cpu|", "a", ours.CPUModel)
	if got := get("cpu|", "a", false); got != `"`+ours.CPUModel+`"` {
		t.Errorf("a CPU entry tuned on this CPU model: %s", got)
	}
	plant("NVIDIA A100-SXM4-80GB|cuda 12.2", "b", "Some Other CPU")
	if got := get("NVIDIA A100-SXM4-80GB|cuda 12.2", "b", false); got != `"Some Other CPU"` {
		t.Errorf("a GPU entry (its fingerprint names the device): %s", got)
	}
	plant("cpu:0", "c", "")
	if got := get("cpu:0", "c", false); got != `""` {
		t.Errorf("an entry of unknown context: %s", got)
	}
	if _, err := st.ConfigPut(ctx, "", "cpu|", "mm", "d", `{"block": 64}`, true); err != nil {
		t.Fatal(err)
	}
	if got := get("cpu|", "d", false); got != `{"block": 64}` {
		t.Errorf("this store's own put: %s", got)
	}
	// Another GPU: a miss, unless asked, then the A100's.
	if got := get("NVIDIA H100|cuda 12.4", "b", false); got != "miss" {
		t.Errorf("another GPU's key: %s", got)
	}
	if got := get("NVIDIA H100|cuda 12.4", "b", true); got != `"Some Other CPU"` {
		t.Errorf("another GPU's key, asked: %s", got)
	}
	for dev, cpu := range map[string]bool{"cpu|": true, "CPU": true, "cpu:0": true, " cpu |x": true, "gpu:0": false, "tpu|v4": false, "NVIDIA A100|": false} {
		if isCPUDevice(dev) != cpu {
			t.Errorf("isCPUDevice(%q) = %v", dev, !cpu)
		}
	}
}
