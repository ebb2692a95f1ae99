#!/usr/bin/env python3
"""A TiraLib search worker whose measurements go through a shared TiraStore.

    python3 examples/tiralib_worker.py [--db DB] [--workers N] [--budget-ms MS]

Each worker explores the same small space of schedules of one program
(tilings, unrollings, interchanges and a fusion, in TiraLib's syntax) in its
own random order, as the workers of a search do, and measures every
schedule with ``CachedSchedule(schedule, store).execute(...)``: a schedule
that another worker recorded comes back at once, one that another worker
is measuring is waited for, and a new one is measured and recorded. At the
end it prints how many schedules each worker measured itself: together,
each schedule once.

examples/tiralib_standin.py stands in for TiraLib here, with its
signatures and simulated run times; with TiraLib and a Tiramisu build,
load the program with ``TiramisuProgram.from_file`` and build
``tiralib.tiramisu.schedule.Schedule`` objects instead: nothing else
changes. Without --db the database is tiralib_worker.db in the working
directory.
"""

from __future__ import annotations

import argparse
import multiprocessing
import random
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
try:
    from tirastore import TiraStore
except ImportError:  # run from a source checkout without `pip install -e .`
    sys.path.insert(0, str(HERE.parent / "python"))
    from tirastore import TiraStore
from tirastore.tiralib import CachedSchedule, IllegalSchedule, MeasurementTimedOut

sys.path.insert(0, str(HERE))
import tiralib_standin  # noqa: E402

# The space every worker explores, as TiraLib's actions print themselves.
SPACE = [
    [],
    ["T2(L0,L1,32,32,comps=['comp00'])"],
    ["T2(L0,L1,64,32,comps=['comp00'])"],
    ["T2(L0,L1,32,32,comps=['comp00'])", "U(L3,4,comps=['comp00'])"],
    ["I(L0,L1,comps=['comp00'])"],
    ["I(L0,L1,comps=['comp00'])", "P(L0,comps=['comp00'])"],
    ["P(L0,comps=['comp00'])"],
    ["P(L0,comps=['comp00'])", "U(L1,8,comps=['comp00'])"],
    ["S(L0,L1,1,1,comps=['comp00'])"],
    ["R(L1,comps=['comp00'])"],
    ["TG(L0,L1,16,16,comps=['comp00'])"],
    ["M([0, 1, 1, 0],comps=['comp00'])"],
    ["E(comps=['comp00'])"],
]


def worker(db: str, seed: int, budget_ms: float) -> dict:
    program = tiralib_standin.TiramisuProgram.from_name("function_example")
    order = list(range(len(SPACE)))
    random.Random(seed).shuffle(order)
    measured = illegal = timed_out = 0
    best = None
    with TiraStore(db, source_project="tiralib-example") as store:
        for i in order:
            schedule = tiralib_standin.Schedule(program)
            schedule.add_optimizations(SPACE[i])
            cached = CachedSchedule(schedule, store)
            try:
                times = cached.execute(min_runs=3 if budget_ms <= 0 else 0, time_budget=budget_ms or None)
            except IllegalSchedule:
                illegal += 1
                continue
            except MeasurementTimedOut:
                timed_out += 1
                continue
            finally:
                measured += schedule.executions  # 0 when the store answered
            if times and (best is None or min(times) < best[0]):
                best = (min(times), str(schedule) or "(no transformation)")
    return {"seed": seed, "measured": measured, "illegal": illegal, "timed_out": timed_out, "best": best}


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--db", default="tiralib_worker.db", help="the database (default: %(default)s)")
    p.add_argument("--workers", type=int, default=4, help="worker processes (default: %(default)s)")
    p.add_argument("--budget-ms", type=float, default=0.0,
                   help="TiraLib's time_budget per schedule, ms (0: three runs each, no budget)")
    args = p.parse_args(argv)
    if args.workers < 1:
        p.error("--workers must be at least 1")
    ctx = multiprocessing.get_context("spawn")  # a fresh interpreter per worker, as Slurm tasks are
    with ctx.Pool(args.workers) as pool:
        results = pool.starmap(worker, [(args.db, seed, args.budget_ms) for seed in range(args.workers)])
    for r in results:
        print(f"worker {r['seed']}: measured {r['measured']}; saw {r['illegal']} illegal, {r['timed_out']} timed out")
    total = sum(r["measured"] for r in results)
    print(f"{total} measurements by {args.workers} workers of {len(SPACE)} schedules")
    best = min((r["best"] for r in results if r["best"]), default=None)
    if best:
        print(f"fastest: {best[1]} at {best[0]} ms")
    print(f"next: tirastore stats {args.db}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
