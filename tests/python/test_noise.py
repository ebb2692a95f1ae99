"""Noisy measurements: statistics on read, the database's noise policy, and
re-measurement through claims, beside a worker of the original library.

The fleet test runs four worker processes over 50 schedules, 10 of them
noisy: a fake measurer returns five widely spread times on the first N
measurements of a noisy schedule (N = 1, 2 or 3) and five equal times
afterwards, and sleeps as a measurement would. Every measurement is logged
with its start and end; the logs show which schedule was measured when, by
whom. Meanwhile a worker speaking the original library's protocol
(test_mixed_fleet.OriginalStore) reads the same records and writes its own.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path

import pytest

from conftest import sqlite_only
from test_claims import _start_together
from test_mixed_fleet import OriginalStore
import plan  # tests/multinode, on the path through test_mixed_fleet
from tirastore import Claim, LookupResult, TimingStats, TiraStore

SRC = "void search() { /* the program */ }"
SCHEDS = [f"S(L0,L1,{i},{j},comps=['c1'])" for i in range(1, 11) for j in range(1, 6)]
# Every fifth schedule is noisy for its first N measurements, N cycling
# through 1, 2, 3.
NOISY = {s: 1 + k % 3 for k, s in enumerate(SCHEDS[::5])}
NOISY_TIMES = [1.0, 1.5, 0.6, 1.4, 0.8]
CLEAN_TIMES = [1.0] * 5
# What the policy (5%, at most 3 re-measurements) makes of them, by
# PolyBench's rule generalized (drop the fastest and slowest fifth): one
# noisy run and one clean one are stable (the two outliers of ten are
# dropped); two noisy and two clean runs are stable; three noisy runs
# and one clean one are not, and the cap of four runs ends it.
EXPECTED = {1: (2, True), 2: (4, True), 3: (4, False)}

WORKER = r"""
import random, sys, time
from pathlib import Path
from tirastore import Claim, TiraStore
db, wid, mode, log, go, cpu, noisy = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], Path(sys.argv[5]), sys.argv[6], eval(sys.argv[7])
src = "void search() { /* the program */ }"
scheds = [f"S(L0,L1,{i},{j},comps=['c1'])" for i in range(1, 11) for j in range(1, 6)]
rng = random.Random(wid)

def measure(s, sc, f):
    attempt = len(s.runs("search", src, sc) or [])
    t0 = time.time()
    time.sleep(rng.uniform(0.02, 0.05))
    f.write(f"{sc}\t{t0}\t{time.time()}\t{wid}\n"); f.flush()
    return [1.0, 1.5, 0.6, 1.4, 0.8] if attempt < noisy.get(sc, 0) else [1.0] * 5

with TiraStore(db, cpu_model=cpu, tools={"fake-measurer": "1"}) as s, open(log, "a") as f:
    Path(log + ".ready").touch()
    while not go.exists():
        time.sleep(0.001)
    for _ in range(20):
        rng.shuffle(scheds)
        measured = 0
        for sc in scheds:
            if mode == "claims":
                got = s.lookup_or_claim("search", src, sc, lease=30, remeasure_unstable=True)
                if isinstance(got, Claim):
                    measured += 1
                    got.record(True, measure(s, sc, f))
            else:  # negative control: the same decisions without claims
                got = s.lookup("search", src, sc)
                runs = s.runs("search", src, sc) or []
                if got is None or (not got.stable and len(runs) < 4):
                    measured += 1
                    s.record("search", src, sc, True, measure(s, sc, f), overwrite=True)
        if not measured:
            break
"""

ORIG_SCHEDS = [f"R(L{i},comps=['o'])" for i in range(10)]


def _measurements(logs: list[Path]) -> int:
    """How many measurements the fleet has logged so far."""
    return sum(log.read_text().count("\n") for log in logs if log.exists())


def _original_worker(db: Path, stop: threading.Event, seen: dict, go: Path, logs: list[Path],
                     writes: list[float]) -> None:
    """The original library's worker: from the fleet's start until it is
    done, reads the fleet's records and writes its own under its own lock,
    the first after the fleet's first measurement, then one after every
    second (the time of each in writes), so that they fall within the
    fleet's work even when this thread runs slowly on a loaded machine."""
    orig = OriginalStore(db, "old-project", stale_lock_timeout=600)
    while not go.exists() and not stop.is_set():
        time.sleep(0.001)
    i = k = 0
    while not stop.is_set() or i < len(ORIG_SCHEDS):
        for sc in SCHEDS[k % 5::5]:
            if i < len(ORIG_SCHEDS) and (stop.is_set() or _measurements(logs) > 2 * i):
                assert orig.record("search", SRC, ORIG_SCHEDS[i], True, [0.5 + i]) is True
                writes.append(time.time())
                i += 1
            got = orig.lookup(SRC, sc)
            if got is not None:
                legal, times, _, norm = got
                assert legal is True and len(times) % 5 == 0 and norm == plan.normalize_schedule(sc), got
                seen[sc] = max(seen.get(sc, 0), len(times))
        k += 1
        time.sleep(0.01)


