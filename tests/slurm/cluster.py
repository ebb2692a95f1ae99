#!/usr/bin/env python3
"""A real one-node Slurm cluster in a private directory, for the tests.

    from cluster import start, SlurmUnavailable
    with start(workdir) as c:                     # munged, slurmctld, slurmd
        subprocess.run(["srun", "hostname"], env=c.env, timeout=60)

    python3 tests/slurm/cluster.py start DIR      # for manual use: daemons keep running
    SLURM_CONF=DIR/etc/slurm.conf srun hostname
    python3 tests/slurm/cluster.py stop DIR

Everything lives under DIR (the munge key and socket, slurm.conf, the state,
spool, pid and log files), except, when DIR's path is too long for a Unix
socket, a short directory from tempfile.mkdtemp() for the sockets, removed
by stop(). Nothing is read from or written to /etc: the daemons and every
client find the configuration through SLURM_CONF (Cluster.env) and munge
through AuthInfo=socket=... in that configuration.

The node is this machine under its real short host name, with the CPUs and
memory `slurmd -C` reports; its one partition oversubscribes (FORCE:8) so
that up to 8 jobs share each core of a small test machine. Daemons run as
root (SlurmUser=root) with proctrack/linuxproc and task/none: no cgroups.

Any step that cannot be done (not root, packages missing, a daemon that
dies or never gets the node idle) raises SlurmUnavailable, whose message
says why and ends with the tail of the daemons' logs. Stdlib only.
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

PARTITION = "tirastore"
STATE_FILE = "cluster.json"
DAEMON_BINARIES = ("munged", "slurmctld", "slurmd")
CLIENT_BINARIES = ("sinfo", "squeue", "scontrol", "scancel", "srun", "sbatch")
INSTALL_HINT = ("install them with: apt-get update && apt-get install -y "
                "--no-install-recommends slurmctld slurmd munge slurm-client")
# The daemons live in sbin, which a non-login PATH may lack.
SBIN_DIRS = ("/usr/local/sbin", "/usr/sbin", "/sbin")
# sun_path holds 108 bytes; slurmd's step sockets add "<node>_<job>.<step>".
MAX_SOCKET_DIR = 60


class SlurmUnavailable(Exception):
    """Slurm cannot be started here; the message says why (and shows logs)."""


def _log_tail(paths, nbytes: int = 1500) -> str:
    """The last bytes of each existing log, so that a failure explains itself."""
    parts = []
    for p in paths:
        p = Path(p)
        try:
            data = p.read_bytes()[-nbytes:].decode(errors="replace").strip()
        except OSError:
            continue
        if data:
            parts.append(f"--- {p.name} (tail) ---\n{data}")
    return ("\n" + "\n".join(parts)) if parts else ""


def _free_port() -> int:
    """A TCP port nobody listens on now, so that clusters never collide."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _die_with_parent() -> None:
    """preexec_fn: the daemon gets SIGTERM if the process that started it dies
    (a test run killed hard must not leave daemons behind)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _run(cmd, env=None, timeout: float = 20.0) -> subprocess.CompletedProcess:
    """Run a short command, bounded, never raising for its exit status."""
    try:
        return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as e:
        return subprocess.CompletedProcess(cmd, 124, e.stdout or "", f"timed out after {timeout} s")
    except OSError as e:
        return subprocess.CompletedProcess(cmd, 127, "", str(e))


def clean_env(base: Optional[dict] = None) -> dict:
    """The caller's environment without SLURM_* variables (a test run inside a
    real Slurm job must not leak its job id into our cluster's commands)."""
    base = dict(os.environ if base is None else base)
    env = {k: v for k, v in base.items() if not k.startswith("SLURM_")}
    path = env.get("PATH", os.defpath).split(os.pathsep)
    env["PATH"] = os.pathsep.join(path + [d for d in SBIN_DIRS if d not in path])
    return env


