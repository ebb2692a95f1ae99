#!/usr/bin/env python3
"""A throwaway PgBouncer in front of a throwaway cluster (pgcluster.py).

``start(cluster)`` writes a configuration in a directory of its own and
starts Debian's ``pgbouncer`` on a Unix socket in that directory and on
127.0.0.1 (a free port), every database name routed to the cluster's
socket, and returns a :class:`Bouncer`; ``Bouncer.stop()`` removes it.
Nothing outside the directory is touched, and no PgBouncer of the
machine's own is used. PgBouncer refuses to run as root: run as root, it
runs as the cluster's server user (pgcluster's ``postgres`` or
``nobody``). Clients are trusted (the cluster trusts its socket); the
pool is ``pool_size`` server connections per database.

Used from Python (``import pgbouncer``) and from the command line, by the
Go tests and the benchmark::

    pgbouncer.py start DIR CLUSTER_DIR [--pool-size N] [--mode transaction]
    pgbouncer.py stop DIR
    pgbouncer.py restart DIR           # SIGTERM (clients cut off), start again

Standard library only. PgBouncer comes from Debian's ``pgbouncer`` package
(``apt-get install pgbouncer``); ``PGBOUNCER`` overrides the program.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from typing import Optional
from urllib.parse import quote

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pgcluster  # noqa: E402


class Unavailable(RuntimeError):
    """PgBouncer is not installed."""


def program() -> str:
    """The pgbouncer program."""
    p = os.environ.get("PGBOUNCER") or shutil.which("pgbouncer") or (
        "/usr/sbin/pgbouncer" if os.path.exists("/usr/sbin/pgbouncer") else None)
    if not p:
        raise Unavailable("pgbouncer was not found: install Debian's pgbouncer package "
                          "(apt-get install pgbouncer), or set PGBOUNCER")
    return p


def version() -> str:
    """PgBouncer's version, e.g. "1.18.0"."""
    out = subprocess.run([program(), "--version"], capture_output=True, text=True, timeout=30).stdout
    return out.split("\n", 1)[0].split()[-1] if out else ""


@dataclass
class Bouncer:
    """One running throwaway PgBouncer."""

    base: str
    port: int
    socket_dir: str
    mode: str
    pool_size: int
    version: str

    def url(self, db: str = "tira", **params: str) -> str:
        """The superuser's URL of database *db* through the pooler, on its
        socket, with pool_mode set to the pooler's mode."""
        q = {"host": self.socket_dir, "port": str(self.port), "pool_mode": self.mode, **params}
        return f"postgresql://postgres@/{db}?" + "&".join(f"{k}={quote(v, safe='/')}" for k, v in q.items())

    @property
    def config(self) -> str:
        return os.path.join(self.base, "pgbouncer.ini")

    def pid(self) -> Optional[int]:
        try:
            with open(os.path.join(self.base, "pgbouncer.pid")) as f:
                return int(f.read().strip())
        except (OSError, ValueError):
            return None

    def start(self) -> None:
        """Start it (daemonized), and wait until it accepts connections."""
        pgcluster._run_as_server([program(), "-d", "-q", self.config])
        sock = os.path.join(self.socket_dir, f".s.PGSQL.{self.port}")
        end = time.monotonic() + 30
        while True:
            try:
                with socket.socket(socket.AF_UNIX) as s:
                    s.connect(sock)
                return
            except OSError:
                if time.monotonic() > end:
                    raise RuntimeError(f"pgbouncer did not start: {self.log_tail()}")
                time.sleep(0.02)

    def kill(self, sig: int = signal.SIGTERM) -> None:
        """Signal it (SIGTERM: immediate shutdown, every client cut off)
        and wait until it is gone."""
        pid = self.pid()
        if pid is None:
            return
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return
        end = time.monotonic() + 30
        while time.monotonic() < end:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.01)
        try:
            os.unlink(os.path.join(self.base, "pgbouncer.pid"))
        except FileNotFoundError:
            pass

    def restart(self) -> None:
        """Stop it at once (clients cut off mid-call), then start again."""
        self.kill(signal.SIGTERM)
        self.start()

    def stop(self) -> None:
        """Stop it and remove its directory."""
        self.kill(signal.SIGTERM)
        shutil.rmtree(self.base, ignore_errors=True)

    def log_tail(self, n: int = 5) -> str:
        try:
            with open(os.path.join(self.base, "pgbouncer.log")) as f:
                return "".join(f.readlines()[-n:]).strip()
        except OSError:
            return "(no log)"


