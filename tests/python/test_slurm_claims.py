"""Claims that follow the Slurm job, on a real one-node Slurm cluster.

A holder job claims a schedule and "measures" it (sleeps); a waiter job,
run as on another node (its own host name and /dev/shm), waits for the
schedule. The holder's job is then cancelled (scancel) or suspended
(scontrol suspend) right after one of its renewals:

* cancelled: the waiter asks Slurm once the renewal is overdue, learns that
  the job has ended, and takes the claim over within 5 s;
* suspended: Slurm says SUSPENDED, which is not an end: the claim is left
  to its lease, and `tirastore claims` and the dashboard show the job's
  state;
* the negative control, the waiter's Slurm commands off its PATH (Slurm
  unreachable): a cancelled job's claim is taken over only at the end of
  its lease.

And the node's waiters share their questions: many waiter processes of one
node, waiting on one suspended holder (overdue until its lease ends), make
at most one query per interval between them; with the node's answer file
made unusable (a symlink planted at its name, the negative control), each
asks on its own.

The cluster comes from the slurm_cluster fixture (conftest_slurm.py): these
tests skip, saying why, where Slurm cannot start.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

import pytest

from conftest import other_node_prefix, tiered
from conftest_slurm import slurm_cluster  # noqa: F401  (the fixture)

REPO = Path(__file__).resolve().parents[2]
LEASE = 6.0      # the claim's lease: renewed every 2 s, overdue after 2.5 s
TAKEOVER = 5.0   # a cancelled job's claim is taken over within this
SRC = "void conv() { /* ... */ }"
SCHED = "T2(L0,L1,32,32,comps=['comp00'])"

# The holder: claim, say so, then measure forever.
HOLDER = r"""
import json, os, sys, time
from tirastore import Claim, TiraStore
db, lease, events = sys.argv[1], float(sys.argv[2]), sys.argv[3]
s = TiraStore(db, cpu_model="test", slurm_cpus="N/A")
c = s.lookup_or_claim("conv", sys.argv[4], sys.argv[5], lease=lease)
assert isinstance(c, Claim), c
with open(events, "w") as f:
    json.dump({"pid": os.getpid(), "job": os.environ["SLURM_JOB_ID"],
               "cluster": os.environ.get("SLURM_CLUSTER_NAME")}, f)
time.sleep(3600)
"""

# A waiter: wait for the schedule, record it if the claim comes here.
WAITER = r"""
import json, sys, time
from tirastore import Claim, TiraStore
db, lease, out = sys.argv[1], float(sys.argv[2]), sys.argv[3]
s = TiraStore(db, cpu_model="test", slurm_cpus="N/A")
with open(out, "a") as f:
    f.write(json.dumps({"ready": time.time()}) + "\n")
got = s.lookup_or_claim("conv", sys.argv[4], sys.argv[5], lease=lease)
took = time.time()
if isinstance(got, Claim):
    got.record(True, [1.0])
with open(out, "a") as f:
    f.write(json.dumps({"took": took, "claimed": isinstance(got, Claim)}) + "\n")