def node_hardware() -> dict:
    """What `slurmd -C` reports (CPUs, Boards, ..., RealMemory): the node line
    must match the machine or slurmctld drains the node."""
    r = _run(["slurmd", "-C"], env=clean_env(), timeout=30)
    if r.returncode != 0:
        raise SlurmUnavailable(f"`slurmd -C` failed ({r.returncode}): {(r.stderr or r.stdout).strip()}")
    line = next((x for x in r.stdout.splitlines() if x.startswith("NodeName=")), "")
    fields = dict(kv.split("=", 1) for kv in line.split() if "=" in kv)
    keep = ("CPUs", "Boards", "SocketsPerBoard", "CoresPerSocket", "ThreadsPerCore", "RealMemory")
    hw = {k: fields[k] for k in keep if k in fields}
    if "CPUs" not in hw or "RealMemory" not in hw:
        raise SlurmUnavailable(f"cannot read the node's hardware from `slurmd -C`: {r.stdout.strip()!r}")
    return hw


def slurm_conf_text(d: dict) -> str:
    """slurm.conf for one node, every path and port private to this cluster."""
    hw = " ".join(f"{k}={v}" for k, v in d["hardware"].items())
    return f"""\
# Written by tests/slurm/cluster.py: a private one-node test cluster.
ClusterName={d['cluster_name']}
SlurmctldHost={d['node']}(127.0.0.1)
SlurmUser=root
SlurmdUser=root
SlurmctldPort={d['ctld_port']}
SlurmdPort={d['slurmd_port']}
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={d['munge_socket']}
StateSaveLocation={d['dir']}/state
SlurmdSpoolDir={d['sock_dir']}/spool
SlurmctldPidFile={d['dir']}/run/slurmctld.pid
SlurmdPidFile={d['dir']}/run/slurmd.pid
SlurmctldLogFile={d['dir']}/log/slurmctld.log
SlurmdLogFile={d['dir']}/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
PlugStackConfig={d['dir']}/etc/plugstack.conf
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SwitchType=switch/none
MpiDefault=none
MailProg=/bin/true
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
InactiveLimit=0
KillWait=5
MinJobAge=30
SlurmctldTimeout=30
SlurmdTimeout=60
Waittime=0
NodeName={d['node']} NodeAddr=127.0.0.1 NodeHostname={d['node']} {hw} State=UNKNOWN
PartitionName={d['partition']} Nodes={d['node']} Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:8
"""


