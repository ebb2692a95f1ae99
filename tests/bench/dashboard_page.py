"""The page side of the bench's dashboard section (tests/bench/dashboard.go).

    python dashboard_page.py SPEC.json   ->  one JSON document on stdout

Headless Chromium (tests/python/chromium.py, the DevTools protocol over a
pipe) watches `python -m tirastore dashboard DB --port <free>`, the
process started here with this tree's package (the bench sets PYTHONPATH
and TIRASTORE_LIB):

* first paint, once per start (``starts``): from just before the server's
  process is started to the first animation frame after the overview's
  program rows are in the document. The browser is up and on about:blank
  before the server starts (its own start-up is not the dashboard's), and
  the page is asked for as soon as the server prints its URL. The time the
  server took to print it is given beside.
* refresh, ``rounds`` times on one page: another process writes
  ``new_records`` records of a new program in one record_many; from its
  acknowledgement to the frame after the program's row appears, and the
  page's polls (the page's own fetches, timed and sized in the page) that
  brought the new records: their time and bytes.

Times are wall-clock (``time.time()`` here, ``performance.timeOrigin +
performance.now()`` in the page: the same clock of this machine). The
probes are installed with Page.addScriptToEvaluateOnNewDocument, which
runs before the page's scripts and is not subject to its CSP; they only
observe (a MutationObserver, a wrapper around fetch).
"""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

# The probe: when the programs table gets rows, and when a row named
# window.__tsWant appears, stamp the next animation frame (the paint that
# shows them); every /api/ fetch is timed to the end of its body and sized.
PROBE = r"""
(() => {
  const now = () => performance.timeOrigin + performance.now();
  window.__ts = {polls: [], rowsAt: null, wantAt: null};
  const frame = (key) => requestAnimationFrame(() => { window.__ts[key] = now(); });
  const names = () => [...document.querySelectorAll('#programs tbody td.name')].map(td => td.textContent);
  new MutationObserver(() => {
      const ts = window.__ts;
      if (ts.rowsAt === null && ts.rowsPending === undefined &&
          document.querySelectorAll('#programs tbody tr').length > 0) {
        ts.rowsPending = true;
        frame('rowsAt');
      }
      if (window.__tsWant && ts.wantAt === null && ts.wantPending !== window.__tsWant &&
          names().includes(window.__tsWant)) {
        ts.wantPending = window.__tsWant;
        frame('wantAt');
      }
  }).observe(document, {childList: true, subtree: true});
  const orig = window.fetch.bind(window);
  window.fetch = async (url, opts) => {
    const t0 = now();
    const r = await orig(url, opts);
    const body = await r.clone().arrayBuffer();
    let records = null;
    try { records = JSON.parse(new TextDecoder().decode(body)).records; } catch (e) {}
    window.__ts.polls.push({url: String(url), start: t0, end: now(), bytes: body.byteLength, records});
    return r;
  };
})();
"""

