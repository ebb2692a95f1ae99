#!/usr/bin/env python3
"""How export scales with the database: time and peak memory (a bench).

    python3 tests/bench/export_scale.py                  # 200x100 and 2000x100
    python3 tests/bench/export_scale.py --runs 1 --fmt jsonl --dir /tmp/xs

Builds one database per size (P programs x R records, written with one
``record_many`` of R records per program, so the R records of a program
share one creation_date, as a campaign's batches do), then exports each in
a fresh Python subprocess (``--runs`` times, the median is kept) through
the public API: ``TiraStore(path, cpu_model="X").export(out, fmt)``. The
child measures the export alone, the store being open and the library
loaded: wall time, and peak RSS growth, the peak RSS during the export
minus the RSS at its start (VmHWM, reset when the export starts: see
child() for why not ru_maxrss alone; ru_maxrss is printed too). It also
times the open, which is where an opener builds a missing index. The
parent checks that the file lists every program and record, that the runs
of one size wrote identical files, and prints a table.

``--original-schema`` drops the engine's index before every run, as in a
database the original library created (every run's open then finds it
missing).

Acceptance (exit status 1 when missed; 0 otherwise): with S = the smallest
size and L = the largest (200x100 and 2000x100 by default, 10x the data),

    time(L)        <= 15  x time(S)        (--time-ratio)
    peak growth(L) <= 1.5 x peak growth(S) (--mem-ratio)

that is, export time roughly linear in the database and its memory
independent of it: one program in memory at a time, streamed to the file.
The library is the ``tirastore`` package of this tree (``python/``, with
the ``libtirastore.so`` that ./build.sh puts there) unless --installed.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def source_of(p: int) -> str:
    """A Tiramisu-like source of about 1 KB, distinct per program (in its
    code: comments and whitespace do not count in the program hash)."""
    body = "\n".join(
        f"    tiramisu::computation comp{j}(\"[N]->{{comp{j}[i,j]: 0<=i<N and 0<=j<{p + 1}}}\", "
        f"expr(), true, p_float64, &fn);  // stage {j}"
        for j in range(8)
    )
    return f"#include <tiramisu/tiramisu.h>\n// program {p}\nint main() {{\n{body}\n    return 0;\n}}\n"


def name_of(p: int) -> str:
    """Two source versions per name: the export's <name>_v1, <name>_v2 path."""
    return f"function{p // 2:05d}"


def schedules_of(p: int, records: int) -> list[dict]:
    out = []
    for i in range(records):
        legal = i % 5 != 0
        out.append({
            "tiralib_schedule_string": f"T2(L0,L1,{i // 32 + 1},{i % 32 + 1},comps=['comp{p % 8}'])",
            "is_legal": legal,
            "execution_times": [0.001 * (i + 1), 0.0011 * (i + 1), 0.00105 * (i + 1)] if legal else None,
        })
    return out


def build(tirastore, path: Path, programs: int, records: int) -> float:
    for f in (path, Path(str(path) + "-journal"), path.with_suffix(".db.lock")):
        f.unlink(missing_ok=True)
    start = time.perf_counter()
    s = tirastore.TiraStore(str(path), source_project="export-bench", cpu_model="X")
    try:
        for p in range(programs):
            n = s.record_many(name_of(p), source_of(p), schedules_of(p, records))
            if n != records:
                raise SystemExit(f"record_many wrote {n} of {records} records")
    finally:
        s.close()
    return time.perf_counter() - start