def start(cluster: pgcluster.Cluster, base: Optional[str] = None, pool_size: int = 20,
          mode: str = "transaction") -> Bouncer:
    """Configure and start a PgBouncer in *base* (a new temporary
    directory by default) in front of *cluster*."""
    prog = program()
    if base is None:
        base = tempfile.mkdtemp(prefix="tirastore-pgb-")
    os.makedirs(base, exist_ok=True)
    sock = os.path.join(base, "sock")
    os.makedirs(sock, exist_ok=True)
    port = pgcluster._free_port()
    with open(os.path.join(base, "userlist.txt"), "w") as f:
        f.write('"postgres" ""\n"tira_pw" ""\n')
    # server_login_retry: after a failed server login (a restarting
    # server) PgBouncer waits this long before it tries again (15 s by
    # default); query_wait_timeout bounds a client's wait for a server
    # connection (120 s by default): both short, so that a restart is
    # over in seconds.
    with open(os.path.join(base, "pgbouncer.ini"), "w") as f:
        f.write(f"""[databases]
* = host={cluster.socket_dir} port={cluster.port}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {port}
unix_socket_dir = {sock}
auth_type = trust
auth_file = {base}/userlist.txt
admin_users = postgres
pool_mode = {mode}
default_pool_size = {pool_size}
max_db_connections = {pool_size}
min_pool_size = 0
reserve_pool_size = 0
max_client_conn = 5000
server_login_retry = 1
query_wait_timeout = 60
server_connect_timeout = 5
logfile = {base}/pgbouncer.log
pidfile = {base}/pgbouncer.pid
log_connections = 0
log_disconnections = 0
""")
    u = pgcluster._server_user()
    if u is not None:
        for root, dirs, files in os.walk(base):
            for p in [root, *(os.path.join(root, n) for n in files)]:
                os.chown(p, u.pw_uid, u.pw_gid)
    os.chmod(base, 0o755)
    b = Bouncer(base=base, port=port, socket_dir=sock, mode=mode, pool_size=pool_size,
                version=version() if prog else "")
    try:
        b.start()
    except Exception:
        b.stop()
        raise
    with open(os.path.join(base, "bouncer.json"), "w") as f:
        json.dump(asdict(b), f)
    return b


def load(base: str) -> Bouncer:
    """The PgBouncer started in *base*."""
    with open(os.path.join(base, "bouncer.json")) as f:
        return Bouncer(**json.load(f))


def main(argv: list) -> int:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("start")
    p.add_argument("dir")
    p.add_argument("cluster_dir")
    p.add_argument("--pool-size", type=int, default=20)
    p.add_argument("--mode", default="transaction", choices=["session", "transaction", "statement"])
    for name in ("stop", "restart"):
        sub.add_parser(name).add_argument("dir")
    a = ap.parse_args(argv)
    if a.cmd == "start":
        b = start(pgcluster.load(a.cluster_dir), a.dir, pool_size=a.pool_size, mode=a.mode)
        print(json.dumps({**asdict(b), "url": b.url()}))
    elif a.cmd == "stop":
        load(a.dir).stop()
    else:
        load(a.dir).restart()
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except (Unavailable, pgcluster.Unavailable) as e:
        print(f"pgbouncer: {e}", file=sys.stderr)
        sys.exit(3)
