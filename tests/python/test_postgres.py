"""The PostgreSQL backend against a real server (a throwaway cluster that
the session starts, tests/pg/pgcluster.py): concurrency, a server restart,
password authentication and TLS, the faults a user meets, and what only a
server URL has. The API itself is tested on this backend by the API
modules, run with TIRASTORE_TEST_BACKEND=postgresql (make test)."""

from __future__ import annotations

import json
import os
import pickle
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path
from urllib.parse import quote

import pytest

from conftest import SCHED_R, SCHED_S, SRC_BLUR, TEST_CPU, new_pg_url, raw_query

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "pg"))
import pgcluster  # noqa: E402
from tirastore import LookupResult, PersistentCache, TiraStore  # noqa: E402

SRC = "void prog() { for (int i = 0; i < N; i++) a[i] = b[i]; }"


@pytest.fixture
def url(pg_cluster):
    """A new, empty schema's URL (the superuser, on the socket)."""
    return new_pg_url(pg_cluster)


def _schema(url: str) -> str:
    from conftest import _pg_schema

    return _pg_schema(url)


def _with_options(url: str, *opts: str) -> str:
    """url with more -c options (after its search_path)."""
    from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

    parts = urlsplit(url)
    q = dict(parse_qsl(parts.query))
    q["options"] = " ".join([q.get("options", ""), *(f"-c{o}" for o in opts)]).strip()
    return urlunsplit(parts._replace(query=urlencode(q, quote_via=quote, safe="/")))


def _tcp(pg_cluster, url: str, user: str = "tira_pw", password=pgcluster.PASSWORD, sslmode="disable", **params) -> str:
    """The TCP URL of the schema of url, as user."""
    schema = _schema(url)
    pg_cluster.psql(f'GRANT ALL ON SCHEMA "{schema}" TO {user}')
    return pg_cluster.tcp_url(user=user, password=password, sslmode=sslmode,
                              options=f"-csearch_path={schema}", **params)


# ---------------------------------------------------------------------------
# 64 processes x 100 records
# ---------------------------------------------------------------------------

FLEET_WORKER = """
import json, os, sys, time
from tirastore import TiraStore
url, w, out, go, overwrite, cpu = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5] == "1", sys.argv[6]
src = "void prog() { for (int i = 0; i < N; i++) a[i] = b[i]; }"
s = TiraStore(url, cpu_model=cpu)
while not os.path.exists(go):
    time.sleep(0.005)
won = []
for i in range(100):
    if i % 2 == 0:   # this worker's own schedule
        assert s.record("prog", src, f"U(L0,{i},comps=['w{w}'])", True, [float(w)]) is True
    elif s.record("prog", src, f"U(L1,{i},comps=['c'])", True, [float(w)], overwrite=overwrite):
        won.append(i)  # a contested schedule, the same for every worker
s.close()
with open(out, "w") as f:
    json.dump(won, f)
"""


def _fleet(tmp_path: Path, url: str, overwrite: bool, n: int = 64) -> tuple[dict, list]:
    go = tmp_path / "go"
    outs = [tmp_path / f"w{w}.json" for w in range(n)]
    procs = [subprocess.Popen([sys.executable, "-c", FLEET_WORKER, url, str(w), str(outs[w]), str(go),
                               "1" if overwrite else "0", TEST_CPU]) for w in range(n)]
    time.sleep(2.0)
    go.touch()
    for p in procs:
        assert p.wait(timeout=600) == 0
    wins: dict[int, list[int]] = {}
    for w, out in enumerate(outs):
        for i in json.loads(out.read_text()):
            wins.setdefault(i, []).append(w)
    rows = raw_query(url, "SELECT schedule, result_json FROM records")
    return wins, rows


def test_64_processes_x_100_records_exact_count_one_winner(tmp_path, url):
    """64 processes record 100 records each at once: 50 of their own and 50
    that every process records. The table then holds exactly 64 x 50 + 50
    rows, every contested key has exactly one winner (one record() returned
    True), and the stored value is the winner's."""
    wins, rows = _fleet(tmp_path, url, overwrite=False)
    assert len(rows) == 64 * 50 + 50
    contested = {r["schedule"]: json.loads(r["result_json"]) for r in rows if "'c'" in r["schedule"]}
    assert len(contested) == 50
    assert sorted(wins) == list(range(1, 100, 2))
    for i, winners in wins.items():
        assert len(winners) == 1, f"schedule {i}: {len(winners)} winners"
        assert contested[f"U(L1,{i},comps=['c'])"]["execution_times"] == [float(winners[0])]