"""

# Many waiters of one node: start n WAITERs at once, wait for them all.
FLEET = r"""
import subprocess, sys
n, rest = int(sys.argv[1]), sys.argv[2:]
procs = [subprocess.Popen([sys.executable, "-c", rest[0], *rest[1:3], f"{rest[3]}.{i}", *rest[4:]]) for i in range(n)]
sys.exit(max(p.wait() for p in procs))
"""

SLURM_COMMANDS = ("squeue", "sacct", "scontrol")


def job_env(cluster) -> dict:
    env = dict(cluster.env)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO / "python"), env.get("PYTHONPATH")) if p)
    return env


def tools_without_slurm(d: Path) -> str:
    """A PATH with what a waiter job runs (unshare, sh, mount, hostname) and
    no Slurm command: Slurm unreachable, as far as the waiter can tell."""
    d.mkdir()
    for tool in ("unshare", "sh", "mount", "hostname"):
        os.symlink(shutil.which(tool), d / tool)
    assert not any((d / c).exists() for c in SLURM_COMMANDS)
    return str(d)


def counting_slurm(d: Path, count: Path) -> str:
    """A directory of squeue and sacct that log each call to count and run
    the real command: how many queries the node made."""
    d.mkdir()
    for cmd in ("squeue", "sacct"):
        real = shutil.which(cmd)
        (d / cmd).write_text(f'#!/bin/sh\necho "{cmd} $(date +%s.%N)" >> "{count}"\nexec "{real}" "$@"\n')
        (d / cmd).chmod(0o755)
    return str(d)


class Scenario:
    """A holder job, a waiter job (or a fleet of waiters) on "another node"."""

    def __init__(self, cluster, root: Path) -> None:
        self.cluster, self.root = cluster, root
        self.db = root / "db" / "cache.db"
        self.db.parent.mkdir(parents=True)
        self.env = job_env(cluster)
        self.procs: list = []
        self.jobs: list = []

    def srun(self, name: str, cmd: list, env: Optional[dict] = None) -> subprocess.Popen:
        log = open(self.root / f"{name}.log", "wb")
        srun = shutil.which("srun", path=self.env["PATH"]) or "srun"
        p = subprocess.Popen([srun, "--nodes=1", "--ntasks=1", f"--partition={self.cluster.partition}",
                              f"--job-name=claims-{name}", *cmd], env=env or self.env, stdin=subprocess.DEVNULL,
                             stdout=log, stderr=subprocess.STDOUT)
        self.procs.append((p, log))
        return p

    def start_holder(self, lease: float = LEASE) -> dict:
        events = self.root / "holder.json"
        p = self.srun("holder", [sys.executable, "-c", HOLDER, str(self.db), str(lease), str(events), SRC, SCHED])
        deadline = time.monotonic() + 60
        while not events.exists() or not events.read_text():
            assert p.poll() is None and time.monotonic() < deadline, self.logs()
            time.sleep(0.05)
        holder = json.loads(events.read_text())
        self.jobs.append(holder["job"])
        assert holder["cluster"] == self.cluster.cluster_name
        return holder

    def start_waiters(self, n: int = 1, path: Optional[str] = None, plant: str = "") -> Path:
        """n waiters in one job, as on another node; their output files are
        waiter.jsonl(.i). plant: a shell command run in the node first."""
        prefix = other_node_prefix("claims-node2")
        if prefix is None:
            pytest.skip("cannot run a job as on another node here (needs root and unshare)")
        env = dict(self.env)
        if path is not None:
            env["PATH"] = path
        out = self.root / "waiter.jsonl"
        args = [str(self.db), str(LEASE), str(out), SRC, SCHED]
        cmd = [sys.executable, "-c", WAITER, *args] if n == 1 else [sys.executable, "-c", FLEET, str(n), WAITER, *args]
        if plant:
            prefix = prefix[:-2] + [prefix[-2].replace('exec "$@"', f'{plant} && exec "$@"'), prefix[-1]]
        self.srun("waiter", prefix + cmd, env)
        files = [out] if n == 1 else [Path(f"{out}.{i}") for i in range(n)]
        deadline = time.monotonic() + 60
        while not all(f.exists() and "ready" in f.read_text() for f in files):
            assert time.monotonic() < deadline, self.logs()
            time.sleep(0.05)
        time.sleep(1.0)  # the waiters have seen the claim
        return out

    def on_another_node(self, in_job: bool = True) -> tuple[list, dict]:
        """A command prefix and environment that run a tirastore command as
        on a third node of the cluster: in a job (SLURM_CLUSTER_NAME set,
        as Slurm sets it), or as on a login node (not set: the command
        learns the cluster from scontrol)."""
        prefix = other_node_prefix("claims-node3")
        if prefix is None:
            pytest.skip("cannot run a process as on another node here (needs root and unshare)")
        env = job_env(self.cluster)
        env.pop("SLURM_CLUSTER_NAME", None)
        if in_job:
            env["SLURM_CLUSTER_NAME"] = self.cluster.cluster_name
        return prefix, env

    def renewals(self) -> int:
        from tirastore import TiraStore

        with TiraStore(self.db, cpu_model="test", slurm_cpus="N/A") as s:
            claims = s.claims()
        assert len(claims) == 1, claims
        return claims[0].renewals

    def right_after_a_renewal(self) -> None:
        """Return as soon as the holder has renewed its claim again."""
        r0 = self.renewals()
        deadline = time.monotonic() + LEASE
        while self.renewals() == r0:
            assert time.monotonic() < deadline, "the holder did not renew its claim"
            time.sleep(0.02)

    def act_after_a_renewal(self, *command: str) -> float:
        """Run a Slurm command (on the holder's job) right after one of the
        holder's renewals; return when."""
        self.right_after_a_renewal()
        t = time.time()
        r = self.cluster.run(*command)
        assert r.returncode == 0, r.stderr
        return t

    def delay(self, out: Path, since: float) -> float:
        """Seconds from since until the waiter got the claim or the result."""
        took = self.took(out, LEASE + 15)
        assert took is not None, self.logs()
        return took - since

    def took(self, out: Path, timeout: float) -> Optional[float]:
        """When the waiter got the claim or the result (None: not by timeout)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in out.read_text().splitlines() if out.exists() else []:
                doc = json.loads(line)
                if "took" in doc:
                    return doc["took"]
            time.sleep(0.02)
        return None

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-2000:]}" for p in sorted(self.root.glob("*.log")))

    def close(self) -> None:
        if self.jobs:
            self.cluster.run("scontrol", "resume", *self.jobs)
            self.cluster.run("scancel", *self.jobs)
        names = self.cluster.run("squeue", "-h", "-o", "%A %j").stdout.split("\n")
        ours = [line.split()[0] for line in names if " claims-" in line]
        if ours:
            self.cluster.run("scancel", *ours)
        for p, log in self.procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
            log.close()


@pytest.fixture
def scenario(slurm_cluster, tmp_path):  # noqa: F811
    s = Scenario(slurm_cluster, tmp_path)
    yield s
    s.close()


def test_a_cancelled_jobs_claim_is_taken_over_within_5_s(scenario):
    holder = scenario.start_holder()
    out = scenario.start_waiters()
    delay = scenario.delay(out, scenario.act_after_a_renewal("scancel", holder["job"]))
    print(f"taken over {delay:.2f} s after scancel")
    assert delay < TAKEOVER, f"taken over {delay:.2f} s after scancel\n{scenario.logs()}"
    from tirastore import TiraStore

    with TiraStore(scenario.db, cpu_model="test", slurm_cpus="N/A") as s:
        assert s.lookup("conv", SRC, SCHED).execution_times == [1.0]
        assert s.claims() == []


def test_negative_control_without_slurm_the_lease_decides(scenario, tmp_path):
    holder = scenario.start_holder()
    out = scenario.start_waiters(path=tools_without_slurm(tmp_path / "noslurm"))
    delay = scenario.delay(out, scenario.act_after_a_renewal("scancel", holder["job"]))
    print(f"without Slurm: taken over {delay:.2f} s after scancel")
    # Unchanged since the renewal before scancel: taken at its lease's end.
    assert delay >= LEASE - 1.0, f"taken over {delay:.2f} s after scancel without Slurm\n{scenario.logs()}"
    assert delay >= TAKEOVER


def test_a_suspended_jobs_claim_is_left_to_its_lease(scenario):
    """A suspended job's claim is listed as SUSPENDED and left to its lease
    (the holder's, made long enough that the listing, slow on a loaded
    machine, sees the claim before the lease ends)."""
    lease = 15.0
    holder = scenario.start_holder(lease=lease)
    out = scenario.start_waiters()
    t = scenario.act_after_a_renewal("scontrol", "suspend", holder["job"])
    # The listing, from the waiters' node, shows the job's state.
    prefix, env = scenario.on_another_node()
    time.sleep(0.5)
    listing = subprocess.run(prefix + [sys.executable, "-m", "tirastore", "claims", "--json", str(scenario.db)],
                             env=env, capture_output=True, text=True, timeout=60)
    assert listing.returncode == 0, listing.stderr
    claims = json.loads(listing.stdout)
    assert [(c["slurm_job_id"], c["slurm_cluster"], c["job_state"], c["job_ended"]) for c in claims] == [
        (holder["job"], scenario.cluster.cluster_name, "SUSPENDED", False)], claims
    assert scenario.took(out, TAKEOVER + 0.5 - (time.time() - t)) is None, "a suspended job's claim was taken over early"
    delay = scenario.delay(out, t)
    print(f"suspended: taken over {delay:.2f} s after suspend")
    assert delay >= lease - 1.0, f"taken over {delay:.2f} s after suspend"


def test_the_dashboard_shows_each_claims_job_state(scenario):
    """Rendered by headless Chromium, as on a login node (outside any job):
    the holder's job running, suspended, then cancelled (its claim flagged
    ended)."""
    import chromium

    if chromium.executable() is None:
        if os.environ.get("CI") == "true":
            pytest.fail("chromium is not installed: .ci/run installs it")
        pytest.skip("chromium is not installed (apt-get install chromium)")
    holder = scenario.start_holder(lease=600.0)  # only Slurm's word ends it here
    prefix, env = scenario.on_another_node(in_job=False)
    proc = subprocess.Popen(prefix + [sys.executable, "-m", "tirastore", "dashboard", str(scenario.db), "--port", "0"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    browser = None
    cells = "[...document.querySelectorAll('#claims tbody td')].map(td => td.textContent)"
    try:
        line = proc.stdout.readline()
        assert " on http" in line, (line, proc.stderr.read() if proc.poll() is not None else "")
        browser = chromium.Chromium()
        browser.navigate(line.split(" on ", 1)[1].split(" ")[0])
        for action, cell, verdict in ((None, "RUNNING", "alive?"), ("suspend", "SUSPENDED", "alive?"),
                                      ("scancel", "CANCELLED", "its job ended (taken over by the next caller)")):
            if action == "suspend":
                assert scenario.cluster.run("scontrol", "suspend", holder["job"]).returncode == 0
            elif action == "scancel":
                assert scenario.cluster.run("scancel", holder["job"]).returncode == 0
            want = f"{holder['job']} {cell}"
            assert browser.wait_for(f"{cells}.includes({json.dumps(want)})", timeout=30), browser.evaluate(cells)
            assert browser.evaluate(f"{cells}.at(-1)") == verdict
        assert browser.errors() == []
    finally:
        if browser is not None:
            browser.close()
        proc.terminate()
        proc.wait(10)


def answer_file(cluster_name: str) -> str:
    """The node's answer file for the cluster (core/slurmjob's name)."""
    return f"/dev/shm/tirastore-slurm-{os.geteuid()}-{hashlib.sha256(cluster_name.encode()).hexdigest()[:12]}"


def fleet_queries(scenario, tmp_path, n: int, plant: str = "") -> tuple[int, float, list]:
    """n waiters of one node on a suspended holder (overdue, asked about
    until its lease ends): the queries they made, over how many seconds,
    and when each got its answer."""
    count = tmp_path / "queries.log"
    path = counting_slurm(tmp_path / "bin", count) + os.pathsep + scenario.env["PATH"]
    holder = scenario.start_holder()
    out = scenario.start_waiters(n, path=path, plant=plant)
    scenario.act_after_a_renewal("scontrol", "suspend", holder["job"])
    tooks = [scenario.took(Path(f"{out}.{i}"), LEASE + 30) for i in range(n)]
    assert None not in tooks, scenario.logs()
    calls = [line.split() for line in count.read_text().splitlines()] if count.exists() else []
    by = {cmd: sorted(float(t) for c, t in calls if c == cmd) for cmd in ("sacct", "squeue")}
    queries = max(by.values(), key=len)  # each query asks sacct, then squeue for what it did not list
    span = max(queries) - min(queries) if queries else 0.0
    return len(queries), span, tooks


@pytest.mark.parametrize("n", tiered(16, 64))
def test_a_nodes_waiters_share_one_query_per_interval(scenario, tmp_path, n):
    queries, span, _ = fleet_queries(scenario, tmp_path, n)
    print(f"{n} waiters of one node: {queries} queries in {span:.2f} s")
    assert 1 <= queries <= span / 1.0 + 2, f"{queries} queries in {span:.2f} s by {n} waiters\n{scenario.logs()}"


def test_negative_control_an_unusable_answer_file_makes_each_waiter_ask(scenario, tmp_path):
    n = 16
    # A link planted at the answer file's name (as another user could):
    # never followed, it switches the sharing off in every waiter.
    plant = f"ln -s /nonexistent {answer_file(scenario.cluster.cluster_name)}"
    queries, span, _ = fleet_queries(scenario, tmp_path, n, plant=plant)
    print(f"{n} waiters that cannot share: {queries} queries in {span:.2f} s")
    assert queries >= 2 * n, f"{queries} queries in {span:.2f} s by {n} waiters that could not share"


def test_check_repair_removes_the_claim_of_an_ended_job(scenario):
    """`tirastore check`, run as on a login node of the cluster, calls the
    claim of a cancelled job stale, naming the job and its state, and
    --repair removes it. Negative control: the same claim while its job is
    suspended is not stale (its holder may resume), and stays."""
    holder = scenario.start_holder(lease=600.0)  # only Slurm's word ends it here
    prefix, env = scenario.on_another_node(in_job=False)

    def check(*args: str) -> tuple[int, dict]:
        r = subprocess.run(prefix + [sys.executable, "-m", "tirastore", "check", "--json", *args, str(scenario.db)],
                           env=env, capture_output=True, text=True, timeout=120)
        assert r.returncode in (0, 1), r.stderr
        return r.returncode, json.loads(r.stdout)

    assert scenario.cluster.run("scontrol", "suspend", holder["job"]).returncode == 0
    rc, rep = check("--repair")
    assert rc == 0 and rep["stale_measurement_claims"] == [], rep
    assert scenario.renewals() >= 0  # the claim is still there
    assert scenario.cluster.run("scontrol", "resume", holder["job"]).returncode == 0
    assert scenario.cluster.run("scancel", holder["job"]).returncode == 0
    deadline = time.monotonic() + 60
    while True:  # Slurm may take a moment to call the job ended
        rc, rep = check()
        if rep["stale_measurement_claims"] or time.monotonic() > deadline:
            break
        time.sleep(1.1)  # the node's answers are a second old at most
    stale = rep["stale_measurement_claims"]
    assert rc == 1 and [(c["slurm_job_id"], c["job_ended"], c["recorded"]) for c in stale] == [
        (holder["job"], True, False)], rep
    # CANCELLED, or COMPLETING while Slurm still ends its processes.
    assert re.fullmatch(r"[A-Z_]+( by \d+)?", stale[0]["job_state"]), stale
    text = subprocess.run(prefix + [sys.executable, "-m", "tirastore", "check", str(scenario.db)],
                          env=env, capture_output=True, text=True, timeout=120)
    assert re.search(rf"\(its Slurm job {holder['job']} ended: [A-Z_]+[^)]*\) is stale", text.stdout), text
    rc, rep = check("--repair")
    assert rc == 0 and len(rep["stale_measurement_claims"]) == 1, rep
    from tirastore import TiraStore

    with TiraStore(scenario.db, cpu_model="test", slurm_cpus="N/A") as s:
        assert s.claims() == []
