#!/usr/bin/env python3
"""Local torture run of the hard-link lock on the FUSE test bed.

    python3 tests/multinode/torture.py [--nodes 8] [--per-node 8] [--nrecords N] ...
    python3 tests/multinode/torture.py --no-lock --expect-failure   # negative control

Starts build/fusebed with --nodes mounts of one backing directory (each mount
a simulated cluster node: fcntl locks local to it, link/rename/O_EXCL atomic
across mounts), runs --per-node workers (tests/multinode/worker.py) per node
against the SAME database, each through its node's mount, and meanwhile a
killer sends SIGKILL to workers: some aimed at the current lock holder
(inside the critical section), some at random workers. Some workers also
kill themselves inside the lock through failpoints of the failpoints build
(before-commit=kill@P, after-commit=kill@P) or hold the lock longer
(lock-acquired=sleep(MS)) so that kills land inside it; a quarter of the
workers use the normal (production) library. Killed workers are restarted
and redo their phases. Then verify_results.py checks the database against
every acknowledgement, and the figures are printed.

--no-lock runs the same with lock-disabled=on in every worker (the engine
skips the hard-link lock): verification must then FAIL; with
--expect-failure the exit code is inverted so CI can assert it.

The run is bounded by --time-limit (default 600 s) and always unmounts the
bed on exit (finally + SIGTERM/SIGINT/SIGALRM handlers).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness  # noqa: E402

NORMAL_LIB = harness.REPO / "python" / "tirastore" / "libtirastore.so"


class Abort(Exception):
    pass


SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGALRM, signal.SIGHUP)


def _on_signal(signum, frame):
    raise Abort(f"stopped by signal {signal.Signals(signum).name}")


def failpoints_for(w: int, run: int, a) -> tuple[str, str]:
    """(library, TIRASTORE_FAILPOINTS) for worker w in its run-th run."""
    fp_lib = str(harness.FAILPOINTS_LIB)
    armed = run <= a.kill_runs  # later runs carry no self-kill point: they must finish
    if a.no_lock:
        points = ["lock-disabled=on"]
        if a.widen:
            points.append(f"before-commit=sleep({a.widen})")
        return fp_lib, ";".join(points)
    group = w % 4
    if group == 0:
        return str(NORMAL_LIB), ""
    if group == 1:
        return fp_lib, f"before-commit=kill@{a.fp_kill}" if armed else ""
    if group == 2:
        return fp_lib, f"lock-acquired=sleep({a.fp_sleep})"
    return fp_lib, f"after-commit=kill@{a.fp_kill / 2:g}" if armed else ""


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=8, help="FUSE mounts (simulated nodes)")
    ap.add_argument("--per-node", type=int, default=8, help="worker processes per node")
    ap.add_argument("--nrecords", type=int, default=24, help="unique records per worker")
    ap.add_argument("--ncontested", type=int, default=10, help="contested records")
    ap.add_argument("--sample", type=int, default=6, help="other workers' records each worker reads")
    ap.add_argument("--kills", type=int, default=100, help="max external SIGKILLs")
    ap.add_argument("--kill-rate", type=float, default=1.0, help="external kills per second")
    ap.add_argument("--holder-bias", type=float, default=0.6,
                    help="fraction of external kills aimed at the lock holder")
    ap.add_argument("--fp-kill", type=float, default=0.02, help="P of before-commit=kill@P")
    ap.add_argument("--fp-sleep", type=int, default=20, help="ms of lock-acquired=sleep(MS)")
    ap.add_argument("--kill-runs", type=int, default=3, help="runs of a worker that may be killed")
    # Killed holders are on this host, so the dead-holder rule frees their
    # locks at once; the stale timeout only guards live holders. At 2 s it
    # was shorter than a holder's worst stall on this 2-core machine under
    # extra load (a heartbeat's fsync through FUSE behind a busy disk), and
    # 2 of 6 runs broke live locks and lost data. Keep it well above that.
    ap.add_argument("--stale-lock-timeout", type=float, default=30.0)
    ap.add_argument("--latency", default="", help="fusebed --latency (e.g. 200us)")
    ap.add_argument("--time-limit", type=float, default=600.0, help="hard wall-clock limit (s)")
    ap.add_argument("--seed", type=int, default=int(time.time()) % 100000)
    ap.add_argument("--dir", help="run directory (default: a new one under /tmp)")
    ap.add_argument("--keep", action="store_true", help="keep the run directory even on success")
    ap.add_argument("--no-lock", action="store_true", help="negative control: lock-disabled=on")
    ap.add_argument("--widen", type=int, default=0,
                    help="with --no-lock: before-commit=sleep(MS) to widen the unprotected window")
    ap.add_argument("--expect-failure", action="store_true", help="invert the exit code")
    a = ap.parse_args(argv)

    def finish(ok: bool) -> int:
        if a.expect_failure:
            print("expected failure: " + ("got it" if not ok else "but the run PASSED"))
            return 0 if not ok else 1
        return 0 if ok else 1

    why = harness.bed_unavailable_reason()
    if why is None and not harness.FAILPOINTS_LIB.exists():
        why = f"{harness.FAILPOINTS_LIB} is missing (./build.sh failpoints)"
    if why is None and not NORMAL_LIB.exists():
        why = f"{NORMAL_LIB} is missing (make build)"
    if why:
        print(f"torture: cannot run: {why}", file=sys.stderr)
        return 2

    run_dir = Path(a.dir) if a.dir else Path(tempfile.mkdtemp(prefix="tirastore-torture-"))
    run_dir.mkdir(parents=True, exist_ok=True)
    backing, log_dir = run_dir / "backing", run_dir / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    mounts = [run_dir / "mnt" / f"node{n}" for n in range(a.nodes)]
    nworkers = a.nodes * a.per_node
    bed = harness.FuseBed(backing, mounts, latency=a.latency or None, log=run_dir / "fusebed.log")
    for s in SIGNALS:
        signal.signal(s, _on_signal)
    signal.alarm(int(a.time_limit))
    t0 = time.monotonic()
    label = "NEGATIVE CONTROL (lock disabled)" if a.no_lock else "torture"
    print(f"{label}: {a.nodes} nodes x {a.per_node} workers = {nworkers} processes, "
          f"{a.nrecords} unique + {a.ncontested} contested records each, seed {a.seed}, dir {run_dir}",
          flush=True)
    fleet = None
    res = None
    bed_missing = False
    fleet_deadline = max(0.75 * a.time_limit, a.time_limit - 60)  # leaves time to verify
    try:
        bed.start()
        if a.no_lock:
            # The negative control's writers race on records, not on creating
            # the file (which, unprotected, mostly ends in errors, not damage).
            harness.create_db(mounts[0] / "shared" / "cache.db")
        members = []
        for w in range(nworkers):
            n = w % a.nodes
            db = mounts[n] / "shared" / "cache.db"

            def cmd_for(run, w=w, n=n, db=db):
                return harness.worker_cmd(db, w, nworkers, a.nrecords, a.ncontested, log_dir,
                                          node=f"node{n}", seed=a.seed * 100 + run,
                                          stale=a.stale_lock_timeout, sample=a.sample,
                                          lock_timeout=max(60.0, a.time_limit))

            def env_for(run, w=w):
                lib, fps = failpoints_for(w, run, a)
                return {"TIRASTORE_LIB": lib, "TIRASTORE_FAILPOINTS": fps}

            members.append(harness.Member(w=w, node=n, cmd_for=cmd_for, env_for=env_for))
        fleet = harness.Fleet(
            members, lock_path=backing / "shared" / "cache.db.lock", log_dir=log_dir,
            kill_rate=a.kill_rate, holder_bias=a.holder_bias, max_kills=a.kills,
            max_runs=a.kill_runs + 2, deadline=fleet_deadline, seed=a.seed,
            progress=lambda s: print(s, flush=True))
        res = fleet.run()
        if res.timed_out:
            print(f"torture: the fleet did not finish within {fleet_deadline:.0f} s "
                  f"(unfinished workers: {res.unfinished})", flush=True)
    except Abort as e:
        print(f"torture: aborted: {e}", file=sys.stderr, flush=True)
        res = None
    except harness.BedUnavailable as e:
        print(f"torture: the FUSE bed is unavailable: {e}", file=sys.stderr)
        res = None
        bed_missing = True
    finally:
        for s in SIGNALS:  # let the cleanup finish whatever arrives now
            signal.signal(s, signal.SIG_IGN)
        if fleet is not None:
            fleet.stop_all()
        bed.stop()
        for s in SIGNALS:
            signal.signal(s, _on_signal)
    if res is None or res.timed_out:
        signal.alarm(0)
        return 2 if bed_missing else 3  # not a verdict: never inverted by --expect-failure

    # Verify on the backing directory (the bed is unmounted now).
    summary_path = run_dir / "summary.json"
    try:
        vr = subprocess.run(harness.verify_cmd(backing / "shared" / "cache.db", log_dir, nworkers,
                                               a.nrecords, a.ncontested, summary=summary_path),
                            timeout=max(30.0, a.time_limit - (time.monotonic() - t0)))
    except (Abort, subprocess.TimeoutExpired) as e:
        print(f"torture: verification aborted: {e}", file=sys.stderr)
        return 3
    finally:
        signal.alarm(0)
    ok = vr.returncode == 0 and not res.failed
    summary = json.loads(summary_path.read_text()) if summary_path.exists() else {}
    info = summary.get("info", {})
    planned = nworkers * a.nrecords + a.ncontested
    print(f"\n{label} figures:")
    print(f"  nodes (FUSE mounts):      {a.nodes}")
    print(f"  processes:                {nworkers} workers, {res.runs} runs including restarts")
    print(f"  records:                  {planned} planned ({nworkers}x{a.nrecords} unique + "
          f"{a.ncontested} contested), {info.get('records in db', '?')} in the database")
    print(f"  kills inside the lock:    {res.kills_in_lock} ({res.kills_inside} external SIGKILL of "
          f"the holder, {res.self_kills} failpoint self-kills)")
    print(f"  kills outside the lock:   {res.kills_outside}")
    print(f"  worst call (wait+work):   {summary.get('max_call_seconds', float('nan')):.3f} s "
          f"({summary.get('max_call_op')}; {summary.get('calls', 0)} calls, median "
          f"{summary.get('p50_call_seconds', float('nan')):.3f} s, p99 "
          f"{summary.get('p99_call_seconds', float('nan')):.3f} s)")
    print(f"  fleet time:               {res.elapsed:.1f} s; total {time.monotonic() - t0:.1f} s")
    left = leftovers(backing / "shared")
    print(f"  left behind:              {left['claims']} claim files of killed processes, "
          f"{left['asides']} aside files, {left['node-local']} node-local entries in {left['private']}")
    if res.failed:
        print(f"  workers that exited nonzero: {res.failed[:20]}")
    print(f"  verification:             {'PASS' if vr.returncode == 0 else 'FAIL'}")
    # Keep the logs of a surprising outcome; remove those of an expected one.
    if ok != a.expect_failure and not a.keep and not a.dir and not any(os.path.ismount(m) for m in mounts):
        harness.rmtree_quiet(run_dir)
        print(f"RESULT: {'PASS' if ok else 'FAIL'}", flush=True)
    else:
        print(f"RESULT: {'PASS' if ok else 'FAIL'}  (logs kept in {run_dir})", flush=True)
    return finish(ok)


def leftovers(shared: Path) -> dict:
    """What the run left: claim and aside files beside the database (the
    verifier fails on any other), and entries in this user's node-local
    private directory (core/nodelocal: it is removed when its last store
    closes, so there should be none)."""
    names = [p.name for p in shared.iterdir()] if shared.is_dir() else []
    base = "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()
    private = Path(base) / f"tirastore-{os.geteuid()}"
    try:
        local = len(list(private.iterdir()))
    except OSError:
        local = 0
    return {"claims": sum(n.startswith(".lock_") for n in names),
            "asides": sum(".lock.stale." in n or ".lock.break.stale." in n for n in names),
            "node-local": local, "private": private}


if __name__ == "__main__":
    sys.exit(main())
