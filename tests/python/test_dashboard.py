"""`tirastore dashboard` (issue 31), in a real browser.

The dashboard runs as its own process (`python -m tirastore dashboard`);
Debian's headless Chromium, driven over the DevTools protocol
(tests/python/chromium.py), loads its page under the page's own
Content-Security-Policy. The tests check what the page shows, that a
record written by a third process appears without a reload, that program
names are shown as text (and that the payload used would run if it were
inserted as HTML: the negative control), the refusal of a non-loopback
address without a token, and they leave a screenshot in
build/dashboard.png. Without chromium they skip, except under CI=true.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

import chromium
from conftest import TEST_CPU, TEST_PROJECT

REPO = Path(__file__).resolve().parents[2]
SCRIPT_NAME = "<script>window.__pwned = 1</script>"
IMG_NAME = '<img src=x onerror="window.__pwned = 1">'


def _write(db, program, schedules, project=TEST_PROJECT):
    """Record schedules of program from a process of their own."""
    code = (
        "import sys, json\nfrom tirastore import TiraStore\n"
        "db, prog, project, scheds = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])\n"
        f"with TiraStore(db, source_project=project, cpu_model={TEST_CPU!r}, slurm_cpus='4') as s:\n"
        "    for i, (sched, times) in enumerate(scheds):\n"
        "        s.record(prog, 'void ' + prog + '() {}', sched, times is not None, times)\n"
    )
    subprocess.run([sys.executable, "-c", code, str(db), program, project, json.dumps(schedules)], check=True,
                   timeout=60)


LONG_SCHEDULE = "T2(L0,L1,32,32,comps=['c1'])|U(L2,8,comps=['c1'])|P(L0,comps=['c1'])|T2(L2,L3,16,16,comps=['c1'])"


def _claim_and_die(db, program, schedule):
    """Claim a schedule from a process that dies holding it (its claim stays, flagged dead)."""
    code = (
        "import os, sys\nfrom tirastore import TiraStore\n"
        f"s = TiraStore(sys.argv[1], source_project={TEST_PROJECT!r}, cpu_model={TEST_CPU!r}, slurm_cpus='4')\n"
        "claim = s.lookup_or_claim(sys.argv[2], 'void ' + sys.argv[2] + '() {}', sys.argv[3], lease=600)\n"
        "assert claim is not None and not hasattr(claim, 'execution_times'), claim\n"
        "os._exit(0)  # no release: dead holding it\n"
    )
    subprocess.run([sys.executable, "-c", code, str(db), program, schedule], check=True, timeout=60)


def _schedules(n, base=1.0):
    out = []
    for i in range(n):
        times = None if i % 5 == 4 else [base * (1 + ((i * 37) % 11) / 3), base * (1.1 + ((i * 37) % 11) / 3)]
        out.append((f"U(L0,{i + 2},comps=['c1'])", times))
    return out


class Served:
    """A `tirastore dashboard` process and the URL it printed."""

    def __init__(self, db, *extra, env=None):
        self.proc = subprocess.Popen([sys.executable, "-m", "tirastore", "dashboard", str(db), "--port", "0", *extra],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     env=dict(os.environ, **(env or {})))
        line = self.proc.stdout.readline()
        if " on http" not in line:
            self.proc.kill()
            raise AssertionError(f"dashboard did not start: {line!r} {self.proc.stderr.read()}")
        self.url = line.split(" on ", 1)[1].split(" ")[0]
        self.base = self.url.split("?")[0].rstrip("/")

    def get(self, path, headers=None):
        req = urllib.request.Request(self.base + path, headers=headers or {})
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                return r.status, dict(r.headers), r.read()
        except urllib.error.HTTPError as e:
            return e.code, dict(e.headers), e.read()

    def stop(self):
        self.proc.terminate()  # our own child, by its pid
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture(scope="module")
def browser():
    if chromium.executable() is None:
        if os.environ.get("CI") == "true":
            pytest.fail("chromium is not installed: .ci/run installs it")
        pytest.skip("chromium is not installed (apt-get install chromium)")
    b = chromium.Chromium()
    yield b
    b.close()


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    db = tmp_path_factory.mktemp("dash") / "cache.db"
    _write(db, "blur", _schedules(60))
    _write(db, SCRIPT_NAME, _schedules(12, base=2.0), project="other-project")
    _write(db, IMG_NAME, _schedules(3, base=3.0))
    _claim_and_die(db, "blur", LONG_SCHEDULE)
    s = Served(db)
    s.db = db
    yield s
    s.stop()


def _table_names(browser):
    return browser.evaluate(
        "[...document.querySelectorAll('#programs tbody td.name')].map(td => td.textContent)")


def test_page_shows_its_content(browser, served):
    browser.navigate(served.url)
    assert browser.wait_for("document.querySelectorAll('#programs tbody tr').length === 3"), browser.errors()
    assert sorted(_table_names(browser)) == sorted(["blur", SCRIPT_NAME, IMG_NAME])
    # The program with the most records is shown: its chart (uPlot's
    # canvas), its summary and the spread table of its fastest schedules.
    assert browser.wait_for("document.querySelector('#program-chart canvas') !== null")
    assert browser.evaluate("document.getElementById('program-name').textContent") == "blur"
    summary = browser.evaluate("document.getElementById('program-summary').textContent")
    assert summary.startswith("60 records: 48 legal, 12 illegal"), summary
    assert browser.evaluate("document.querySelectorAll('#spread tbody tr').length") == 10
    health = browser.evaluate("document.getElementById('health').textContent")
    assert "75 (61 legal, 14 illegal)" in health and "free" in health and "none recorded" in health, health
    for dim in ("host", "user", "project"):
        assert browser.evaluate(f"document.querySelector('#fleet-{dim} canvas') !== null"), dim
    claims = browser.evaluate("[...document.querySelectorAll('#claims tbody tr')].map(tr => "
                              "[...tr.cells].map(td => td.textContent))")
    assert len(claims) == 1 and claims[0][:2] == ["blur", LONG_SCHEDULE] and claims[0][-1].startswith("dead"), claims
    assert "live" in browser.evaluate("document.getElementById('status').textContent")
    # Everything loaded under the strict CSP: no violation, no exception.
    assert browser.errors() == []


def _sideways(browser):
    """The top panels' boxes (health, claims) that scroll sideways: content wider than the box."""
    return browser.evaluate(
        "[...document.querySelectorAll('#health-section, #claims-section, #claims-section .scroll')]"
        ".filter(e => e.scrollWidth > e.clientWidth + 1).map(e => e.id || e.parentElement.id)")


