"""One autotuning job of the released ejkernel, run by tests/python/test_ejkernel.py.

Run with the ejkernel venv's interpreter (tests/python/ejkernel_env.py) and
this tree's python/ on PYTHONPATH. The one argument is a JSON object:

    patch    true: tirastore.patch_ejkernel() before `import ejkernel`, so
             that every cache ejkernel builds is tirastore's PersistentCache;
             false: ejkernel's own class
    shapes   [[batch, seq, heads, head_dim], ...]: one flash_attention call
             each (forward-only autotuning on CPU), distinct call keys
    barrier  optional {"dir": ..., "n": ...}: after importing ejkernel (its
             caches built) and before tuning, wait until n workers have
             arrived, so that no worker's caches see another's puts

It prints one JSON line: how often ejkernel's timing function
(Tuner.measure) ran, the configs chosen, read from the executor's
in-memory ConfigCache (not from the persistent cache under test) as
[device, op_id, call_key, config dict] lists in the order of the calls, the class and location of the
flash-attn persistent cache, and the seconds each phase took.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time


def barrier(d: str, n: int, me: str, timeout: float = 300.0) -> None:
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, me), "w"):
        pass
    deadline = time.monotonic() + timeout
    while len(os.listdir(d)) < n:
        if time.monotonic() > deadline:
            raise SystemExit(f"ejkernel_worker: barrier {d}: {len(os.listdir(d))} of {n} workers after {timeout} s")
        time.sleep(0.02)


def main() -> None:
    spec = json.loads(sys.argv[1])
    t0 = time.monotonic()
    if spec["patch"]:
        import tirastore

        tirastore.patch_ejkernel()
    import jax.numpy as jnp
    from ejkernel.modules.operations import flash_attention
    from ejkernel.ops.config.selection import Tuner, forward_autotune_only

    t_import = time.monotonic() - t0
    fa = sys.modules["ejkernel.modules.operations.flash_attention"]
    chooser = fa._flash_executor.chooser

    calls = [0]
    measure = Tuner.measure

    def counted(self, *a, **k):
        calls[0] += 1
        return measure(self, *a, **k)

    Tuner.measure = counted
    if spec.get("barrier"):
        barrier(spec["barrier"]["dir"], spec["barrier"]["n"], f"{os.getpid()}")
    t1 = time.monotonic()
    with forward_autotune_only():
        for b, s, h, d in spec["shapes"]:
            q = jnp.ones((b, s, h, d), jnp.float32)
            flash_attention(q, q, q).block_until_ready()
    t_tune = time.monotonic() - t1

    chosen = [[dev, op, ck, dataclasses.asdict(cfg)] for (dev, op, ck), cfg in chooser.cache._data.items()]
    p = chooser.persistent
    print(json.dumps({
        "measure_calls": calls[0],
        "chosen": chosen,
        "cache_class": f"{type(p).__module__}.{type(p).__qualname__}",
        "cache_path": str(getattr(p, "path", "")),
        "import_s": round(t_import, 3),
        "tune_s": round(t_tune, 3),
    }))


if __name__ == "__main__":
    main()
