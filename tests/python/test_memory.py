"""RSS stays flat over 100,000 lookups on one store."""

from __future__ import annotations

import gc
import time

import pytest

from conftest import SRC_BLUR, rss_bytes

MIB = 1024 * 1024
N_PROGRAMS = 4
N_SCHEDULES = 50
WARMUP = 5_000
LOOKUPS = 100_000


def _sched(i: int) -> str:
    return f"U(L{i % 3},{i},comps=['c{i % 7}'])"


def _src(p: int) -> str:
    return SRC_BLUR.replace("blur", f"blur{p}")


@pytest.mark.soak
def test_lookup_rss_flat(store, record_property):
    for p in range(N_PROGRAMS):
        n = store.record_many(
            f"blur{p}",
            _src(p),
            [
                {"tiralib_schedule_string": _sched(i), "is_legal": i % 5 != 0,
                 "execution_times": [0.001 * i, float(i), i] if i % 5 != 0 else None}
                for i in range(N_SCHEDULES)
            ],
        )
        assert n == N_SCHEDULES
    assert store.count() == N_PROGRAMS * N_SCHEDULES

    def one(i: int) -> None:
        p = i % N_PROGRAMS
        j = (i // N_PROGRAMS) % (2 * N_SCHEDULES)
        r = store.lookup(f"blur{p}", _src(p), _sched(j))
        if j < N_SCHEDULES:
            assert r is not None and r.is_legal is (j % 5 != 0)
        else:
            assert r is None

    for i in range(WARMUP):
        one(i)
    gc.collect()
    rss_start = rss_bytes()
    t0 = time.monotonic()
    for i in range(LOOKUPS):
        one(i)
    elapsed = time.monotonic() - t0
    gc.collect()
    rss_end = rss_bytes()
    growth = rss_end - rss_start
    msg = (
        f"\n[memory] {LOOKUPS} lookups in {elapsed:.1f}s "
        f"({LOOKUPS / elapsed:.0f}/s); RSS after warm-up {rss_start / MIB:.1f} MiB, "
        f"at end {rss_end / MIB:.1f} MiB, growth {growth / MIB:.2f} MiB"
    )
    print(msg)
    record_property("rss_start_mib", round(rss_start / MIB, 2))
    record_property("rss_end_mib", round(rss_end / MIB, 2))
    record_property("rss_growth_mib", round(growth / MIB, 2))
    record_property("lookups_per_second", round(LOOKUPS / elapsed))
    assert growth < 20 * MIB, msg
