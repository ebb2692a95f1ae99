#!/usr/bin/env python3
"""A throwaway PostgreSQL cluster for the tests and the benchmark.

``start()`` makes a new cluster with initdb in a directory of its own,
starts it on a Unix socket in that directory and on 127.0.0.1 (a free
port, TLS with a self-signed certificate made here), and returns a
:class:`Cluster`; ``Cluster.stop()`` removes it. Nothing outside the
directory is touched, and no cluster of the machine's own is used. Run as
root, the server runs as the ``postgres`` user (or ``nobody``): initdb
refuses root.

Roles:
  * ``postgres``: the superuser, trusted on the socket only;
  * ``tira_pw``: password authentication (scram-sha-256) over TCP;
  * ``tira_tls``: the same, over TLS only (``hostssl``).

Used from Python (``import pgcluster``) and from the command line, by
the Go tests (core/internal/pgtest)::

    pgcluster.py start DIR     # prints the cluster as JSON
    pgcluster.py stop DIR
    pgcluster.py restart DIR [--mode fast|immediate]

Standard library only. PostgreSQL comes from Debian's ``postgresql``
package (``apt-get install postgresql``); ``PG_BINDIR`` overrides where its
programs are looked for.
"""

from __future__ import annotations

import glob
import json
import os
import pwd
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Optional
from urllib.parse import quote

PASSWORD = "s3cret pw/with:odd@chars"
"""The password of tira_pw and tira_tls (characters a URL must escape)."""


class Unavailable(RuntimeError):
    """PostgreSQL's server programs are not installed."""


def bindir() -> Path:
    """Where initdb, pg_ctl and postgres are."""
    env = os.environ.get("PG_BINDIR")
    if env:
        return Path(env)
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                   key=lambda p: int(Path(p).parts[-3]) if Path(p).parts[-3].isdigit() else 0)
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    if initdb:
        return Path(os.path.realpath(initdb)).parent
    raise Unavailable("PostgreSQL's initdb was not found: install Debian's postgresql package "
                      "(apt-get install postgresql), or set PG_BINDIR")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _server_user() -> Optional[pwd.struct_passwd]:
    """The user the server runs as when we are root (initdb refuses root)."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        try:
            return pwd.getpwnam(name)
        except KeyError:
            pass
    raise Unavailable("running as root, and there is no postgres or nobody user to run the server as")


@dataclass
class Cluster:
    """One running throwaway cluster."""

    base: str
    bindir: str
    port: int
    socket_dir: str

    # -- URLs ---------------------------------------------------------------
    def url(self, db: str = "tira", schema: Optional[str] = None, **params: str) -> str:
        """A URL of the superuser on the socket; *schema* is put first on
        the search_path (a database of its own for each test, cheaply)."""
        q = {"host": self.socket_dir, "port": str(self.port), **params}
        if schema:
            q["options"] = f"-csearch_path={schema}"
        return f"postgresql://postgres@/{db}?" + "&".join(f"{k}={quote(v, safe='/')}" for k, v in q.items())

    def tcp_url(self, user: str = "tira_pw", db: str = "tira", password: Optional[str] = PASSWORD,
                sslmode: str = "disable", **params: str) -> str:
        """A URL over TCP on 127.0.0.1, with the password in it unless None."""
        auth = quote(user, safe="") + (":" + quote(password, safe="") if password is not None else "")
        q = {"sslmode": sslmode, **params}
        return f"postgresql://{auth}@127.0.0.1:{self.port}/{db}?" + "&".join(
            f"{k}={quote(v, safe='/')}" for k, v in q.items())

    @property
    def cert(self) -> str:
        """The server's self-signed certificate (a client's sslrootcert)."""
        return os.path.join(self.base, "server.crt")

    # -- administration -----------------------------------------------------
    def psql(self, sql: str, db: str = "tira") -> str:
        """Run sql as the superuser; its output, unaligned."""
        out = subprocess.run(
            [os.path.join(self.bindir, "psql") if os.path.exists(os.path.join(self.bindir, "psql")) else "psql",
             "-X", "-q", "-At", "-v", "ON_ERROR_STOP=1", "-h", self.socket_dir, "-p", str(self.port),
             "-U", "postgres", "-d", db, "-c", sql],
            capture_output=True, text=True, timeout=120)
        if out.returncode != 0:
            raise RuntimeError(f"psql {sql!r}: {out.stderr.strip()}")
        return out.stdout

    def query_json(self, sql: str, db: str = "tira", schema: Optional[str] = None) -> list:
        """Rows of a SELECT as a list of dicts (in *schema*, if given)."""
        sql = sql.strip().rstrip(";")
        prefix = f'SET search_path TO "{schema}"; ' if schema else ""
        text = self.psql(f"{prefix}SELECT coalesce(json_agg(t), '[]') FROM ({sql}) t", db=db)
        return json.loads(text)

    def new_schema(self, name: str, db: str = "tira") -> str:
        """Create (or empty) schema *name* and return its URL."""
        self.psql(f'DROP SCHEMA IF EXISTS "{name}" CASCADE; CREATE SCHEMA "{name}"', db=db)
        return self.url(db=db, schema=name)

    def _ctl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        cmd = [os.path.join(self.bindir, "pg_ctl"), "-D", os.path.join(self.base, "data"),
               "-l", os.path.join(self.base, "server.log"), *args]
        return _run_as_server(cmd, check=check)

    def restart(self, mode: str = "fast") -> None:
        """Restart the server (mode immediate: as after a crash, no
        checkpoint; what the clients acknowledged must survive)."""
        self._ctl("-w", "-t", "120", "-m", mode, "restart")

    def stop_server(self, mode: str = "fast") -> None:
        self._ctl("-w", "-t", "120", "-m", mode, "stop")

    def start_server(self) -> None:
        self._ctl("-w", "-t", "120", "start")

    def stop(self) -> None:
        """Stop the server and remove the cluster."""
        self._ctl("-w", "-t", "60", "-m", "immediate", "stop", check=False)
        shutil.rmtree(self.base, ignore_errors=True)


def _run_as_server(cmd: list, check: bool = True, **kw) -> subprocess.CompletedProcess:
    u = _server_user()
    if u is not None:
        cmd = ["setpriv", f"--reuid={u.pw_uid}", f"--regid={u.pw_gid}", "--clear-groups", *cmd]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=180, **kw)
    if check and out.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({out.returncode}): {out.stderr.strip() or out.stdout.strip()}")
    return out


def start(base: Optional[str] = None, max_connections: int = 300) -> Cluster:
    """Make and start a new cluster in *base* (a new temporary directory
    by default) and create the database ``tira`` and the test roles."""
    bd = bindir()
    if base is None:
        base = tempfile.mkdtemp(prefix="tirastore-pg-")
    os.makedirs(base, exist_ok=True)
    os.chmod(base, 0o755)  # the server user must reach its socket and data
    u = _server_user()
    sock = os.path.join(base, "sock")
    data = os.path.join(base, "data")
    os.makedirs(sock, exist_ok=True)
    # A self-signed certificate for localhost and 127.0.0.1.
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "7",
                    "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
                    "-keyout", os.path.join(base, "server.key"), "-out", os.path.join(base, "server.crt")],
                   check=True, capture_output=True, timeout=60)
    os.chmod(os.path.join(base, "server.key"), 0o600)
    if u is not None:
        for p in (sock, os.path.join(base, "server.key"), os.path.join(base, "server.crt")):
            os.chown(p, u.pw_uid, u.pw_gid)
        os.chown(base, u.pw_uid, u.pw_gid)
    _run_as_server([str(bd / "initdb"), "-D", data, "-U", "postgres", "-E", "UTF8", "--locale=C.UTF-8",
                    "--auth-local=trust", "--auth-host=scram-sha-256"])
    port = _free_port()
    with open(os.path.join(data, "postgresql.conf"), "a") as f:
        f.write(f"""
