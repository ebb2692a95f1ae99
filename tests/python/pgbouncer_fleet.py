"""A fleet of worker processes for test_pgbouncer.py, started cheaply.

``python pgbouncer_fleet.py SPEC.json`` imports tirastore (which starts no
Go runtime) once and forks one child per worker, so that 500 workers cost
500 forks instead of 500 interpreters; each child opens its own store
(its own Go runtime and pool of connections), waits for the spec's go
file, and does a fixed, small piece of work:

  * once its store is open it touches ``<dir>/opened-<w>``: the test
    starts the fleet when every worker has opened, so that the restarts
    meet calls (an open has its own retry window, tested elsewhere);

  * iteration i records its own schedule U(L0,i,comps=['w<w>']);
  * and the contested schedule U(L1,(w+i) mod contested,comps=['c']),
    which every worker records with its own number as the time;
  * odd iterations ask lookup_or_claim for U(L2,(3w+i) mod claimed,...)
    and, given the claim, measure (its own number) and record it;
  * before the iterations listed in ``gates`` it touches
    ``<dir>/at-<gate>-<w>`` and waits for ``<dir>/go-<gate>``: the test
    restarts something while part of the fleet waits there and the rest
    is mid-call.

Every call's outcome is a JSON line of ``<dir>/w<w>.log`` (written before
the next call); a failed call is logged and the work goes on. The parent
exits 0 when every child exited 0 (a child exits 0 unless its store could
not be opened or something outside the calls failed).
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback


def _wait_for(path: str) -> None:
    parent = os.getppid()
    while not os.path.exists(path):
        if os.getppid() != parent:  # the fleet was killed (its test failed)
            os._exit(3)
        time.sleep(0.01)


def work(w: int, spec: dict) -> None:
    from tirastore import LookupResult, TiraStore

    d = spec["dir"]
    prog, src = "fleet", "void fleet() { a[i] = b[i]; }"
    with open(os.path.join(d, f"w{w}.log"), "a", buffering=1) as log:
        def note(**kw) -> None:
            log.write(json.dumps(kw) + "\n")

        def call(what: dict, fn):
            t0 = time.monotonic()
            try:
                out = fn()
            except Exception as e:  # noqa: BLE001 - every failure is the test's finding
                note(**what, error=f"{type(e).__name__}: {e}", s=time.monotonic() - t0)
                return None, False
            return out, time.monotonic() - t0

        s, t = call({"open": True}, lambda: TiraStore(spec["url"], cpu_model=spec["cpu"]))
        if s is None:
            return
        open(os.path.join(d, f"opened-{w}"), "w").close()
        _wait_for(os.path.join(d, "go"))
        for i in range(spec["iterations"]):
            if i in spec["gates"]:
                open(os.path.join(d, f"at-{i}-{w}"), "w").close()
                _wait_for(os.path.join(d, f"go-{i}"))
            own = f"U(L0,{i},comps=['w{w}'])"
            ack, t = call({"own": own}, lambda: s.record(prog, src, own, True, [float(w)]))
            if t is not False:
                note(own=own, ack=ack, s=t)
            con = f"U(L1,{(w + i) % spec['contested']},comps=['c'])"
            won, t = call({"contested": con}, lambda: s.record(prog, src, con, True, [float(w)]))
            if t is not False:
                note(contested=con, won=won, s=t)
            if i % 2 == 1:
                sched = f"U(L2,{(3 * w + i) % spec['claimed']},comps=['k'])"
                r, t = call({"claim": sched}, lambda: s.lookup_or_claim(prog, src, sched, lease=60))
                if isinstance(r, LookupResult):
                    note(claim=sched, hit=r.execution_times[0], s=t)
                elif r is not None:
                    ok, t2 = call({"claim": sched, "measured": w}, lambda: r.record(True, [float(w)]))
                    if t2 is not False:
                        note(claim=sched, measured=w, recorded=ok, s=t + t2)
        s.close()


def main(spec_path: str) -> int:
    with open(spec_path) as f:
        spec = json.load(f)
    import tirastore  # noqa: F401 - imported once, before the forks (no Go runtime yet)

    pids = []
    for w in range(spec["workers"]):
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                work(w, spec)
            except BaseException:  # noqa: BLE001
                traceback.print_exc()
                code = 1
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        pids.append(pid)
    bad = 0
    for pid in pids:
        _, status = os.waitpid(pid, 0)
        bad += status != 0
    print(json.dumps({"failed_workers": bad}))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
