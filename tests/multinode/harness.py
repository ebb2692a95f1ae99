"""Local multi-node harness: the FUSE test bed and a fleet of workers.

Used by torture.py and by tests/python/test_multinode.py and
test_mixed_fleet.py. Stdlib only.

* FuseBed: runs build/fusebed over one backing directory with K mounts
  (each mount a simulated node: fcntl locks local to it, link/rename/O_EXCL
  atomic across mounts), waits for "ready", and always unmounts on stop().
* Fleet: runs worker processes (worker.py, or any command) on the nodes,
  a killer that SIGKILLs them (targeting the lock holder or a random
  worker), restarts killed workers so that their phases complete, and counts
  kills inside and outside the lock.
"""

from __future__ import annotations

import json
import os
import random
import select
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
FUSEBED = REPO / "build" / "fusebed"
FAILPOINTS_LIB = REPO / "build" / "failpoints" / "libtirastore.so"
WORKER = HERE / "worker.py"
VERIFY = HERE / "verify_results.py"


class BedUnavailable(Exception):
    """The FUSE bed cannot run here (the message says why)."""


def bed_unavailable_reason(binary: Path = FUSEBED) -> Optional[str]:
    """None if the FUSE bed can be tried here, else why not."""
    if os.geteuid() != 0:
        return "the FUSE test bed needs root (mount(2))"
    if not os.path.exists("/dev/fuse"):
        return "the FUSE test bed needs /dev/fuse (missing: no FUSE in this kernel/container)"
    if not os.access("/dev/fuse", os.R_OK | os.W_OK):
        return "/dev/fuse is not readable and writable"
    if not binary.exists():
        return f"{binary} is missing (build it with 'make fusebed')"
    return None


class FuseBed:
    """One backing directory mounted at len(mounts) points."""

    def __init__(self, backing: Path, mounts: list[Path], binary: Path = FUSEBED,
                 latency: Optional[str] = None, log: Optional[Path] = None):
        self.binary = Path(binary)
        self.backing = Path(backing)
        self.mounts = [Path(m) for m in mounts]
        self.latency = latency
        self.log = Path(log) if log else self.backing.parent / "fusebed.log"
        self.proc: Optional[subprocess.Popen] = None

    def start(self, timeout: float = 30.0) -> "FuseBed":
        why = bed_unavailable_reason(self.binary)
        if why:
            raise BedUnavailable(why)
        cmd = [str(self.binary), "--backing", str(self.backing)]
        for m in self.mounts:
            cmd += ["--mount", str(m)]
        if self.latency:
            cmd += ["--latency", self.latency]
        self.log.parent.mkdir(parents=True, exist_ok=True)
        errf = open(self.log, "ab")
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=errf, stdin=subprocess.DEVNULL)
        errf.close()
        deadline = time.monotonic() + timeout
        buf = b""
        while b"ready\n" not in buf:
            left = deadline - time.monotonic()
            if left <= 0:
                self.stop()
                raise BedUnavailable(f"fusebed did not print 'ready' within {timeout:.0f} s; see {self.log}")
            r, _, _ = select.select([self.proc.stdout], [], [], min(left, 0.5))
            if r:
                chunk = os.read(self.proc.stdout.fileno(), 4096)
                if not chunk:
                    rc = self.proc.wait()
                    self.proc = None
                    self.cleanup()
                    tail = self.log.read_text(errors="replace")[-2000:] if self.log.exists() else ""
                    raise BedUnavailable(f"fusebed exited with status {rc} before 'ready': {tail.strip()}")
                buf += chunk
        return self

    def stop(self) -> None:
        """SIGTERM (fusebed unmounts), then SIGKILL and --cleanup if needed."""
        p, self.proc = self.proc, None
        if p is not None and p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        if p is not None and p.stdout:
            p.stdout.close()
        self.cleanup()

    def cleanup(self) -> None:
        """Clear any mount left at our points (a dead or leftover bed)."""
        left = [m for m in self.mounts if os.path.ismount(m) or _is_dead_mount(m)]
        if left and self.binary.exists():
            subprocess.run([str(self.binary), "--cleanup", *map(str, left)],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60)
        for m in left:
            if os.path.ismount(m) or _is_dead_mount(m):
                subprocess.run(["umount", "-l", str(m)], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, timeout=30)

    def __enter__(self) -> "FuseBed":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def _is_dead_mount(p: Path) -> bool:
    try:
        os.stat(p)
    except OSError as e:
        return e.errno == 107  # ENOTCONN: a FUSE mount whose server died
    return False


