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

Kernel-config writers share the database: on each node, --config-per-node
of the workers (default a quarter of them) also put entries of the
kernel-config cache (tirastore.PersistentCache on the same database file),
interleaved with their record writes: --nconfigs entries of their own,
--nconfig-first contested entries that every config writer puts with
overwrite=False (the first writer wins) and --nconfig-last ones that every
config writer puts with overwrite=True (the last writer wins). Such a
worker runs as ``torture.py --mixed-worker ... -- <worker.py arguments>``:
worker.py's phases in this process, with one config put after every few of
its record writes and, before worker.py's final "done" line, the remaining
puts and a read-back of what it put (entries, get, len). Its config calls
are acknowledged in an fsync'd log of their own, DIR/config-N.jsonl, and
are killed like the record calls (the same killer, the same failpoints),
and a killed writer redoes them. After verify_results.py, verify_configs()
checks the config table against those logs with the stdlib sqlite3 module,
exactly: every acknowledged entry present with its value; for a
first-writer entry at most one acknowledged winner, whose value is stored
and was never updated; no last-writer value older than an acknowledged
later put; no entry nobody wrote (an unacknowledged one only from a writer
that was killed); no error logged.

Claimers share it too (core/claim.go): on each node, --claim-per-node of
the workers (default a quarter of them, the last ones of the node) also
measure a shared list of --nclaims schedules of one program (plan.py's
claim plan) through lookup_or_claim with a short lease (--claim-lease,
4 s), interleaved with their record calls like the config puts (at most
one call after a record call). The list goes in rounds of --claim-round
schedules, each in an order of the claimer's own; round k opens k x
--claim-pace seconds after the start (as a search advances), so that the
claimers reach a round at nearly the same moment and claims are made
through most of the run, by restarted claimers too; a claimer at its end
does the rounds still closed at once. With two claimers or more per node
each claimer takes every other round, so that every schedule is
contested by one claimer of each node. A third of them wait for a busy schedule
(wait=True), a third skip it (wait=False) and come back with wait=True at
the end, a third ask for a whole round in one lookup_many_or_claim
(wait=False) and likewise. A claim is "measured" (a sleep of --measure-ms)
and recorded through the claim; a claimer logs, fsync'd, each schedule
found recorded (with the value read), each claim it got ("measuring",
before the measurement) and what Claim.record returned, in
DIR/claim-N.jsonl, and at its end reads back every schedule it went
through. With --claim-hosts node (the default, when this process can
make namespaces) the claimers of the even nodes run as hosts of their own
(a UTS namespace with host name torture-nodeN, entered in the worker
before the library loads), so that only their node-mates can prove them
dead: the others must wait out the lease; the claimers of the odd nodes
stay on this host, where the dead-process rule takes their claims over at
once. They share this host's /dev/shm (the engine keeps nothing there);
--claim-hosts node-shm gives each simulated host its own (a mount
namespace) as well. The killer kills
claimers like everyone (and the odd nodes' self-kill failpoints land
inside claims too); a fraction --claim-bias of its kills is aimed at a
claimer that holds a claim at that moment, if one does (by its log, read
again while it is stopped). It
spares a claimer of a host of its own that holds the lock (nobody else
could prove it dead, and everyone would wait for --stale-lock-timeout)
and aims at the next holder instead; for the same reason those claimers
carry no self-kill failpoint. verify_results.py
--nclaims checks the claim records and the claims table against the
logs: every schedule recorded exactly once, with the value of a run that
measured it; the run told True is the one stored; nobody claimed a
schedule after it was read back recorded; a schedule measured twice only
because every measurer but the last was killed inside its claim, or held
it past its lease while its renewals waited for the busy lock (its
record returned a lease or more after it asked, and the taker claimed a
lease or more after that; any other earlier measurer that acknowledged
its record, True or False, fails); a
claim of a killed claimer taken over from another host not before its
lease; no claim left in the table but those of killed runs. Then a fresh store
calls lookup_or_claim(wait=True) for every claim left, with lock_timeout
= lease + 15 s: each must come back recorded or claimed (then released),
and the table must be empty after.

--no-lock runs the same with lock-disabled=on in every worker (the engine
skips the hard-link lock): verification must then FAIL; with
--expect-failure the exit code is inverted so CI can assert it.

The run is bounded by --time-limit (default 600 s) and always unmounts the
bed on exit (finally + SIGTERM/SIGINT/SIGALRM handlers).
"""

from __future__ import annotations

import argparse
import collections
import json
import math
import os
import random
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness  # noqa: E402
from verify_results import read_log  # noqa: E402

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


# ---------------------------------------------------------------------------
# The kernel-config writers: their plan, the mixed worker, the verifier
# ---------------------------------------------------------------------------

CONFIG_OPNAME = "torture"           # only picks a default path, unused with a database path
CONFIG_SHARED = "torture:shared"    # the device of the contested entries
CONFIG_FIRST_OP = "first-writer@v1"  # contested entries put with overwrite=False
CONFIG_LAST_OP = "last-writer@v1"    # contested entries put with overwrite=True
CONFIG_MAX_ERRORS = 25              # a config writer stops putting after this many errors


def config_key(device: str, op_id: str, call_key: str) -> str:
    """The seed's key of an entry, as the config table stores it."""
    return f"{device}|{op_id}|{call_key}"


def config_distinct(w: int, j: int) -> tuple[tuple[str, str, str], object, bool]:
    """Entry j of config writer w (only w puts it): (coords, value, overwrite).

    Even entries are put with overwrite=True (the seed's default), odd ones
    with overwrite=False (a restarted writer then gets False for those its
    earlier run committed). One value in four is a dict, read back through
    cfg_type=dict; the others are lists."""
    coords = (f"torture:w{w}", f"kernel{j % 3}@v1", f"m={64 * (j + 1)},w={w}")
    if j % 4 == 3:
        value: object = {"block_m": 16 << (j % 3), "num_warps": 1 + w % 8, "w": w, "j": j}
    else:
        value = [w, j, (w * 131 + j * 17) % 1009]
    return coords, value, j % 2 == 0


def config_first(w: int, c: int) -> tuple[tuple[str, str, str], object]:
    """Writer w's value of first-writer entry c (every config writer puts it, overwrite=False)."""
    return (CONFIG_SHARED, CONFIG_FIRST_OP, f"c={c}"), [1000 + w, c]


def config_last(w: int, c: int) -> tuple[tuple[str, str, str], object]:
    """Writer w's value of last-writer entry c (every config writer puts it, overwrite=True)."""
    return (CONFIG_SHARED, CONFIG_LAST_OP, f"c={c}"), [2000 + w, c]


def config_spec(kind: str, w: int, n: int) -> tuple[tuple[str, str, str], object, bool]:
    if kind == "distinct":
        return config_distinct(w, n)
    if kind == "first":
        return (*config_first(w, n), False)
    return (*config_last(w, n), True)


def is_config_worker(w: int, nodes: int, per_node: int) -> bool:
    """Worker w runs on node w % nodes as that node's (w // nodes)-th worker."""
    return w // nodes < per_node


def _canon(value: object) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def _exc_type(exc: BaseException) -> str:
    t = type(exc)
    return t.__name__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__name__}"


