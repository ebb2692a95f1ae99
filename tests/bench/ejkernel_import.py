"""One fresh interpreter's ``import ejkernel``, for the benchmark's import-cost row.

    <ejkernel venv>/bin/python tests/bench/ejkernel_import.py own|patched

Run by tests/bench (ejkernel.go) with the interpreter of the venv that
``make ejkernel-venv`` builds, this tree's ``python/`` on PYTHONPATH and a
HOME of the bench directory's. It times, from the first line of this
script (the interpreter's own start-up excluded, the same for both):

* ``own``: ``import ejkernel``, which builds its 39 caches with ejkernel's
  own class;
* ``patched``: ``import tirastore``, ``tirastore.patch_ejkernel()``, then
  ``import ejkernel``, which builds them with tirastore's class: what a
  user of the patch pays.

For ``patched`` it also times our part alone, inside the process, which is
far less noisy than the difference of two imports of 2-3 s: ``import
tirastore`` + the patch + loading ``tirastore.persistent_cache`` (the module
the patch substitutes, whether or not ``import tirastore`` loads it), and
every construction of tirastore's PersistentCache that ``import ejkernel``
makes (its ``__init__`` wrapped with a timer). The bench also runs both
under ``-X importtime`` to count only the imports the patch adds (stdlib
modules that ejkernel imports anyway are no cost of ours). It prints one
JSON line (nanoseconds).
"""

import time

T0 = time.perf_counter_ns()

import json  # noqa: E402
import sys  # noqa: E402


def main() -> None:
    mode = sys.argv[1]
    if mode not in ("own", "patched"):
        raise SystemExit(f"usage: {sys.argv[0]} own|patched")
    out = {"mode": mode}
    if mode == "patched":
        import tirastore

        tirastore.patch_ejkernel()
        import tirastore.persistent_cache as pc

        t1 = time.perf_counter_ns()
        out["tirastore_ns"] = t1 - T0
        cls = pc.PersistentCache
        init = cls.__init__
        spent = [0, 0]

        def timed(self, *a, **k):
            t = time.perf_counter_ns()
            try:
                init(self, *a, **k)
            finally:
                spent[0] += time.perf_counter_ns() - t
                spent[1] += 1

        cls.__init__ = timed
    t2 = time.perf_counter_ns()
    import ejkernel  # noqa: F401

    t3 = time.perf_counter_ns()
    out["import_ns"] = t3 - T0
    if mode == "patched":
        cls.__init__ = init
        out["construct_ns"], out["constructions"] = spent
        # The wrapper's own setup (between t1 and t2) is not ours to count.
        out["ours_ns"] = out["tirastore_ns"] + spent[0]
        out["import_ns"] -= t2 - t1
        p = sys.modules["ejkernel.ops.config.persistent"]
        if p.PersistentCache is not cls:
            raise SystemExit("ejkernel_import.py: the patch did not substitute tirastore's class")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
