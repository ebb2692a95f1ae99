"""`tirastore dashboard`, in a real browser.

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
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from datetime import datetime, timezone
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

import chromium
from conftest import TEST_CPU, TEST_PROJECT
from tirastore import dashboard

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
        self.line = self.proc.stdout.readline()
        if " on http" not in self.line:
            self.proc.kill()
            raise AssertionError(f"dashboard did not start: {self.line!r} {self.proc.stderr.read()}")
        self.url = self.line.split(" on ", 1)[1].split(" ")[0]
        self.base = self.url.split("?")[0].rstrip("/")
        self.token = self.url.split("?token=")[1] if "?token=" in self.url else None

    def get(self, path, headers=None, token=True):
        """GET path; with its token in the query (unless token is False or path has one)."""
        if token and self.token and "token=" not in path:
            path += ("&" if "?" in path else "?") + "token=" + self.token
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
    # Each fastest schedule's median, MAD and count of times (the
    # engine's statistics), and its deviation by PolyBench's rule, marked
    # when the database's noise policy calls it unstable.
    heads = browser.evaluate("[...document.querySelectorAll('#spread thead th')].map(th => th.textContent)")
    assert heads[2:5] == ["median (s)", "MAD", "times"], heads
    stats = browser.evaluate("[...document.querySelectorAll('#spread tbody tr')].map(tr => "
                             "[2, 3, 4].map(i => +tr.cells[i].textContent.replace(/,/g, '')))")
    assert all(med > 0 and mad >= 0 and count >= 1 for med, mad, count in stats), stats
    devs = browser.evaluate("[...document.querySelectorAll('#spread tbody tr')].map(tr => tr.cells[8].textContent)")
    assert all(re.fullmatch(r"\d+\.\d%( unstable)?", d) for d in devs), devs
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


def test_the_cookie_carries_the_token_after_the_first_load(browser, served):
    """The printed URL is opened once; the page's script, style and API
    calls, and a later visit without ?token=, are let in by the cookie. The
    control: without the cookie (cleared) the same address is refused."""
    browser.navigate(served.url)
    assert browser.wait_for("document.querySelectorAll('#programs tbody tr').length === 3")
    browser.navigate(served.base + "/")
    assert browser.wait_for("document.querySelectorAll('#programs tbody tr').length === 3 && "
                            "document.getElementById('status').textContent.startsWith('live')"), browser.errors()
    browser.send("Network.clearBrowserCookies", session=browser.session)
    browser.navigate(served.base + "/")
    assert browser.wait_for("document.readyState === 'complete' && document.body !== null && "
                            "document.body.textContent.includes('a valid token is required')")
    browser.navigate(served.url)  # the cookie again, for the next tests
    assert browser.wait_for("document.querySelectorAll('#programs tbody tr').length === 3")


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
        # A rule of the page's style sheet (through the CSSOM, which its
        # Content-Security-Policy allows), not the cells' own styles: the
        # page redraws the claims table at every poll, which drops those.
        browser.evaluate("document.styleSheets[0].insertRule("
                         "'#claims th, #claims td { white-space: nowrap !important; max-width: none !important; }', "
                         "document.styleSheets[0].cssRules.length); 0")
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


# -- the page's time axis, dates, log scale and filters ---------------------------------------

#: The fleet's search (the README picture's: tests/python/readme_screenshot.py)
#: ends at this instant: its records span the three hours before.
FLEET_END = datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc)
#: The browser's time zone in these tests: not UTC, and not a whole hour off.
TZ = "Asia/Kolkata"


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    """The fleet's database (four hosts of two users, two projects, three
    hours), its records as (program, host, user, project, date, legal), and
    its dashboard."""
    import sqlite3

    import readme_screenshot

    db = tmp_path_factory.mktemp("fleet") / "cache.db"
    readme_screenshot.build(db, FLEET_END)
    subprocess.run([sys.executable, "-m", "tirastore", "check", str(db)], check=True, capture_output=True, timeout=120)
    c = sqlite3.connect(db)
    rows = c.execute("SELECT p.program_name, r.hostname, r.username, r.source_project, r.creation_date, "
                     "json_extract(r.result_json, '$.is_legal') FROM records r JOIN programs p USING (program_hash)"
                     ).fetchall()
    c.close()
    s = Served(db)
    s.rows = rows
    yield s
    s.stop()


@pytest.fixture
def in_tz(browser):
    """The browser in the time zone TZ for the test."""
    browser.send("Emulation.setTimezoneOverride", {"timezoneId": TZ}, session=browser.session)
    yield ZoneInfo(TZ)
    browser.send("Emulation.setTimezoneOverride", {"timezoneId": ""}, session=browser.session)


def _local(iso, tz):
    return datetime.fromisoformat(iso).astimezone(tz).strftime("%Y-%m-%d %H:%M:%S")


def _fleet_axes(browser):
    return browser.evaluate(
        "Object.fromEntries(['host', 'user', 'project'].map(d => { const u = tirastoreDashboard.charts['fleet-' + d]; "
        "return [d, {min: u.scales.x.min, max: u.scales.x.max, ticks: u.axes[0]._values, splits: u.axes[0]._splits, "
        "names: u.series.slice(1).map(s => s.label), xs: u.data[0]}]; }))")


def _open(browser, url, rows):
    browser.navigate(url)
    assert browser.wait_for(f"document.querySelectorAll('#programs tbody tr.prog').length === {rows} && "
                            "document.querySelector('#fleet-host canvas') !== null && "
                            "document.querySelector('#program-chart canvas') !== null"), browser.errors()


def test_throughput_axis_spans_the_data(browser, fleet, in_tz):
    """The three throughput charts' time axis runs around the records'
    three hours (not years around them), its ticks are 24-hour times of the
    browser's time zone, the first with its date, and the bins are of a
    clock's width."""
    n = len(browser.errors())  # those of the tests before are theirs
    _open(browser, fleet.url, 4)
    dates = [datetime.fromisoformat(r[4]) for r in fleet.rows]
    first, last = min(dates).timestamp(), max(dates).timestamp()
    for dim, a in _fleet_axes(browser).items():
        assert a["min"] <= first and a["max"] >= last, (dim, a["min"], a["max"], first, last)
        assert a["max"] - a["min"] <= 1.2 * (last - first) + 3600, (dim, a["max"] - a["min"])
        step = a["xs"][1] - a["xs"][0]
        assert step in (60, 120, 300, 600, 900, 1800, 3600) and a["xs"][1] % step == 0, step
        ticks = a["ticks"]
        assert len(ticks) >= 3, ticks
        for split, label in zip(a["splits"], ticks):
            local = datetime.fromtimestamp(split, in_tz)
            assert label.split("\n")[0] == local.strftime("%H:%M"), (split, label)
        assert ticks[0].split("\n")[1] == datetime.fromtimestamp(a["splits"][0], in_tz).strftime("%Y-%m-%d"), ticks
    tz = browser.evaluate("document.getElementById('tz').textContent")
    assert tz.startswith("times in Asia/") and tz.endswith(" (UTC+05:30)"), tz  # Kolkata, or ICU's Calcutta
    assert browser.errors()[n:] == []


