#!/usr/bin/env python3
"""An autoscheduler-like workload on one shared TiraStore database.

    python3 examples/demo.py --db tirastore-demo/cache.db     (what `make demo` runs)

N worker processes (think: N Slurm tasks on N nodes) explore schedules of a
few Tiramisu programs and share one cache file. Each worker follows the
README's Slurm worker pattern for every (program, schedule) it is given:

    lookup_or_claim -> recorded: reuse the stored measurement, skip the work
                    -> claimed:  "measure" (sleep 5-20 ms, deterministic
                                 pseudo-random times, ~10% of schedules
                                 illegal), then record through the claim
                    -> another worker is measuring it: wait for its result
                                 ("duplicates avoided")

Workers get overlapping slices of the schedule space, so they contend for
the lock, sometimes find what another worker recorded a moment ago, and
sometimes reach a schedule that another worker is measuring at that very
moment. Every worker starts with the unscheduled baseline of each program,
as real autoschedulers do, so that happens on every cold run. With
--no-claims the workers use the plain pattern (lookup, measure on a miss,
record): they then measure those schedules twice, and only one record is
written (the others get False: "already present"). Odd-numbered workers write their
schedules with cosmetic differences (spaces, double quotes): the store
normalizes schedules, so they still hit what even-numbered workers stored.

The workload runs twice by default (--passes): the first pass is cold (on a
new database), the second must be all hits. The demo checks its own books
and exits nonzero if they do not balance (records written vs. database
growth, misses in a repeated pass).

Exit status: 0 on success, 1 on an error (a failed worker, an inconsistent
result), 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import multiprocessing as mp
import os
import queue
import random
import shlex
import shutil
import sqlite3
import sys
import time
import traceback
from dataclasses import asdict, dataclass
from pathlib import Path

try:
    from tirastore import Claim, LookupResult, TiraStore
except ImportError:  # run from a source checkout without `pip install -e .`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "python"))
    from tirastore import Claim, LookupResult, TiraStore

SOURCE_PROJECT = "demo-autoscheduler"

# ---------------------------------------------------------------------------
# The programs: small Tiramisu-like C++ sources. `depth` is the loop nest
# depth (loop levels L0..L<depth-1>), `comps` the computations.
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Program:
    name: str
    depth: int
    comps: tuple[str, ...]
    source: str


PROGRAMS = (
    Program("blur", 2, ("bx", "by"), """\
#include <tiramisu/tiramisu.h>
using namespace tiramisu;

// Two-stage 3x3 box blur of a 1024x1024 image.
void blur() {
    tiramisu::init("blur");
    constexpr int N = 1024;
    var i("i", 0, N - 2), j("j", 0, N - 2);
    input in("in", {i, j}, p_float32);
    computation bx("bx", {i, j}, (in(i, j) + in(i, j + 1) + in(i, j + 2)) / 3.0f);
    computation by("by", {i, j}, (bx(i, j) + bx(i + 1, j) + bx(i + 2, j)) / 3.0f);
    by.after(bx, computation::root);
}
"""),
    Program("matmul", 3, ("c_init", "c_upd"), """\
#include <tiramisu/tiramisu.h>
using namespace tiramisu;

// C = A * B, 512x512 single precision.
void matmul() {
    tiramisu::init("matmul");
    constexpr int N = 512;
    var i("i", 0, N), j("j", 0, N), k("k", 0, N);
    input A("A", {i, k}, p_float32), B("B", {k, j}, p_float32);
    computation c_init("c_init", {i, j}, expr(0.0f));
    computation c_upd("c_upd", {i, j, k}, c_init(i, j) + A(i, k) * B(k, j));
    c_upd.after(c_init, j);
}
"""),
    Program("heat2d", 3, ("heat",), """\
#include <tiramisu/tiramisu.h>
using namespace tiramisu;

/* 2-D heat equation, 100 Jacobi time steps on a 1000x1000 grid. */
void heat2d() {
    tiramisu::init("heat2d");
    var t("t", 1, 100), i("i", 1, 999), j("j", 1, 999);
    input u("u", {t, i, j}, p_float64);
    computation heat("heat", {t, i, j},
        u(t - 1, i, j) + 0.125 * (u(t - 1, i - 1, j) + u(t - 1, i + 1, j)
                                + u(t - 1, i, j - 1) + u(t - 1, i, j + 1)
                                - 4.0 * u(t - 1, i, j)));
}
"""),
    Program("conv2d", 4, ("conv",), """\
#include <tiramisu/tiramisu.h>
using namespace tiramisu;