def _status_kib(field: str) -> int | None:
    """A "VmHWM"/"VmRSS" line of /proc/self/status, in KiB (None off Linux)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def _reset_peak() -> bool:
    """Reset this process's peak RSS (VmHWM) to its current RSS (Linux)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def child(db: str, out: str, fmt: str) -> None:
    """One export in this (fresh) process; prints its measurements as JSON.

    Peak RSS growth = the process's peak RSS during the export minus its RSS
    when the export starts. ru_maxrss alone cannot say it: after exec() it
    still counts the RSS the forked parent had (the kernel carries the old
    address space's peak over exec in signal->maxrss), which here was the
    parent's parse of the previous export file, and it includes the open's
    own peak. So the peak is reset (/proc/self/clear_refs, "5") once the
    store is open and read back as VmHWM; ru_maxrss before and after is
    reported too, and is the measure where /proc is missing.
    """
    import gc

    import tirastore

    tirastore._native.ensure_loaded()  # loaded on first use: not part of the open's time
    start = time.perf_counter()
    s = tirastore.TiraStore(db, cpu_model="X")
    opened = time.perf_counter() - start
    gc.collect()
    reset = _reset_peak()
    hwm_before = _status_kib("VmHWM") if reset else None
    ru_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    s.export(out, fmt=fmt)
    seconds = time.perf_counter() - start
    ru_after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    hwm_after = _status_kib("VmHWM") if reset else None
    s.close()
    m = {"seconds": seconds, "open_seconds": opened, "ru_before_kib": ru_before, "ru_after_kib": ru_after}
    if hwm_before is not None and hwm_after is not None:
        m.update(rss_before_kib=hwm_before, rss_after_kib=hwm_after, method="VmHWM")
    else:
        m.update(rss_before_kib=ru_before, rss_after_kib=ru_after, method="ru_maxrss")
    print(json.dumps(m))


def drop_indexes(db: Path) -> None:
    """Drop every index the original's schema lacks (the tables' own
    primary-key indexes stay). Nothing else uses the database meanwhile."""
    import sqlite3

    conn = sqlite3.connect(str(db))
    try:
        names = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL")]
        for name in names:
            conn.execute(f'DROP INDEX "{name}"')
        conn.commit()
    finally:
        conn.close()