def test_one_minute_of_records(browser, tmp_path):
    """What `make demo` leaves: every record within a minute or two. The
    axis is minutes around them (it was two years), the counts per minute."""
    db = tmp_path / "cache.db"
    _write(db, "blur", _schedules(40))
    s = Served(db)
    try:
        _open(browser, s.url, 1)
        doc = json.loads(s.get("/api/overview?since=0")[2])
        f = doc["fleet"]["host"]
        assert f["step"] == 60 and sum(map(sum, f["counts"])) == 40, f
        a = _fleet_axes(browser)["host"]
        end = f["start"] + len(f["counts"][0]) * 60
        assert a["min"] <= f["start"] and a["max"] >= end and a["max"] - a["min"] <= 15 * 60, a
        assert all(":" in t for t in a["ticks"]), a["ticks"]
    finally:
        s.stop()


def test_dates_are_readable(browser, fleet, in_tz):
    """Dates on the page are YYYY-MM-DD HH:MM:SS of the browser's time zone
    (as stored in the tooltip): the programs' last records, the fastest
    schedules' records, the last check."""
    _open(browser, fleet.url, 4)
    last = {}
    for name, _, _, _, date, _ in fleet.rows:
        last[name] = max(last.get(name, date), date)
    cells = browser.evaluate("[...document.querySelectorAll('#programs tbody tr')].map(tr => "
                             "[tr.cells[0].textContent, tr.cells[7].textContent, tr.cells[7].title])")
    for name, shown, title in cells:
        assert shown == _local(last[name], in_tz) and title == "as stored: " + last[name], (name, shown, title)
    assert browser.wait_for("document.querySelectorAll('#spread tbody tr').length === 10")
    recorded = browser.evaluate("[...document.querySelectorAll('#spread tbody tr')].map(tr => tr.cells[10].textContent)")
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", d) for d in recorded), recorded
    health = browser.evaluate("document.getElementById('health').textContent")
    assert re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d \(\d+ (s|min|h|days) ago\) by ", health), health
    page = browser.evaluate("document.querySelector('main').textContent")
    assert not re.search(r"\d{4}-\d\d-\d\dT\d\d:|:\d\d\.\d{6}|\+00:00", page), "a raw ISO date is shown"


