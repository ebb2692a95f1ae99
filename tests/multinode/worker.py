#!/usr/bin/env python3
"""One worker of the multi-node concurrency test (one per node or process).

    worker.py --db PATH --worker-id N --nworkers W --nrecords R \
              --ncontested C --log DIR [--seed S]

Runs four phases against the shared database (the plan is in plan.py):

1. unique writes: the R records only this worker owns;
2. contested writes: the C records every worker writes, each with its own
   value (exactly one worker should see record() return True);
3. cross reads: its own records, the contested ones, and a sample of the
   records other workers have acknowledged (read from their logs), checking
   every value;
4. overwrite: worker 0 overwrites one contested record (overwrite=True).

The acknowledgement log DIR/worker-N.jsonl gets one JSON line per finished
call, written with O_APPEND and fsync'd before the next call starts, so a
verifier knows exactly which writes were acknowledged even if this process
is SIGKILLed later. A write that committed but was not yet logged when the
worker died may or may not be in the database; the verifier allows that.
Errors (exception type and message) are logged too, with the host and the
mount (simulated node) the worker ran on. A restarted worker (same id)
appends to the same log and re-does every phase: record() of a record that
already exists returns False, which the verifier accounts for.

Exit status: 0 when every call succeeded and every read matched, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import socket
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
# Test the library of this checkout (python/tirastore), whatever an editable
# install elsewhere may point at; TIRASTORE_LIB can still pick another .so.
sys.path.insert(0, str(HERE.parent.parent / "python"))

import plan  # noqa: E402


class AckLog:
    """Append-only JSONL log; every line is fsync'd before append returns."""

    def __init__(self, path: Path, base: dict):
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self.base = base

    def append(self, **entry) -> None:
        line = json.dumps({**self.base, **entry, "t": time.time()}, separators=(",", ":")) + "\n"
        os.write(self.fd, line.encode())
        os.fsync(self.fd)


def mount_of(path: Path) -> str:
    p = path.resolve()
    while not os.path.ismount(p) and p != p.parent:
        p = p.parent
    return str(p)