def test_negative_control_overwrite_makes_every_writer_a_winner(tmp_path, url):
    """The check above catches writes that do not decide one winner: with
    overwrite=True every record() of a contested key reports a write."""
    wins, rows = _fleet(tmp_path, url, overwrite=True, n=8)
    assert len(rows) == 8 * 50 + 50
    assert any(len(w) > 1 for w in wins.values())


# ---------------------------------------------------------------------------
# A server restart mid-run
# ---------------------------------------------------------------------------

RESTART_WRITER = """
import json, os, sqlite3, sys, time
from tirastore import TiraStore
url, w, log, stop, cpu = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
s = TiraStore(url, cpu_model=cpu)
i = 0
with open(log, "a") as f:
    while not os.path.exists(stop):
        try:
            ack = s.record("restart", "void r() {}", f"U(L0,{i},comps=['r{w}'])", True, [float(i)])
            f.write(json.dumps({"i": i, "ack": ack, "t": time.time()}) + "\\n")
        except (sqlite3.OperationalError, TimeoutError) as e:
            f.write(json.dumps({"i": i, "error": f"{type(e).__name__}: {e}", "t": time.time()}) + "\\n")
        f.flush()
        i += 1
s.close()
"""


def _entries(p: Path) -> list[dict]:
    return [json.loads(line) for line in p.read_text().splitlines() if line.strip()] if p.exists() else []