def _programs_shown(browser):
    return browser.evaluate("Object.fromEntries([...document.querySelectorAll('#programs tbody tr.prog')].map(tr => "
                            "[tr.cells[0].textContent, [+tr.cells[2].textContent.replace(/,/g, ''), "
                            "+tr.cells[4].textContent.replace(/,/g, '')]]))")


def _choose(browser, dim, value):
    """Choose value (None: any) in the filter of dim, as a reader does."""
    v = "*" if value is None else "=" + value
    browser.evaluate(f"(() => {{ const s = document.getElementById('filter-{dim}'); s.value = {json.dumps(v)}; "
                     "s.dispatchEvent(new Event('change')); })()")


def test_filters(browser, fleet):
    """Choosing a project, a host, a user shows the records they select:
    the programs (counts as the database has them), the throughput's
    series, the number selected; the choice stays in the address (a
    reload keeps it); a choice selecting nothing says so."""
    n = len(browser.errors())  # those of the tests before are theirs
    _open(browser, fleet.url, 4)

    def expected(**want):
        out = {}
        for name, host, user, project, _, legal in fleet.rows:
            if all(dict(host=host, user=user, project=project)[k] == v for k, v in want.items()):
                n, ill = out.get(name, (0, 0))
                out[name] = (n + 1, ill + (not legal))
        return {k: list(v) for k, v in out.items()}

    assert _programs_shown(browser) == expected()
    _choose(browser, "project", "mcts")
    want = expected(project="mcts")
    assert browser.wait_for(f"document.getElementById('filter-matched').textContent.startsWith("
                            f"'{sum(n for n, _ in want.values()):,} of {len(fleet.rows):,} records selected')")
    assert _programs_shown(browser) == want  # drawn in the same task as the count above
    assert browser.wait_for("tirastoreDashboard.charts['fleet-project'].series.length === 2")
    axes = _fleet_axes(browser)
    assert axes["project"]["names"] == ["mcts"] and set(axes["host"]["names"]) == {"node031", "node032"}, axes
    assert axes["user"]["names"] == ["mbaghdadi"]
    selected = browser.evaluate("document.getElementById('program-name').textContent")
    # The shown program's view is fetched after the overview: wait for it.
    assert browser.wait_for(f"document.getElementById('program-summary').textContent.startsWith("
                            f"'{want[selected][0]} records selected')"), (
        selected, browser.evaluate("document.getElementById('program-summary').textContent"))
    assert "project=mcts" in browser.evaluate("location.hash")
    # Two dimensions at once; then a reload keeps them.
    _choose(browser, "host", "node032")
    want = expected(project="mcts", host="node032")
    assert browser.wait_for(f"document.getElementById('filter-matched').textContent.startsWith("
                            f"'{sum(n for n, _ in want.values()):,} of')")
    assert _programs_shown(browser) == want
    href = browser.evaluate("location.href")
    browser.navigate("about:blank")  # a new document, not a move within this one
    assert browser.wait_for("location.href === 'about:blank'")
    browser.navigate(href)
    assert browser.wait_for(f"document.getElementById('filter-matched').textContent.startsWith("
                            f"'{sum(n for n, _ in want.values()):,} of')")
    assert browser.evaluate("document.getElementById('filter-host').value") == "=node032"
    # A user who never worked on that project: nothing selected, said so.
    _choose(browser, "user", "aliyu")
    assert browser.wait_for("document.getElementById('filter-matched').textContent.startsWith('0 of')")
    assert browser.wait_for("document.querySelector('#programs tbody').textContent === 'no records selected' && "
                            "document.getElementById('program-summary').textContent === 'no records selected' && "
                            "document.getElementById('fleet-host').textContent === 'no dated records selected'")
    # All records again.
    browser.evaluate("document.getElementById('filter-clear').click()")
    assert browser.wait_for("document.getElementById('filter-matched').textContent.startsWith('all ')")
    assert browser.wait_for("document.querySelectorAll('#programs tbody tr.prog').length === 4")
    assert _programs_shown(browser) == expected() and browser.evaluate("location.hash") == ""
    assert browser.errors()[n:] == []