def _fleet(tmp_path: Path, db: Path, mode: str) -> tuple[dict[str, list[tuple[float, float, int]]], list[float]]:
    """Four workers measure SCHEDS (mode "claims": through lookup_or_claim;
    "plain": lookup and record) beside an original worker: the spans of
    each schedule's measurements, and the times of the original's writes."""
    with TiraStore(db, cpu_model=plan.TEST_CPU) as s:
        assert s.set_noise_policy(max_spread=0.05, max_remeasures=3) == {"max_spread": 0.05, "max_remeasures": 3}
    go = tmp_path / "go"
    logs = [tmp_path / f"w{w}.log" for w in range(4)]
    procs = [subprocess.Popen([sys.executable, "-c", WORKER, str(db), str(w), mode, str(logs[w]), str(go),
                               plan.TEST_CPU, repr(NOISY)]) for w in range(4)]
    stop, seen, writes = threading.Event(), {}, []
    orig_error: list = []

    def run_orig():
        try:
            _original_worker(db, stop, seen, go, logs, writes)
        except BaseException as e:  # reported below
            orig_error.append(e)

    orig = threading.Thread(target=run_orig)
    orig.start()
    try:
        _start_together(procs, logs, go)
        for p in procs:
            assert p.wait(timeout=300) == 0
    finally:
        stop.set()
        orig.join(timeout=120)
    assert not orig_error, orig_error
    assert seen, "the original worker read none of the fleet's records"
    measured: dict[str, list[tuple[float, float, int]]] = defaultdict(list)
    for log in logs:
        for line in log.read_text().splitlines():
            sc, t0, t1, w = line.split("\t")
            measured[sc].append((float(t0), float(t1), int(w)))
    return measured, writes


def _overlaps(spans: list[tuple[float, float, int]]) -> bool:
    spans = sorted(spans)
    return any(b[0] < a[1] for a, b in zip(spans, spans[1:]))


@sqlite_only
def test_noisy_schedules_are_measured_again_never_twice_at_once(tmp_path):
    db = tmp_path / "noise.db"
    measured, writes = _fleet(tmp_path, db, "claims")
    assert set(measured) == set(SCHEDS)
    # The original worker wrote while the fleet measured, not before or
    # after it (two writes may trail on a loaded machine).
    spans = [span for spans in measured.values() for span in spans]
    first, last = min(t0 for t0, _, _ in spans), max(t1 for _, t1, _ in spans)
    assert sum(first < t < last for t in writes) >= len(ORIG_SCHEDS) - 2, (first, last, writes)
    for sc, spans in measured.items():
        assert not _overlaps(spans), (sc, spans)
        if sc not in NOISY:
            assert len(spans) == 1, f"stable {sc} measured {len(spans)} times"
    with TiraStore(db, cpu_model=plan.TEST_CPU) as s:
        assert s.claims() == []
        for sc, n in NOISY.items():
            r = s.lookup("search", SRC, sc)
            runs = s.runs("search", SRC, sc)
            want_runs, want_stable = EXPECTED[n]
            assert (len(runs), r.stable) == (want_runs, want_stable), (sc, n, r.stats)
            assert len(measured[sc]) == len(runs), (sc, measured[sc])
            # Appended, not replaced: every run's times, in order.
            assert r.execution_times == [t for run in runs for t in run["times"]]
            assert r.count == 5 * len(runs)
            assert [run["context"]["tools"] for run in runs] == [{"fake-measurer": "1"}] * len(runs)
        # The original worker's records read back; its own lookups parsed
        # every record it met (asserted in its thread).
        for i, sc in enumerate(ORIG_SCHEDS):
            r = s.lookup("search", SRC, sc)
            assert r.execution_times == [0.5 + i] and r.source_project == "old-project"
            assert s.runs("search", SRC, sc)[0]["context"] is None  # the original keeps none


@sqlite_only
def test_negative_control_without_claims_measures_twice(tmp_path):
    """The same decisions without claims: some schedule is measured by two
    workers at once, or a stable one more than once."""
    measured, _ = _fleet(tmp_path, tmp_path / "noise.db", "plain")
    doubled = [sc for sc, spans in measured.items() if _overlaps(spans) or (sc not in NOISY and len(spans) > 1)]
    assert doubled, "no schedule was measured twice without claims"


