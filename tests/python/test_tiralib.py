"""tirastore.tiralib: a TiraLib Schedule whose execute and is_legal go
through a store, with the stand-in of examples/tiralib_standin.py (TiraLib's
signatures; TiraLib itself needs a Tiramisu build to measure anything).
"""

from __future__ import annotations

import inspect
import subprocess
import sys
from pathlib import Path

import pytest

from tirastore.tiralib import CachedSchedule, CompileFailed, IllegalSchedule, MeasurementTimedOut

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "examples"))
import tiralib_standin  # noqa: E402

SCHED = ["T2(L0,L1,32,32,comps=['comp00'])", "U(L3,4,comps=['comp00'])"]


class Counting(tiralib_standin.Schedule):
    """The stand-in, counting TiraLib's calls, with chosen outcomes."""

    run_seconds = 0.01

    def __init__(self, program, legal=True, raises=None, times=None):
        super().__init__(program)
        self.calls = []
        self._legal, self._raises, self._times = legal, raises, times

    def is_legal(self, with_ast: bool = False) -> bool:
        self.calls.append(("is_legal", with_ast))
        self.legality = self._legal
        return self._legal

    def execute(self, min_runs=1, max_runs=None, time_budget=None, delete_files=True):
        self.calls.append(("execute", min_runs, max_runs, time_budget, delete_files))
        if self._raises is not None:
            raise self._raises
        if self._times is not None:
            return list(self._times)
        return super().execute(min_runs, max_runs, time_budget, delete_files)


class CompileError(Exception):
    pass


@pytest.fixture
def program():
    return tiralib_standin.TiramisuProgram.from_name("function_blur")


def make(program, *actions, **kw):
    s = Counting(program, **kw)
    s.add_optimizations(list(actions or SCHED))
    return s


def test_the_standin_has_tiralibs_signatures():
    # As TiraLib's tiralib/tiramisu/schedule.py declares them.
    assert str(inspect.signature(tiralib_standin.Schedule.execute)) == (
        "(self, min_runs: 'int' = 1, max_runs: 'Optional[int]' = None, time_budget: 'Optional[float]' = None, "
        "delete_files: 'bool' = True) -> 'List[float]'")
    assert str(inspect.signature(tiralib_standin.Schedule.is_legal)) == "(self, with_ast: 'bool' = False) -> 'bool'"
    assert list(inspect.signature(CachedSchedule.execute).parameters) == list(
        inspect.signature(tiralib_standin.Schedule.execute).parameters)
    assert list(inspect.signature(CachedSchedule.is_legal).parameters) == list(
        inspect.signature(tiralib_standin.Schedule.is_legal).parameters)


def test_a_miss_is_measured_once_then_every_worker_hits(store, program):
    first = make(program, times=[1.5, 1.4, 1.6])
    assert CachedSchedule(first, store).execute(min_runs=3) == [1.5, 1.4, 1.6]
    assert [c[0] for c in first.calls] == ["is_legal", "execute"]
    assert first.calls[1] == ("execute", 3, None, None, True)  # TiraLib's arguments passed on
    # Another process's instance of the same program: another temporary
    # file name in its cpp_code, the same record.
    other_program = tiralib_standin.TiramisuProgram.from_name("function_blur")
    assert other_program.cpp_code != program.cpp_code
    again = make(other_program)
    cached = CachedSchedule(again, store)
    assert cached.execute(min_runs=3) == [1.5, 1.4, 1.6]
    assert cached.is_legal() is True
    assert again.calls == []  # TiraLib was not called
    r = cached.lookup()
    assert r.schedule == "|".join(SCHED) and r.execution_times == [1.5, 1.4, 1.6]


def test_an_illegal_schedule_is_recorded_and_raised_as_tiralib_does(store, program):
    s = make(program, legal=False)
    with pytest.raises(Exception, match="Schedule is not legal") as e:
        CachedSchedule(s, store).execute()
    assert isinstance(e.value, IllegalSchedule)
    assert [c[0] for c in s.calls] == ["is_legal"]  # never run
    again = make(program)
    assert CachedSchedule(again, store).is_legal() is False
    with pytest.raises(IllegalSchedule):
        CachedSchedule(again, store).execute()
    assert again.calls == []


def test_is_legal_records_only_an_illegal_answer(store, program):
    legal = make(program, "P(L0,comps=['comp00'])")
    assert CachedSchedule(legal, store).is_legal() is True
    assert CachedSchedule(legal, store).lookup() is None  # a legal result needs its times
    illegal = make(program, "R(L0,comps=['comp00'])", legal=False)
    assert CachedSchedule(illegal, store).is_legal() is False
    assert CachedSchedule(illegal, store).lookup().is_legal is False
    # with_ast asks TiraLib (the caller wants its tree) even when recorded.
    asked = make(program, "R(L0,comps=['comp00'])", legal=False)
    assert CachedSchedule(asked, store).is_legal(with_ast=True) is False
    assert asked.calls == [("is_legal", True)]