def check_export(out: Path, fmt: str, programs: int, records: int) -> str:
    """Every program and record is in the file; returns its digest."""
    data = out.read_bytes()
    if fmt == "json":
        entries = json.loads(data)
    else:
        entries = {}
        for line in data.splitlines():
            entries.update(json.loads(line))
    n = sum(len(v["schedules_list"]) for v in entries.values())
    if len(entries) != programs or n != programs * records:
        raise SystemExit(f"{out}: {len(entries)} programs and {n} records, want {programs} and {programs * records}")
    return hashlib.sha256(data).hexdigest()[:12]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="200x100,2000x100", help="PROGRAMSxRECORDS,... (smallest and largest compared)")
    ap.add_argument("--dir", default=str(REPO / "build" / "bench-tmp" / "export_scale"), help="work directory")
    ap.add_argument("--fmt", default="json", choices=["json", "jsonl"])
    ap.add_argument("--runs", type=int, default=3, help="exports per size, each in a fresh process (median kept)")
    ap.add_argument("--reuse", action="store_true", help="reuse databases a previous run built completely")
    ap.add_argument("--keep", action="store_true", help="keep the databases and exports afterwards")
    ap.add_argument("--original-schema", action="store_true",
                    help="drop the engine's secondary indexes before each run (a database the original created)")
    ap.add_argument("--installed", action="store_true", help="use the installed tirastore, not this tree's python/")
    ap.add_argument("--time-ratio", type=float, default=15.0)
    ap.add_argument("--mem-ratio", type=float, default=1.5)
    ap.add_argument("--child", nargs=3, metavar=("DB", "OUT", "FMT"), help=argparse.SUPPRESS)
    args = ap.parse_args()

    env = dict(os.environ)
    if not args.installed:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO / "python"), env.get("PYTHONPATH")]))
        sys.path.insert(0, str(REPO / "python"))
    if args.child:
        child(*args.child)
        return 0
    import tirastore

    sizes = []
    for spec in args.sizes.split(","):
        p, r = spec.lower().split("x")
        sizes.append((int(p), int(r)))
    sizes.sort(key=lambda s: s[0] * s[1])
    work = Path(args.dir).resolve()
    work.mkdir(parents=True, exist_ok=True)
    print(f"tirastore from {Path(tirastore.__file__).parent}; work directory {work}", flush=True)

    rows = []
    for programs, records in sizes:
        tag = f"{programs}x{records}"
        db = work / f"export_{tag}" / "cache.db"
        done = db.parent / "complete.json"
        if args.reuse and done.exists() and db.exists():
            built = f"reused ({json.loads(done.read_text())['seconds']:.1f} s to build)"
        else:
            done.unlink(missing_ok=True)
            secs = build(tirastore, db, programs, records)
            done.write_text(json.dumps({"programs": programs, "records": records, "seconds": secs}))
            built = f"built in {secs:.1f} s"
        print(f"{tag}: {built}, {db.stat().st_size / 2**20:.1f} MiB", flush=True)
        runs, digests = [], set()
        out = db.parent / f"export.{args.fmt}"
        for _ in range(args.runs):
            out.unlink(missing_ok=True)
            if args.original_schema:
                drop_indexes(db)
            proc = subprocess.run([sys.executable, __file__, "--child", str(db), str(out), args.fmt],
                                  env=env, capture_output=True, text=True)
            if proc.returncode != 0:
                print(proc.stdout + proc.stderr, file=sys.stderr)
                raise SystemExit(f"{tag}: the export process failed ({proc.returncode})")
            m = json.loads(proc.stdout.strip().splitlines()[-1])
            runs.append(m)
            digests.add(check_export(out, args.fmt, programs, records))
            print(f"  open {m['open_seconds']:.3f} s, export {m['seconds']:.3f} s, RSS {m['rss_before_kib'] / 1024:.1f}"
                  f" -> peak {m['rss_after_kib'] / 1024:.1f} MiB ({m['method']}; ru_maxrss "
                  f"{m['ru_before_kib'] / 1024:.1f} -> {m['ru_after_kib'] / 1024:.1f})", flush=True)
        if len(digests) != 1:
            raise SystemExit(f"{tag}: the exports of one database differ between runs")
        rows.append({
            "size": tag, "records": programs * records,
            "seconds": statistics.median(r["seconds"] for r in runs),
            "growth_mib": statistics.median((r["rss_after_kib"] - r["rss_before_kib"]) / 1024 for r in runs),
            "base_mib": statistics.median(r["rss_before_kib"] / 1024 for r in runs),
            "open_s": statistics.median(r["open_seconds"] for r in runs),
            "out_mib": out.stat().st_size / 2**20, "digest": digests.pop(),
        })
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)

    print()
    print(f"{'size':>10} {'records':>8} {'open s':>7} {'export s':>9} {'peak RSS growth MiB':>20} "
          f"{'RSS at start MiB':>17} {'file MiB':>9}  sha256")
    for r in rows:
        print(f"{r['size']:>10} {r['records']:>8} {r['open_s']:>7.3f} {r['seconds']:>9.3f} {r['growth_mib']:>20.1f} "
              f"{r['base_mib']:>17.1f} {r['out_mib']:>9.1f}  {r['digest']}")
    if len(rows) < 2:
        return 0
    small, large = rows[0], rows[-1]
    def ratio(a: float, b: float) -> float:
        return a / b if b > 0 else (0.0 if a <= 0 else float("inf"))

    t, g = ratio(large["seconds"], small["seconds"]), ratio(large["growth_mib"], small["growth_mib"])
    ok_t = large["seconds"] <= args.time_ratio * small["seconds"]
    ok_g = large["growth_mib"] <= args.mem_ratio * small["growth_mib"]
    print()
    print(f"time   {large['size']} / {small['size']} = {t:.2f}  (limit {args.time_ratio:g})  {'ok' if ok_t else 'MISSED'}")
    print(f"growth {large['size']} / {small['size']} = {g:.2f}  (limit {args.mem_ratio:g})  {'ok' if ok_g else 'MISSED'}")
    return 0 if ok_t and ok_g else 1


if __name__ == "__main__":
    sys.exit(main())