class ConfigWriter:
    """The config side of a mixed worker (see mixed_worker)."""

    def __init__(self, a, log_cls, append):
        self.a = a
        self.w = a.worker_id
        self.db = Path(a.db)
        self.workers = [int(x) for x in a.config_workers.split(",") if x]
        self._append = append  # AckLog.append as worker.py defines it (not the hook)
        self.log = log_cls(Path(a.log) / f"config-{self.w}.jsonl", {"w": self.w, "pid": os.getpid()})
        rng = random.Random(a.seed * 1000003 + self.w * 7919 + os.getpid())
        self.todo = ([("distinct", j) for j in range(a.nconfigs)]
                     + [("first", c) for c in range(a.nconfig_first)]
                     + [("last", c) for c in range(a.nconfig_last)])
        rng.shuffle(self.todo)
        self.put_done: dict[tuple[str, int], bool] = {}  # (kind, n) -> what put returned, this run
        self.cache = None
        self.errors = 0
        self.writes = 0
        self.finished = False

    def note(self, **entry) -> None:
        self._append(self.log, **entry)

    def start(self) -> None:
        self.note(op="start", hostname=socket.gethostname(), node=self.a.node, db=str(self.db),
                  lib=os.environ.get("TIRASTORE_LIB", ""),
                  failpoints=os.environ.get("TIRASTORE_FAILPOINTS", ""))

    def error(self, phase: str, exc: BaseException, **ctx) -> None:
        self.errors += 1
        self.note(op="error", phase=phase, type=_exc_type(exc), message=str(exc)[:500], **ctx)

    def mismatch(self, what: str, **ctx) -> None:
        self.errors += 1
        self.note(op="error", phase="read", type="Mismatch", message=what[:500], **ctx)

    def _open(self) -> bool:
        if self.cache is not None:
            return True
        try:
            import plan
            import tirastore
            if not self.db.exists():
                # The first store to open the file writes its CPU into it, and
                # the record workers use the test CPU: a cache creating it with
                # this host's CPU would disable their writes.
                tirastore.TiraStore(self.db, cpu_model=plan.TEST_CPU, slurm_cpus=plan.TEST_SLURM,
                                    stale_lock_timeout=self.a.stale_lock_timeout,
                                    lock_timeout=self.a.lock_timeout).close()
            self.cache = tirastore.PersistentCache(
                CONFIG_OPNAME, path=str(self.db), cfg_type=dict,
                lock_timeout=self.a.lock_timeout, stale_lock_timeout=self.a.stale_lock_timeout)
        except Exception as e:  # noqa: BLE001 - every failure is logged for the verifier
            self.error("open", e)
            return False
        return True

    def put_next(self) -> bool:
        """Put the next planned entry; False when there is nothing (more) to do."""
        if not self.todo or self.errors >= CONFIG_MAX_ERRORS or not self._open():
            return False
        kind, n = self.todo.pop(0)
        coords, value, overwrite = config_spec(kind, self.w, n)
        t0 = time.time()
        try:
            ret = self.cache.put(*coords, value, overwrite=overwrite)
        except Exception as e:  # noqa: BLE001
            self.error("put", e, kind=kind, n=n)
            return True
        t1 = time.time()
        self.note(op="put", kind=kind, n=n, key=config_key(*coords), overwrite=overwrite,
                  returned=bool(ret), t0=t0, t1=t1)
        self.put_done[(kind, n)] = bool(ret)
        return True

    def after_write(self) -> None:
        """Called after each acknowledged record write of this process."""
        self.writes += 1
        if self.writes % max(1, self.a.every) == 0:
            self.put_next()

    def finish(self) -> None:
        """The remaining puts, the read-back, the close; then the 'done' line."""
        if self.finished:
            return
        self.finished = True
        while self.put_next():
            pass
        if self.errors < CONFIG_MAX_ERRORS and self._open():
            try:
                self.check()
            except Exception as e:  # noqa: BLE001
                self.error("check", e)
        self.close()
        self.note(op="done", errors=self.errors, puts=len(self.put_done))

    def close(self) -> None:
        if self.cache is not None:
            try:
                self.cache.close()
            except Exception as e:  # noqa: BLE001
                self.error("close", e)
            self.cache = None

    def check(self) -> None:
        """Read back what this run put, in few calls (each takes the lock in a
        new process): entries() of its own device and of the shared one, get()
        of the first-writer entries (its own value where it won) and of one
        own dict value, len()."""
        w, cache = self.w, self.cache
        first_values = {_canon(config_first(x, c)[1])
                        for x in self.workers for c in range(self.a.nconfig_first)}
        last_values = {_canon(config_last(x, c)[1])
                       for x in self.workers for c in range(self.a.nconfig_last)}
        planned_own = {config_key(*config_distinct(w, j)[0]): _canon(config_distinct(w, j)[1])
                       for j in range(self.a.nconfigs)}
        mine = {config_key(e.device, e.op_id, e.call_key): e for e in cache.entries(device=f"torture:w{w}")}
        for key, e in mine.items():
            if planned_own.get(key) != _canon(e.value):
                self.mismatch(f"entries(): {key} = {e.value!r}, not planned for worker {w}")
            elif e.hostname != socket.gethostname() or e.update_date < e.creation_date:
                self.mismatch(f"entries(): {key} written by {e.hostname!r} at {e.creation_date}/"
                              f"{e.update_date}")
        seen = {config_key(e.device, e.op_id, e.call_key): _canon(e.value)
                for e in cache.entries(device=CONFIG_SHARED)}
        for key, val in seen.items():
            if val not in (first_values if f"|{CONFIG_FIRST_OP}|" in key else last_values):
                self.mismatch(f"entries(): shared entry {key} = {val}, which nobody put")
        for kind, n in self.put_done:
            key = config_key(*config_spec(kind, w, n)[0])
            if key not in (mine if kind == "distinct" else seen):
                self.mismatch(f"entries(): {key} is missing although put() returned", kind=kind, n=n)
        own = sorted(n for kind, n in self.put_done if kind == "distinct")
        gets = [("first", n) for kind, n in sorted(self.put_done) if kind == "first"]
        gets += [("distinct", j) for j in own if j % 4 == 3][:1]  # a dict value, through cfg_type
        for kind, n in gets:
            coords, value, _ = config_spec(kind, w, n)
            got = cache.get(*coords)
            returned = self.put_done[(kind, n)]
            if not (got == value if kind == "distinct" or returned else _canon(got) in first_values):
                self.mismatch(f"get({coords!r}) = {got!r} after put({value!r}) returned {returned}",
                              kind=kind, n=n)
        n = len(cache)
        most = len(self.workers) * self.a.nconfigs + self.a.nconfig_first + self.a.nconfig_last
        if not len(self.put_done) <= n <= most:
            self.mismatch(f"len(cache) = {n}; this run put {len(self.put_done)} entries, "
                          f"{most} are planned in all")
        self.note(op="checked", own=len(mine), shared=len(seen), entries=n, gets=len(gets))


# ---------------------------------------------------------------------------
# The claimers: their simulated hosts, the claim side of a mixed worker, the
# killer that aims at claims
# ---------------------------------------------------------------------------

CLAIM_MAX_ERRORS = 25   # a claimer stops claiming after this many errors
CLAIM_MODES = ("wait", "skip", "batch")
HOLDER_WAIT = 0.2       # s the killer waits for the next holder when it spares one


def is_claimer(w: int, nodes: int, per_node: int, claim_per_node: int) -> bool:
    """The last claim_per_node workers of each node claim (the config
    writers are its first ones)."""
    return w // nodes >= per_node - claim_per_node