class Cluster:
    """A running (or stopped) cluster; its state is also kept in DIR/cluster.json
    so that `cluster.py stop DIR` can stop what `cluster.py start DIR` began."""

    def __init__(self, state: dict, procs: Optional[dict] = None):
        """Wrap a state record (from start(), or read back from cluster.json)."""
        self.state = state
        self.procs = procs or {}          # name -> Popen (only in the starting process)
        self.dir = Path(state["dir"])
        self.conf = Path(state["conf"])
        self.node = state["node"]
        self.partition = state["partition"]
        self.cluster_name = state["cluster_name"]
        self.env = clean_env()
        self.env["SLURM_CONF"] = str(self.conf)

    # -- clients -------------------------------------------------------------

    def run(self, *cmd: str, timeout: float = 30.0) -> subprocess.CompletedProcess:
        """Run a Slurm client command against this cluster (bounded)."""
        return _run(list(cmd), env=self.env, timeout=timeout)

    def node_state(self) -> str:
        """The node's state as sinfo shows it ('idle', 'mixed', 'down*', ...)."""
        r = self.run("sinfo", "-h", "-N", "-n", self.node, "-o", "%T", timeout=15)
        return r.stdout.strip() if r.returncode == 0 else f"(sinfo failed: {r.stderr.strip()})"

    def logs(self) -> list:
        """The daemons' log files (also their captured stdout/stderr)."""
        return sorted((self.dir / "log").glob("*"))

    def log_tail(self) -> str:
        """The tails of all daemon logs, for error messages."""
        return _log_tail(self.logs())

    # -- lifetime ------------------------------------------------------------

    def _save(self) -> None:
        """Write DIR/cluster.json (pids, paths) for a later `stop DIR`."""
        tmp = self.dir / (STATE_FILE + ".tmp")
        tmp.write_text(json.dumps(self.state, indent=1))
        tmp.replace(self.dir / STATE_FILE)

    def _spawn(self, name: str, cmd: list, die_with_parent: bool) -> None:
        """Start one daemon in the foreground mode, output to DIR/log/NAME.out."""
        out = open(self.dir / "log" / f"{name}.out", "ab")
        try:
            p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                 env=self.env, start_new_session=True,
                                 preexec_fn=_die_with_parent if die_with_parent else None)
        except OSError as e:
            raise SlurmUnavailable(f"cannot start {name}: {e}")
        finally:
            out.close()
        self.procs[name] = p
        self.state["pids"][name] = p.pid
        self._save()

    def _alive(self, name: str) -> bool:
        """Whether the daemon we started is still running."""
        p = self.procs.get(name)
        if p is not None:
            return p.poll() is None
        pid = self.state["pids"].get(name)
        return bool(pid) and _is_ours(pid, self.state)

    def _check_alive(self, what: str) -> None:
        """Raise SlurmUnavailable (with logs) if a daemon has died."""
        for name in self.state["pids"]:
            if not self._alive(name):
                p = self.procs.get(name)
                rc = p.returncode if p is not None else "?"
                raise SlurmUnavailable(f"{name} exited (status {rc}) while {what}{self.log_tail()}")

    def _wait(self, what: str, ok, timeout: float, detail=None) -> None:
        """Poll ok() until true; raise SlurmUnavailable on timeout or a dead
        daemon (detail() adds what was last seen)."""
        deadline = time.monotonic() + timeout
        while True:
            if ok():
                return
            self._check_alive(what)
            if time.monotonic() > deadline:
                seen = f" ({detail()})" if detail else ""
                raise SlurmUnavailable(f"timed out after {timeout:.0f} s {what}{seen}{self.log_tail()}")
            time.sleep(0.2)

    def _munge_works(self) -> bool:
        """A credential encoded and decoded through our munged's socket."""
        sock = self.state["munge_socket"]
        if not os.path.exists(sock):
            return False
        if not (shutil.which("munge", path=self.env["PATH"]) and shutil.which("unmunge", path=self.env["PATH"])):
            return True  # the socket exists; slurmctld will tell the rest
        try:
            enc = subprocess.run(["munge", "-n", "-S", sock], capture_output=True, timeout=10, env=self.env)
            if enc.returncode != 0:
                return False
            dec = subprocess.run(["unmunge", "-S", sock], input=enc.stdout, capture_output=True, timeout=10,
                                 env=self.env)
            return dec.returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            return False

    def start(self, timeout: float = 60.0, die_with_parent: bool = True) -> "Cluster":
        """munged, then slurmctld, then slurmd; returns once the node is idle."""
        d = self.dir
        try:
            self._spawn("munged", ["munged", "-F", "--force", "--key-file", str(d / "etc" / "munge.key"),
                                   "--socket", self.state["munge_socket"],
                                   "--pid-file", str(d / "run" / "munged.pid"),
                                   "--log-file", str(d / "log" / "munged.log"),
                                   "--seed-file", str(d / "run" / "munged.seed")], die_with_parent)
            self._wait("waiting for munged to answer on its socket", self._munge_works, 20)
            self._spawn("slurmctld", ["slurmctld", "-D", "-c", "-f", str(self.conf)], die_with_parent)
            self._wait("waiting for slurmctld to answer",
                       lambda: self.run("scontrol", "ping", timeout=10).stdout.count("UP") > 0, timeout)
            self._spawn("slurmd", ["slurmd", "-D", "-f", str(self.conf), "-N", self.node], die_with_parent)
            self._wait(f"waiting for node {self.node} to become idle", lambda: self.node_state() == "idle",
                       timeout, detail=lambda: "sinfo: " + self.node_state() + "; "
                       + self.run("sinfo", "-h", "-R", timeout=10).stdout.strip())
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self, timeout: float = 20.0) -> None:
        """Cancel every job, stop the daemons (TERM, then KILL), kill anything
        left that belongs to this cluster (job steps, their processes), and
        remove the socket directory if it was outside DIR."""
        pids = self.state.get("pids", {})
        if pids.get("slurmctld") and self._alive("slurmctld"):
            jobs = self.run("squeue", "-h", "-o", "%i", timeout=10).stdout.split()
            if jobs:
                self.run("scancel", *jobs, timeout=10)
                deadline = time.monotonic() + 12
                while time.monotonic() < deadline and self.run("squeue", "-h", "-o", "%i", timeout=10).stdout.split():
                    time.sleep(0.3)
        for name in ("slurmd", "slurmctld", "munged"):
            pid = pids.get(name)
            if pid:
                _terminate(pid, self.procs.get(name), self.state, timeout / 2)
        _sweep(self.state)
        for p in self.procs.values():
            if p.poll() is None:
                p.kill()
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        self.procs.clear()
        self.state["pids"] = {}
        if self.dir.exists():
            self._save()
        sock_dir = Path(self.state["sock_dir"])
        if sock_dir != self.dir and sock_dir.exists():
            shutil.rmtree(sock_dir, ignore_errors=True)

    def __enter__(self) -> "Cluster":
        """`with start(dir) as c:` (start() has already started it)."""
        return self

    def __exit__(self, *exc) -> None:
        """Stop on leaving the block, also on an exception."""
        self.stop()


