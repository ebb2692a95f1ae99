"""Tests on a real (one-node) Slurm cluster started by the tests themselves.

* tests/multinode/launch_test.sh for real: 4 workers, each its own srun job,
  on one database; the verifier must pass.
* The stall test: job A holds the lock inside a record_many() of 30,000
  new schedules and is suspended (scontrol suspend, i.e. SIGSTOP) long past
  stale_lock_timeout=3; jobs C and D then record one at a time, the first
  of them must be acknowledged within stale_lock_timeout + 4 s, and A is
  resumed right after C's first acknowledgement. Afterwards: PRAGMA
  integrity_check is ok, every acknowledged record of C and D is there,
  and A's 30,000 are all there or none (A either raised, expected
  tirastore.LockLostError, or succeeded and then all are there).
* The negative control: the same scenario with the failpoints build and
  fence-disabled=on (a holder that stalled goes on writing after its lock
  was broken) must break one of the data checks. The fault is a race, so
  the control tries up to CONTROL_TRIES times (bounded) and passes at the
  first try that shows a data violation.

The cluster comes from the slurm_cluster fixture (conftest_slurm.py): these
tests skip, saying why, where Slurm cannot start.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import pytest

from conftest import expected_key
from conftest_slurm import slurm_cluster  # noqa: F401  (the fixture)

# Real jobs on a real cluster: the soak tier (`make soak`). The fast tier
# holds the same stall property without Slurm (test_stall.py).
pytestmark = pytest.mark.soak

REPO = Path(__file__).resolve().parents[2]
LAUNCH = REPO / "tests" / "multinode" / "launch_test.sh"
STALL_JOB = REPO / "tests" / "slurm" / "slurm_stall_job.py"
# The library the package of this checkout loads (as in test_multinode.py).
NORMAL_LIB = REPO / "python" / "tirastore" / "libtirastore.so"


def _load(name: str, path: Path):
    """Import a file under a name of its own (tests/python has a stall_worker
    of its own: no clash in sys.modules)."""
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


stall_job = _load("tirastore_slurm_stall_job", STALL_JOB)

STALE = 3.0            # stale_lock_timeout of every job
ACK_MARGIN = 4.0       # the first acknowledgement (C or D) within STALE + ACK_MARGIN
SUSPENDED_FOR = 5.0    # A stays suspended this long before C and D start
AFTER_RESUME = 4.0     # C and D keep writing this long after A's resume
COUNT = 30000          # A's record_many
CONTROL_TRIES = 3
DATA_CLASSES = ("integrity", "lost-ack", "partial")  # what a fence protects


def job_env(cluster, lib: Path, **extra: Optional[str]) -> dict:
    """The jobs' environment: our cluster, this checkout's package and
    library; extra values of None remove a variable."""
    env = dict(cluster.env)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO / "python"), env.get("PYTHONPATH")) if p)
    env["TIRASTORE_LIB"] = str(lib)
    env["TIRASTORE_FAILPOINTS"] = ""
    for k, v in extra.items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = v
    return env


# ---------------------------------------------------------------------------
# (a) launch_test.sh with a real srun
# ---------------------------------------------------------------------------


def test_launch_test_sh_on_slurm(slurm_cluster, tmp_path):  # noqa: F811
    """launch_test.sh as on a real cluster (real srun, one job per worker):
    the multi-node test's own verifier must pass."""
    env = job_env(slurm_cluster, NORMAL_LIB, TIRASTORE_TEST_DIR=str(tmp_path / "shared"),
                  REQUIRE_DISTINCT_HOSTS="0", PYTHON=sys.executable, SLURM_PARTITION=slurm_cluster.partition,
                  LOCK_TIMEOUT="120", SEED="1")
    r = subprocess.run(["bash", str(LAUNCH), "4", "20", "10"], env=env, capture_output=True, text=True,
                       timeout=240, stdin=subprocess.DEVNULL)
    out = r.stdout + r.stderr
    print(out)
    assert r.returncode == 0, out
    assert "PASS" in r.stdout and "0 failed" in r.stdout, out
    # The workers were Slurm jobs of this cluster, and they ran at the same time.
    jobs = slurm_cluster.run("squeue", "-h", "-t", "all", "-o", "%j %T").stdout.split("\n")
    done = [j for j in jobs if j.startswith("tirastore-mn-") and j.endswith("COMPLETED")]
    assert len(done) >= 4, jobs
    logs = list((tmp_path / "shared").glob("run_*/logs"))
    assert len(logs) == 1
    spans = []
    for w in range(4):
        lines = [json.loads(x) for x in (logs[0] / f"worker-{w}.jsonl").read_text().splitlines()]
        spans.append((min(x["t"] for x in lines), max(x["t"] for x in lines)))
    assert max(s for s, _ in spans) < min(e for _, e in spans), f"the workers did not overlap: {spans}"


