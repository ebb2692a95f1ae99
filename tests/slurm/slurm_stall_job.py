#!/usr/bin/env python3
"""One Slurm job of the stall test (tests/python/test_slurm.py).

    slurm_stall_job.py --db DB --role A --run RUN --count N
    slurm_stall_job.py --db DB --role C --run RUN --level 1

Role A opens the store, then calls record_many() with N new schedules
U(L0,i,comps=['c1']) in one transaction; the test suspends its job
(scontrol suspend) while it holds the lock, long enough for the lock to
go stale, and resumes it later. Roles C and D record new schedules
U(L<level>,i,comps=['c1']) one at a time until RUN/stop appears.

Every event goes to RUN/<role>.jsonl, one JSON line fsync'd before the
next step, so that the test knows exactly what each job saw even if it
was killed: "start" (pid, host, Slurm job id; before the library is even
imported, so C's latency counts the store's opening), "calling" (A, right
before record_many), "returned"/"raised" (A: the count, or the exception's
class, its classes' names and message), "ack" (C/D: one per record() that
returned True, with the schedule), "error", and "done".
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sqlite3
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
# The library of this checkout (python/tirastore), as tests/multinode/worker.py.
sys.path.insert(0, str(HERE.parent.parent / "python"))

PROGRAM = "stallprog"
SOURCE = "void stallprog() {\n  for (int i = 0; i < 8; i++) { }\n}\n"
CPU_MODEL = "tirastore-slurm-test-cpu"
SLURM_CPUS = "1"


def schedule(level: int, i: int) -> str:
    """The i-th schedule of a role: valid per COMPAT.md's U(LX,INT,COMPS)."""
    return f"U(L{level},{i},comps=['c1'])"


class Events:
    """Append-only JSONL event log; each line is fsync'd before we go on."""

    def __init__(self, path: Path, role: str):
        """Open (append) the role's log; O_APPEND so that lines never interleave."""
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self.role = role

    def log(self, ev: str, **kw) -> None:
        """Write one event with the wall-clock and monotonic times."""
        line = json.dumps({"ev": ev, "role": self.role, "t": time.time(), "mono": time.monotonic(), **kw})
        os.write(self.fd, (line + "\n").encode())
        os.fsync(self.fd)


def describe(exc: BaseException) -> dict:
    """What the test needs to judge an exception: its class and message."""
    return {
        "class": type(exc).__name__,
        "classes": [c.__name__ for c in type(exc).__mro__],
        "operational": isinstance(exc, sqlite3.OperationalError),
        "message": str(exc)[:1000],
    }


def main() -> int:
    """Run one role; exit 0 unless the store could not even be opened."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--db", required=True, type=Path)
    ap.add_argument("--role", required=True, choices=["A", "C", "D"])
    ap.add_argument("--run", required=True, type=Path, help="directory of the event logs and the stop file")
    ap.add_argument("--count", type=int, default=30000, help="A: schedules in the one record_many")
    ap.add_argument("--level", type=int, default=1, help="C/D: the loop index of their schedules")
    ap.add_argument("--stale-lock-timeout", type=float, default=3.0)
    ap.add_argument("--lock-timeout", type=float, default=60.0)
    ap.add_argument("--deadline", type=float, default=90.0, help="C/D: stop writing after this many seconds")
    args = ap.parse_args()

    ev = Events(args.run / f"{args.role}.jsonl", args.role)
    ev.log("start", pid=os.getpid(), host=socket.gethostname(), job=os.environ.get("SLURM_JOB_ID"),
           lib=os.environ.get("TIRASTORE_LIB"), failpoints=os.environ.get("TIRASTORE_FAILPOINTS"))
    import tirastore

    try:
        store = tirastore.TiraStore(args.db, source_project=f"stall-{args.role}", cpu_model=CPU_MODEL,
                                    slurm_cpus=SLURM_CPUS, stale_lock_timeout=args.stale_lock_timeout,
                                    lock_timeout=args.lock_timeout)
        if args.role == "A":
            store.count()  # create the database before the call the test times
    except Exception as e:  # noqa: BLE001 - logged for the test
        ev.log("error", phase="open", **describe(e))
        return 1

    if args.role == "A":
        entries = [{"tiralib_schedule_string": schedule(0, i), "is_legal": True, "execution_times": [0.25]}
                   for i in range(args.count)]
        ev.log("calling", count=args.count)
        try:
            n = store.record_many(PROGRAM, SOURCE, entries)
            ev.log("returned", n=n)
        except Exception as e:  # noqa: BLE001 - expected: tirastore.LockLostError
            ev.log("raised", **describe(e))
    else:
        stop = args.run / "stop"
        end = time.monotonic() + args.deadline
        i = 0
        ev.log("writing")
        while not stop.exists() and time.monotonic() < end:
            s = schedule(args.level, i)
            try:
                ok = store.record(PROGRAM, SOURCE, s, True, [0.5])
                ev.log("ack" if ok else "not-written", schedule=s)
            except Exception as e:  # noqa: BLE001 - logged for the test
                ev.log("error", phase="record", schedule=s, **describe(e))
                time.sleep(0.05)
            i += 1
    try:
        store.close()
    except Exception as e:  # noqa: BLE001
        ev.log("error", phase="close", **describe(e))
    ev.log("done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