def _restart_run(tmp_path: Path, pg_cluster, url: str, n: int = 8) -> tuple[list, list, set]:
    """n writers record one record per call while the server is restarted
    (immediate: no checkpoint, as after a crash); returns the acknowledged
    and failed calls, and the schedules the table holds afterwards."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    stop = tmp_path / "stop"
    logs = [tmp_path / f"r{w}.log" for w in range(n)]
    procs = [subprocess.Popen([sys.executable, "-c", RESTART_WRITER, url, str(w), str(logs[w]), str(stop), TEST_CPU])
             for w in range(n)]
    try:
        def acks() -> int:
            return min(len([e for e in _entries(p) if "ack" in e]) for p in logs)

        end = time.monotonic() + 120
        while acks() < 20:
            assert time.monotonic() < end and all(p.poll() is None for p in procs), "the writers did not start"
            time.sleep(0.05)
        restarted_at = time.time()
        pg_cluster.restart(mode="immediate")
        before = acks()
        end = time.monotonic() + 120
        while acks() < before + 20:
            assert time.monotonic() < end and all(p.poll() is None for p in procs), "the writers did not go on"
            time.sleep(0.05)
    finally:
        stop.touch()
        for p in procs:
            p.wait(timeout=120)
    entries = [(w, e) for w, p in enumerate(logs) for e in _entries(p)]
    acked = [(w, e) for w, e in entries if "ack" in e]
    failed = [(w, e) for w, e in entries if "error" in e]
    assert any(e["t"] > restarted_at for _, e in acked)
    stored = {r["schedule"] for r in raw_query(url, "SELECT schedule FROM records")}
    return acked, failed, stored


def test_server_restart_mid_run_loses_nothing_acknowledged(tmp_path, pg_cluster, url):
    """8 writers over TCP with a password record while the server restarts as
    after a crash: every call is acknowledged (lost connections are retried,
    and a retried record recognizes its own row: never a False for a new
    schedule), every acknowledged record is in the table, and no message
    carries the password."""
    tcp = _tcp(pg_cluster, url)
    acked, failed, stored = _restart_run(tmp_path, pg_cluster, tcp)
    assert failed == [], failed[:3]
    assert all(e["ack"] is True for _, e in acked), [e for _, e in acked if e["ack"] is not True][:3]
    missing = [(w, e["i"]) for w, e in acked if f"U(L0,{e['i']},comps=['r{w}'])" not in stored]
    assert missing == []
    assert len(stored) == len(acked)


def test_negative_control_asynchronous_commit_loses_acknowledged_records(tmp_path, pg_cluster, url):
    """The check above catches lost acknowledgements: with the server told
    not to wait for its WAL at commit (synchronous_commit=off), an
    immediate restart loses records that were acknowledged."""
    for attempt in range(3):
        schema_url = new_pg_url(pg_cluster)
        acked, failed, stored = _restart_run(tmp_path / f"a{attempt}", pg_cluster,
                                             _with_options(schema_url, "synchronous_commit=off"))
        missing = [(w, e["i"]) for w, e in acked if f"U(L0,{e['i']},comps=['r{w}'])" not in stored]
        if missing:
            return
    pytest.fail("asynchronous commit lost no acknowledged record in 3 immediate restarts")


# ---------------------------------------------------------------------------
# Authentication and TLS
# ---------------------------------------------------------------------------


def test_password_in_the_url_works_and_is_never_shown(pg_cluster, url):
    tcp = _tcp(pg_cluster, url)
    with TiraStore(tcp, cpu_model=TEST_CPU) as s:
        assert s.record("blur", SRC_BLUR, SCHED_R, True, [1.0])
        assert pgcluster.PASSWORD not in repr(s)
        assert quote(pgcluster.PASSWORD, safe="") not in s.db_path
        assert s.db_path.startswith("postgresql://tira_pw@127.0.0.1:")
        # A pickled store re-opens with the password it was given.
        clone = pickle.loads(pickle.dumps(s))
        assert clone.lookup("blur", SRC_BLUR, SCHED_R).execution_times == [1.0]
        clone.close()


def test_wrong_or_missing_password_is_a_permission_error_without_it(pg_cluster, url):
    wrong = "not-" + pgcluster.PASSWORD
    for bad in (_tcp(pg_cluster, url, password=wrong), _tcp(pg_cluster, url, password=None)):
        env_has = os.environ.pop("PGPASSWORD", None)
        try:
            with pytest.raises(PermissionError) as ei:
                TiraStore(bad, cpu_model=TEST_CPU)
        finally:
            if env_has is not None:
                os.environ["PGPASSWORD"] = env_has
        msg = str(ei.value)
        assert "tira_pw" in msg and "127.0.0.1" in msg
        assert wrong not in msg and quote(wrong, safe="") not in msg


def test_pgpass_and_pgpassword_supply_the_password(pg_cluster, url, tmp_path, monkeypatch):
    """libpq's conventions: ~/.pgpass (mode 0600), then PGPASSWORD."""
    tcp = _tcp(pg_cluster, url, password=None)
    code = ("import sys\nfrom tirastore import TiraStore\n"
            "with TiraStore(sys.argv[1], cpu_model=sys.argv[2]) as s: print(s.count())")
    home = tmp_path / "home"
    home.mkdir()
    pgpass = home / ".pgpass"
    pgpass.write_text(f"127.0.0.1:{pg_cluster.port}:tira:tira_pw:{pgcluster.PASSWORD.replace(':', chr(92) + ':')}\n")
    pgpass.chmod(0o600)
    env = {k: v for k, v in os.environ.items() if k not in ("PGPASSWORD", "PGPASSFILE")}
    out = subprocess.run([sys.executable, "-c", code, tcp, TEST_CPU], env={**env, "HOME": str(home)},
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "0", out.stderr
    out = subprocess.run([sys.executable, "-c", code, tcp, TEST_CPU],
                         env={**env, "HOME": str(tmp_path), "PGPASSWORD": pgcluster.PASSWORD},
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "0", out.stderr
    # Control: neither, and the server refuses.
    out = subprocess.run([sys.executable, "-c", code, tcp, TEST_CPU], env={**env, "HOME": str(tmp_path)},
                         capture_output=True, text=True, timeout=120)
    assert out.returncode != 0 and "PermissionError" in out.stderr


def _tls_sessions(pg_cluster) -> int:
    return int(pg_cluster.psql("SELECT count(*) FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) "
                               "WHERE a.usename = 'tira_tls' AND s.ssl").strip())


def test_tls_is_used_and_verified(pg_cluster, url):
    """tira_tls may connect over TLS only (pg_hba hostssl). sslmode=require
    and verify-full (against the server's certificate) work, and the
    server sees a TLS session; without TLS the server refuses it; with
    verify-full against another root the client refuses the server."""
    with pytest.raises(PermissionError):
        TiraStore(_tcp(pg_cluster, url, user="tira_tls", sslmode="disable"), cpu_model=TEST_CPU)
    for mode, extra in (("require", {}), ("verify-full", {"sslrootcert": pg_cluster.cert})):
        with TiraStore(_tcp(pg_cluster, url, user="tira_tls", sslmode=mode, **extra), cpu_model=TEST_CPU) as s:
            s.record("blur", SRC_BLUR, SCHED_S, True, [2.0])
            assert _tls_sessions(pg_cluster) >= 1
    other = Path(pg_cluster.base) / "other-root.crt"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=other",
                    "-keyout", str(other) + ".key", "-out", str(other)], check=True, capture_output=True)
    with pytest.raises(sqlite3.OperationalError, match="certificate"):
        TiraStore(_tcp(pg_cluster, url, user="tira_tls", sslmode="verify-full", sslrootcert=str(other),
                       connect_timeout="5"), cpu_model=TEST_CPU)