def test_log_scale_toggle(browser, fleet):
    """The program chart's time axis: logarithmic when the times span more
    than 20x (automatic), linear when the reader unticks the box, and the
    choice holds for the next program shown."""
    n = len(browser.errors())  # those of the tests before are theirs
    _open(browser, fleet.url, 4)
    distr = "tirastoreDashboard.charts.program.scales.y.distr"
    assert browser.evaluate("document.getElementById('log-scale').checked") is True
    assert browser.evaluate(distr) == 3  # uPlot's logarithmic distribution
    browser.evaluate("document.getElementById('log-scale').click()")
    assert browser.wait_for(f"{distr} === 1")
    assert browser.evaluate("tirastoreDashboard.charts.program.axes[1].label") == "time (s)"
    ticks = browser.evaluate("tirastoreDashboard.charts.program.axes[1]._values")
    browser.evaluate("[...document.querySelectorAll('#programs tbody tr.prog')]"
                     ".find(tr => tr.cells[0].textContent === 'blur').click()")
    assert browser.wait_for("document.getElementById('program-name').textContent === 'blur'")
    assert browser.wait_for(f"{distr} === 1") and not browser.evaluate("document.getElementById('log-scale').checked")
    browser.evaluate("document.getElementById('log-scale').click()")
    assert browser.wait_for(f"{distr} === 3")
    assert browser.evaluate("tirastoreDashboard.charts.program.axes[1].label") == "time (s), log scale"
    assert ticks != browser.evaluate("tirastoreDashboard.charts.program.axes[1]._values")
    assert browser.errors()[n:] == []


def test_filter_api(fleet):
    """The server passes the filter to the engine: project= (empty) selects
    the records without a project; a filter the page does not know is an
    error, not a crash."""
    base = json.loads(fleet.get("/api/overview?since=0")[2])
    assert base["matched"] == len(fleet.rows) and {c["name"] for c in base["choices"]["project"]} == {"beam-search", "mcts"}
    none = json.loads(fleet.get("/api/overview?since=0&project=")[2])
    assert none["matched"] == 0 and none["programs"] == [] and none["records"] == len(fleet.rows)
    one = json.loads(fleet.get("/api/overview?since=0&host=node017")[2])
    assert one["matched"] == sum(r[1] == "node017" for r in fleet.rows)
    assert fleet.get("/api/overview?since=x")[0] == 400
    h = one["programs"][0]["program_hash"]
    view = json.loads(fleet.get(f"/api/program?hash={h}&host=node017")[2])
    assert {t["hostname"] for t in view["top"]} == {"node017"}
    assert json.loads(fleet.get(f"/api/program?hash={h}&host=nowhere")[2]) is None


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


def _small_db(tmp_path):
    db = tmp_path / "cache.db"
    _write(db, "blur", _schedules(3))
    return db


def _dashboard(*args, env=None):
    return subprocess.run([sys.executable, "-m", "tirastore", "dashboard", *map(str, args)], capture_output=True,
                          text=True, timeout=60, env=dict(os.environ, **(env or {})))