def test_panels_fit_without_sideways_scrolling(browser, served):
    """The claims table beside the health panel wraps rather than scrolls
    sideways, at a laptop's width and narrower (where the panels stack).
    The control: the same page with the claims table's cells kept on one
    line (as the first version of the page had them) does scroll."""
    browser.navigate(served.url)
    assert browser.wait_for("document.querySelectorAll('#claims tbody tr td').length > 1")
    try:
        for width in (1280, 1024, 800):
            browser.send("Emulation.setDeviceMetricsOverride",
                         {"width": width, "height": 1100, "deviceScaleFactor": 1, "mobile": False},
                         session=browser.session)
            time.sleep(0.2)
            assert _sideways(browser) == [], width
        browser.evaluate("document.querySelectorAll('#claims th, #claims td').forEach(c => "
                         "{ c.style.whiteSpace = 'nowrap'; c.style.maxWidth = 'none'; }); 0")
        assert "claims-section" in _sideways(browser), "the control did not overflow"
    finally:
        browser.send("Emulation.setDeviceMetricsOverride",
                     {"width": 1280, "height": 1100, "deviceScaleFactor": 1, "mobile": False}, session=browser.session)
        browser.navigate(served.url)  # a page without the control's styles for the next tests


def test_record_of_another_process_appears(browser, served):
    assert browser.wait_for("document.querySelectorAll('#programs tbody tr').length === 3")
    before = browser.evaluate("window.performance.timeOrigin + performance.now()")
    t0 = time.monotonic()
    _write(served.db, "fresh-program", _schedules(2))
    assert browser.wait_for(
        "[...document.querySelectorAll('#programs tbody td.name')].some(td => td.textContent === 'fresh-program')",
        timeout=15), "a record written by another process did not appear"
    print(f"appeared {time.monotonic() - t0:.1f} s after the writer started")
    # Without a reload: the document is the same one.
    assert browser.evaluate("window.performance.timeOrigin + performance.now()") > before
    assert browser.evaluate("performance.getEntriesByType('navigation').length") == 1
    assert "77 (" in browser.evaluate("document.getElementById('health').textContent")


def test_program_names_are_text(browser, served):
    assert browser.wait_for("document.querySelectorAll('#programs tbody tr').length >= 3")
    names = _table_names(browser)
    assert SCRIPT_NAME in names and IMG_NAME in names
    assert browser.evaluate("window.__pwned === undefined")
    assert browser.evaluate("document.querySelectorAll('#programs img, #programs tbody script').length") == 0
    # Selecting it shows its name as text in the heading too.
    browser.evaluate("[...document.querySelectorAll('#programs tbody tr')]"
                     f".find(tr => tr.cells[0].textContent === {json.dumps(IMG_NAME)}).click()")
    assert browser.wait_for(f"document.getElementById('program-name').textContent === {json.dumps(IMG_NAME)}")
    time.sleep(0.5)
    assert browser.evaluate("window.__pwned === undefined")