def _cmdline(pid: int) -> str:
    """A process's command line (empty if it is gone or unreadable)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _environ(pid: int) -> bytes:
    """A process's initial environment (empty if gone or unreadable)."""
    try:
        return Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return b""


_SLURM_PROCESS = re.compile(r"^[:\s]*(\S*/)?(munged|slurmctld|slurmd|slurmstepd|slurmscriptd)\b")


def _is_ours(pid: int, state: dict) -> bool:
    """Whether pid is a live process of this cluster (not a reused pid): a
    daemon whose arguments name our files or which has our SLURM_CONF, or a
    job's process (our SLURM_CONF and a SLURM_JOB_ID in its environment).
    A process that merely inherited SLURM_CONF from a user's shell is not."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    if stat.rsplit(")", 1)[-1].split()[0] == "Z":
        return False
    cmd = _cmdline(pid)
    env = b"\0" + _environ(pid) + b"\0"
    has_conf = f"\0SLURM_CONF={state['conf']}\0".encode() in env
    if _SLURM_PROCESS.match(cmd):
        return has_conf or state["dir"] + "/" in cmd
    return has_conf and b"\0SLURM_JOB_ID=" in env


def _terminate(pid: int, proc: Optional[subprocess.Popen], state: dict, timeout: float) -> None:
    """SIGTERM a daemon, SIGKILL it if it lingers; reaps it if we started it."""
    def gone() -> bool:
        """Exited (reaped, if we are its parent) or no longer ours."""
        if proc is not None:
            return proc.poll() is not None
        return not _is_ours(pid, state)

    if gone():
        return
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not gone():
        time.sleep(0.1)
    if not gone():
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        if proc is not None:
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass


def _spared() -> set:
    """This process and its ancestors: never ours to kill."""
    spare = set()
    pid = os.getpid()
    while pid > 1:
        spare.add(pid)
        try:
            pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[1])
        except (OSError, ValueError, IndexError):
            break
    return spare


def leftover_processes(state: dict) -> list:
    """Pid and command line of every live process of this cluster (daemons,
    slurmstepd, job processes, clients): empty after a clean stop()."""
    spare = _spared()
    return [(int(e), _cmdline(int(e))) for e in os.listdir("/proc")
            if e.isdigit() and int(e) not in spare and _is_ours(int(e), state)]


def _sweep(state: dict) -> None:
    """SIGKILL what is left of this cluster (see _is_ours): slurmstepd and
    the jobs' processes, a daemon that ignored SIGTERM. Never this process
    or its ancestors."""
    for _ in range(3):
        victims = [pid for pid, _ in leftover_processes(state)]
        if not victims:
            return
        for v in victims:
            try:
                os.kill(v, signal.SIGCONT)  # a suspended job step too
                os.kill(v, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.3)


def _preflight() -> None:
    """Raise SlurmUnavailable unless we are root and every binary is installed."""
    if os.geteuid() != 0:
        raise SlurmUnavailable("the test cluster needs root (slurmd runs jobs as SlurmUser=root)")
    path = clean_env()["PATH"]
    missing = [b for b in DAEMON_BINARIES + CLIENT_BINARIES if shutil.which(b, path=path) is None]
    if missing:
        raise SlurmUnavailable(f"not installed: {', '.join(missing)}; {INSTALL_HINT}")


def start(workdir, timeout: float = 60.0, die_with_parent: bool = True) -> Cluster:
    """Start a one-node cluster in workdir (created; should be empty or an old
    cluster's) and return it once its node is idle. die_with_parent=False
    keeps the daemons running after this process exits (the `start` command).
    Raises SlurmUnavailable with the reason and the daemons' log tails."""
    _preflight()
    d = Path(workdir).resolve()
    if (d / STATE_FILE).exists():
        stop(d)  # an earlier cluster in the same directory
    for sub in ("etc", "state", "run", "log"):
        (d / sub).mkdir(parents=True, exist_ok=True)
    os.chmod(d, 0o700)
    if len(str(d)) <= MAX_SOCKET_DIR:
        sock_dir = d
    else:
        sock_dir = Path(tempfile.mkdtemp(prefix="slurm-"))
    os.chmod(sock_dir, 0o700)
    (sock_dir / "spool").mkdir(exist_ok=True)
    (sock_dir / "munge").mkdir(mode=0o700, exist_ok=True)
    state = {
        "dir": str(d),
        "conf": str(d / "etc" / "slurm.conf"),
        "sock_dir": str(sock_dir),
        "munge_socket": str(sock_dir / "munge" / "munge.socket"),
        "node": socket.gethostname().split(".")[0],
        "partition": PARTITION,
        # Unique to this cluster: a job id names a job only with its
        # cluster, and clients key what they remember of jobs by it
        # (TiraStore's node-wide answer file), so two test clusters at
        # once must not share a name.
        "cluster_name": "tirastore-test-" + os.urandom(4).hex(),
        "pids": {},
    }
    cluster = Cluster(state)
    try:
        state["hardware"] = node_hardware()
        state["ctld_port"] = _free_port()
        state["slurmd_port"] = _free_port()
        while state["slurmd_port"] == state["ctld_port"]:
            state["slurmd_port"] = _free_port()
        key = d / "etc" / "munge.key"
        if key.exists():
            key.unlink()
        fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o400)
        try:
            os.write(fd, os.urandom(1024))
        finally:
            os.close(fd)
        (d / "etc" / "plugstack.conf").write_text("")
        Path(state["conf"]).write_text(slurm_conf_text(state))
        cluster._save()
    except BaseException:
        cluster.stop()
        raise
    return cluster.start(timeout=timeout, die_with_parent=die_with_parent)


def stop(workdir) -> bool:
    """Stop the cluster recorded in workdir/cluster.json; False if there is
    no such record (nothing to stop, or not a cluster directory)."""
    f = Path(workdir).resolve() / STATE_FILE
    try:
        state = json.loads(f.read_text())
    except (OSError, ValueError):
        return False
    Cluster(state).stop()
    return True


def main(argv) -> int:
    """`cluster.py start DIR` / `cluster.py stop DIR` for manual use."""
    if len(argv) != 3 or argv[1] not in ("start", "stop"):
        print(f"usage: {argv[0]} start|stop DIR", file=sys.stderr)
        return 2
    if argv[1] == "stop":
        if not stop(argv[2]):
            print(f"no cluster recorded in {argv[2]}/{STATE_FILE}", file=sys.stderr)
            return 1
        print(f"stopped the cluster in {argv[2]}")
        return 0
    try:
        c = start(argv[2], die_with_parent=False)
    except SlurmUnavailable as e:
        print(f"Slurm cannot start here: {e}", file=sys.stderr)
        return 1
    print(f"node {c.node} idle in partition {c.partition}; use it with:")
    print(f"  export SLURM_CONF={c.conf}")
    print(f"stop it with: {argv[0]} stop {c.dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