def test_a_token_is_required_by_default(tmp_path):
    """Without any option the printed URL carries a random token, and every
    request without it (page, script, API; no token, a wrong one, the
    cookie of another token) is refused; with it, the page sets the cookie
    that carries it afterwards."""
    db = _small_db(tmp_path)
    s = Served(db)
    try:
        assert s.url.startswith("http://127.0.0.1:") and s.token and len(s.token) >= 32, s.url
        assert s.line.count(s.token) == 1  # printed once, in the URL
        for path in ("/", "/api/overview?since=0", "/assets/app.js", "/api/program?hash=x"):
            status, _, body = s.get(path, token=False)
            assert status == 403 and b"token" in body, (path, status)
        wrong = s.token[:-1] + ("B" if s.token.endswith("A") else "A")  # one character off
        assert s.get("/?token=" + wrong)[0] == 403
        assert s.get("/?token=")[0] == 403
        assert s.get("/api/overview", {"Cookie": f"{dashboard.cookie_name('x' * 32)}={'x' * 32}"}, token=False)[0] == 403
        assert s.get("/", {"Cookie": "garbage;;==\"; x"}, token=False)[0] == 403
        status, headers, _ = s.get("/")
        cookie = headers["Set-Cookie"]
        assert status == 200 and cookie.startswith(f"{dashboard.cookie_name(s.token)}={s.token};"), cookie
        assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/" in cookie, cookie
        status, _, body = s.get("/api/overview?since=0", {"Cookie": cookie.split(";")[0]}, token=False)
        assert status == 200 and json.loads(body)["records"] == 3
        # With a token, the loopback address still checks the Host header.
        assert s.get("/", {"Host": "attacker.example"})[0] == 403
    finally:
        s.stop()


def test_the_token_is_compared_in_constant_time(tmp_path, monkeypatch):
    """The handler compares tokens with hmac.compare_digest (in this process:
    a server on a thread, its calls watched)."""
    import threading

    calls = []
    real = dashboard.hmac.compare_digest

    def watched(a, b):
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(dashboard.hmac, "compare_digest", watched)
    token = dashboard.new_token()
    server = dashboard.make_server(None, "127.0.0.1", 0, token)
    t = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    t.start()
    try:
        base = dashboard.url_of(server).split("?")[0]
        for given in ("wrong", token[:-1]):
            with pytest.raises(urllib.error.HTTPError) as e:
                urllib.request.urlopen(f"{base}nowhere?token={given}", timeout=10)
            assert e.value.code == 403
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(f"{base}nowhere?token={token}", timeout=10)
        assert e.value.code == 404  # past the token: no such page
        assert calls == [(b"wrong", token.encode()), (token[:-1].encode(), token.encode()),
                         (token.encode(), token.encode())]
    finally:
        server.shutdown()
        server.server_close()


NOBODY_GET = """
import sys, urllib.request, urllib.error
try:
    with urllib.request.urlopen(sys.argv[1], timeout=10) as r:
        print(r.status, r.read().decode(errors="replace"))
except urllib.error.HTTPError as e:
    print(e.code, e.read().decode(errors="replace"))
"""


def _as_nobody(url):
    """GET url as uid/gid 65534 (another local user): 'status body'."""
    r = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-I", "-c",
                        NOBODY_GET, url], capture_output=True, text=True, timeout=60, cwd="/")
    assert r.returncode == 0, r
    return r.stdout


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None,
                    reason="needs root and setpriv to act as another user")
def test_another_user_cannot_read_the_page_without_the_token(tmp_path):
    """A root-only database (0600 in a 0700 directory): another local user
    cannot read the file, nor the default dashboard's page or API without
    the token (with it, they can: the token is the key). The negative
    control: with --no-token the same request of the same user reads the
    database's contents, which is what the default prevents."""
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    db = private / "cache.db"
    _write(db, "secret-kernel", _schedules(3))
    db.chmod(0o600)
    probe = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-I",
                            "-c", "import sys; open(sys.argv[1], 'rb')", str(db)], capture_output=True, text=True,
                           timeout=60, cwd="/")
    assert probe.returncode != 0 and "PermissionError" in probe.stderr, probe
    s = Served(db)
    try:
        for path in ("/", "/api/overview?since=0"):
            out = _as_nobody(s.base + path)
            assert out.startswith("403 ") and "secret-kernel" not in out, out
        assert _as_nobody(s.base + "/api/overview?since=0&token=" + s.token).startswith("200 ")
    finally:
        s.stop()
    s = Served(db, "--no-token")  # the control
    try:
        assert s.token is None
        out = _as_nobody(s.base + "/api/overview?since=0")
        assert out.startswith("200 ") and "secret-kernel" in out, out
    finally:
        s.stop()