def test_negative_control_the_payload_runs_as_html(browser, served):
    """The detector works: the same name inserted as HTML runs its handler
    on a page without a CSP; on the dashboard's page the CSP blocks even
    that (a second line behind textContent) and reports it."""
    browser.navigate("about:blank")
    browser.wait_for("document.readyState === 'complete'")
    browser.evaluate(f"document.body.innerHTML = {json.dumps(IMG_NAME)}")
    assert browser.wait_for("window.__pwned === 1", timeout=5), "the control payload did not run"
    browser.navigate(served.url)
    assert browser.wait_for("document.querySelectorAll('#programs tbody tr').length >= 3")
    n = len(browser.errors())
    browser.evaluate(f"document.body.insertAdjacentHTML('beforeend', {json.dumps(IMG_NAME)})")
    time.sleep(0.5)
    assert browser.evaluate("window.__pwned === undefined")
    assert any("Content Security Policy" in e for e in browser.errors()[n:]), browser.errors()
    browser.evaluate("document.querySelector('body > img').remove()")


def test_screenshot(browser, served):
    browser.navigate(served.url)
    assert browser.wait_for("document.querySelector('#fleet-project canvas') !== null && "
                            "document.querySelector('#program-chart canvas') !== null")
    time.sleep(0.3)
    out = REPO / "build" / "dashboard.png"
    browser.screenshot(out)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_server_is_read_only_and_checks_the_host(served):
    status, headers, body = served.get("/api/overview?since=0")
    assert status == 200 and "script-src 'self'" in headers["Content-Security-Policy"]
    doc = json.loads(body)
    assert doc["records"] >= 75 and doc["caught_up"]
    req = urllib.request.Request(served.base + "/api/overview", data=b"{}", method="POST")
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, timeout=10)
    assert e.value.code == 405
    # A page of another site that rebinds its name to 127.0.0.1 is refused.
    assert served.get("/", {"Host": "attacker.example:8050"})[0] == 403
    assert served.get("/../../etc/passwd")[0] == 404
    assert served.get("/assets/../dashboard.py")[0] == 404


def test_non_loopback_needs_a_token(tmp_path):
    db = tmp_path / "cache.db"
    _write(db, "blur", _schedules(3))
    r = subprocess.run([sys.executable, "-m", "tirastore", "dashboard", str(db), "--host", "0.0.0.0", "--port", "0"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "refusing to listen on 0.0.0.0" in r.stderr and "--token" in r.stderr, r
    s = Served(db, "--host", "0.0.0.0", "--token")
    try:
        token = s.url.split("?token=")[1]
        assert len(token) >= 24
        assert s.get("/")[0] == 403
        assert s.get("/api/overview")[0] == 403
        assert s.get("/?token=wrong" + token)[0] == 403
        assert s.get("/api/overview", {"Cookie": "tirastore_dashboard=wrong"})[0] == 403
        status, headers, _ = s.get(f"/?token={token}")
        assert status == 200 and "HttpOnly" in headers["Set-Cookie"]
        status, _, body = s.get("/api/overview", {"Cookie": headers["Set-Cookie"].split(";")[0]})
        assert status == 200 and json.loads(body)["records"] == 3
    finally:
        s.stop()
    # A token given by the environment is the one required.
    s = Served(db, "--host", "0.0.0.0", env={"TIRASTORE_DASHBOARD_TOKEN": "sesame-" + "x" * 20})
    try:
        assert s.url.endswith("?token=sesame-" + "x" * 20)
        assert s.get("/api/overview?token=sesame-" + "x" * 20)[0] == 200
    finally:
        s.stop()


def test_on_a_postgresql_server(request):
    """The same engine calls on a server's database: records of another process appear."""
    from conftest import new_pg_url

    url = new_pg_url(request.getfixturevalue("pg_cluster"))
    _write(url, "blur", _schedules(5))
    s = Served(url)
    try:
        doc = json.loads(s.get("/api/overview?since=0")[2])
        assert doc["records"] == 5 and doc["health"]["server"] and "lock" not in doc["health"]
        _write(url, "second", _schedules(2))
        deadline = time.monotonic() + 15
        while doc["records"] != 7 and time.monotonic() < deadline:
            time.sleep(0.3)
            doc = json.loads(s.get("/api/overview?since=0")[2])
        assert doc["records"] == 7 and {p["program_name"] for p in doc["programs"]} == {"blur", "second"}
    finally:
        s.stop()
