"""A worker of the stall tests (test_stall.py), run as its own process.

    stall_worker.py batch DB OUT N FAILPOINTS   one record_many of N new schedules,
                                              with TIRASTORE_FAILPOINTS armed after
                                              the store is open (so that a "stop"
                                              point stalls the batch itself)
    stall_worker.py single DB OUT STOPFILE      records new schedules one at a time
                                              until STOPFILE exists

Both open the store with stale_lock_timeout=3 and write what happened to OUT
as JSON lines: {"ack": schedule, "t": time} for every record that returned
True (flushed before the next one starts), {"start": t} first, and
{"done": ..., "error": class, "message": ..., "t": time} last.
"""

from __future__ import annotations

import json
import os
import sys
import time

from tirastore import TiraStore

PROGRAM = "stall"
SOURCE = "void stall() { int x = 0; }"
STALE = 3.0


def _log(out, **entry) -> None:
    """Append one JSON line and make it durable before going on."""
    out.write(json.dumps(entry) + "\n")
    out.flush()
    os.fsync(out.fileno())


def batch_schedules(n: int) -> list[str]:
    """The batch worker's schedules (also used by the test to count them)."""
    return [f"U(L0,{i},comps=['batch'])" for i in range(n)]


def main() -> None:
    role, db, out_path = sys.argv[1], sys.argv[2], sys.argv[3]
    with open(out_path, "a", encoding="utf-8") as out:
        _log(out, start=time.time(), pid=os.getpid())
        store = TiraStore(db, stale_lock_timeout=STALE, lock_timeout=60, cpu_model="stall-cpu", slurm_cpus="N/A")
        try:
            if role == "batch":
                scheds = batch_schedules(int(sys.argv[4]))
                entries = [{"tiralib_schedule_string": s, "is_legal": True, "execution_times": [1.0]}
                           for s in scheds]
                os.environ["TIRASTORE_FAILPOINTS"] = sys.argv[5]
                _log(out, armed=time.time())
                n = store.record_many(PROGRAM, SOURCE, entries)
                _log(out, done=n, t=time.time())
            else:
                stop, i = sys.argv[4], 0
                while not os.path.exists(stop):
                    sched = f"U(L1,{i},comps=['single{os.getpid()}'])"
                    if store.record(PROGRAM, SOURCE, sched, True, [2.0]):
                        _log(out, ack=sched, t=time.time())
                    i += 1
                _log(out, done=i)
        except Exception as e:  # noqa: BLE001 - the test judges the class
            _log(out, done=None, error=type(e).__name__, message=str(e),
                 mro=[c.__name__ for c in type(e).__mro__], t=time.time())
        finally:
            store.close()


if __name__ == "__main__":
    main()