def claim_mode(w: int, nodes: int) -> str:
    """How claimer w goes through its rounds: "wait" (lookup_or_claim,
    wait=True), "skip" (wait=False, the busy ones again at the end with
    wait=True) or "batch" (one lookup_many_or_claim per round, wait=False,
    then likewise)."""
    return CLAIM_MODES[(w // nodes + w % nodes) % len(CLAIM_MODES)]


def claim_parity(w: int, nodes: int, claim_per_node: int) -> int:
    """The rounds of the list claimer w goes through: with two claimers or
    more per node, the even rounds (0) or the odd ones (1), so that each
    schedule is contested by one claimer of most nodes at half the cost;
    else every round (-1)."""
    return (w // nodes) % 2 if claim_per_node >= 2 else -1


def has_own_host(w: int, nodes: int) -> bool:
    """With --claim-hosts node, the claimers of the even nodes run as hosts
    of their own; those of the odd nodes stay on this host (and keep the
    self-kill failpoints of their group)."""
    return (w % nodes) % 2 == 0


def node_host(n: int) -> str:
    return f"torture-node{n}"


_CLONE_NEWNS, _CLONE_NEWUTS = 0x00020000, 0x04000000
_MS_BIND, _MS_REC, _MS_PRIVATE = 4096, 16384, 1 << 18


def become_node(hostname: str, shm: str) -> None:
    """Make this process (still single-threaded: before the library is
    loaded) run as on another node: its own host name (a UTS namespace) and,
    if shm, that directory as its node-local memory /dev/shm (a mount
    namespace, shared by the claimers of one simulated node). The lock's
    and the claims' dead-process rule then holds only among the processes
    of one simulated node; others judge its claims by their lease. Without
    shm it shares this host's /dev/shm."""
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_void_p]

    def check(rc: int, what: str) -> None:
        if rc != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"{what}: {os.strerror(err)}")

    check(libc.unshare(_CLONE_NEWUTS | (_CLONE_NEWNS if shm else 0)), "unshare")
    if shm:
        check(libc.mount(None, b"/", None, _MS_REC | _MS_PRIVATE, None), "mount --make-rprivate /")
        check(libc.mount(shm.encode(), b"/dev/shm", None, _MS_BIND, None), f"mount --bind {shm} /dev/shm")
    socket.sethostname(hostname)


PROBE_NODE = r"""
import sys
sys.path.insert(0, sys.argv[1])
import socket, torture
torture.become_node(sys.argv[2], sys.argv[3])
assert socket.gethostname() == sys.argv[2]
"""


def node_unavailable_reason(shm: Path, with_shm: bool) -> Optional[str]:
    """None if become_node works here (tried in a child), else why not."""
    if with_shm:
        shm.mkdir(parents=True, exist_ok=True)
    try:
        p = subprocess.run([sys.executable, "-c", PROBE_NODE, str(Path(__file__).resolve().parent),
                            "torture-probe", str(shm) if with_shm else ""], capture_output=True, text=True,
                           timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        return str(e)
    if p.returncode != 0:
        return (p.stderr.strip().splitlines() or [f"exit status {p.returncode}"])[-1]
    return None


def open_claims(entries: list, pid: int, held: Optional[set] = None) -> set:
    """The schedules run pid holds a claim on, by its claim log: claimed (or
    measuring) and not yet recorded or released (added to held)."""
    held = set() if held is None else held
    for e in entries:
        if e.get("pid") != pid:
            continue
        op = e.get("op")
        if op == "claimed":
            held.update(e.get("s", []))
        elif op == "measuring":
            held.add(e.get("s"))
        elif op in ("recorded", "released"):
            held.discard(e.get("s"))
    return held


class Claimer:
    """The claim side of a mixed worker (see mixed_worker): the shared list
    of plan.claim_schedule(s), 0 <= s < nclaims, in rounds that open one
    after the other (each in an order of its own), through lookup_or_claim
    (or lookup_many_or_claim), "measuring" what it
    claims (a sleep) and recording through the claim. Everything is
    acknowledged in DIR/claim-N.jsonl: "found" (recorded, with the value
    read), "busy" (wait=False: claimed by another live worker, tried again
    with wait=True at the end), "claimed" (a batch's claims), "measuring"
    (fsync'd before the measurement starts, with when the call that claimed
    it started), "recorded" (what Claim.record returned)."""

    def __init__(self, a, log_cls, append):
        import plan
        self.plan = plan
        self.a = a
        self.w = a.worker_id
        self.pid = os.getpid()
        self.db = Path(a.db)
        self._append = append
        self.log = log_cls(Path(a.log) / f"claim-{self.w}.jsonl", {"w": self.w, "pid": self.pid})
        self.rng = random.Random(a.seed * 1000003 + self.w * 7919 + self.pid + 17)
        # The list in rounds of --claim-round schedules, each round in an
        # order of its own: the claimers, going at about the same pace,
        # reach each round at nearly the same moment (as the workers of one
        # search do), all through their runs.
        size = max(1, a.claim_round)
        self.todo = []  # the steps: one call each, of one schedule or (batch) of a round
        for k, r0 in enumerate(range(0, a.nclaims, size)):
            if a.claim_parity >= 0 and k % 2 != a.claim_parity:
                continue
            rnd = list(range(r0, min(a.nclaims, r0 + size)))
            self.rng.shuffle(rnd)
            self.todo += [(k, rnd)] if a.claim_mode == "batch" else [(k, [s]) for s in rnd]
        self.mine = sorted(s for _, step in self.todo for s in step)
        self.t0 = a.claim_t0 or time.time()
        self.deferred: list = []
        self.mode = a.claim_mode
        lo, hi = (float(x) for x in a.measure_ms.split(","))
        self.measure_s = (lo / 1000, hi / 1000)
        self.store = None
        self.errors = 0
        self.calls = 0
        self.measured = 0
        self.finished = False

    def note(self, **entry) -> None:
        self._append(self.log, **entry)

    def start(self, node_error: str = "") -> None:
        self.note(op="start", hostname=socket.gethostname(), node=self.a.node, db=str(self.db),
                  mode=self.mode, lease=self.a.claim_lease, lib=os.environ.get("TIRASTORE_LIB", ""),
                  failpoints=os.environ.get("TIRASTORE_FAILPOINTS", ""))
        if node_error:
            self.errors += 1
            self.note(op="error", phase="node", type="OSError", message=node_error[:500])

    def error(self, phase: str, exc: BaseException, **ctx) -> None:
        self.errors += 1
        self.note(op="error", phase=phase, type=_exc_type(exc), message=str(exc)[:500], **ctx)

    def _open(self) -> bool:
        if self.store is not None:
            return True
        try:
            import tirastore
            self.store = tirastore.TiraStore(
                self.db, source_project=self.plan.project(self.w), cpu_model=self.plan.TEST_CPU,
                slurm_cpus=self.plan.TEST_SLURM, stale_lock_timeout=self.a.stale_lock_timeout,
                lock_timeout=self.a.claim_lock_timeout)
        except Exception as e:  # noqa: BLE001 - every failure is logged for the verifier
            self.error("open", e)
            return False
        return True

    def _ask(self, ss: list, wait: bool) -> None:
        """One call for the schedules ss (one, unless a batch), then the
        measurements of what it claimed."""
        import tirastore
        plan = self.plan
        asked = time.time()
        t0 = time.monotonic()
        try:
            if self.mode == "batch":
                outs = self.store.lookup_many_or_claim(plan.CLAIM_PROGRAM, plan.CLAIM_SOURCE,
                                                       [plan.claim_schedule(s) for s in ss],
                                                       lease=self.a.claim_lease, wait=wait)
            else:
                outs = [self.store.lookup_or_claim(plan.CLAIM_PROGRAM, plan.CLAIM_SOURCE,
                                                   plan.claim_schedule(ss[0]), lease=self.a.claim_lease,
                                                   wait=wait)]
        except Exception as e:  # noqa: BLE001
            self.error("claim", e, s=ss, wait=wait)
            if isinstance(e, TimeoutError):
                # A claim nobody ended within --claim-lock-timeout: a failed
                # run already; more such waits would only make it longer.
                self.errors = max(self.errors, CLAIM_MAX_ERRORS)
            return
        dt = round(time.monotonic() - t0, 6)
        claims = []
        for s, o in zip(ss, outs):
            if isinstance(o, tirastore.LookupResult):
                self.note(op="found", s=s, is_legal=o.is_legal, times=o.execution_times,
                          project=o.source_project, asked=asked, dt=dt, wait=wait)
            elif isinstance(o, tirastore.Claim):
                claims.append((s, o))
            elif o is None and not wait:
                self.note(op="busy", s=s, asked=asked, dt=dt)
                self.deferred.append(s)
            else:
                self.errors += 1
                self.note(op="error", phase="claim", type="Mismatch", s=s,
                          message=f"lookup_or_claim(wait={wait}) returned {o!r}")
        if len(claims) > 1:
            self.note(op="claimed", s=[s for s, _ in claims], asked=asked, dt=dt, wait=wait)
        for s, c in claims:
            self.measure(s, c, asked, dt, wait)

    def measure(self, s: int, claim, asked: float, dt: float, wait: bool) -> None:
        self.note(op="measuring", s=s, asked=asked, dt=dt, wait=wait)
        time.sleep(self.rng.uniform(*self.measure_s))
        self.measured += 1
        times = self.plan.claim_times(s, self.w, self.pid)
        t0 = time.monotonic()
        try:
            taken = claim.taken_over
            ret = claim.record(True, times)
        except Exception as e:  # noqa: BLE001
            self.error("record", e, s=s)
            try:
                claim.release()
                self.note(op="released", s=s)
            except Exception as e2:  # noqa: BLE001
                self.error("release", e2, s=s)
            return
        self.note(op="recorded", s=s, returned=bool(ret), taken_over=bool(taken), times=times,
                  dt=round(time.monotonic() - t0, 6))

    def step(self) -> bool:
        """Ask for the next schedule(s) of the list; False when none is left."""
        if not self.todo or self.errors >= CLAIM_MAX_ERRORS or not self._open():
            return False
        _, ss = self.todo.pop(0)
        self._ask(ss, wait=self.mode == "wait")
        return True

    def opens(self, k: int) -> float:
        """When round k opens: the fleet reaches the rounds one after the
        other, every --claim-pace seconds, as a search advances (a claimer
        at its end does the rounds still closed at once)."""
        return self.t0 + k * self.a.claim_pace

    def after_call(self) -> None:
        """Called after each acknowledged call of the record side: one claim
        step if its round has opened."""
        self.calls += 1
        if self.todo and time.time() >= self.opens(self.todo[0][0]):
            self.step()

    def finish(self) -> None:
        """The rest of the list, the busy ones with wait=True, a read-back of
        every schedule; then the 'done' line."""
        if self.finished:
            return
        self.finished = True
        while self.step():
            pass
        while self.deferred and self.errors < CLAIM_MAX_ERRORS and self._open():
            n = len(self.deferred) if self.mode == "batch" else 1
            ss, self.deferred = self.deferred[:n], self.deferred[n:]
            self._ask(ss, wait=True)
        if self.errors < CLAIM_MAX_ERRORS and self._open():
            try:
                self.check()
            except Exception as e:  # noqa: BLE001
                self.error("check", e)
        self.close()
        self.note(op="done", errors=self.errors, measured=self.measured)

    def check(self) -> None:
        """Every schedule this run went through is recorded now, with a
        value of a claimer's measurement of it."""
        plan = self.plan
        got = self.store.lookup_many(plan.CLAIM_PROGRAM, plan.CLAIM_SOURCE,
                                     [plan.claim_schedule(s) for s in self.mine])
        found = 0
        for s, r in zip(self.mine, got):
            if r is None:
                self.errors += 1
                self.note(op="error", phase="read", type="Mismatch", s=s,
                          message="not recorded after every claimer's lookup_or_claim of it ended")
                continue
            found += 1
            t = r.execution_times
            if not (r.is_legal and isinstance(t, list) and len(t) == 3 and t[0] == s + 0.5
                    and r.source_project == plan.project(int(t[1]))):
                self.errors += 1
                self.note(op="error", phase="read", type="Mismatch", s=s,
                          message=f"stored value {(r.is_legal, t, r.source_project)!r} is no measurement of it")
        self.note(op="checked", found=found)

    def close(self) -> None:
        if self.store is not None:
            try:
                self.store.close()
            except Exception as e:  # noqa: BLE001
                self.error("close", e)
            self.store = None


class TortureFleet(harness.Fleet):
    """harness.Fleet whose killer also aims at claims: with P claim_bias a
    kill is aimed at a claimer that holds a claim at that moment, if one
    does (by its claim log, read again while the victim is stopped), else
    it is of harness.Fleet's kind (the lock holder, else anyone). A claimer on a simulated host of its own is
    spared (SIGCONT, another victim) while it holds the lock: nothing on
    the other hosts could prove it dead, so everyone would wait out
    --stale-lock-timeout; it is killed anywhere else, in its claims too."""

    def __init__(self, *args, claimers: dict, claim_bias: float = 0.0, **kw):
        super().__init__(*args, **kw)
        self.claimers = claimers  # w -> True when it runs on a simulated host of its own
        self.claim_bias = claim_bias
        self.kills_in_claim = 0       # claimers killed while holding a claim (by their log)
        self.kills_claimer_other = 0  # claimers killed holding none
        self.spared = 0
        self._tails: dict = {}

    def _held(self, m: harness.Member) -> set:
        """What m's current run holds, by its claim log (read incrementally)."""
        st = self._tails.setdefault(m.w, {"off": 0, "buf": b"", "held": collections.defaultdict(set)})
        try:
            with open(self.log_dir / f"claim-{m.w}.jsonl", "rb") as f:
                f.seek(st["off"])
                chunk = f.read()
        except OSError:
            return set()
        st["off"] += len(chunk)
        lines = (st["buf"] + chunk).split(b"\n")
        st["buf"] = lines.pop()
        for line in lines:
            try:
                e = json.loads(line)
            except ValueError:
                continue
            st["held"][e.get("pid")] = open_claims([e], e.get("pid"), st["held"][e.get("pid")])
        return st["held"].get(m.proc.pid, set())

    def _kill_one(self) -> None:
        running = [m for m in self._running() if m.runs < self.max_runs and m.killable]
        if not running:
            return
        if self.claimers and self.rng.random() < self.claim_bias:
            # A claimer that holds a claim now, if any; else a kill of the
            # usual kind.
            holding = [m for m in running if m.w in self.claimers and self._held(m)]
            if holding and self._kill(self.rng.choice(holding)):
                return
        # The holder (a claimer of a host of its own is not killed inside
        # the lock: wait a little for the next holder), else anyone.
        aim = self.rng.random() < self.holder_bias
        end = time.monotonic() + HOLDER_WAIT
        for _ in range(40):
            victim = None
            if aim:
                pid = harness.read_holder_pid(self.lock_path)
                victim = next((m for m in running if m.proc.pid == pid), None)
                if victim is not None and self.claimers.get(victim.w):
                    victim = None
                    if time.monotonic() < end:
                        time.sleep(0.01)
                        continue
            if self._kill(victim or self.rng.choice(running)):
                break

    def _kill(self, victim: harness.Member) -> bool:
        """SIGKILL victim unless it is spared; False if spared."""
        pid = victim.proc.pid
        try:
            os.kill(pid, signal.SIGSTOP)  # freeze it: its lock and claim state cannot change now
        except ProcessLookupError:
            return True
        inside = harness.read_holder_pid(self.lock_path) == pid
        if inside and self.claimers.get(victim.w):
            os.kill(pid, signal.SIGCONT)
            self.spared += 1
            return False
        in_claim = bool(self._held(victim)) if victim.w in self.claimers else False
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            return True
        victim.externally_killed.add(pid)
        if inside:
            self.result.kills_inside += 1
        else:
            self.result.kills_outside += 1
        if victim.w in self.claimers:
            if in_claim:
                self.kills_in_claim += 1
            else:
                self.kills_claimer_other += 1
        return True


def mixed_worker(argv: list) -> int:
    """torture.py --mixed-worker OPTIONS -- WORKER-ARGUMENTS: worker.py's
    record phases in this process, with config puts (--config-workers)
    and/or claims (--nclaims) interleaved (see the docstring at the top)."""
    if "--" not in argv:
        print("torture.py --mixed-worker: '--' and the worker.py arguments are missing", file=sys.stderr)
        return 2
    cut = argv.index("--")
    ap = argparse.ArgumentParser(prog="torture.py --mixed-worker")
    ap.add_argument("--db", required=True)
    ap.add_argument("--worker-id", type=int, required=True)
    ap.add_argument("--log", required=True)
    ap.add_argument("--node", default="")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--config-workers", default="",
                    help="comma-separated ids of every config writer (empty: this worker puts no config)")
    ap.add_argument("--nconfigs", type=int, default=0)
    ap.add_argument("--nconfig-first", type=int, default=0)
    ap.add_argument("--nconfig-last", type=int, default=0)
    ap.add_argument("--every", type=int, default=2, help="one config put after every N record writes")
    ap.add_argument("--nclaims", type=int, default=0, help="claim schedules (0: this worker claims nothing)")
    ap.add_argument("--claim-lease", type=float, default=4.0)
    ap.add_argument("--claim-mode", choices=CLAIM_MODES, default="wait")
    ap.add_argument("--claim-round", type=int, default=5, help="schedules per round of the list")
    ap.add_argument("--claim-parity", type=int, default=-1, help="only the even (0) or odd (1) rounds; -1: all")
    ap.add_argument("--claim-t0", type=float, default=0.0, help="when round 0 opens (time.time(); 0: now)")
    ap.add_argument("--claim-pace", type=float, default=6.0, help="s between the openings of two rounds")
    ap.add_argument("--claim-lock-timeout", type=float, default=120.0)
    ap.add_argument("--measure-ms", default="10,40", help="a measurement sleeps between these (ms)")
    ap.add_argument("--host", default="", help="run as on a simulated host of this name (become_node)")
    ap.add_argument("--shm", default="", help="with --host: this directory as its /dev/shm")
    ap.add_argument("--stale-lock-timeout", type=float, default=600.0)
    ap.add_argument("--lock-timeout", type=float, default=600.0)
    a = ap.parse_args(argv[:cut])
    wargv = argv[cut + 1:]

    node_error = ""
    if a.host:
        try:
            become_node(a.host, a.shm)  # first: the library's threads do not exist yet
        except OSError as e:
            node_error = f"cannot run as host {a.host}: {e}"

    import worker as record_worker  # tests/multinode/worker.py (sys.path has this directory)

    append = record_worker.AckLog.append
    sides: list = []
    if a.config_workers:
        cw = ConfigWriter(a, record_worker.AckLog, append)
        cw.start()
        sides.append(cw)
    if a.nclaims > 0:
        cl = Claimer(a, record_worker.AckLog, append)
        cl.start(node_error)
        sides.append(cl)
    elif node_error:
        print(node_error, file=sys.stderr)
        return 1

    def hooked(self, **entry):
        # Between two calls of worker.py: after a call is acknowledged (its
        # log line fsync'd), before the next call starts its clock; and the
        # config and claim sides end before the record side's "done", so
        # that a kill during them counts as a killed run for
        # verify_results.py too.
        op = entry.get("op")
        if op == "done":
            for side in sides:
                side.finish()
        append(self, **entry)
        if op in ("unique", "contested"):
            for side in sides:
                if isinstance(side, ConfigWriter):
                    side.after_write()
        if op in ("unique", "contested", "read"):
            for side in sides:
                if isinstance(side, Claimer):
                    side.after_call()

    record_worker.AckLog.append = hooked
    sys.argv = [str(harness.WORKER), *wargv]
    try:
        rc = record_worker.main(wargv)
    except SystemExit as e:  # worker.py gives up after too many errors
        rc = e.code if isinstance(e.code, int) else 1
    for side in sides:
        if not side.finished:
            side.close()
            side.note(op="exit", errors=side.errors)
    return 1 if rc or any(side.errors for side in sides) else 0


def load_config_logs(log_dir: Path, workers: list) -> tuple[dict, int]:
    """{w: [entries]} of the config logs, and the count of torn lines."""
    logs: dict[int, list] = {}
    torn = 0
    for w in workers:
        f = log_dir / f"config-{w}.jsonl"
        if not f.exists():
            continue
        logs[w], bad = read_log(f)
        torn += bad
    return logs, torn


def verify_configs(db: Path, log_dir: Path, workers: list, nconfigs: int, nfirst: int,
                   nlast: int) -> tuple[list, dict]:
    """Check the config table against the config writers' logs (stdlib only).

    Returns (violations, figures)."""
    v: list[str] = []
    errs: list[str] = []
    info: collections.Counter = collections.Counter()
    logs, torn = load_config_logs(log_dir, workers)
    info["torn config log lines"] = torn
    runs: dict = {}  # pid -> {"w", "t" (start), "done"}
    hosts: set = set()
    puts = []  # (w, pid, entry)
    for w in workers:
        if w not in logs:
            v.append(f"config writer {w}: no config log (never started)")
            continue
        for e in logs[w]:
            pid, op = e.get("pid"), e.get("op")
            if op == "start":
                runs[pid] = {"w": w, "t": e.get("t", 0.0), "done": False}
                hosts.add(e.get("hostname"))
            elif op in ("done", "exit"):
                runs.setdefault(pid, {"w": w, "t": 0.0})["done"] = True
            elif op == "error":
                errs.append(f"config writer {w} (pid {pid}) logged an error in phase {e.get('phase')}: "
                            f"{e.get('type')}: {e.get('message')}")
            elif op == "put" and "returned" in e:
                puts.append((w, pid, e))
        if not any(e.get("op") == "done" and e.get("errors") == 0 for e in logs[w]):
            errs.append(f"config writer {w}: never finished without error (no clean 'done')")
    killed = {pid for pid, r in runs.items() if not r["done"]}
    killed_w = {runs[p]["w"] for p in killed}
    info["config writer runs"] = len(runs)
    info["killed config writer runs"] = len(killed)
    starts = collections.defaultdict(list)
    for r in runs.values():
        starts[r["w"]].append(r["t"])

    def death_bound(pid) -> float:
        """The latest moment a killed run can have committed: when its
        worker's next run started (the fleet restarts it once it is dead)."""
        r = runs[pid]
        later = [t for t in starts[r["w"]] if t > r["t"]]
        return min(later) if later else math.inf

    planned: dict[str, dict] = {}
    for w in workers:
        for j in range(nconfigs):
            coords, value, overwrite = config_distinct(w, j)
            planned[config_key(*coords)] = {"kind": "distinct", "w": w, "n": j, "coords": coords,
                                            "overwrite": overwrite, "values": {_canon(value): w}}
    for kind, n_of, value_of, overwrite in (("first", nfirst, config_first, False),
                                            ("last", nlast, config_last, True)):
        for c in range(n_of):
            for w in workers:
                coords, value = value_of(w, c)
                spec = planned.setdefault(config_key(*coords), {"kind": kind, "n": c, "coords": coords,
                                                                "overwrite": overwrite, "values": {}})
                spec["values"][_canon(value)] = w

    rows = []
    if not db.exists():
        v.append(f"database {db} does not exist")
    else:
        try:
            conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
            try:
                has = conn.execute("SELECT count(*) FROM sqlite_master WHERE type = 'table'"
                                   " AND name = 'config_entries'").fetchone()[0]
                if has:
                    rows = conn.execute(
                        "SELECT key, device, op_id, call_key, value_json, hostname, username,"
                        " creation_date, update_date FROM config_entries NOT INDEXED").fetchall()
                    by_index = conn.execute("SELECT count(*) FROM config_entries INDEXED BY"
                                            " idx_config_entries_namespace_device_op_id").fetchone()[0]
                    if by_index != len(rows):
                        v.append(f"config_entries: {len(rows)} rows, {by_index} in its index")
            finally:
                conn.close()
        except sqlite3.DatabaseError as e:
            v.append(f"cannot read the config table: {type(e).__name__}: {e}")
    info["config entries in db"] = len(rows)

    count = collections.Counter(r[0] for r in rows)
    for key, n in count.items():
        if n > 1:
            v.append(f"config entry {key} stored {n} times")
    stored: dict[str, int] = {}  # key -> writer of the stored value
    for key, device, op_id, call_key, value_json, host, user, created, updated in rows:
        spec = planned.get(key)
        if spec is None:
            v.append(f"unexpected config entry {key!r} = {value_json} (nobody put it)")
            continue
        if (device, op_id, call_key) != spec["coords"]:
            v.append(f"config entry {key}: columns {(device, op_id, call_key)!r}, expected {spec['coords']!r}")
        try:
            writer = spec["values"].get(_canon(json.loads(value_json)))
        except ValueError:
            writer = None
        if writer is None:
            v.append(f"config entry {key} ({spec['kind']}): value {value_json} is no planned value")
            continue
        stored[key] = writer
        if host not in hosts:
            v.append(f"config entry {key}: hostname {host!r}, but the config writers ran on {sorted(map(str, hosts))}")
        if not user:
            v.append(f"config entry {key}: no username")
        if updated < created:
            v.append(f"config entry {key}: update_date {updated} before creation_date {created}")
        elif not spec["overwrite"] and updated != created:
            v.append(f"config entry {key} (put with overwrite=False only) was updated: "
                     f"created {created}, updated {updated}")

    acks: dict[str, list] = collections.defaultdict(list)
    for w, pid, e in puts:
        kind, n = e.get("kind"), e.get("n")
        try:
            coords, _, overwrite = config_spec(kind, w, n)
        except TypeError:
            v.append(f"config writer {w}: unparseable put line {e}")
            continue
        key = config_key(*coords)
        if e.get("key") != key or key not in planned or e.get("overwrite") != overwrite:
            v.append(f"config writer {w}: logged put {e} does not match the plan ({key})")
            continue
        acks[key].append((w, pid, bool(e["returned"]), e.get("t0", 0.0), e.get("t1", 0.0)))
        info[f"acked config puts, {kind} ({e['returned']})"] += 1

    winners = 0
    for key, spec in planned.items():
        kind = spec["kind"]
        label = (f"config entry {key} ({kind}, writer {spec['w']})" if kind == "distinct"
                 else f"config entry {key} ({kind}-writer)")
        a = acks.get(key, [])
        wins = [x for x in a if x[2]]
        if spec["overwrite"]:
            for x in a:
                if not x[2]:
                    v.append(f"{label}: put(overwrite=True) returned False (worker {x[0]}, pid {x[1]})")
        elif len(wins) > 1:
            v.append(f"{label}: put(overwrite=False) returned True {len(wins)} times "
                     f"(workers/pids {[(x[0], x[1]) for x in wins]}) - two winners, or lost and put again")
        if kind == "first" and wins:
            winners += 1
        if key not in stored:
            if a and not any(r[0] == key for r in rows):
                v.append(f"{label}: LOST - acknowledged ({[(x[0], x[1], x[2]) for x in a[:4]]}) "
                         f"but not in the database")
            continue
        writer = stored[key]
        if kind == "distinct":
            if not a and spec["w"] not in killed_w:
                v.append(f"{label}: present but never acknowledged, and its writer was never killed")
            if not spec["overwrite"]:
                for x in a:
                    if x[2]:
                        continue
                    before = any(y[2] and y[4] <= x[3] for y in a) or any(
                        runs[p]["w"] == spec["w"] and runs[p]["t"] < x[3] for p in killed)
                    if not before:
                        v.append(f"{label}: put(overwrite=False) returned False (pid {x[1]}), but no "
                                 f"earlier put of it was acknowledged or killed")
            continue
        if kind == "first":
            if wins:
                if writer != wins[0][0]:
                    v.append(f"{label}: worker {wins[0][0]} was told it won, but the stored value is "
                             f"worker {writer}'s")
            elif writer not in killed_w:
                v.append(f"{label}: nobody was told it won, and the stored value's writer "
                         f"(worker {writer}) was never killed")
            continue
        # last-writer: the stored value is its writer's latest put, so no
        # acknowledged put of another writer may have started after it.
        mine = [x for x in a if x[0] == writer]
        if not mine and writer not in killed_w:
            v.append(f"{label}: holds worker {writer}'s value, which it never acknowledged, and it was "
                     f"never killed")
            continue
        latest = max([x[4] for x in mine] + [death_bound(p) for p in killed if runs[p]["w"] == writer],
                     default=-math.inf)
        later = [x for x in a if x[0] != writer and x[3] > latest]
        if later:
            x = min(later, key=lambda y: y[3])
            v.append(f"{label}: LOST UPDATE - holds worker {writer}'s value, but worker {x[0]}'s put "
                     f"(pid {x[1]}, acknowledged) started {x[3] - latest:.3f} s after worker {writer}'s "
                     f"last put ended")
    info["first-writer entries with an acknowledged winner"] = winners
    info["config entries planned"] = len(planned)
    return v + errs, dict(info)


TAKE_OVER = r"""
import json, sys, threading, time
sys.path[:0] = [sys.argv[2], sys.argv[3]]
import plan, tirastore
db, lease, timeout = sys.argv[1], float(sys.argv[4]), float(sys.argv[5])
out = {"results": []}
with tirastore.TiraStore(db, cpu_model=plan.TEST_CPU, slurm_cpus=plan.TEST_SLURM, lock_timeout=timeout) as st:
    left = st.claims()
    out["before"] = [{"key": c.key, "schedule": c.tiralib_schedule_string, "hostname": c.hostname,
                      "pid": c.pid, "dead": c.dead, "program_name": c.program_name} for c in left]

    def take(c):  # one thread per claim: the leases run out together
        t0 = time.monotonic()
        r = {"key": c.key, "schedule": c.tiralib_schedule_string, "hostname": c.hostname, "pid": c.pid}
        try:
            got = st.lookup_or_claim(c.program_name, plan.CLAIM_SOURCE, c.tiralib_schedule_string,
                                     lease=lease, wait=True)
        except Exception as e:
            r["error"] = f"{type(e).__name__}: {e}"
        else:
            if isinstance(got, tirastore.LookupResult):
                r["outcome"] = "recorded"
            elif isinstance(got, tirastore.Claim):
                r["outcome"] = "claimed"
                got.release()
            else:
                r["outcome"] = repr(got)
        r["dt"] = time.monotonic() - t0
        out["results"].append(r)

    threads = [threading.Thread(target=take, args=(c,)) for c in left]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    out["after"] = [{"key": c.key, "schedule": c.tiralib_schedule_string, "hostname": c.hostname,
                     "pid": c.pid} for c in st.claims()]
print(json.dumps(out))
"""


def take_over_at_end(db: Path, lease: float, nclaims: int, margin: float = 15.0) -> tuple[list, dict]:
    """After the fleet: a fresh store (this host, the production library)
    calls lookup_or_claim(wait=True) for every schedule that still has a
    claim, with lock_timeout = lease + margin: each must come back recorded
    or claimed (then released) in time, and no claim may be left after.
    The claims of the simulated hosts' claimers are judged by their lease
    here, those of this host's by the dead-process rule. Returns
    (violations, figures)."""
    import plan as _plan  # tests/multinode/plan.py
    v: list = []
    env = {**os.environ, "TIRASTORE_FAILPOINTS": "", "TIRASTORE_LIB": str(NORMAL_LIB)}
    timeout = lease + margin
    p = subprocess.run([sys.executable, "-c", TAKE_OVER, str(db), str(harness.HERE), str(harness.REPO / "python"),
                        str(lease), str(timeout)], env=env, capture_output=True, text=True,
                       timeout=120 + 2 * timeout)
    if p.returncode != 0:
        return [f"the end-of-run takeover failed (exit {p.returncode}): {p.stderr.strip()[-1500:]}"], {}
    out = json.loads(p.stdout.strip().splitlines()[-1])
    planned = set(_plan.claim_plan(nclaims))
    info = {"claims left": len(out["before"]), "found recorded": 0, "claimed and released": 0,
            "taken over": 0, "slowest": 0.0, "claims after": len(out["after"])}
    for r in out["results"]:
        info["slowest"] = max(info["slowest"], r["dt"])
        what = f"the claim on {r['schedule']!r} left by {r['hostname']} pid {r['pid']}"
        if r["key"] not in planned:
            v.append(f"{what} is on no claim schedule")
        if "error" in r:
            v.append(f"{what}: STAYS CLAIMED - lookup_or_claim(wait=True) failed after {r['dt']:.1f} s "
                     f"(lock_timeout {timeout:g} s): {r['error']}")
            continue
        info["taken over"] += 1
        if r["outcome"] == "recorded":
            info["found recorded"] += 1
        elif r["outcome"] == "claimed":
            info["claimed and released"] += 1
        else:
            v.append(f"{what}: lookup_or_claim(wait=True) returned {r['outcome']}")
    for c in out["after"]:
        v.append(f"claims table after the takeover: the claim on {c['schedule']!r} by {c['hostname']} pid "
                 f"{c['pid']} is still there")
    return v, info


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=8, help="FUSE mounts (simulated nodes)")
    ap.add_argument("--per-node", type=int, default=8, help="worker processes per node")
    ap.add_argument("--nrecords", type=int, default=24, help="unique records per worker")
    ap.add_argument("--ncontested", type=int, default=10, help="contested records")
    ap.add_argument("--sample", type=int, default=6, help="other workers' records each worker reads")
    ap.add_argument("--config-per-node", type=int, default=None,
                    help="workers per node that also put kernel-config entries (default: a quarter; 0: none)")
    ap.add_argument("--nconfigs", type=int, default=4, help="config entries of its own per config writer")
    ap.add_argument("--nconfig-first", type=int, default=3,
                    help="contested config entries every config writer puts with overwrite=False")
    ap.add_argument("--nconfig-last", type=int, default=2,
                    help="contested config entries every config writer puts with overwrite=True")
    ap.add_argument("--claim-per-node", type=int, default=None,
                    help="workers per node that also claim and measure the shared claim schedules "
                         "(default: a quarter; 0: none)")
    ap.add_argument("--nclaims", type=int, default=40, help="claim schedules (one program) every claimer goes through")
    # The lease must outlast a live holder's renewals under a busy lock
    # (lock waits here reach several seconds): a renewal waits for the lock
    # up to two thirds of the lease, and a claimer's records and claim
    # transactions renew its other claims too. Short enough that claims of
    # killed holders on other hosts are taken over during the run.
    ap.add_argument("--claim-lease", type=float, default=None,
                    help="lease of the claims (s; default 4, with --no-lock 3)")
    ap.add_argument("--claim-hosts", choices=("node", "node-shm", "same"), default="node",
                    help="node: the even nodes' claimers run as a host of their own per node (a UTS "
                         "namespace), so that only their node-mates can prove them dead; node-shm: also "
                         "with a /dev/shm of their own per node (a mount namespace: slower, every commit "
                         "of theirs is another node's for the others); same: all on this host")
    ap.add_argument("--claim-round", type=int, default=5,
                    help="the claimers go through the list in rounds of this many schedules")
    ap.add_argument("--claim-pace", type=float, default=6.0,
                    help="round k of the list opens k times this many seconds after the start")
    ap.add_argument("--claim-bias", type=float, default=0.5,
                    help="fraction of external kills aimed at a claimer holding a claim (when one does)")
    ap.add_argument("--measure-ms", default="10,40", help="a claimer's measurement sleeps between these (ms)")
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
    if a.config_per_node is None:
        a.config_per_node = max(1, a.per_node // 4) if a.per_node else 0
    config_workers = [w for w in range(nworkers) if is_config_worker(w, a.nodes, a.config_per_node)]
    if a.claim_per_node is None:
        a.claim_per_node = max(1, a.per_node // 4) if a.per_node else 0
    if a.claim_lease is None:
        a.claim_lease = 3.0 if a.no_lock else 4.0
    # How long a claimer's call may wait (for the lock or for a claim): with
    # the lock off the claims table is unprotected, and a claim nobody can
    # end must fail the run soon rather than hang it.
    claim_lock_timeout = (3 * a.claim_lease + 10 if a.no_lock
                          else max(60.0, 20 * a.claim_lease + a.stale_lock_timeout))
    if a.nclaims <= 0:
        a.claim_per_node = 0
    claim_workers = [w for w in range(nworkers) if is_claimer(w, a.nodes, a.per_node, a.claim_per_node)]
    shm_dirs = {n: run_dir / "shm" / f"node{n}" for n in range(a.nodes) if has_own_host(n, a.nodes)}
    if claim_workers and a.claim_hosts != "same":
        why_not = node_unavailable_reason(run_dir / "shm" / "probe", a.claim_hosts == "node-shm")
        if why_not:
            print(f"torture: the claimers run on this host: cannot simulate hosts here ({why_not})", flush=True)
            a.claim_hosts = "same"
    own_host = a.claim_hosts != "same"
    if a.claim_hosts != "node-shm":
        shm_dirs = {}
    for d in shm_dirs.values():
        d.mkdir(parents=True, exist_ok=True)
    own_hosts = {w: own_host and has_own_host(w, a.nodes) for w in claim_workers}
    nconfig_ops = a.nconfigs + a.nconfig_first + a.nconfig_last
    # One config put after every `every` record writes spreads them over the
    # write phases; the rest are put before the worker's end.
    every = max(1, (a.nrecords + a.ncontested) // max(1, nconfig_ops))
    bed = harness.FuseBed(backing, mounts, latency=a.latency or None, log=run_dir / "fusebed.log")
    for s in SIGNALS:
        signal.signal(s, _on_signal)
    signal.alarm(int(a.time_limit))
    t0 = time.monotonic()
    label = "NEGATIVE CONTROL (lock disabled)" if a.no_lock else "torture"
    print(f"{label}: {a.nodes} nodes x {a.per_node} workers = {nworkers} processes, "
          f"{a.nrecords} unique + {a.ncontested} contested records each, seed {a.seed}, dir {run_dir}",
          flush=True)
    if config_workers:
        print(f"  with {len(config_workers)} kernel-config writers ({a.config_per_node} per node) putting "
              f"{a.nconfigs} own + {a.nconfig_first} first-writer + {a.nconfig_last} last-writer "
              f"config entries each", flush=True)
    if claim_workers:
        modes = collections.Counter(claim_mode(w, a.nodes) for w in claim_workers)
        print(f"  with {len(claim_workers)} claimers ({a.claim_per_node} per node, "
              f"{'those of the even nodes on a host of their own per node' if own_host else 'on this host'}"
              f"{' with a /dev/shm per node' if shm_dirs else ''}; "
              f"{', '.join(f'{n} {m}' for m, n in sorted(modes.items()))}) measuring {a.nclaims} shared "
              f"schedules, lease {a.claim_lease:g} s", flush=True)
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
        claim_t0 = time.time() + 2.0  # round 0 opens as the workers have started
        for w in range(nworkers):
            n = w % a.nodes
            db = mounts[n] / "shared" / "cache.db"

            def cmd_for(run, w=w, n=n, db=db):
                cmd = harness.worker_cmd(db, w, nworkers, a.nrecords, a.ncontested, log_dir,
                                         node=f"node{n}", seed=a.seed * 100 + run,
                                         stale=a.stale_lock_timeout, sample=a.sample,
                                         lock_timeout=max(60.0, a.time_limit))
                if w not in config_workers and w not in claim_workers:
                    return cmd
                mixed = [sys.executable, str(Path(__file__).resolve()), "--mixed-worker",
                         "--db", str(db), "--worker-id", str(w), "--log", str(log_dir),
                         "--node", f"node{n}", "--seed", str(a.seed * 100 + run),
                         "--stale-lock-timeout", str(a.stale_lock_timeout),
                         "--lock-timeout", str(max(60.0, a.time_limit))]
                if w in config_workers:
                    mixed += ["--config-workers", ",".join(map(str, config_workers)),
                              "--nconfigs", str(a.nconfigs), "--nconfig-first", str(a.nconfig_first),
                              "--nconfig-last", str(a.nconfig_last), "--every", str(every)]
                if w in claim_workers:
                    mixed += ["--nclaims", str(a.nclaims), "--claim-lease", str(a.claim_lease),
                              "--claim-mode", claim_mode(w, a.nodes), "--claim-round", str(a.claim_round),
                              "--claim-parity", str(claim_parity(w, a.nodes, a.claim_per_node)),
                              "--claim-t0", f"{claim_t0:.3f}", "--claim-pace", str(a.claim_pace),
                              "--measure-ms", a.measure_ms,
                              "--claim-lock-timeout", str(claim_lock_timeout)]
                    if own_hosts[w]:
                        mixed += ["--host", node_host(n)]
                        if n in shm_dirs:
                            mixed += ["--shm", str(shm_dirs[n])]
                return [*mixed, "--", *cmd[2:]]

            def env_for(run, w=w):
                lib, fps = failpoints_for(w, run, a)
                if own_hosts.get(w) and "kill@" in fps:
                    # A self-kill inside the lock on a host of its own would
                    # stall every other host for --stale-lock-timeout.
                    fps = ""
                return {"TIRASTORE_LIB": lib, "TIRASTORE_FAILPOINTS": fps}

            members.append(harness.Member(w=w, node=n, cmd_for=cmd_for, env_for=env_for))
        fleet = TortureFleet(
            members, lock_path=backing / "shared" / "cache.db.lock", log_dir=log_dir,
            kill_rate=a.kill_rate, holder_bias=a.holder_bias, max_kills=a.kills,
            max_runs=a.kill_runs + 2, deadline=fleet_deadline, seed=a.seed,
            progress=lambda s: print(s, flush=True),
            claimers=own_hosts, claim_bias=a.claim_bias)
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
    cv, cinfo = [], {}
    tv, tinfo = [], {}
    vcmd = harness.verify_cmd(backing / "shared" / "cache.db", log_dir, nworkers, a.nrecords, a.ncontested,
                              summary=summary_path)
    if claim_workers:
        vcmd += ["--nclaims", str(a.nclaims), "--claimers", ",".join(map(str, claim_workers)),
                 "--claim-lease", str(a.claim_lease)]
    try:
        vr = subprocess.run(vcmd, timeout=max(30.0, a.time_limit - (time.monotonic() - t0)))
        # No schedule stays claimed: a fresh store takes over (or finds
        # recorded) every claim the fleet left, within the lease and a margin.
        if claim_workers:
            try:
                tv, tinfo = take_over_at_end(backing / "shared" / "cache.db", a.claim_lease, a.nclaims)
            except Abort:
                raise
            except Exception as e:  # noqa: BLE001
                tv = [f"the end-of-run takeover crashed: {type(e).__name__}: {e}"]
        # The config table, against the config writers' logs (in this
        # process: stdlib sqlite3 on the backing directory, read-only).
        if config_workers:
            try:
                cv, cinfo = verify_configs(backing / "shared" / "cache.db", log_dir, config_workers,
                                           a.nconfigs, a.nconfig_first, a.nconfig_last)
            except Abort:
                raise
            except Exception as e:  # noqa: BLE001 - a crash of the checks is a failed verification
                cv = [f"the config verification crashed: {type(e).__name__}: {e}"]
    except (Abort, subprocess.TimeoutExpired) as e:
        print(f"torture: verification aborted: {e}", file=sys.stderr)
        return 3
    finally:
        signal.alarm(0)
    if config_workers:
        print(f"verify configs: {len(config_workers)} config writers x {a.nconfigs} own + "
              f"{a.nconfig_first} first-writer + {a.nconfig_last} last-writer entries")
        for k, n in sorted(cinfo.items()):
            print(f"  {k}: {n}")
        if cv:
            print(f"FAIL: {len(cv)} violations")
            for x in cv[:40]:
                print("  - " + x)
            if len(cv) > 40:
                print(f"  ... and {len(cv) - 40} more")
        else:
            print("PASS")
    if claim_workers:
        print(f"take over at the end: {tinfo.get('claims left', '?')} claims left, "
              f"{tinfo.get('taken over', '?')} taken over ({tinfo.get('found recorded', '?')} found recorded, "
              f"{tinfo.get('claimed and released', '?')} claimed and released), slowest "
              f"{tinfo.get('slowest', 0.0):.3f} s, {tinfo.get('claims after', '?')} claims in the table after")
        if tv:
            print(f"FAIL: {len(tv)} violations")
            for x in tv[:20]:
                print("  - " + x)
        else:
            print("PASS")
    ok = vr.returncode == 0 and not cv and not tv and not res.failed
    summary = json.loads(summary_path.read_text()) if summary_path.exists() else {}
    info = summary.get("info", {})
    planned = nworkers * a.nrecords + a.ncontested
    print(f"\n{label} figures:")
    print(f"  nodes (FUSE mounts):      {a.nodes}")
    print(f"  processes:                {nworkers} workers, {res.runs} runs including restarts")
    print(f"  records:                  {planned} planned ({nworkers}x{a.nrecords} unique + "
          f"{a.ncontested} contested)" + (f" + {a.nclaims} claim schedules" if claim_workers else "")
          + f", {info.get('records in db', '?')} in the database")
    if config_workers:
        print(f"  config entries:           {cinfo.get('config entries planned', '?')} planned "
              f"({len(config_workers)}x{a.nconfigs} own + {a.nconfig_first} first-writer + "
              f"{a.nconfig_last} last-writer), {cinfo.get('config entries in db', '?')} in the database; "
              f"{sum(n for k, n in cinfo.items() if k.startswith('acked config puts'))} puts acknowledged "
              f"by {len(config_workers)} config writers in {cinfo.get('config writer runs', '?')} runs "
              f"({cinfo.get('killed config writer runs', '?')} killed)")
    if claim_workers:
        cl = summary.get("claims", {})
        ci = cl.get("info", {})
        print(f"  claimers:                 {len(claim_workers)} ({a.claim_per_node} per node"
              f"{', the even nodes as hosts of their own' if own_host else ''}) x {a.nclaims} shared schedules, lease "
              f"{a.claim_lease:g} s, {ci.get('claimer runs', '?')} runs ({ci.get('killed claimer runs', '?')} "
              f"killed); {cl.get('claim records in db', '?')} of {a.nclaims} recorded, "
              f"{ci.get('measurements', '?')} measurements")
        print(f"  kills inside claims:      {ci.get('killed inside a claim (runs)', '?')} runs holding "
              f"{ci.get('claims open at a kill', '?')} claims ({fleet.kills_in_claim} external SIGKILLs "
              f"seen inside a claim, {fleet.kills_claimer_other} outside; {fleet.spared} spared holding "
              f"the lock); {ci.get('killed after recording, before the acknowledgement', 0)} after their "
              f"record committed")
        print(f"  claims taken over:        {ci.get('claims of killed claimers taken over on their host', 0)} "
              f"on their host (slowest {cl.get('takeover_same_max', 0.0):.2f} s), "
              f"{ci.get('claims of killed claimers taken over from another host', 0)} from another host "
              f"(slowest {cl.get('takeover_other_max', 0.0):.2f} s) during the run; "
              f"{ci.get('claims left by killed workers', '?')} claims left by killed workers, "
              f"{tinfo.get('taken over', '?')} taken over at the end")
        second = ci.get("takers whose record came second to the killed holder's", 0)
        print(f"  duplicate measurements:   {ci.get('extra measurements', '?')} extra on "
              f"{ci.get('schedules measured more than once', '?')} schedules, "
              f"{ci.get('schedules measured again after a kill inside the claim', '?')} of them after a "
              f"kill inside the claim ({second} takers told False: the killed holder's record landed "
              f"after its death), {ci.get('live claims taken over after their lease (renewals waited for the lock)', 0)} "
              f"after a live holder's renewals waited for the lock past the lease")
        print(f"  claim calls:              lookup_or_claim median {cl.get('lookup_p50', float('nan')):.3f} s, "
              f"slowest {cl.get('lookup_max', float('nan')):.3f} s; longest claim "
              f"{cl.get('hold_max', 0.0):.2f} s ({ci.get('claims held longer than the lease', '?')} longer "
              f"than the lease)")
    print(f"  kills inside the lock:    {res.kills_in_lock} ({res.kills_inside} external SIGKILL of "
          f"the holder, {res.self_kills} failpoint self-kills)")
    print(f"  kills outside the lock:   {res.kills_outside}")
    print(f"  worst call (wait+work):   {summary.get('max_call_seconds', float('nan')):.3f} s "
          f"({summary.get('max_call_op')}; {summary.get('calls', 0)} calls, median "
          f"{summary.get('p50_call_seconds', float('nan')):.3f} s, p99 "
          f"{summary.get('p99_call_seconds', float('nan')):.3f} s)")
    print(f"  fleet time:               {res.elapsed:.1f} s; total {time.monotonic() - t0:.1f} s")
    left = leftovers(backing / "shared")
    print(f"  left behind:              {left['tickets']} lock ticket files of killed processes, "
          f"{left['asides']} aside files")
    if res.failed:
        print(f"  workers that exited nonzero: {res.failed[:20]}")
    print(f"  verification:             records {'PASS' if vr.returncode == 0 else 'FAIL'}"
          + (f", configs {'PASS' if not cv else f'FAIL ({len(cv)} violations)'}" if config_workers else "")
          + (f", end-of-run takeover {'PASS' if not tv else f'FAIL ({len(tv)} violations)'}"
             if claim_workers else ""))
    # Keep the logs of a surprising outcome; remove those of an expected one.
    if ok != a.expect_failure and not a.keep and not a.dir and not any(os.path.ismount(m) for m in mounts):
        harness.rmtree_quiet(run_dir)
        print(f"RESULT: {'PASS' if ok else 'FAIL'}", flush=True)
    else:
        print(f"RESULT: {'PASS' if ok else 'FAIL'}  (logs kept in {run_dir})", flush=True)
    return finish(ok)


def leftovers(shared: Path) -> dict:
    """What the run left: the lock's ticket and aside files beside the
    database (the verifier fails on any other)."""
    names = [p.name for p in shared.iterdir()] if shared.is_dir() else []
    return {"tickets": sum(n.startswith(".lock_") for n in names),
            "asides": sum(".lock.stale." in n or ".lock.break.stale." in n for n in names)}


if __name__ == "__main__":
    if sys.argv[1:2] == ["--mixed-worker"]:
        sys.exit(mixed_worker(sys.argv[2:]))
    sys.exit(main())