# ---------------------------------------------------------------------------
# The fleet
# ---------------------------------------------------------------------------


@dataclass
class Member:
    w: int
    node: int
    cmd_for: Callable[[int], list]        # run number -> argv
    env_for: Callable[[int], dict]        # run number -> extra environment
    proc: Optional[subprocess.Popen] = None
    runs: int = 0
    done: bool = False
    rc: Optional[int] = None
    externally_killed: set = field(default_factory=set)  # pids we SIGKILLed
    killable: bool = True                 # may the killer pick it?


@dataclass
class FleetResult:
    elapsed: float = 0.0
    runs: int = 0
    kills_inside: int = 0          # external kills of the lock holder
    kills_outside: int = 0         # external kills of a non-holder
    self_kills: int = 0            # SIGKILL we did not send: a kill failpoint, inside the lock
    failed: list = field(default_factory=list)   # (w, rc) of workers that exited nonzero
    timed_out: bool = False
    unfinished: list = field(default_factory=list)

    @property
    def kills_in_lock(self) -> int:
        return self.kills_inside + self.self_kills


def read_holder_pid(lock_path: Path) -> Optional[int]:
    try:
        return int(json.loads(lock_path.read_text())["pid"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


class Fleet:
    """Run members to completion, restarting those SIGKILLed.

    kill_rate: external kills per second (0: none); holder_bias: fraction of
    external kills aimed at the current lock holder; max_kills: total external
    kills; max_runs: runs per member: a member SIGKILLed in an earlier run is
    restarted, its last run is never killed by the killer (env_for should
    disarm kill failpoints well before it).
    """

    def __init__(self, members: list[Member], lock_path: Path, log_dir: Path,
                 kill_rate: float = 0.0, holder_bias: float = 0.5, max_kills: int = 0,
                 max_runs: int = 12, deadline: float = 600.0, seed: int = 0,
                 progress: Optional[Callable[[str], None]] = None):
        self.members = members
        self.lock_path = Path(lock_path)
        self.log_dir = Path(log_dir)
        self.kill_rate = kill_rate
        self.holder_bias = holder_bias
        self.max_kills = max_kills
        self.max_runs = max_runs
        self.deadline = deadline
        self.rng = random.Random(seed)
        self.progress = progress or (lambda s: None)
        self.result = FleetResult()

    def _start(self, m: Member) -> None:
        m.runs += 1
        self.result.runs += 1
        env = dict(os.environ)
        env.update(m.env_for(m.runs))
        out = open(self.log_dir / f"worker-{m.w}.out", "ab")
        m.proc = subprocess.Popen(m.cmd_for(m.runs), env=env, stdout=out, stderr=subprocess.STDOUT,
                                  stdin=subprocess.DEVNULL)
        out.close()

    def _running(self) -> list[Member]:
        return [m for m in self.members if m.proc is not None and m.proc.poll() is None]

    def _kill_one(self) -> None:
        running = [m for m in self._running() if m.runs < self.max_runs and m.killable]
        if not running:
            return
        victim = None
        if self.rng.random() < self.holder_bias:
            pid = read_holder_pid(self.lock_path)
            victim = next((m for m in running if m.proc.pid == pid), None)
        if victim is None:
            victim = self.rng.choice(running)
        pid = victim.proc.pid
        try:
            os.kill(pid, signal.SIGSTOP)  # freeze it: its lock state cannot change now
        except ProcessLookupError:
            return
        inside = read_holder_pid(self.lock_path) == pid
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            return
        victim.externally_killed.add(pid)
        if inside:
            self.result.kills_inside += 1
        else:
            self.result.kills_outside += 1

    def run(self) -> FleetResult:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        t0 = time.monotonic()
        for m in self.members:
            self._start(m)
        next_kill = t0 + (self.rng.expovariate(self.kill_rate) if self.kill_rate > 0 else 1e18)
        last_report = t0
        try:
            while True:
                now = time.monotonic()
                if now - t0 > self.deadline:
                    self.result.timed_out = True
                    break
                pending = False
                for m in self.members:
                    if m.done:
                        continue
                    rc = m.proc.poll()
                    if rc is None:
                        pending = True
                        continue
                    pid = m.proc.pid
                    if rc == -signal.SIGKILL:
                        if pid not in m.externally_killed:
                            self.result.self_kills += 1
                        if m.runs < self.max_runs:
                            self._start(m)
                            pending = True
                            continue
                    m.done, m.rc = True, rc
                    if rc != 0:
                        self.result.failed.append((m.w, rc))
                if not pending:
                    break
                kills = self.result.kills_inside + self.result.kills_outside
                if now >= next_kill and kills < self.max_kills:
                    self._kill_one()
                    next_kill = now + self.rng.expovariate(self.kill_rate)
                if now - last_report >= 10:
                    last_report = now
                    self.progress(
                        f"  t={now - t0:5.0f}s running={len(self._running())} "
                        f"done={sum(m.done for m in self.members)}/{len(self.members)} "
                        f"runs={self.result.runs} kills in/out/self={self.result.kills_inside}/"
                        f"{self.result.kills_outside}/{self.result.self_kills}")
                time.sleep(0.02)
        finally:
            self.stop_all()
        self.result.unfinished = [m.w for m in self.members if not m.done]
        self.result.elapsed = time.monotonic() - t0
        return self.result

    def stop_all(self) -> None:
        for m in self.members:
            if m.proc is not None and m.proc.poll() is None:
                try:
                    m.proc.kill()
                except ProcessLookupError:
                    pass
        for m in self.members:
            if m.proc is not None:
                try:
                    m.proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    pass


def worker_cmd(db: Path, w: int, nworkers: int, nrecords: int, ncontested: int, log_dir: Path,
               node: str = "", seed: int = 0, stale: float = 2.0, lock_timeout: float = 300.0,
               sample: int = 10, extra: Optional[list] = None) -> list:
    cmd = [sys.executable, str(WORKER), "--db", str(db), "--worker-id", str(w),
           "--nworkers", str(nworkers), "--nrecords", str(nrecords), "--ncontested", str(ncontested),
           "--log", str(log_dir), "--seed", str(seed), "--stale-lock-timeout", str(stale),
           "--lock-timeout", str(lock_timeout), "--sample", str(sample)]
    if node:
        cmd += ["--node", node]
    return cmd + list(extra or [])


def verify_cmd(db: Path, log_dir: Path, nworkers: int, nrecords: int, ncontested: int,
               distinct: str = "", summary: Optional[Path] = None) -> list:
    cmd = [sys.executable, str(VERIFY), "--db", str(db), "--log", str(log_dir),
           "--nworkers", str(nworkers), "--nrecords", str(nrecords), "--ncontested", str(ncontested)]
    if distinct:
        cmd.append(f"--distinct-{distinct}")
    if summary:
        cmd += ["--summary-json", str(summary)]
    return cmd


CREATE_DB = """
import sys
sys.path[:0] = [sys.argv[2], sys.argv[3]]
import plan, tirastore
tirastore.TiraStore(sys.argv[1], cpu_model=plan.TEST_CPU, slurm_cpus=plan.TEST_SLURM).close()
"""


def create_db(db: Path, lib: Optional[Path] = None) -> None:
    """Create the (empty) database with the library, lock on, in a child
    process (the library of this checkout), e.g. before a negative control so
    that its writers race on records rather than on creating the file."""
    env = {**os.environ, "TIRASTORE_FAILPOINTS": ""}
    env["TIRASTORE_LIB"] = str(lib or REPO / "python" / "tirastore" / "libtirastore.so")
    subprocess.run([sys.executable, "-c", CREATE_DB, str(db), str(HERE), str(REPO / "python")],
                   env=env, check=True, timeout=60, stdout=subprocess.DEVNULL)


def rmtree_quiet(p: Path) -> None:
    shutil.rmtree(p, ignore_errors=True)