def test_token_options(tmp_path):
    db = _small_db(tmp_path)
    # --no-token is for a loopback address only.
    r = _dashboard(db, "--host", "0.0.0.0", "--port", "0", "--no-token")
    assert r.returncode == 2 and "refusing to listen on 0.0.0.0" in r.stderr and "Traceback" not in r.stderr, r
    r = _dashboard(db, "--port", "0", "--no-token", "--token", "x" * 20)
    assert r.returncode == 2 and "not allowed with" in r.stderr, r
    # A token must fit a URL and a cookie, and be long enough not to be guessed.
    for bad, why in (("short", "at least 16"), ("a;b=c d" + "x" * 16, "letters, digits")):
        r = _dashboard(db, "--port", "0", "--token", bad)
        assert r.returncode == 2 and why in r.stderr and "Traceback" not in r.stderr, r
    r = _dashboard(db, "--port", "0", env={"TIRASTORE_DASHBOARD_TOKEN": "short"})
    assert r.returncode == 2 and "at least 16" in r.stderr, r
    # Another address: a token by default (--token alone: the same).
    for extra in ((), ("--token",)):
        s = Served(db, "--host", "0.0.0.0", *extra)
        try:
            assert len(s.token) >= 32 and s.get("/", token=False)[0] == 403 and s.get("/")[0] == 200
            # Not the loopback address: no Host check (the token is the check).
            assert s.get("/", {"Host": "login-node.example:8050"})[0] == 200
        finally:
            s.stop()
    # A token given by the environment, or by --token TOKEN, is the one required.
    s = Served(db, env={"TIRASTORE_DASHBOARD_TOKEN": "sesame-" + "x" * 20})
    try:
        assert s.url.endswith("?token=sesame-" + "x" * 20)
        assert s.get("/api/overview")[0] == 200 and s.get("/api/overview", token=False)[0] == 403
    finally:
        s.stop()
    s = Served(db, "--token", "given-" + "y" * 20, env={"TIRASTORE_DASHBOARD_TOKEN": "sesame-" + "x" * 20})
    try:
        assert s.token == "given-" + "y" * 20
    finally:
        s.stop()
    # --no-token on the loopback address: no token, and the Host check stays.
    s = Served(db, "--no-token")
    try:
        assert s.token is None and s.url.endswith("/") and s.get("/api/overview")[0] == 200
        assert "Set-Cookie" not in s.get("/")[1]
        assert s.get("/", {"Host": "attacker.example:8050"})[0] == 403
    finally:
        s.stop()


def test_bad_port_and_address_are_clear_errors(tmp_path):
    """--port out of range: a usage error (exit 2); a port in use, or an
    address of another machine: a clear error naming --port (exit 1); never
    a traceback."""
    db = _small_db(tmp_path)
    for port in ("99999", "-1", "http"):
        r = _dashboard(db, "--port", port)
        assert r.returncode == 2 and "usage:" in r.stderr and "--port" in r.stderr, r
        assert "Traceback" not in r.stderr, r.stderr
    s = Served(db)
    try:
        port = s.base.rsplit(":", 1)[1]
        r = _dashboard(db, "--port", port)
        assert r.returncode == 1 and "already in use" in r.stderr and "--port" in r.stderr, r
        assert "Traceback" not in r.stderr and r.stdout == "", r
    finally:
        s.stop()
    r = _dashboard(db, "--port", "0", "--host", "192.0.2.1")  # TEST-NET-1: no machine's
    assert r.returncode == 1 and "not an address of this machine" in r.stderr and "Traceback" not in r.stderr, r
    r = _dashboard(db, "--port", "0", "--host", "no-such-host.invalid")
    assert r.returncode == 1 and "cannot listen on no-such-host.invalid" in r.stderr, r
    assert "Traceback" not in r.stderr, r