port = {port}
listen_addresses = '127.0.0.1'
unix_socket_directories = '{sock}'
max_connections = {max_connections}
shared_buffers = 64MB
ssl = on
ssl_cert_file = '{base}/server.crt'
ssl_key_file = '{base}/server.key'
password_encryption = 'scram-sha-256'
log_min_messages = warning
""")
    with open(os.path.join(data, "pg_hba.conf"), "w") as f:
        f.write("""# TYPE   DATABASE USER      ADDRESS        METHOD
local     all      all                      trust
hostssl   all      tira_tls  127.0.0.1/32   scram-sha-256
hostnossl all      tira_tls  127.0.0.1/32   reject
host      all      tira_pw   127.0.0.1/32   scram-sha-256
host      all      all       127.0.0.1/32   scram-sha-256
""")
    c = Cluster(base=base, bindir=str(bd), port=port, socket_dir=sock)
    try:
        c.start_server()
        c.psql("CREATE DATABASE tira", db="postgres")
        pw = PASSWORD.replace("'", "''")
        c.psql(f"CREATE ROLE tira_pw LOGIN PASSWORD '{pw}'; CREATE ROLE tira_tls LOGIN PASSWORD '{pw}';"
               "GRANT ALL ON DATABASE tira TO tira_pw, tira_tls", db="postgres")
        c.psql("GRANT ALL ON SCHEMA public TO tira_pw, tira_tls")
    except Exception:
        c.stop()
        raise
    with open(os.path.join(base, "cluster.json"), "w") as f:
        json.dump(asdict(c), f)
    return c


def load(base: str) -> Cluster:
    """The cluster started in *base*."""
    with open(os.path.join(base, "cluster.json")) as f:
        return Cluster(**json.load(f))


def main(argv: list) -> int:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("start", "stop", "restart"):
        p = sub.add_parser(name)
        p.add_argument("dir")
        if name == "start":
            p.add_argument("--max-connections", type=int, default=300)
        if name == "restart":
            p.add_argument("--mode", default="fast", choices=["smart", "fast", "immediate"])
    a = ap.parse_args(argv)
    if a.cmd == "start":
        c = start(a.dir, max_connections=a.max_connections)
        print(json.dumps({**asdict(c), "url": c.url(), "tcp_url": c.tcp_url(), "cert": c.cert,
                          "password": PASSWORD}))
    elif a.cmd == "stop":
        load(a.dir).stop()
    else:
        load(a.dir).restart(a.mode)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except Unavailable as e:
        print(f"pgcluster: {e}", file=sys.stderr)
        sys.exit(3)