# ---------------------------------------------------------------------------
# Faults and bad locations
# ---------------------------------------------------------------------------


def _serve(reply: bytes | None) -> tuple[int, threading.Event]:
    """A TCP server on 127.0.0.1 that answers every connection with reply
    (None: accepts and says nothing)."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)
    done = threading.Event()
    conns = []

    def run():
        srv.settimeout(0.2)
        while not done.is_set():
            try:
                c, _ = srv.accept()
            except OSError:
                continue
            conns.append(c)
            if reply is not None:
                try:
                    c.recv(1024)
                    c.sendall(reply)
                except OSError:
                    pass
        for c in conns:
            c.close()
        srv.close()

    threading.Thread(target=run, daemon=True).start()
    return srv.getsockname()[1], done


def test_a_server_that_is_not_postgresql(pg_cluster):
    port, done = _serve(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
    try:
        t0 = time.monotonic()
        with pytest.raises(sqlite3.DatabaseError) as ei:
            TiraStore(f"postgresql://u:pw@127.0.0.1:{port}/db?sslmode=disable&connect_timeout=5", cpu_model=TEST_CPU)
        assert not isinstance(ei.value, sqlite3.OperationalError), ei.value
        assert "PostgreSQL" in str(ei.value) and ":pw@" not in str(ei.value)
        assert time.monotonic() - t0 < 10
    finally:
        done.set()


def test_a_silent_server_times_out_at_connect_timeout(pg_cluster):
    """A peer that accepts and never answers (a cut network past a proxy):
    the open fails after connect_timeout, without retrying it."""
    port, done = _serve(None)
    try:
        t0 = time.monotonic()
        with pytest.raises(TimeoutError):
            TiraStore(f"postgresql://u@127.0.0.1:{port}/db?sslmode=disable&connect_timeout=1", cpu_model=TEST_CPU)
        assert time.monotonic() - t0 < 5
    finally:
        done.set()


def _server_pids(pg_cluster) -> list[int]:
    """The cluster's postmaster and its children."""
    pm = int((Path(pg_cluster.base) / "data" / "postmaster.pid").read_text().split()[0])
    kids = subprocess.run(["pgrep", "-P", str(pm)], capture_output=True, text=True).stdout.split()
    return [pm, *map(int, kids)]


HUNG_LOOKUP = """
import os, sys, time
from tirastore import TiraStore
s = TiraStore(sys.argv[1], cpu_model=sys.argv[2])
s.lookup("blur", "void f() {}", "R(L0,comps=['c1'])")
open(sys.argv[3], "w").close()
while not os.path.exists(sys.argv[3] + ".go"):  # the server is stopped
    time.sleep(0.01)
t0 = time.monotonic()
try:
    s.lookup("blur", "void f() {}", "R(L0,comps=['c1'])")
    print("answered", time.monotonic() - t0, flush=True)
except TimeoutError as e:
    print("timeout", time.monotonic() - t0, e, flush=True)
t0 = time.monotonic()
s.close()
print("closed", time.monotonic() - t0, flush=True)
"""