# ---------------------------------------------------------------------------
# (b) the stall test
# ---------------------------------------------------------------------------


@dataclass
class Stall:
    """What one run of the stall scenario showed."""
    label: str
    count: int
    violations: list = field(default_factory=list)   # (class, message)
    inconclusive: str = ""    # the scenario itself did not happen (A not caught holding the lock)
    notes: list = field(default_factory=list)

    def classes(self) -> set:
        """The kinds of violation seen (integrity, lost-ack, partial, latency, ...)."""
        return {c for c, _ in self.violations}

    def summary(self) -> str:
        """A readable account of the run, for the test output and failures."""
        lines = [f"stall[{self.label}] count={self.count}"] + [f"  {n}" for n in self.notes]
        if self.inconclusive:
            lines.append(f"  INCONCLUSIVE: {self.inconclusive}")
        lines += [f"  VIOLATION {c}: {m}" for c, m in self.violations] or ["  no violations"]
        return "\n".join(lines)


def read_events(path: Path) -> list:
    """A job's events (a torn last line is ignored)."""
    out = []
    try:
        text = path.read_text()
    except OSError:
        return out
    for line in text.splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            pass
    return out


def first_event(path: Path, names, timeout: float, alive=None) -> Optional[dict]:
    """Wait (bounded) for the first event named in names; None on timeout or
    when alive() says the job is gone without it."""
    names = (names,) if isinstance(names, str) else tuple(names)
    deadline = time.monotonic() + timeout
    while True:
        for e in read_events(path):
            if e["ev"] in names:
                return e
        if time.monotonic() > deadline or (alive is not None and not alive()):
            for e in read_events(path):  # a last look: it may have just been written
                if e["ev"] in names:
                    return e
            return None
        time.sleep(0.02)


