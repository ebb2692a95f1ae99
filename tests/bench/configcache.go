package main

import (
	"errors"
	"fmt"
	"io"
	"time"
)

// The kernel-config cache: tirastore.PersistentCache, ejKernel's
// PersistentCache on a TiraStore database, beside SeedPersistentCache of
// tests/python/seed_cache.py, the seed's own pattern (the whole JSON file
// loaded by the constructor, every put rewriting the whole file through a
// temporary file and a rename). Both run from Python (pybench.py), in the
// same run, on the same disk, in the database's directory. Their rows
// belong to the latency section (results.json: latency.<impl>.<row>) and
// are printed as a table of their own in it.

// Implementation names of the kernel-config cache rows.
const (
	implConfigSeed  = "seed-cache"       // SeedPersistentCache (tests/python/seed_cache.py)
	implConfigCache = "persistent-cache" // tirastore.PersistentCache
)

// configImpls are the kernel-config cache implementations, the reference
// (the seed) first.
var configImpls = []string{implConfigSeed, implConfigCache}

// Labels of the kernel-config cache rows, in table order.
const (
	opConfigGet      = "config_get_hit"
	opConfigPutSmall = "config_put_10"
	opConfigPutLarge = "config_put_10000"
)

// configOps are the kernel-config cache rows, in table order.
var configOps = []string{opConfigGet, opConfigPutSmall, opConfigPutLarge}

// The entries: one device and operation, call keys naming (tag, i) as the
// schedules do, and a small configuration whose "trial" field tells the
// writes apart.
const (
	configDevice    = "gpu:0"
	configOpID      = "matmul@v1"
	configKeyFormat = "matmul(bfloat16[{i},4096],bfloat16[4096,4096])->bfloat16#{tag}"

	configSmall = 10    // entries of the small cache
	configLarge = 10000 // entries of the large cache

	tagConfigPool    = 8  // preloaded entries of both caches
	tagConfigNew     = 9  // new keys of the 10,000-entry put row
	tagConfigWarmNew = 10 // warm-up puts of the 10,000-entry cache

	configGetHitTarget = 10.0 // µs, median of a PersistentCache get hit
)

// configValue is every entry's configuration, "trial" aside.
var configValue = map[string]any{"block_m": 128, "block_n": 128, "block_k": 64, "num_warps": 8, "num_stages": 3}

// configSizes are the iteration counts of the kernel-config cache plan.
type configSizes struct {
	Gets      int `json:"get_hit"`
	PutsSmall int `json:"put_10"`
	PutsLarge int `json:"put_10000"`
}

// configPlan is the kernel-config cache plan, per implementation: a cache
// preloaded with 10 entries, their gets repeated (after one get of each,
// so that PersistentCache answers from the engine's in-process cache),
// puts that overwrite those 10 entries with new values (the cache stays at
// 10 entries, where a put of a new key would grow it by one per put: the
// seed's put cost grows with it), then a cache preloaded with 10,000
// entries and puts of new keys. Each cache is preloaded by writing its
// seed JSON file; the constructor loads it (the seed) or imports it into
// the database (PersistentCache).
func configPlan(z configSizes) []step {
	const warm = 5
	return []step{
		{Label: "cache_10", Op: "config_open", N: 1, Tag: tagConfigPool, Batch: configSmall, Expect: true, Warmup: true},
		{Label: "warmup_get", Op: "config_get", N: configSmall, Tag: tagConfigPool, Expect: true, Warmup: true},
		{Label: opConfigGet, Op: "config_get", N: z.Gets, Tag: tagConfigPool, Keys: configSmall, Expect: true},
		{Label: "warmup_put_10", Op: "config_put", N: warm, Tag: tagConfigPool, Keys: configSmall, Overwrite: true, Expect: true, Warmup: true},
		{Label: opConfigPutSmall, Op: "config_put", N: z.PutsSmall, Tag: tagConfigPool, Keys: configSmall, Overwrite: true, Expect: true},
		{Label: "cache_10000", Op: "config_open", N: 1, Tag: tagConfigPool, Batch: configLarge, Expect: true, Warmup: true},
		{Label: "warmup_put_10000", Op: "config_put", N: 2, Tag: tagConfigWarmNew, Overwrite: true, Expect: true, Warmup: true},
		{Label: opConfigPutLarge, Op: "config_put", N: z.PutsLarge, Tag: tagConfigNew, Overwrite: true, Expect: true},
	}
}