@pytest.mark.parametrize("control", [False, True], ids=["statement-deadline", "negative-control-no-deadline"])
def test_a_frozen_server_fails_a_call_at_its_deadline(pg_cluster, url, tmp_path, control):
    """A server that stops answering mid-run (SIGSTOP, as a cut network
    looks): a lookup fails with TimeoutError at its client-side deadline
    (the statement_timeout, 1 s here, plus 10 s), never hangs, and closing
    the store then takes at most a second. Control:
    with statement_timeout=0, which removes the deadline, it is still
    waiting after 20 s."""
    u = _with_options(url, "statement_timeout=0" if control else "statement_timeout=1000")
    TiraStore(u, cpu_model=TEST_CPU).close()
    ready = tmp_path / "ready"
    p = subprocess.Popen([sys.executable, "-c", HUNG_LOOKUP, u, TEST_CPU, str(ready)], stdout=subprocess.PIPE, text=True)
    end = time.monotonic() + 60
    while not ready.exists():
        assert p.poll() is None and time.monotonic() < end
        time.sleep(0.01)
    pids = _server_pids(pg_cluster)
    for pid in pids:
        os.kill(pid, 19)  # SIGSTOP
    Path(str(ready) + ".go").touch()
    try:
        try:
            out, _ = p.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            out = None
    finally:
        for pid in pids:
            os.kill(pid, 18)  # SIGCONT
        p.kill()
        p.wait()
    if control:
        assert out is None, out
    else:
        assert out is not None and out.startswith("timeout"), out
        assert 10.5 < float(out.split()[1]) < 15, out
        closed = out.splitlines()[-1].split()
        assert closed[0] == "closed" and float(closed[1]) < 1.5, out


def test_a_newer_schema_is_refused(pg_cluster, url):
    TiraStore(url, cpu_model=TEST_CPU).close()
    schema = _schema(url)
    pg_cluster.psql(f"UPDATE \"{schema}\".db_meta SET value = '99' WHERE key = 'postgres_schema'")
    with pytest.raises(sqlite3.DatabaseError, match="newer"):
        TiraStore(url, cpu_model=TEST_CPU)
    pg_cluster.psql(f"UPDATE \"{schema}\".db_meta SET value = '1' WHERE key = 'postgres_schema'; "
                    f"UPDATE \"{schema}\".db_meta SET value = '3' WHERE key = 'schema_version'")
    with pytest.raises(sqlite3.DatabaseError, match="schema_version is 3"):
        TiraStore(url, cpu_model=TEST_CPU)


def test_missing_database_and_create_false(pg_cluster, url):
    with pytest.raises(FileNotFoundError, match="createdb"):
        TiraStore(pg_cluster.url(db="no_such_db"), cpu_model=TEST_CPU)
    with pytest.raises(FileNotFoundError, match="create=False"):
        TiraStore(url, cpu_model=TEST_CPU, create=False)
    assert raw_query(url, "SELECT table_name FROM information_schema.tables "
                          f"WHERE table_schema = '{_schema(url)}'") == []


def test_other_urls_are_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match="mysql://"):
        TiraStore("mysql://u:secret@h/db", cpu_model=TEST_CPU)
    assert list(tmp_path.iterdir()) == []


def test_the_schema_is_the_sqlite_one(pg_cluster, url):
    """The same tables and columns as the SQLite schema, plus records.rowid;
    the CPU metadata and version rows in db_meta."""
    with TiraStore(url, cpu_model=TEST_CPU, slurm_cpus="4") as s:
        s.record("blur", SRC_BLUR, SCHED_R, True, [1.0])
    cols = raw_query(url, "SELECT table_name, column_name FROM information_schema.columns "
                          f"WHERE table_schema = '{_schema(url)}' ORDER BY table_name, ordinal_position")
    tables: dict[str, list[str]] = {}
    for c in cols:
        tables.setdefault(c["table_name"], []).append(c["column_name"])
    assert tables["records"] == ["key", "program_hash", "schedule", "result_json", "hostname", "username",
                                 "creation_date", "update_date", "source_project", "rowid"]
    assert tables["programs"] == ["program_hash", "program_name", "source_code"]
    assert tables["db_meta"] == ["key", "value"]
    assert {"config_entries", "config_imports", "claims", "record_runs", "run_contexts"} <= set(tables)
    meta = {r["key"]: r["value"] for r in raw_query(url, "SELECT key, value FROM db_meta")}
    assert meta["schema_version"] == "2" and meta["postgres_schema"] == "4"
    assert meta["cpu_model"] == TEST_CPU and meta["slurm_cpus"] == "4"