def lock_holder_pid(lock: Path) -> Optional[int]:
    """The pid named by the lock file (JSON with hostname/pid/timestamp)."""
    try:
        return int(json.loads(lock.read_text())["pid"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def proc_state(pid: int) -> str:
    """The kernel's state letter of a process ('T' when stopped), '' if gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("State:"):
                return line.split()[1]
    except OSError:
        pass
    return ""


def check_database(db: Path, work: Path) -> tuple:
    """integrity_check result and the set of keys, read with the stdlib
    sqlite3 from a copy (with its journal, which the copy then rolls back:
    what the next opener would do) so that the original stays as it was."""
    work.mkdir(parents=True, exist_ok=True)
    copy = work / "check.db"
    shutil.copy2(db, copy)
    journal = Path(str(db) + "-journal")
    had_journal = journal.exists()
    if had_journal:
        shutil.copy2(journal, Path(str(copy) + "-journal"))
    conn = sqlite3.connect(str(copy), timeout=5)
    try:
        rows = conn.execute("PRAGMA integrity_check").fetchall()
        integrity = "; ".join(str(r[0]) for r in rows[:10])
        try:
            keys = {r[0] for r in conn.execute("SELECT key FROM records")}
        except sqlite3.DatabaseError as e:
            keys = None
            integrity += f"; SELECT key FROM records failed: {e}"
    except sqlite3.DatabaseError as e:
        integrity, keys = f"unreadable: {type(e).__name__}: {e}", None
    finally:
        conn.close()
    return integrity, keys, had_journal


def run_stall(cluster, root: Path, label: str, lib: Path, count: int = COUNT, **extra) -> Stall:
    """One run of the stall scenario on a fresh database under root; returns
    what it showed. Every wait is bounded; every job is gone on return."""
    res = Stall(label, count)
    run, db = root / "run", root / "db" / "cache.db"
    run.mkdir(parents=True)
    db.parent.mkdir(parents=True)
    lock = Path(str(db) + ".lock")
    env = job_env(cluster, lib, **extra)
    procs: dict = {}
    outs = []

    def launch(role: str, *args: str) -> None:
        """Start one job: srun in the background, its output in run/."""
        f = open(run / f"{role}.srun", "wb")
        outs.append(f)
        procs[role] = subprocess.Popen(
            ["srun", "--nodes=1", "--ntasks=1", f"--partition={cluster.partition}", f"--job-name=stall-{role}",
             f"--output={run}/{role}.out", sys.executable, str(STALL_JOB), "--db", str(db), "--role", role,
             "--run", str(run), "--stale-lock-timeout", str(STALE), "--lock-timeout", "60", *args],
            env=env, stdin=subprocess.DEVNULL, stdout=f, stderr=subprocess.STDOUT)

    def alive(role: str):
        """Whether the role's srun is still running (stop waiting for it if not)."""
        return lambda: procs[role].poll() is None

    def events(role: str) -> list:
        """The role's events so far."""
        return read_events(run / f"{role}.jsonl")

    a_job = None
    suspended = False
    t_resume = float("inf")
    try:
        launch("A", "--count", str(count))
        start = first_event(run / "A.jsonl", "start", 60, alive("A"))
        calling = first_event(run / "A.jsonl", ("calling", "error"), 60, alive("A"))
        if start is None or calling is None or calling["ev"] != "calling":
            res.inconclusive = f"job A did not get to record_many: {events('A')} {_tail(run / 'A.out')}"
            return res
        a_pid, a_job = start["pid"], start["job"]
        # Suspend A as soon as the lock file names it: it is then inside
        # record_many's transaction (which holds the lock for its whole span).
        deadline = time.monotonic() + 30
        while lock_holder_pid(lock) != a_pid:
            if any(e["ev"] in ("returned", "raised") for e in events("A")) or time.monotonic() > deadline:
                res.inconclusive = ("A finished (or stalled) before it was seen holding the lock: "
                                    f"{(events('A') or [None])[-1]}")
                return res
            time.sleep(0.002)
        t_seen = time.monotonic()
        r = cluster.run("scontrol", "suspend", str(a_job))
        t_susp = time.monotonic()
        suspended = r.returncode == 0
        if not suspended:
            res.inconclusive = f"scontrol suspend {a_job} failed: {r.stderr.strip()}"
            return res
        for _ in range(100):
            if proc_state(a_pid) == "T":
                break
            time.sleep(0.02)
        finished = [e for e in events("A") if e["ev"] in ("returned", "raised")]
        if proc_state(a_pid) != "T" or lock_holder_pid(lock) != a_pid or finished:
            res.inconclusive = (f"A was not caught holding the lock (state {proc_state(a_pid)!r}, lock names "
                                f"{lock_holder_pid(lock)}, A's pid {a_pid}, finished: {finished})")
            return res
        res.notes.append(f"A (job {a_job}, pid {a_pid}) suspended {t_susp - calling['mono']:.2f} s after "
                         f"calling record_many, {t_susp - t_seen:.3f} s after the lock named it")

        time.sleep(max(0.0, t_susp + SUSPENDED_FOR - time.monotonic()))
        launch("C", "--level", "1")
        launch("D", "--level", "2")
        first_ack = first_event(run / "C.jsonl", "ack", STALE + ACK_MARGIN + 8, alive("C"))
        r = cluster.run("scontrol", "resume", str(a_job))
        suspended = r.returncode != 0
        t_resume = time.monotonic()
        res.notes.append(f"A resumed {t_resume - t_susp:.1f} s after its suspension"
                         + ("" if first_ack else " (C had no acknowledgement: resumed anyway)"))
        time.sleep(AFTER_RESUME)
        (run / "stop").touch()
        for role, limit in (("C", 30), ("D", 30), ("A", 70)):
            try:
                procs[role].wait(timeout=limit)
            except subprocess.TimeoutExpired:
                res.violations.append(("hang", f"job {role} did not finish within {limit} s after the stop"))
    finally:
        (run / "stop").touch()
        if suspended and a_job:
            cluster.run("scontrol", "resume", str(a_job))
        if any(p.poll() is None for p in procs.values()):
            jobs = cluster.run("squeue", "-h", "-o", "%i %j").stdout.split("\n")
            ids = [j.split()[0] for j in jobs if " stall-" in j]
            if ids:
                cluster.run("scancel", *ids)
        for p in procs.values():
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=10)
        for f in outs:
            f.close()

    # -- judge ---------------------------------------------------------------
    ev = {role: events(role) for role in ("A", "C", "D")}
    for role in ("C", "D"):
        acks = [e for e in ev[role] if e["ev"] == "ack"]
        errors = [e for e in ev[role] if e["ev"] == "error"]
        started = next((e for e in ev[role] if e["ev"] == "start"), None)
        line = f"{role}: {len(acks)} acknowledged"
        if started and acks:
            line += (f", the first {acks[0]['mono'] - started['mono']:.2f} s after the job started, "
                     f"{sum(1 for a in acks if a['mono'] < t_resume)} before A's resume")
        if errors:
            line += f"; {len(errors)} errors, first: {errors[0]['class']}: {errors[0]['message'][:200]}"
        res.notes.append(line)
    # The property is that a suspended holder blocks nobody for longer than
    # stale_lock_timeout: the first waiter through (C or D) is held to the
    # bound. Which of the two gets there first is not: without the node
    # queue the lock is not fair, and D, writing back to back, may keep C
    # out for a while (each one's figures are in the notes above).
    firsts = []
    for role in ("C", "D"):
        started = next((e for e in ev[role] if e["ev"] == "start"), None)
        acks = [e for e in ev[role] if e["ev"] == "ack"]
        if started and acks:
            firsts.append((acks[0]["mono"] - started["mono"], role))
    bound = STALE + ACK_MARGIN
    if not firsts:
        res.violations.append(("latency", f"neither C nor D got an acknowledgement (C's events: {ev['C'][-3:]}, "
                                          f"D's: {ev['D'][-3:]})"))
    elif min(firsts)[0] > bound:
        after, role = min(firsts)
        res.violations.append(("latency", f"the first acknowledgement (of {role}) came {after:.2f} s after it "
                                          f"started, more than stale_lock_timeout + {ACK_MARGIN:.0f} = {bound:.0f} s"))

    a_end = next((e for e in ev["A"] if e["ev"] in ("returned", "raised")), None)
    if a_end is None:
        res.violations.append(("a-outcome", f"A neither returned nor raised: {ev['A'][-2:]} {_tail(run / 'A.out')}"))
    elif a_end["ev"] == "raised":
        res.notes.append(f"A raised {a_end['class']} (sqlite3.OperationalError: {a_end['operational']}): "
                         f"{a_end['message'][:300]}")
        if not a_end["operational"]:
            res.violations.append(("a-outcome", f"A raised {a_end['class']}, not a sqlite3.OperationalError "
                                                "(expected tirastore.LockLostError)"))
    else:
        res.notes.append(f"A's record_many returned {a_end['n']}")

    integrity, keys, had_journal = check_database(db, root / "check")
    res.notes.append(f"integrity_check: {integrity}"
                     + ("; a journal was left (rolled back in the copy)" if had_journal else ""))
    if integrity != "ok":
        res.violations.append(("integrity", f"PRAGMA integrity_check: {integrity}"))
    if keys is not None:
        missing = [e["schedule"] for role in ("C", "D") for e in ev[role] if e["ev"] == "ack"
                   and expected_key(stall_job.SOURCE, e["schedule"]) not in keys]
        if missing:
            res.violations.append(("lost-ack", f"{len(missing)} acknowledged records of C/D are missing, "
                                               f"e.g. {missing[:3]}"))
        a_keys = {expected_key(stall_job.SOURCE, stall_job.schedule(0, i)) for i in range(count)}
        present = len(a_keys & keys)
        res.notes.append(f"A's records present: {present}/{count}")
        if a_end is not None and a_end["ev"] == "returned" and present != count:
            res.violations.append(("partial", f"A's record_many returned {a_end['n']} but {present} of its "
                                              f"{count} records are there"))
        elif present not in (0, count):
            res.violations.append(("partial", f"{present} of A's {count} records are there: not all or nothing"))
    return res


def _tail(path: Path, n: int = 800) -> str:
    """The end of a job's output file, for messages."""
    try:
        return path.read_text(errors="replace")[-n:]
    except OSError:
        return ""


def run_conclusive(cluster, root: Path, label: str, lib: Path, **extra) -> Stall:
    """run_stall, again with a bigger record_many (up to twice) when A was
    not caught holding the lock (on a fast machine 30,000 rows hold it
    ~0.25 s); a scenario that never happens fails the test."""
    count = COUNT
    for attempt in range(3):
        res = run_stall(cluster, root / f"try{attempt}", label, lib, count=count, **extra)
        print(res.summary())
        if not res.inconclusive:
            return res
        count *= 3
    pytest.fail(f"the stall scenario could not be set up:\n{res.summary()}")


def test_stall_suspended_holder(slurm_cluster, tmp_path):  # noqa: F811
    """A holder suspended by Slurm past stale_lock_timeout must neither block
    the others (beyond the stale timeout) nor write once its lock is gone."""
    res = run_conclusive(slurm_cluster, tmp_path, "stall", NORMAL_LIB)
    assert not res.violations, res.summary()


def test_stall_negative_control_fence_disabled(slurm_cluster, failpoints_lib, tmp_path):  # noqa: F811
    """NEGATIVE CONTROL: without the fence the stall test must fail on data
    (integrity, a lost acknowledged record, or A's rows partly there)."""
    seen = []
    deadline = time.monotonic() + 150
    for i in range(CONTROL_TRIES):
        res = run_conclusive(slurm_cluster, tmp_path / f"control{i}", "negative-control fence-disabled",
                             failpoints_lib, TIRASTORE_FAILPOINTS="fence-disabled=on")
        seen.append(res)
        if res.classes() & set(DATA_CLASSES):
            print(f"NEGATIVE CONTROL OK: the stall test caught the fence-less engine on try {i + 1}: "
                  f"{sorted(res.classes() & set(DATA_CLASSES))}")
            return
        if time.monotonic() > deadline:
            break
    pytest.fail("NEGATIVE CONTROL FAILED: with fence-disabled=on the stall test saw no data violation in "
                f"{len(seen)} tries:\n" + "\n".join(r.summary() for r in seen))