// configSection measures both kernel-config caches, in rounds
// (-latency-rounds) like the latency section, the seed first, each on a
// fresh directory; samples are pooled over rounds.
func configSection(cfg *config, res *results) error {
	if why := pythonPrereq(cfg); why != "" {
		for _, impl := range configImpls {
			res.Skipped["latency/"+impl] = why
		}
		cfg.logf("kernel-config cache rows skipped: %s", why)
		return nil
	}
	raw := map[string]map[string]*stepResult{}
	for round := 1; round <= cfg.Rounds; round++ {
		for _, impl := range configImpls {
			if _, failed := res.Skipped["latency/"+impl]; failed {
				continue
			}
			m, err := configPython(cfg, impl, round)
			if err != nil {
				res.fail("latency/"+impl, err)
				delete(raw, impl)
				cfg.logf("config %s: %v", impl, err)
				continue
			}
			poolResults(raw, impl, m)
		}
	}
	for impl, m := range raw {
		res.Latency[impl] = toOpResults(m, cfg.Raw)
	}
	return nil
}

// configPython runs the kernel-config cache plan in pybench.py.
func configPython(cfg *config, impl string, round int) (map[string]*stepResult, error) {
	if err := cfg.fresh(); err != nil {
		return nil, err
	}
	z := cfg.ConfigCache
	cfg.logf("config %s (round %d): %d gets, %d puts with %d entries, %d puts with %d entries",
		impl, round, z.Gets, z.PutsSmall, configSmall, z.PutsLarge, configLarge)
	t0 := time.Now()
	out, err := runPython(cfg, cfg.pySpec(impl, configPlan(z)))
	switch {
	case err != nil:
		return nil, err
	case out.Skip != "":
		return nil, errors.New(out.Skip)
	}
	cfg.logf("config %s (round %d): done in %.1f s", impl, round, time.Since(t0).Seconds())
	return out.Results, nil
}

// writeConfigCache prints the kernel-config cache rows (part of section 1).
func writeConfigCache(w io.Writer, res *results) {
	shown := false
	for _, impl := range configImpls {
		_, skipped := res.Skipped["latency/"+impl]
		shown = shown || res.Latency[impl] != nil || skipped
	}
	if !shown {
		return
	}
	fmt.Fprintf(w, "\n   Kernel-config cache, from Python (µs): tirastore.PersistentCache against SeedPersistentCache (tests/python/seed_cache.py:\n")
	fmt.Fprintf(w, "   the seed's pattern, whole JSON file loaded once, every put rewrites it). speedup = seed-cache median / this median, same run, same disk.\n")
	t := newTable("ll", "operation", "client", "n", "median", "p99", "mean", "speedup", "target", "met?", "failed")
	for _, op := range configOps {
		first := true
		for _, impl := range configImpls {
			r := res.lat(impl, op)
			if r == nil || r.Summary == nil {
				continue
			}
			title := ""
			if first {
				title = opTitles[op]
				first = false
			}
			sp := "-"
			if impl != implConfigSeed {
				sp = fmtX(ratio(res.median(implConfigSeed, op), r.Summary.Median))
			}
			tgt, met := "", ""
			if impl == implConfigCache && op == opConfigGet {
				tgt = "median<=" + fmtNum(configGetHitTarget) + "µs"
				met = metStr(boolp(r.Summary.Median <= configGetHitTarget))
			}
			failed := ""
			if r.Errors+r.Wrong > 0 {
				failed = fmt.Sprintf("%d err, %d wrong", r.Errors, r.Wrong)
			}
			t.add(title, impl, fmt.Sprint(r.Summary.N), fmtUS(r.Summary.Median), fmtUS(r.Summary.P99), fmtUS(r.Summary.Mean),
				sp, tgt, met, failed)
		}
	}
	t.write(w, "  ")
	for _, impl := range configImpls {
		if why, ok := res.Skipped["latency/"+impl]; ok {
			fmt.Fprintf(w, "   %s skipped: %s\n", impl, why)
		}
	}
	fmt.Fprintf(w, "   get hit: the same %d keys again and again; put 10: overwrites of those %d entries (the cache stays at %d);\n", configSmall, configSmall, configSmall)
	fmt.Fprintf(w, "   put 10,000: new keys in a cache preloaded with 10,000 entries (a seed JSON file, imported by PersistentCache's first use, before the timing).\n")
}