def read_logs(log_dir: Path, skip: int) -> list[dict]:
    """Acknowledged records of the other workers (partial lines ignored)."""
    out = []
    for f in sorted(log_dir.glob("worker-*.jsonl")):
        try:
            lines = f.read_text().splitlines()
        except OSError:
            continue
        for line in lines:
            try:
                e = json.loads(line)
            except ValueError:
                continue
            if e.get("op") == "unique" and e.get("w") != skip and "returned" in e:
                out.append(e)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--db", required=True)
    ap.add_argument("--worker-id", type=int, required=True)
    ap.add_argument("--nworkers", type=int, required=True)
    ap.add_argument("--nrecords", type=int, required=True)
    ap.add_argument("--ncontested", type=int, required=True)
    ap.add_argument("--log", required=True, help="directory of the acknowledgement logs")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--sample", type=int, default=10, help="other workers' records read in phase 3")
    ap.add_argument("--node", default="", help="label of the node (default: the mount of --db)")
    ap.add_argument("--stale-lock-timeout", type=float, default=600.0)
    ap.add_argument("--lock-timeout", type=float, default=600.0)
    ap.add_argument("--max-errors", type=int, default=25, help="give up after this many errors")
    ap.add_argument("--pause", type=float, default=0.0, help="max random pause between calls (s)")
    args = ap.parse_args(argv)

    w = args.worker_id
    log_dir = Path(args.log)
    log_dir.mkdir(parents=True, exist_ok=True)
    db = Path(args.db)
    rng = random.Random(args.seed * 1000003 + w * 7919 + os.getpid())
    base = {"w": w, "pid": os.getpid()}
    log = AckLog(log_dir / f"worker-{w}.jsonl", base)
    errors = 0

    def error(phase: str, exc: BaseException, **ctx) -> None:
        nonlocal errors
        errors += 1
        log.append(op="error", phase=phase, type=type(exc).__module__ + "." + type(exc).__name__
                   if type(exc).__module__ not in ("builtins",) else type(exc).__name__,
                   message=str(exc)[:500], **ctx)
        if errors >= args.max_errors:
            log.append(op="abort", errors=errors)
            sys.exit(1)

    def mismatch(what: str, **ctx) -> None:
        nonlocal errors
        errors += 1
        log.append(op="error", phase="read", type="Mismatch", message=what, **ctx)

    log.append(op="start", hostname=socket.gethostname(), node=args.node or mount_of(db.parent),
               mount=mount_of(db.parent), db=str(db), lib=os.environ.get("TIRASTORE_LIB", ""),
               failpoints=os.environ.get("TIRASTORE_FAILPOINTS", ""),
               argv=sys.argv[1:])

    try:
        import tirastore
        store = tirastore.TiraStore(
            db, source_project=plan.project(w), cpu_model=plan.TEST_CPU, slurm_cpus=plan.TEST_SLURM,
            stale_lock_timeout=args.stale_lock_timeout, lock_timeout=args.lock_timeout)
    except Exception as e:  # noqa: BLE001 - every failure is logged for the verifier
        error("open", e)
        log.append(op="exit", errors=errors)
        return 1

    def pause():
        if args.pause > 0:
            time.sleep(rng.uniform(0, args.pause))

    def write(phase: str, r: dict, overwrite: bool = False, **ids) -> None:
        pause()
        t0 = time.monotonic()
        try:
            ret = store.record(r["name"], r["source"], r["schedule"], r["is_legal"], r["times"],
                               overwrite=overwrite)
        except Exception as e:  # noqa: BLE001
            error(phase, e, **ids)
            return
        log.append(op=phase, **ids, key=plan.record_key(r["source"], r["schedule"]),
                   is_legal=r["is_legal"], times=r["times"], returned=bool(ret),
                   dt=round(time.monotonic() - t0, 6))

    def read(r: dict, expect: list, **ids) -> None:
        """Look r up; its (is_legal, times, project) must be one of expect."""
        pause()
        t0 = time.monotonic()
        try:
            got = store.lookup(r["name"], r["source"], r["schedule"])
        except Exception as e:  # noqa: BLE001
            error("read", e, **ids)
            return
        dt = round(time.monotonic() - t0, 6)
        if got is None:
            mismatch("acknowledged record not found", **ids)
        elif (got.is_legal, got.execution_times, got.source_project) not in expect:
            mismatch(f"unexpected value {(got.is_legal, got.execution_times, got.source_project)!r}; "
                     f"expected one of {expect!r}", **ids)
        elif got.schedule != plan.normalize_schedule(r["schedule"]):
            mismatch(f"schedule {got.schedule!r} is not the normalized one", **ids)
        log.append(op="read", **ids, found=got is not None, dt=dt)

    # Phase 1: unique writes.
    for i in range(args.nrecords):
        write("unique", plan.unique_record(w, i), i=i)
    # Phase 2: contested writes (in a per-worker order, so they interleave).
    won: set[int] = set()
    order = list(range(args.ncontested))
    rng.shuffle(order)
    for c in order:
        r = plan.contested_record(w, c)
        write("contested", r, c=c)
    # Which contested records did this worker (this run) win?
    try:
        for line in (log_dir / f"worker-{w}.jsonl").read_text().splitlines():
            e = json.loads(line)
            if e.get("op") == "contested" and e.get("returned") and e.get("pid") == os.getpid():
                won.add(e["c"])
    except (OSError, ValueError):
        pass
    # Phase 3: cross reads.
    for i in range(args.nrecords):
        r = plan.unique_record(w, i)
        read(r, [(r["is_legal"], r["times"], plan.project(w))], kind="own", i=i)
    all_values = {}
    for c in range(args.ncontested):
        vals = [(True, plan.contested_record(x, c)["times"], plan.project(x)) for x in range(args.nworkers)]
        if c == plan.OVERWRITE_CONTESTED:
            vals.append((True, plan.overwrite_record(c)["times"], plan.project(plan.OVERWRITE_WORKER)))
        if c in won and c != plan.OVERWRITE_CONTESTED:
            mine = plan.contested_record(w, c)
            vals = [(True, mine["times"], plan.project(w))]
        all_values[c] = vals
    for c in range(args.ncontested):
        read(plan.contested_record(w, c), all_values[c], kind="contested", c=c)
    others = read_logs(log_dir, skip=w)
    for e in rng.sample(others, min(args.sample, len(others))):
        r = plan.unique_record(e["w"], e["i"])
        read(r, [(r["is_legal"], r["times"], plan.project(e["w"]))], kind="other", ow=e["w"], i=e["i"])
    # Phase 4: the overwrite.
    if w == plan.OVERWRITE_WORKER and args.ncontested > plan.OVERWRITE_CONTESTED:
        o = plan.overwrite_record()
        write("overwrite", o, overwrite=True, c=plan.OVERWRITE_CONTESTED)
        if errors == 0:
            read(o, [(True, o["times"], plan.project(w))], kind="overwritten", c=plan.OVERWRITE_CONTESTED)
    try:
        store.close()
    except Exception as e:  # noqa: BLE001
        error("close", e)
    log.append(op="done", errors=errors)
    return 0 if errors == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