def test_statistics_and_policy_on_read(make_store):
    """The statistics come with every lookup and judge by the database's
    policy; an illegal record has none."""
    store = make_store()
    assert store.noise_policy() == {"max_spread": 0.05, "max_remeasures": 3}
    store.record("p", SRC, "R(L0,comps=['c'])", True, [1.0, 1.02, 0.99, 1.0, 1.3])
    store.record("p", SRC, "R(L1,comps=['c'])", False, None)
    r = store.lookup("p", SRC, "R(L0,comps=['c'])")
    # Sorted 0.99, 1.0, 1.0, 1.02, 1.3: the fastest and slowest dropped.
    assert r.stats == TimingStats(count=5, median=1.0, mad=pytest.approx(0.01), min=0.99,
                                  spread=pytest.approx((1.02 - 3.02 / 3) / (3.02 / 3)), stable=True)
    assert (r.median, r.min, r.count, r.stable) == (1.0, 0.99, 5, True)
    # to_dict keeps the original's keys; the statistics are the times'.
    assert LookupResult(**r.to_dict()).stats == r.stats._replace(stable=None)
    illegal = store.lookup("p", SRC, "R(L1,comps=['c'])")
    assert illegal.stats is None and illegal.count == 0 and illegal.median is None
    store.set_noise_policy(max_spread=0.001)
    assert store.lookup("p", SRC, "R(L0,comps=['c'])").stable is False
    assert store.noise_policy() == {"max_spread": 0.001, "max_remeasures": 3}
    for bad, exc in [({"max_spread": 0}, ValueError), ({"max_spread": 11}, ValueError),
                     ({"max_remeasures": -1}, ValueError), ({"max_remeasures": 101}, ValueError),
                     ({"max_spread": "5%"}, TypeError), ({"max_remeasures": 1.5}, TypeError)]:
        with pytest.raises(exc):
            store.set_noise_policy(**bad)


@pytest.mark.parametrize("times", [[0.5], [3, 1, 2], [1.0, 1.02, 0.99, 1.0, 1.3], [1, 2.5],
                                   [0.0, 0.0], [1e-300, 5e-324, 1e300], [7], None])
def test_each_statistic_read_alone_is_the_statistics_field(make_store, times):
    """A hit's fields (median, mad, min, count, spread) read one by one
    from the library's reply are those of its stats, read first or not."""
    store = make_store()
    store.record("p", SRC, "R(L0,comps=['c'])", times is not None, times)
    names = ("count", "median", "mad", "min", "spread")
    alone = [getattr(store.lookup("p", SRC, "R(L0,comps=['c'])"), n) for n in names]
    r = store.lookup("p", SRC, "R(L0,comps=['c'])")
    st = r.stats
    want = [0, None, None, None, None] if st is None else [getattr(st, n) for n in names]
    assert alone == want and [getattr(r, n) for n in names] == want
    assert [type(x) for x in alone] == [type(x) for x in want]


def test_remeasure_claim(make_store):
    """An unstable record is claimed only with remeasure_unstable; the
    claim appends a run; a second asker meanwhile gets the record; an
    illegal re-measurement is refused."""
    store = make_store()
    sc = "U(L0,4,comps=['c'])"
    store.record("p", SRC, sc, True, NOISY_TIMES)
    assert isinstance(store.lookup_or_claim("p", SRC, sc), LookupResult)
    claim = store.lookup_or_claim("p", SRC, sc, remeasure_unstable=True)
    assert isinstance(claim, Claim) and claim.remeasure
    busy = store.lookup_or_claim("p", SRC, sc, remeasure_unstable=True, wait=False)
    assert isinstance(busy, LookupResult) and busy.execution_times == NOISY_TIMES
    with pytest.raises(ValueError, match="re-measurement of a legal record"):
        claim.record(False, None)
    assert claim.record(True, CLEAN_TIMES) is True
    r = store.lookup("p", SRC, sc)
    assert r.execution_times == NOISY_TIMES + CLEAN_TIMES and r.stable
    assert [run["count"] for run in store.runs("p", SRC, sc)] == [5, 5]
    assert isinstance(store.lookup_or_claim("p", SRC, sc, remeasure_unstable=True), LookupResult)
    # A miss is claimed as before: not a re-measurement.
    fresh = store.lookup_or_claim("p", SRC, "U(L1,4,comps=['c'])", remeasure_unstable=True)
    assert isinstance(fresh, Claim) and not fresh.remeasure
    fresh.release()


