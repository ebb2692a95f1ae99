#!/usr/bin/env python3
"""An autotuner loop whose workers share their results through PersistentCache.

    python3 examples/autotune_cache.py   # 4 workers, cache tirastore-demo/autotune.json
    python3 examples/autotune_cache.py --workers 2 --cache /tmp/tune/autotune.json

Several processes tune the block sizes of a toy kernel (a blocked matrix
multiply in pure Python) for a few call signatures (problem sizes). For each
signature a worker first asks the cache; on a miss it times every candidate
(best of a few runs with time.perf_counter) and stores the fastest with
``put(..., overwrite=False)``. If that put returns False, another worker
stored its result first: the worker drops its own and uses the stored one,
so that every worker ends up with the same configuration. Workers visit the
signatures in rotated order, so that on a cold cache they start on different
ones; a worker that reaches a signature another one is still tuning tunes it
too, and the first put wins.

The cache path ends in .json, as an ejkernel cache's does: the entries live
in the TiraStore database beside it (``persistent-cache.tirastore.db``, the
namespace ``autotune``), and the
.json file itself is only read (imported once) if it exists. Run the script
a second time on the same cache: every signature is a hit and it tunes
nothing ("0 tuned").

Exit status: 0 on success, 1 if the workers did not agree, 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import platform
import sys
import time
from dataclasses import dataclass
from pathlib import Path

try:
    from tirastore import PersistentCache
except ImportError:  # run from a source checkout without `pip install -e .`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "python"))
    from tirastore import PersistentCache

OPNAME = "blocked_matmul"
OP_ID = OPNAME + "@v1"
DEVICE = "cpu:" + platform.machine()
SIGNATURES = [(24, 24, 24), (32, 48, 16), (48, 32, 32), (40, 40, 40)]  # (m, n, k)
BLOCKS = (8, 16, 32)
REPEATS = 3


@dataclass
class BlockConfig:
    block_i: int
    block_k: int
    best_ms: float  # the winner's time, for the report


def matmul(a, b, m, n, k, block_i, block_k):
    """C = A @ B, looping over (block_i x block_k) tiles of A."""
    c = [[0.0] * n for _ in range(m)]
    for i0 in range(0, m, block_i):
        for k0 in range(0, k, block_k):
            for i in range(i0, min(i0 + block_i, m)):
                ci, ai = c[i], a[i]
                for kk in range(k0, min(k0 + block_k, k)):
                    aik, bk = ai[kk], b[kk]
                    for j in range(n):
                        ci[j] += aik * bk[j]
    return c


def tune(m, n, k) -> BlockConfig:
    a = [[float(i + j) for j in range(k)] for i in range(m)]
    b = [[float(i - j) for j in range(n)] for i in range(k)]
    best = None
    for bi in (x for x in BLOCKS if x <= m):
        for bk in (x for x in BLOCKS if x <= k):
            times = []
            for _ in range(REPEATS):
                t0 = time.perf_counter()
                matmul(a, b, m, n, k, bi, bk)
                times.append(time.perf_counter() - t0)
            ms = min(times) * 1e3
            if best is None or ms < best.best_ms:
                best = BlockConfig(bi, bk, round(ms, 3))
    return best


def call_key(sig) -> str:
    return "m={},n={},k={}".format(*sig)


def worker(rank: int, cache_path: str) -> dict:
    stats = {"tuned": 0, "hits": 0, "lost_races": 0, "chosen": {}}
    r = rank % len(SIGNATURES)
    with PersistentCache(OPNAME, path=cache_path, cfg_type=BlockConfig) as cache:
        for sig in SIGNATURES[r:] + SIGNATURES[:r]:
            key = call_key(sig)
            cfg = cache.get(DEVICE, OP_ID, key)
            if cfg is None:
                cfg = tune(*sig)
                stats["tuned"] += 1
                if not cache.put(DEVICE, OP_ID, key, cfg, overwrite=False):
                    stats["lost_races"] += 1  # someone else's result is in: use it
                    cfg = cache.get(DEVICE, OP_ID, key)
            else:
                stats["hits"] += 1
            assert isinstance(cfg, BlockConfig), cfg
            stats["chosen"][key] = (cfg.block_i, cfg.block_k)
    return stats


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=4, help="processes (default: 4)")
    parser.add_argument("--cache", default="tirastore-demo/autotune.json")
    args = parser.parse_args(argv)
    if args.workers < 1:
        parser.error("--workers must be at least 1")

    t0 = time.perf_counter()
    # spawn: every worker is a fresh process, as a job on another node would be.
    with mp.get_context("spawn").Pool(args.workers) as pool:
        results = pool.starmap(worker, [(r, args.cache) for r in range(args.workers)])
    elapsed = time.perf_counter() - t0

    agreed = True
    with PersistentCache(OPNAME, path=args.cache, cfg_type=BlockConfig) as cache:
        print(f"cache {cache.db_path}, device {DEVICE}, op {OP_ID}:")
        entries = {e.call_key: e for e in cache.entries(DEVICE, OP_ID)}
        for sig in SIGNATURES:
            key = call_key(sig)
            e, cfg = entries[key], cache.get(DEVICE, OP_ID, key)
            print(f"  {key:<15} {cfg}")
            print(f"  {'':<15} by {e.username}@{e.hostname} at {e.creation_date}")
            seen = {res["chosen"][key] for res in results}
            if seen != {(cfg.block_i, cfg.block_k)}:
                print(f"workers disagree on {key}: {sorted(seen)}", file=sys.stderr)
                agreed = False
    tuned = sum(res["tuned"] for res in results)
    hits = sum(res["hits"] for res in results)
    lost = sum(res["lost_races"] for res in results)
    print(
        f"{args.workers} workers, {len(SIGNATURES)} signatures: {tuned} tuned "
        f"({lost} of them lost the race to store), {hits} avoided; {elapsed:.2f} s"
    )
    return 0 if agreed else 1


if __name__ == "__main__":
    sys.exit(main())