def test_sixteen_processes_create_one_schema_at_once(pg_cluster, tmp_path):
    url = new_pg_url(pg_cluster)
    code = "import sys\nfrom tirastore import TiraStore\nTiraStore(sys.argv[1], cpu_model=sys.argv[2]).close()"
    procs = [subprocess.Popen([sys.executable, "-c", code, url, TEST_CPU], stderr=subprocess.PIPE, text=True)
             for _ in range(16)]
    errs = [p.communicate(timeout=120)[1] for p in procs]
    assert all(p.returncode == 0 for p in procs), [e for e in errs if e][:2]
    assert raw_query(url, "SELECT count(*) AS n FROM db_meta WHERE key = 'schema_version'") == [{"n": 1}]


def test_persistent_cache_on_a_server(pg_cluster, url):
    """PersistentCache(path=URL): the kernel-config cache in the server's
    database; a put is seen at once by another process."""
    cache = PersistentCache("matmul", path=url)
    try:
        cache.put("gpu:0", "mm", "m1024", {"block": 128})
        code = ("import sys\nfrom tirastore import PersistentCache\n"
                "c = PersistentCache('matmul', path=sys.argv[1])\nprint(c.get('gpu:0', 'mm', 'm1024'))")
        out = subprocess.run([sys.executable, "-c", code, url], capture_output=True, text=True, timeout=120)
        assert out.stdout.strip() in ("{'block': 128}", "Namespace(block=128)"), out.stderr
        assert cache.json_path is None
    finally:
        cache.close()


CLAIM_HOLDER = """
import sys, time
from tirastore import TiraStore
s = TiraStore(sys.argv[1], cpu_model=sys.argv[2])
c = s.lookup_or_claim("blur", sys.argv[3], sys.argv[4], lease=30)
open(sys.argv[5], "w").close()
time.sleep(600)
"""


def test_a_claim_expires_by_the_servers_clock(pg_cluster, url, tmp_path):
    """A claim is judged by the server's clock: a waiter that arrives after
    the lease ran out by it takes the claim over at once, without watching
    it for a lease first. Control: the same stopped holder's claim, not yet
    expired by the server's clock, is busy."""
    ready = tmp_path / "ready"
    holder = subprocess.Popen([sys.executable, "-c", CLAIM_HOLDER, url, TEST_CPU, SRC_BLUR, SCHED_S, str(ready)])
    try:
        end = time.monotonic() + 60
        while not ready.exists():
            assert holder.poll() is None and time.monotonic() < end
            time.sleep(0.01)
        os.kill(holder.pid, 19)  # SIGSTOP: no more renewals
        with TiraStore(url, cpu_model=TEST_CPU) as b:
            assert b.lookup_or_claim("blur", SRC_BLUR, SCHED_S, wait=False) is None  # control: 30 s left
            # As if the server had last seen a renewal a minute ago.
            pg_cluster.psql(f"UPDATE \"{_schema(url)}\".claims SET renewed_at = to_char((clock_timestamp() - "
                            "interval '60 s') AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US') || '+00:00'")
            t0 = time.monotonic()
            took = b.lookup_or_claim("blur", SRC_BLUR, SCHED_S, wait=False)
            assert took is not None and not isinstance(took, LookupResult)
            assert time.monotonic() - t0 < 10  # not after watching it for its 30 s lease
            assert [(c.pid, c.lease) for c in b.claims()] == [(os.getpid(), took.lease)]  # ours now
            took.release()
    finally:
        holder.kill()
        holder.wait()


# ---------------------------------------------------------------------------
# The tirastore command on a server's database
# ---------------------------------------------------------------------------