WRITER = """
import json, sys, time
from tirastore import TiraStore
db, name, n, cpu = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
with TiraStore(db, source_project="bench-dashboard-writer", cpu_model=cpu, slurm_cpus="N/A", create=False) as s:
    ms = [{"tiralib_schedule_string": f"U(L0,{i + 2},comps=['w'])", "is_legal": True,
           "execution_times": [0.01 * (1 + i % 7), 0.011 * (1 + i % 7)]} for i in range(n)]
    t0 = time.time()
    written = s.record_many(name, "void " + name + "() {}", ms)
    print(json.dumps({"acked": time.time(), "write_s": time.time() - t0, "written": written}))
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """A `python -m tirastore dashboard` process on a free port."""

    def __init__(self, db: str) -> None:
        self.port = free_port()
        self.started = time.time()
        self.proc = subprocess.Popen([sys.executable, "-m", "tirastore", "dashboard", db, "--port", str(self.port)],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        self.ready = time.time()
        if " on http" not in line:
            self.stop()
            raise RuntimeError(f"the dashboard did not start: {line!r} {self.proc.stderr.read()[-2000:]}")
        self.url = line.split(" on ", 1)[1].split(" ")[0].strip()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)  # our own child, by its pid
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def wait(browser, expr: str, timeout: float):
    v = browser.wait_for(expr, timeout=timeout)
    if not v:
        raise RuntimeError(f"timed out after {timeout} s waiting for {expr}; page errors: {browser.errors()}")
    return v


def first_paint(browser, db: str) -> dict:
    browser.navigate("about:blank")
    wait(browser, "document.readyState === 'complete' && location.href === 'about:blank'", 10)
    server = Server(db)
    try:
        browser.navigate(server.url)
        at = wait(browser, "window.__ts && window.__ts.rowsAt", 30)
        # The status line says when the server has read the whole table.
        caught = wait(browser, "document.getElementById('status').textContent.startsWith('live') && "
                               "performance.timeOrigin + performance.now()", 120)
        rows = browser.evaluate("document.querySelectorAll('#programs tbody tr').length")
        return {"server_ready_s": server.ready - server.started, "first_paint_s": at / 1e3 - server.started,
                "live_s": caught / 1e3 - server.started, "rows": rows}
    finally:
        server.stop()


def refresh_rounds(browser, db: str, spec: dict) -> list:
    server = Server(db)
    out = []
    try:
        browser.navigate(server.url)
        wait(browser, "document.getElementById('status').textContent.startsWith('live')", 120)
        rng = random.Random(spec["rounds"])
        for k in range(spec["rounds"]):
            name = f"bench-dashboard-new-{k}-{os.getpid()}"
            browser.evaluate("window.__ts.polls = []; 0")
            # An idle poll (nothing new since the last), then a random
            # phase against the page's 2 s polling.
            idle = wait(browser, "window.__ts.polls.find(p => p.url.includes('/api/overview'))", 10)
            time.sleep(rng.uniform(0, 2))
            browser.evaluate(f"window.__tsWant = {json.dumps(name)}; window.__ts.wantAt = null; "
                             "delete window.__ts.wantPending; 0")
            before = browser.evaluate("Math.max(0, ...window.__ts.polls.map(p => p.records || 0))")
            w = subprocess.run([sys.executable, "-c", WRITER, db, name, str(spec["new_records"]), spec["cpu_model"]],
                               capture_output=True, text=True, timeout=120)
            if w.returncode != 0:
                raise RuntimeError(f"writer: {w.stderr[-2000:]}")
            wrote = json.loads(w.stdout)
            at = wait(browser, "window.__ts.wantAt", 30)
            polls = browser.evaluate("window.__ts.polls")
            # The overview poll that first carried the new records.
            carrier = next((p for p in polls if "/api/overview" in p["url"] and (p["records"] or 0) > before), None)
            if carrier is None:
                raise RuntimeError(f"no poll carried the new records: {polls}")
            out.append({
                "visible_s": at / 1e3 - wrote["acked"],
                "written": wrote["written"], "write_s": wrote["write_s"],
                "poll_s": (carrier["end"] - carrier["start"]) / 1e3, "poll_bytes": carrier["bytes"],
                "new_records_polled": carrier["records"] - before,
                "idle_poll_s": (idle["end"] - idle["start"]) / 1e3, "idle_poll_bytes": idle["bytes"],
            })
        return out
    finally:
        server.stop()


def main() -> int:
    spec = json.loads(Path(sys.argv[1]).read_text())
    sys.path.insert(0, str(Path(spec["repo"]) / "tests" / "python"))
    import chromium  # noqa: PLC0415 - from the tests' directory

    if chromium.executable() is None:
        print(json.dumps({"skipped": "chromium is not installed (apt-get install chromium)"}))
        return 0
    # Compile the package's bytecode once (users' installs have it).
    subprocess.run([sys.executable, "-c", "import tirastore.cli, tirastore.dashboard"], check=True, timeout=120)
    browser = chromium.Chromium()
    try:
        browser.send("Page.addScriptToEvaluateOnNewDocument", {"source": PROBE}, session=browser.session)
        starts = [first_paint(browser, spec["db"]) for _ in range(spec["starts"])]
        rounds = refresh_rounds(browser, spec["db"], spec)
        errors = browser.errors()
    finally:
        browser.close()
    print(json.dumps({"starts": starts, "rounds": rounds, "page_errors": errors}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