@sqlite_only
def test_original_overwrite_leaves_runs_behind(tmp_path):
    """An original worker's overwrite replaces the times: the runs of the
    old record no longer describe it, and the record is one run of unknown
    context."""
    db = tmp_path / "o.db"
    sc = "U(L0,4,comps=['c'])"
    with TiraStore(db, cpu_model=plan.TEST_CPU) as s:
        s.record("search", SRC, sc, True, NOISY_TIMES)
        assert s.runs("search", SRC, sc)[0]["context"] is not None
    orig = OriginalStore(db, "old-project", stale_lock_timeout=600)
    assert orig.record("search", SRC, sc, True, [2.0, 2.0], overwrite=True)
    with TiraStore(db, cpu_model=plan.TEST_CPU) as s:
        r = s.lookup("search", SRC, sc)
        assert r.execution_times == [2.0, 2.0] and r.stable
        [run] = s.runs("search", SRC, sc)
        assert run["context"] is None and run["times"] == [2.0, 2.0] and run["date"] == r.update_date
    assert orig.lookup(SRC, sc)[1] == [2.0, 2.0]


def test_fingerprint_rules(make_store, db_path):
    """A store with match rules sees only the runs taken in a context like
    its own: a record measured under other tool versions is a miss, claimed
    to be measured here (the claim says what differed); its record appends
    a run, which that store alone sees; a store without rules sees all."""
    sc = "R(L0,comps=['c'])"
    old = make_store(tools={"gcc": "12"})
    old.record("p", SRC, sc, True, [1.0] * 5)
    new = make_store(tools={"gcc": "13"}, match={"tools": "exact", "cpu_model": "family"})
    assert new.lookup("p", SRC, sc) is None
    assert new.lookup_many("p", SRC, [sc]) == [None]
    claim = new.lookup_or_claim("p", SRC, sc)
    assert isinstance(claim, Claim) and claim.remeasure
    assert claim.mismatch == {"tools": ["gcc=12", "gcc=13"]}
    assert claim.record(True, [2.0] * 5) is True
    assert new.lookup("p", SRC, sc).execution_times == [2.0] * 5
    assert old.lookup("p", SRC, sc).execution_times == [1.0] * 5 + [2.0] * 5
    same_as_old = make_store(tools={"gcc": "12"}, match={"tools": "exact"})
    assert same_as_old.lookup("p", SRC, sc).execution_times == [1.0] * 5
    runs = new.runs("p", SRC, sc)
    assert [r["differs"] for r in runs] == [{"tools": ["gcc=12", "gcc=13"]}, None]
    assert [r["differs"] for r in old.runs("p", SRC, sc)] == [None, None]  # no rules


@sqlite_only
def test_fingerprint_rules_refuse_records_without_context(tmp_path):
    """A record the original library wrote carries no context: a store with
    a rule on the CPU model does not take it as measured here."""
    db = tmp_path / "o.db"
    TiraStore(db, cpu_model=plan.TEST_CPU).close()
    orig = OriginalStore(db, "old-project", stale_lock_timeout=600)
    sc = "R(L1,comps=['c'])"
    assert orig.record("search", SRC, sc, True, [3.0])
    with TiraStore(db, cpu_model=plan.TEST_CPU, match={"cpu_model": "exact"}) as s:
        assert s.lookup("search", SRC, sc) is None
        claim = s.lookup_or_claim("search", SRC, sc)
        [run] = s.runs("search", SRC, sc)
        assert run["context"] is None and run["differs"]["cpu_model"][0] == "unknown"
        assert claim.mismatch == run["differs"] and set(claim.mismatch) == {"cpu_model"}
        claim.release()
    with TiraStore(db, cpu_model=plan.TEST_CPU) as s:
        assert s.lookup("search", SRC, sc).execution_times == [3.0]


@pytest.mark.parametrize("match, exc", [
    ({"nope": "exact"}, ValueError), ({"cores": "family"}, ValueError), ({"cpu_model": "fuzzy"}, ValueError),
    ({"cpu_model": 1}, TypeError), ("cpu", TypeError), ({1: "exact"}, TypeError),
])
def test_bad_fingerprint_rules(make_store, match, exc):
    with pytest.raises(exc):
        make_store(match=match)


@pytest.mark.parametrize("tools, says", [
    ({1: "x"}, "tools keys must be str, not int (1)"), ({None: "x"}, "tools keys must be str, not NoneType (None)"),
    ({"gcc": 13}, 'tools["gcc"] must be str, not int'),
    (["gcc"], "tools must be dict of str, not list"),
])
def test_bad_tools(make_store, tools, says):
    """tools is a dict of str to str: a key json.dumps would turn into a
    str unseen (1 into "1") is refused as a value is."""
    with pytest.raises(TypeError) as e:
        make_store(tools=tools)
    assert says in str(e.value)