def test_a_budget_that_ran_out_is_a_censored_timeout(store, program):
    s = make(program, times=[])
    with pytest.raises(MeasurementTimedOut) as e:
        CachedSchedule(s, store).execute(min_runs=0, time_budget=250.0)
    assert e.value.timed_out_after == 250.0  # milliseconds, as TiraLib's times
    r = CachedSchedule(make(program), store).lookup()
    assert (r.censored, r.timed_out_after, r.is_legal) == ("timeout", 250.0, True)
    with pytest.raises(MeasurementTimedOut):  # a hit raises it too, without measuring
        CachedSchedule(make(program), store).execute()
    assert CachedSchedule(make(program), store).is_legal() is True


def test_a_timeouts_bound_is_in_the_unit_of_tiralibs_times(store, program):
    """An older worker reads a timeout's bound as its execution_times: in
    TiraLib's milliseconds it is at least the time the schedule takes, where
    a bound in seconds would make it the fastest schedule of the search."""
    slow = make(program, "U(L3,4,comps=['comp00'])")
    with pytest.raises(MeasurementTimedOut):
        CachedSchedule(slow, store).execute(min_runs=0, time_budget=0.5)  # ms: below one run
    bound = CachedSchedule(make(program, "U(L3,4,comps=['comp00'])"), store).lookup().execution_times
    other = make(program, "U(L3,4,comps=['comp00'])")
    took = tiralib_standin.Schedule.execute(other, min_runs=1)  # what the run really takes, ms
    assert bound == [0.5] and min(took) >= bound[0], (bound, took)


def test_a_subprocess_timeout_is_recorded_at_its_limit(store, program):
    s = make(program, raises=subprocess.TimeoutExpired(["./wrapper"], 30))
    with pytest.raises(MeasurementTimedOut):
        CachedSchedule(s, store).execute()
    assert CachedSchedule(make(program), store).lookup().timed_out_after == 30000.0  # ms


def test_compile_failures_are_recorded_only_when_named(store, program):
    s = make(program, raises=CompileError("g++ exited 1"))
    with pytest.raises(CompileError):
        CachedSchedule(s, store).execute()
    assert CachedSchedule(make(program), store).lookup() is None  # not named: released, not recorded
    assert store.claims() == []
    with pytest.raises(CompileFailed):
        CachedSchedule(s, store, compile_failures=(CompileError,)).execute()
    r = CachedSchedule(make(program), store).lookup()
    assert (r.censored, r.is_legal) == ("compile_failure", False)
    with pytest.raises(CompileFailed):
        CachedSchedule(make(program), store).is_legal()


def test_any_other_error_releases_the_claim(store, program):
    s = make(program, raises=RuntimeError("node lost its GPU"))
    with pytest.raises(RuntimeError, match="GPU"):
        CachedSchedule(s, store).execute()
    assert store.claims() == [] and CachedSchedule(make(program), store).lookup() is None
    ok = make(program, times=[2.0])
    assert CachedSchedule(ok, store).execute() == [2.0]


def test_everything_else_is_the_wrapped_schedules(store, program):
    s = make(program)
    c = CachedSchedule(s, store)
    assert str(c) == str(s) and c.optims_list is s.optims_list and c.tiramisu_program is program
    c.add_optimizations(["P(L0,comps=['comp00'])"])
    assert str(s).endswith("|P(L0,comps=['comp00'])")


def test_bad_arguments_are_refused(store, program):
    with pytest.raises(TypeError, match="program_name"):
        CachedSchedule(object(), store)
    with pytest.raises(TypeError, match="compile_failures"):
        CachedSchedule(make(program), store, compile_failures=[CompileError])
    bad = Counting(program)
    bad.add_optimizations(["T2(L0,comps=['comp00'])"])
    with pytest.raises(ValueError, match="Malformed T2"):
        CachedSchedule(bad, store).execute()
    assert bad.calls == []


def test_is_legal_does_not_wait_for_another_workers_measurement(store, make_store, db_path, program):
    other = make_store(db_path)
    busy = other.lookup_or_claim("function_blur", CachedSchedule(make(program), store).program_source_code, "|".join(SCHED))
    assert busy is not None and not hasattr(busy, "execution_times")
    s = make(program)
    assert CachedSchedule(s, store).is_legal() is True  # checked here, at once
    assert s.calls == [("is_legal", False)]
    busy.release()
