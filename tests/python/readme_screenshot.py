#!/usr/bin/env python3
"""Make docs/dashboard.png, the README's picture of `tirastore dashboard`.

    make screenshot        (or: python3 tests/python/readme_screenshot.py [OUT])

The picture shows what an operator sees during a search, not a test's
database: the demo's four programs (examples/demo.py) searched for about
three hours by four nodes of two users, each program's times falling as
the search finds better schedules, a tenth of the schedules illegal, the
best ones measured again, a `tirastore check` summary, and one worker
measuring a schedule right now (a live claim).

The records are written as a fleet of the original library would have
written them, with their own hosts, users and dates (an engine-written
record is always dated now and named after this host): with Python's
sqlite3, in the original's schema (docs/COMPAT.md), after the engine
created the database. The dashboard then reads
the file as it reads any other. Needs Debian's chromium, as the browser
tests do; the database lives in a temporary directory and is removed.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
import warnings
from datetime import datetime, timedelta, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "python"))  # chromium.py
sys.path.insert(0, str(REPO / "examples"))  # demo.py: the programs and their schedules

import chromium  # noqa: E402
import demo  # noqa: E402

import tirastore  # noqa: E402
from tirastore import _native  # noqa: E402

HOSTS = {"node017": "aliyu", "node018": "aliyu", "node031": "mbaghdadi", "node032": "mbaghdadi"}
PROJECTS = {"aliyu": "beam-search", "mbaghdadi": "mcts"}
HOURS = 3.0
PER_PROGRAM = {"blur": 420, "matmul": 900, "heat2d": 650, "conv2d": 520}
BASE_SECONDS = {"blur": 0.084, "matmul": 1.92, "heat2d": 0.61, "conv2d": 0.43}


def _iso(t: datetime) -> str:
    return t.isoformat(timespec="microseconds")


def _times(rng: random.Random, base: float, progress: float) -> list[float]:
    """Three repeated times of a schedule found at progress (0..1) of the
    search: better schedules as it goes, with the spread of a real node."""
    speedup = 1.0 + 4.0 * (1.0 - math.exp(-3.0 * progress))
    t = base / speedup * math.exp(rng.gauss(0.0, 0.45))
    return [round(t * rng.uniform(0.97, 1.04), 6) for _ in range(3)]


def build(db: Path, now: datetime) -> None:
    with warnings.catch_warnings():  # a private directory: the sharing notice says nothing here
        warnings.simplefilter("ignore", tirastore.TiraStoreWarning)
        tirastore.TiraStore(db).close()  # the engine makes the database
    rng = random.Random(7)
    start = now - timedelta(hours=HOURS)
    programs, rows = [], []
    for p in demo.PROGRAMS:
        h = tirastore.make_program_hash(p.source)
        programs.append((h, p.name, p.source))
        n = PER_PROGRAM[p.name]
        for i, sched in enumerate(demo.schedules_for(p, n)):  # the first: "", the unscheduled baseline
            progress = (i + rng.random()) / n if i else 0.0
            host = rng.choice(list(HOSTS))
            user = HOSTS[host]
            at = start + timedelta(hours=HOURS * progress) + timedelta(seconds=rng.uniform(0, 20))
            legal = not i or rng.random() > 0.1
            times = _times(rng, BASE_SECONDS[p.name], progress) if legal else None
            norm = tirastore.normalize_schedule(sched)
            result = json.dumps({"is_legal": legal, "execution_times": times}, separators=(",", ":"))
            key = _native.call(0, "make_record_key", program_hash=h, tiralib_schedule_string=norm)
            rows.append((key, h, norm, result, host, user, _iso(at), _iso(at),
                         PROJECTS[user]))
    c = sqlite3.connect(db)
    with c:
        c.executemany("INSERT INTO programs (program_hash, program_name, source_code) VALUES (?,?,?)", programs)
        c.executemany("INSERT INTO records (key, program_hash, schedule, result_json, hostname, username,"
                      " creation_date, update_date, source_project) VALUES (?,?,?,?,?,?,?,?,?)",
                      sorted(rows, key=lambda r: r[6]))
    c.close()


NEUTRAL_DIR = Path("/tmp/tirastore-screenshot")


def _neutral_dir() -> Path | None:
    """A directory with a name that means nothing on this machine, made
    afresh (None if the name is taken: then the temporary one is shown)."""
    try:
        NEUTRAL_DIR.mkdir(mode=0o700)
    except FileExistsError:
        return None
    return NEUTRAL_DIR


def _as_node(cmd: list[str]) -> list[str]:
    """cmd on a host named like the fleet's nodes, where unshare can give
    it a hostname of its own (root); else on this host."""
    if os.geteuid() == 0 and shutil.which("unshare"):
        probe = subprocess.run(["unshare", "--uts", "hostname", "node031"], capture_output=True)
        if probe.returncode == 0:
            return ["unshare", "--uts", "sh", "-c", 'hostname node031 && exec "$@"', "sh", *cmd]
    return cmd


def shoot(d: Path, out: Path) -> None:
    """Build the database in d, serve it and take the picture."""
    build(d / "cache.db", datetime.now(timezone.utc))
    subprocess.run([sys.executable, "-m", "tirastore", "check", "cache.db"], cwd=d, check=True,
                   stdout=subprocess.DEVNULL)
    # One worker measuring a schedule of matmul now: its claim is in flight.
    matmul = next(p for p in demo.PROGRAMS if p.name == "matmul")
    worker = subprocess.Popen(_as_node(
        [sys.executable, "-c",
         "import sys, tirastore\n"
         "s = tirastore.TiraStore('cache.db', source_project='beam-search')\n"
         "c = s.lookup_or_claim('matmul', sys.argv[1], sys.argv[2])\n"
         "print('claimed', flush=True)\n"
         "sys.stdin.read()\n",
         matmul.source, "T2(L0,L1,32,64,comps=['c_upd'])|U(L2,8,comps=['c_upd'])"]),
        cwd=d, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    server = None
    try:
        if worker.stdout.readline().strip() != "claimed":
            raise RuntimeError("the claiming worker did not start")
        server = subprocess.Popen([sys.executable, "-m", "tirastore", "dashboard", "cache.db", "--port", "0"],
                                  cwd=d, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = server.stdout.readline()
        if " on http" not in line:
            raise RuntimeError(f"the dashboard did not start: {line!r}")
        url = line.split(" on ", 1)[1].split(" ")[0]
        b = chromium.Chromium(width=1280, height=1610)
        try:
            b.navigate(url)
            if not b.wait_for("document.querySelectorAll('#programs tbody tr').length === 4 && "
                              "document.querySelector('#program-chart canvas') !== null && "
                              "document.querySelector('#fleet-host canvas') !== null", timeout=30):
                raise RuntimeError(f"the page did not fill: {b.errors()}")
            time.sleep(1.0)
            b.screenshot(out)
        finally:
            b.close()
    finally:
        if server is not None:
            server.terminate()
            server.wait(10)
        worker.stdin.close()
        worker.wait(30)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", nargs="?", default=str(REPO / "docs" / "dashboard.png"), help="the PNG to write")
    args = ap.parse_args(argv)
    if chromium.executable() is None:
        print("readme_screenshot: chromium is not installed (apt-get install chromium)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="tirastore-screenshot-") as tmp:
        shown = _neutral_dir()  # the page shows the database's path: not a random one
        try:
            shoot(shown or Path(tmp), Path(args.out))
        finally:
            if shown is not None:
                shutil.rmtree(shown)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