def _ipv6_loopback():
    try:
        with socket.socket(socket.AF_INET6) as sock:
            sock.bind(("::1", 0))
        return True
    except OSError:
        return False


@pytest.mark.skipif(not _ipv6_loopback(), reason="no IPv6 loopback address here")
def test_ipv6_loopback(tmp_path):
    db = _small_db(tmp_path)
    s = Served(db, "--host", "::1")
    try:
        assert s.url.startswith("http://[::1]:") and "?token=" in s.url, s.url
        status, _, body = s.get("/api/overview?since=0")
        assert status == 200 and json.loads(body)["records"] == 3
        port = s.base.rsplit(":", 1)[1]
        for host in (f"[::1]:{port}", "[::1]", f"localhost:{port}"):
            assert s.get("/", {"Host": host})[0] == 200, host
        assert s.get("/", {"Host": f"[2001:db8::1]:{port}"})[0] == 403
    finally:
        s.stop()


def _pg_password_url(request):
    """A new schema's URL over TCP, as a user with a password in the URL."""
    from urllib.parse import parse_qs, urlsplit

    from conftest import new_pg_url

    cluster = request.getfixturevalue("pg_cluster")
    schema = parse_qs(urlsplit(new_pg_url(cluster)).query)["options"][0].split("=", 1)[1]
    cluster.psql(f'GRANT ALL ON SCHEMA "{schema}" TO tira_pw')
    return cluster.tcp_url(options=f"-csearch_path={schema}")


def test_on_a_postgresql_server(request, browser):
    """The same engine calls on a server's database: records of another
    process appear. The URL's password is shown nowhere: not in the line
    printed (text or --json), the health JSON or the page, which show the
    store's db_path (the URL without its password)."""
    url = _pg_password_url(request)
    from pgcluster import PASSWORD  # on the path once the cluster is up

    quoted = url.split("://", 1)[1].split("@", 1)[0].split(":", 1)[1]
    assert quoted and quoted != PASSWORD  # the URL holds it %-quoted
    from tirastore import TiraStore

    _write(url, "blur", _schedules(5))
    with TiraStore(url, create=False, allow_cpu_mismatch=True) as store:
        shown = store.db_path
    assert PASSWORD not in shown and quoted not in shown and "tira_pw@127.0.0.1" in shown, shown

    def secret_in(text):
        return PASSWORD in text or quoted in text

    s = Served(url)
    try:
        assert not secret_in(s.line) and f"serving {shown} on http" in s.line, s.line
        doc = json.loads(s.get("/api/overview?since=0")[2])
        assert doc["records"] == 5 and doc["health"]["server"] and "lock" not in doc["health"]
        assert doc["health"]["db_path"] == shown and not secret_in(json.dumps(doc))
        browser.navigate(s.url)
        assert browser.wait_for("document.querySelectorAll('#programs tbody tr').length === 1")
        page = browser.evaluate("document.body.textContent")
        assert shown in page and not secret_in(page)
        _write(url, "second", _schedules(2))
        deadline = time.monotonic() + 15
        while doc["records"] != 7 and time.monotonic() < deadline:
            time.sleep(0.3)
            doc = json.loads(s.get("/api/overview?since=0")[2])
        assert doc["records"] == 7 and {p["program_name"] for p in doc["programs"]} == {"blur", "second"}
    finally:
        s.stop()
    assert not secret_in(s.proc.stderr.read())
    # --json: the same, as one document.
    proc = subprocess.Popen([sys.executable, "-m", "tirastore", "dashboard", url, "--port", "0", "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        lines = [proc.stdout.readline()]
        while lines[-1] and lines[-1] != "}\n":
            lines.append(proc.stdout.readline())
        doc = json.loads("".join(lines))
        assert doc["db_path"] == shown and "?token=" in doc["url"] and not secret_in("".join(lines)), lines
    finally:
        proc.terminate()  # our own child
        proc.wait(10)