// Direct 2-D convolution: 64 filters of 3x3 over a 224x224 image.
void conv2d() {
    tiramisu::init("conv2d");
    var f("f", 0, 64), y("y", 0, 222), x("x", 0, 222), k("k", 0, 9);
    input img("img", {y, x}, p_float32), w("w", {f, k}, p_float32);
    computation conv("conv", {f, y, x, k},
        img(y + k / 3, x + k % 3) * w(f, k));
}
"""),
)

# ---------------------------------------------------------------------------
# Schedules, generated deterministically from the transformation grammar:
#   S(Li,Lj,a,b,comps=[...])  skew         I(Li,Lj,comps=[...])  interchange
#   T2(Li,Lj,x,y,comps=[...]) 2-D tiling   U(Li,k,comps=[...])   unroll
# chained with '|'. Schedule 0 of every program is "" (the baseline).
# ---------------------------------------------------------------------------


def _seed(*parts: object) -> int:
    """A stable seed (Python's hash() is randomized per process)."""
    return int.from_bytes(hashlib.sha256("\x1f".join(map(str, parts)).encode()).digest()[:8], "big")


def _comps(rng: random.Random, prog: Program) -> str:
    pick = rng.choice(list(prog.comps) + [None]) if len(prog.comps) > 1 else prog.comps[0]
    names = prog.comps if pick is None else (pick,)
    return "comps=[" + ",".join(f"'{c}'" for c in names) + "]"


def _transformation(rng: random.Random, prog: Program) -> str:
    kinds = ["U", "T2", "I", "S"] if prog.depth > 1 else ["U"]
    kind = rng.choice(kinds)
    comps = _comps(rng, prog)
    if kind == "U":
        return f"U(L{rng.randrange(prog.depth)},{rng.choice((2, 4, 8, 16))},{comps})"
    i = rng.randrange(prog.depth - 1)
    if kind == "T2":
        return f"T2(L{i},L{i + 1},{rng.choice((8, 16, 32, 64))},{rng.choice((8, 16, 32, 64))},{comps})"
    j = rng.randrange(i + 1, prog.depth)
    if kind == "I":
        return f"I(L{i},L{j},{comps})"
    return f"S(L{i},L{j},{rng.choice((1, 2))},{rng.choice((1, -1, 2))},{comps})"


def schedules_for(prog: Program, n: int) -> list[str]:
    """The first n distinct schedules of prog (always the same ones)."""
    rng = random.Random(_seed("schedules", prog.name))
    out, seen = [""], {""}
    attempts = 0
    while len(out) < n and attempts < 100 * n:
        attempts += 1
        chain = "|".join(_transformation(rng, prog) for _ in range(rng.choice((1, 1, 2, 2, 3))))
        if chain not in seen:
            seen.add(chain)
            out.append(chain)
    return out[:n]


def cosmetic(schedule: str) -> str:
    """The same schedule as a sloppier client writes it (the store normalizes)."""
    return schedule.replace(",", ", ").replace("'", '"').replace("|", " | ")


# ---------------------------------------------------------------------------
# The simulated measurement.
# ---------------------------------------------------------------------------


def measurement_cost(prog: Program, schedule: str) -> float:
    """Seconds the (simulated) compile-and-run of a schedule takes: 5-20 ms."""
    return 0.005 + (_seed("cost", prog.name, schedule) % 15001) / 1e6


def measure(prog: Program, schedule: str) -> tuple[bool, list[float] | None]:
    """Run the (simulated) measurement: deterministic per (program, schedule)."""
    time.sleep(measurement_cost(prog, schedule))
    rng = random.Random(_seed("measure", prog.name, schedule))
    if schedule and rng.random() < 0.10:
        return False, None  # the schedule violates a dependence
    base = rng.uniform(0.002, 0.250)
    return True, [round(base * rng.uniform(0.97, 1.03), 6) for _ in range(3)]


# ---------------------------------------------------------------------------
# Workers.
# ---------------------------------------------------------------------------


@dataclass
class Counts:
    hits: int = 0
    misses: int = 0
    written: int = 0
    already: int = 0          # record() returned False: another worker won
    waited: int = 0           # claimed by another worker: its result awaited, not measured again
    measure_s: float = 0.0    # simulated measurement time spent
    saved_s: float = 0.0      # simulated measurement time hits avoided
    store_s: float = 0.0      # time spent inside the store (lock + SQLite)
    store_ops: int = 0

    def add(self, other: "Counts") -> None:
        for k, v in asdict(other).items():
            setattr(self, k, getattr(self, k) + v)


Task = tuple[int, str]  # (program index, schedule)


def plan(n_workers: int, n_schedules: int) -> tuple[list[Task], list[list[Task]]]:
    """All tasks, and each worker's list.

    Every worker starts with the baselines of all programs (all workers at
    once: they race). The rest of the tasks form a ring; worker w takes a
    window of about 2/N of it starting at w/N, so every task is covered by
    about two workers (one when N is 1), each in its own shuffled order.
    """
    per_program = [schedules_for(p, n_schedules) for p in PROGRAMS]
    tasks = [(pi, s) for pi, scheds in enumerate(per_program) for s in scheds]
    baselines = [t for t in tasks if t[1] == ""]
    ring = [t for t in tasks if t[1] != ""]
    n = len(ring)
    window = min(n, -(-2 * n // n_workers)) if n else 0
    lists = []
    for w in range(n_workers):
        start = w * n // n_workers
        mine = [ring[(start + k) % n] for k in range(window)]
        random.Random(_seed("order", w)).shuffle(mine)
        lists.append(baselines + mine)
    return tasks, lists


def worker(wid: int, db_path: str, tasks: list[Task], start, stop, results, claims: bool = True) -> None:
    """One worker process: the README's Slurm worker pattern over its tasks.

    stop asks it to quit between two tasks (another worker failed): never
    kill a worker that may hold the database lock.
    """
    try:
        store = TiraStore(db_path, source_project=SOURCE_PROJECT)
        results.put(("ready", wid, None))
        start.wait()
        c = Counts()
        sloppy = wid % 2 == 1
        for pi, schedule in tasks:
            if stop.is_set():
                break
            prog = PROGRAMS[pi]
            sched = cosmetic(schedule) if sloppy else schedule
            t0 = time.perf_counter()
            if claims:
                # Another worker measuring it: None at once (counted), then
                # wait for its result (or its claim, if it gives up).
                found = store.lookup_or_claim(prog.name, prog.source, sched, wait=False)
                if found is None:
                    c.waited += 1
                    found = store.lookup_or_claim(prog.name, prog.source, sched)
            else:
                found = store.lookup(prog.name, prog.source, sched)
            c.store_s += time.perf_counter() - t0
            c.store_ops += 1
            if isinstance(found, LookupResult):
                c.hits += 1
                c.saved_s += measurement_cost(prog, schedule)
                results.put(("tick", wid, True))
                continue
            c.misses += 1
            t0 = time.perf_counter()
            is_legal, times = measure(prog, schedule)
            c.measure_s += time.perf_counter() - t0
            t0 = time.perf_counter()
            if isinstance(found, Claim):
                wrote = found.record(is_legal, times)
            else:
                wrote = store.record(prog.name, prog.source, sched, is_legal, times)
            if wrote:
                c.written += 1
            else:
                c.already += 1
            c.store_s += time.perf_counter() - t0
            c.store_ops += 1
            results.put(("tick", wid, False))
        store.close()
        results.put(("done", wid, asdict(c)))
    except BaseException as e:  # report everything, even KeyboardInterrupt
        results.put(("error", wid, f"{type(e).__name__}: {e}\n{traceback.format_exc()}"))
        raise SystemExit(1)


# ---------------------------------------------------------------------------
# The parent: runs passes, shows progress, prints the summary.
# ---------------------------------------------------------------------------


class DemoError(Exception):
    pass


class Progress:
    """A single updating line on a terminal; a line every few seconds otherwise."""

    def __init__(self, label: str, total: int, enabled: bool, stream=sys.stderr) -> None:
        self.label, self.total, self.enabled, self.stream = label, total, enabled, stream
        self.tty = stream.isatty()
        self.done = self.hits = 0
        self.t0 = time.monotonic()
        self.last = 0.0 if self.tty else self.t0  # plain lines: the first after 2 s

    def tick(self, hit: bool) -> None:
        self.done += 1
        self.hits += hit
        self.show()

    def line(self) -> str:
        pct = 100 * self.done // self.total if self.total else 100
        width = 24
        bar = "#" * (width * pct // 100)
        return (f"{self.label} [{bar:<{width}}] {self.done:>5}/{self.total} {pct:>3}%  "
                f"hits {self.hits:>5}  misses {self.done - self.hits:>5}  {time.monotonic() - self.t0:6.1f}s")

    def show(self, final: bool = False) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if self.tty:
            if final or now - self.last >= 0.1:
                self.stream.write("\r" + self.line() + ("\n" if final else ""))
                self.stream.flush()
                self.last = now
        elif final or now - self.last >= 2.0:
            self.stream.write(self.line() + "\n")
            self.stream.flush()
            self.last = now


def run_pass(ctx, number: int, n_passes: int, db_path: str, lists: list[list[Task]],
             show_progress: bool, timeout: float, claims: bool = True) -> tuple[Counts, float]:
    results = ctx.Queue()
    start, stop = ctx.Event(), ctx.Event()
    procs = [ctx.Process(target=worker, args=(w, db_path, tasks, start, stop, results, claims), name=f"demo-worker-{w}",
                         daemon=True)
             for w, tasks in enumerate(lists)]
    for p in procs:
        p.start()
    try:
        total = Counts()
        pending_ready, pending_done = set(range(len(procs))), set(range(len(procs)))
        progress = Progress(f"pass {number}/{n_passes}", sum(map(len, lists)), show_progress)
        deadline = time.monotonic() + timeout
        t0 = None
        while pending_done:
            if time.monotonic() > deadline:
                raise DemoError(f"pass {number} did not finish within {timeout:.0f} s "
                                f"(workers {sorted(pending_done)} still running)")
            try:
                kind, wid, payload = results.get(timeout=0.2)
            except queue.Empty:
                for w in sorted(pending_done):
                    code = procs[w].exitcode
                    if code is not None and code != 0:
                        raise DemoError(f"worker {w} died with exit code {code} without reporting")
                progress.show()
                continue
            if kind == "ready":
                pending_ready.discard(wid)
                if not pending_ready:
                    t0 = time.perf_counter()  # every worker is connected: go
                    progress.t0 = time.monotonic()
                    start.set()
            elif kind == "tick":
                progress.tick(payload)
            elif kind == "done":
                total.add(Counts(**payload))
                pending_done.discard(wid)
            elif kind == "error":
                raise DemoError(f"worker {wid} failed: {payload.rstrip()}")
        wall = time.perf_counter() - t0
        progress.show(final=True)
        for p in procs:
            p.join(timeout=10)
        return total, wall
    finally:
        # On an error: let the others stop between two operations (a killed
        # worker could leave the lock held until it goes stale), and only
        # then terminate what is still running.
        stop.set()
        start.set()
        for p in procs:
            p.join(timeout=15)
        for p in procs:
            if p.is_alive():
                p.terminate()
                p.join(timeout=5)


def print_table(rows: list[dict], out=sys.stdout) -> None:
    cols = [
        ("pass", "pass", "{}"),
        ("lookups", "lookups", "{}"),
        ("hits", "hits", "{}"),
        ("misses", "misses", "{}"),
        ("written", "records written", "{}"),
        ("already", "already present", "{}"),
        ("waited", "duplicates avoided", "{}"),
        ("db_records", "records in DB", "{}"),
        ("wall_s", "wall time", "{:.2f} s"),
        ("saved_s", "measurement saved", "{:.2f} s"),
        ("store_ms", "store op (avg)", "{:.1f} ms"),
    ]
    cells = [[fmt.format(r[key]) for key, _, fmt in cols] for r in rows]
    widths = [max(len(title), *(len(c[i]) for c in cells)) for i, (_, title, _) in enumerate(cols)]
    print("  ".join(title.rjust(w) for (_, title, _), w in zip(cols, widths)), file=out)
    print("  ".join("-" * w for w in widths), file=out)
    for c in cells:
        print("  ".join(v.rjust(w) for v, w in zip(c, widths)), file=out)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description="An autoscheduler-like workload: worker processes share one TiraStore cache.")
    ap.add_argument("--db", default="tirastore-demo/cache.db", help="database path (default: %(default)s)")
    ap.add_argument("--workers", type=int, default=4, help="worker processes (default: %(default)s)")
    ap.add_argument("--schedules", type=int, default=60,
                    help="schedules per program, baseline included (default: %(default)s)")
    ap.add_argument("--passes", type=int, default=2, help="times to run the workload (default: %(default)s)")
    ap.add_argument("--fresh", action="store_true", help="delete the database first, for a cold first pass")
    ap.add_argument("--quiet", action="store_true", help="no progress output")
    ap.add_argument("--json", action="store_true", help="print the summary as one JSON document")
    ap.add_argument("--no-claims", dest="claims", action="store_false",
                    help="the plain pattern (lookup, measure on a miss, record) instead of lookup_or_claim")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds a pass may take (default: %(default)s)")
    a = ap.parse_args(argv)
    for name in ("workers", "schedules", "passes"):
        if getattr(a, name) < 1:
            ap.error(f"--{name} must be at least 1")
    return a


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    db_path = Path(a.db)
    if a.fresh and db_path.exists():
        db_path.unlink()
    # Open once in the parent: creates the database and fails early (and
    # clearly) if it cannot be used, e.g. writes disabled by the CPU check.
    with TiraStore(db_path, source_project=SOURCE_PROJECT) as store:
        if not store.writes_allowed:
            raise DemoError(f"{db_path} is read-only for this machine (CPU metadata mismatch); "
                            "use another --db or --fresh")
        db_before = store.count()

    tasks, lists = plan(a.workers, a.schedules)
    say = (lambda *m: None) if a.json else print
    say(f"TiraStore demo: {len(PROGRAMS)} programs x {a.schedules} schedules = {len(tasks)} measurements, "
        f"{a.workers} workers, {sum(map(len, lists))} lookups per pass, database {db_path} "
        f"({db_before} records before{'; --fresh starts cold' if db_before else ''})")

    ctx = mp.get_context("spawn")  # fork after loading the Go runtime hangs
    rows = []
    for n in range(1, a.passes + 1):
        counts, wall = run_pass(ctx, n, a.passes, str(db_path), lists, not a.quiet, a.timeout, a.claims)
        with TiraStore(db_path, source_project=SOURCE_PROJECT) as store:
            db_after = store.count()
        rows.append({
            "pass": n,
            "lookups": counts.hits + counts.misses,
            "hits": counts.hits,
            "misses": counts.misses,
            "written": counts.written,
            "already": counts.already,
            "waited": counts.waited,
            "db_records": db_after,
            "wall_s": wall,
            "measure_s": counts.measure_s,
            "saved_s": counts.saved_s,
            "store_ms": 1000 * counts.store_s / max(counts.store_ops, 1),
        })
        problems = []
        if db_after - db_before != counts.written:
            problems.append(f"workers reported {counts.written} records written but the database grew by "
                            f"{db_after - db_before}")
        if counts.written + counts.already != counts.misses:
            problems.append(f"{counts.misses} misses but {counts.written + counts.already} records attempted")
        if n > 1 and (counts.misses or counts.waited):
            problems.append(f"{counts.misses} misses in a repeated pass: measurements recorded earlier were lost")
        if problems:
            raise DemoError(f"pass {n} is inconsistent: " + "; ".join(problems))
        db_before = db_after

    if a.json:
        print(json.dumps({"db_path": str(db_path), "programs": len(PROGRAMS), "tasks": len(tasks),
                          "workers": a.workers, "passes": rows}, indent=2))
    else:
        print()
        print_table(rows)
        print()
        print("'already present': record() returned False because another worker stored the schedule first "
              "(measured twice).")
        if a.claims:
            print("'duplicates avoided': another worker was measuring the schedule; lookup_or_claim waited for "
                  "its result instead of measuring it again.")
        print(f"'measurement saved': simulated compile-and-run time the cache hits avoided "
              f"(pass 1 spent {rows[0]['measure_s']:.2f} s measuring).")
        print()
        print_next_commands(db_path)
    return 0


def print_next_commands(db_path: Path) -> None:
    """Name what to try next on the demo's database, runnable as printed."""
    # The command of this Python's environment (under `make demo`, the
    # project's venv, which is often not on PATH).
    beside = Path(sys.executable).with_name("tirastore")
    if shutil.which("tirastore") == str(beside):
        cmd = "tirastore"
    elif beside.is_file():
        rel = os.path.relpath(beside)
        cmd = shlex.quote(str(beside) if rel.startswith("..") else rel)
    else:
        cmd = f"{shlex.quote(sys.executable)} -m tirastore"
    db = shlex.quote(str(db_path))
    lines = [(f"{cmd} stats {db}", "what the database holds"),
             (f"{cmd} dashboard {db}", "the search as a live web page"),
             (f"{cmd} --help", "every command")]
    width = max(len(c) for c, _ in lines)
    print("Next, try:")
    for command, why in lines:
        print(f"  {command:<{width}}  # {why}")


if __name__ == "__main__":
    try:
        sys.exit(main())
    except DemoError as e:
        print(f"demo: error: {e}", file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt:
        print("demo: interrupted", file=sys.stderr)
        sys.exit(130)
    except (OSError, ValueError, TimeoutError, sqlite3.Error) as e:
        print(f"demo: error: {type(e).__name__}: {e}", file=sys.stderr)
        sys.exit(1)