def _cli(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    out = subprocess.run([sys.executable, "-m", "tirastore", *args], capture_output=True, text=True, timeout=300)
    if check:
        assert out.returncode == 0, out.stderr
    return out


def test_cli_merge_both_ways_export_stats_check_backup(pg_cluster, url, tmp_path):
    """merge from a SQLite file into PostgreSQL and back; the two databases
    then export the same bytes; stats, check, backup and claims work on the
    URL, and lock status says there is no lock file."""
    a = tmp_path / "a.db"
    with TiraStore(a, cpu_model=TEST_CPU, slurm_cpus="4", source_project="p") as s:
        s.record("blur", SRC_BLUR, SCHED_R, True, [1.0])
        s.record_many("prog", SRC, [{"tiralib_schedule_string": f"U(L0,{i},comps=['c'])", "is_legal": i % 2 == 0,
                                     "execution_times": [float(i)] if i % 2 == 0 else None} for i in range(5)])
    r = json.loads(_cli("merge", url, str(a), "--json").stdout)
    assert r["created"] is True and r["sources"][0]["added"] == 6 and r["db_path"] == url
    with TiraStore(url, cpu_model=TEST_CPU, slurm_cpus="4") as s:  # the new database took a's CPU metadata
        assert s.writes_allowed
        s.record("blur", SRC_BLUR, SCHED_S, False, None)
    b = tmp_path / "b.db"
    r = json.loads(_cli("merge", str(b), url, "--json").stdout)
    assert r["created"] is True and r["sources"][0]["added"] == 7 and r["sources"][0]["source"] == url
    _cli("export", url, str(tmp_path / "pg.json"))
    _cli("export", str(b), str(tmp_path / "b.json"))
    assert (tmp_path / "pg.json").read_bytes() == (tmp_path / "b.json").read_bytes()
    st = json.loads(_cli("stats", url, "--json", "--by", "program").stdout)
    assert st["total_records"] == 7 and st["file_size"] is None and st["cpu_model"] == TEST_CPU
    assert [p["program_name"] for p in st["programs"]] == ["blur", "prog"]
    ck = json.loads(_cli("check", url, "--json").stdout)
    assert ck["ok"] and ck["records"] == 7 and ck["lock"] is None and ck["tables"]["orphan_records"] == 0
    text = _cli("check", url).stdout  # the text form too (it once failed on the missing lock)
    assert "server's database" in text and text.rstrip().endswith("ok"), text
    bk = json.loads(_cli("backup", url, str(tmp_path / "snap.db"), "--json").stdout)
    assert sqlite3.connect(bk["path"]).execute("SELECT count(*) FROM records").fetchone() == (7,)
    assert json.loads(_cli("claims", url, "--json").stdout) == []
    out = _cli("lock", "status", url, check=False)
    assert out.returncode == 1 and "no lock file" in out.stderr


def test_root_certificate_from_home(pg_cluster, url, tmp_path):
    """libpq's ~/.postgresql/root.crt, found through $HOME: verify-full
    without sslrootcert trusts it. Control: a $HOME without it, and the
    server's certificate is refused."""
    tls = _tcp(pg_cluster, url, user="tira_tls", sslmode="verify-full", connect_timeout="5")
    code = ("import sys\nfrom tirastore import TiraStore\n"
            "with TiraStore(sys.argv[1], cpu_model=sys.argv[2]) as s: print(s.count())")
    home = tmp_path / "home"
    (home / ".postgresql").mkdir(parents=True)
    (home / ".postgresql" / "root.crt").write_bytes(Path(pg_cluster.cert).read_bytes())
    env = {k: v for k, v in os.environ.items() if not k.startswith("PGSSL")}
    out = subprocess.run([sys.executable, "-c", code, tls, TEST_CPU], env={**env, "HOME": str(home)},
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "0", out.stderr
    empty = tmp_path / "empty"
    empty.mkdir()
    out = subprocess.run([sys.executable, "-c", code, tls, TEST_CPU], env={**env, "HOME": str(empty)},
                         capture_output=True, text=True, timeout=120)
    assert out.returncode != 0 and "certificate" in out.stderr, out.stderr
