"""TiraLib's schedules, measured once per cluster: a cached ``Schedule``.

TiraLib (Tiramisu's Python library) measures a schedule with
``Schedule.execute(min_runs, max_runs, time_budget, delete_files)`` and
checks it with ``Schedule.is_legal(with_ast)``: exactly what a TiraStore
caches. :class:`CachedSchedule` wraps a TiraLib ``Schedule`` so that both go
through :meth:`TiraStore.lookup_or_claim`: a recorded schedule returns at
once, one that another worker is measuring waits for that worker's result,
and a new one is claimed, measured by TiraLib and recorded::

    from tiralib.tiramisu.schedule import Schedule
    from tirastore import TiraStore
    from tirastore.tiralib import CachedSchedule

    store = TiraStore("/lustre/shared/tirastore.db")
    schedule = Schedule(program)
    schedule.add_optimizations([...])
    times = CachedSchedule(schedule, store).execute(min_runs=5)

Everything else of the ``Schedule`` (``add_optimizations``, ``tree``,
``str()``) is the wrapped one's. TiraLib is not a dependency: this module
only calls the methods and reads the attributes named here, so any object
with TiraLib's signatures works (``examples/tiralib_worker.py`` runs with a
stand-in).

What is recorded:

* an illegal schedule: ``is_legal`` False (found by TiraLib's
  ``is_legal()``, which :meth:`CachedSchedule.execute` asks first, as
  TiraLib's own ``execute`` does);
* the times ``execute`` returns;
* a run that gave no time within its budget (TiraLib returns ``[]`` when
  ``time_budget`` ran out before the first run, with ``min_runs=0``): a
  censored ``"timeout"`` at the budget; and a ``TimeoutError`` or
  ``subprocess.TimeoutExpired`` raised by the measurement, a ``"timeout"``
  at its limit (its ``timeout`` attribute, else the time it ran). A
  timeout's limit is recorded in milliseconds, the unit of the times
  TiraLib returns, so that a reader of ``execution_times`` alone (an older
  worker) sees it as the lower bound it is;
* a compile failure: the exception classes the caller names in
  ``compile_failures`` (none by default: TiraLib raises the same
  classes for a broken installation as for a schedule that does not
  compile, and a broken node must not mark a schedule as failed for
  every worker of the cluster).

Any other exception releases the claim (another worker measures the
schedule) and propagates. A hit of an illegal schedule raises
:exc:`IllegalSchedule` (an ``Exception`` whose message is TiraLib's, "Schedule
is not legal"), of a timeout :exc:`MeasurementTimedOut`, of a compile
failure :exc:`CompileFailed`.

The program is named by TiraLib's ``tiramisu_program.name``; its source is
``tiramisu_program.cpp_code`` with the per-process temporary file name that
TiraLib writes into it (``temp_files_identifier``) put back to the
program's name, so that every worker of the program finds the same
records; pass ``program_source_code`` to name the source yourself.
"""

from __future__ import annotations

import contextlib
import subprocess
import time
from typing import TYPE_CHECKING, Any, Optional

from tirastore.store import LookupResult

if TYPE_CHECKING:
    from tirastore.claim import Claim
    from tirastore.store import TiraStore

__all__ = ["CachedSchedule", "IllegalSchedule", "MeasurementTimedOut", "CompileFailed"]


class IllegalSchedule(Exception):
    """The schedule is recorded, or found, illegal (TiraLib raises a plain
    ``Exception("Schedule is not legal")``; this is one, so code that
    catches TiraLib's catches it too)."""


class MeasurementTimedOut(TimeoutError):
    """The schedule is recorded as timed out: its time is at least
    ``timed_out_after`` milliseconds (TiraLib's unit)."""

    def __init__(self, schedule: str, timed_out_after: float) -> None:
        super().__init__(f"schedule {schedule!r} timed out after {timed_out_after:g} ms (recorded)")
        self.timed_out_after = timed_out_after


class CompileFailed(RuntimeError):
    """The schedule is recorded as failing to compile."""


class CachedSchedule:
    """A TiraLib ``Schedule`` whose ``execute`` and ``is_legal`` go through a store.

    :param schedule: a TiraLib ``Schedule`` (or an object with its
        ``execute``, ``is_legal``, ``__str__`` and ``tiramisu_program``)
    :param store: the :class:`~tirastore.TiraStore` to look up and record in
    :param program_name: the program's name (default: TiraLib's
        ``tiramisu_program.name``)
    :param program_source_code: the program's source (default: its
        ``cpp_code``, with TiraLib's per-process file name taken out)
    :param lease: the claim's lease while measuring, seconds (None: the
        store's default, see :meth:`TiraStore.lookup_or_claim`)
    :param compile_failures: exception classes that mean "this schedule
        does not compile": recorded as a censored ``"compile_failure"``
    :param remeasure_unstable: measure again a recorded schedule whose
        times break the database's noise policy (its new times are
        appended), as :meth:`TiraStore.lookup_or_claim` does
    """

    def __init__(
        self,
        schedule: Any,
        store: "TiraStore",
        *,
        program_name: Optional[str] = None,
        program_source_code: Optional[str] = None,
        lease: Optional[float] = None,
        compile_failures: tuple = (),
        remeasure_unstable: bool = False,
    ) -> None:
        program = getattr(schedule, "tiramisu_program", None)
        if program_name is None:
            program_name = getattr(program, "name", None)
        if program_source_code is None:
            program_source_code = _stable_source(program)
        if not isinstance(program_name, str) or not isinstance(program_source_code, str):
            raise TypeError("CachedSchedule(): the schedule's tiramisu_program has no name and cpp_code: "
                            "pass program_name= and program_source_code=")
        if not (isinstance(compile_failures, tuple) and all(isinstance(c, type) and issubclass(c, BaseException)
                                                            for c in compile_failures)):
            raise TypeError("CachedSchedule(): compile_failures must be a tuple of exception classes")
        self.schedule = schedule
        self.store = store
        self.program_name = program_name
        self.program_source_code = program_source_code
        self._lease = lease
        self._compile_failures = compile_failures
        self._remeasure = remeasure_unstable

    def __getattr__(self, name: str) -> Any:
        # Everything but execute and is_legal is the wrapped schedule's.
        return getattr(self.__dict__["schedule"], name)

    def __str__(self) -> str:
        return str(self.schedule)

    def __repr__(self) -> str:
        return f"CachedSchedule({str(self.schedule)!r}, program_name={self.program_name!r})"

    def lookup(self) -> Optional[LookupResult]:
        """The schedule's record, or None (no claim, no measurement)."""
        return self.store.lookup(self.program_name, self.program_source_code, str(self.schedule))

    def is_legal(self, with_ast: bool = False) -> bool:
        """Whether the schedule is legal: recorded, or checked by TiraLib.

        A schedule found illegal is recorded; a legal one is recorded only
        with its times (by :meth:`execute`). ``with_ast=True`` asks TiraLib
        (the caller wants its tree), and records an illegal answer. A
        schedule another worker is measuring is checked here, not waited
        for.

        :raises CompileFailed: the schedule is recorded as failing to compile
        """
        # Not waiting for another worker's whole measurement to learn
        # what a compile tells: busy elsewhere (None), check it here.
        claim = self._claim(wait=False)
        if isinstance(claim, LookupResult):
            self._raise_censored(claim, legality=True)
            if not with_ast:
                return bool(claim.is_legal)
            claim = None
        with claim if claim is not None else contextlib.nullcontext():  # releases it unless recorded
            legal = self._check_legality(claim, with_ast)
            if not legal and claim is not None:
                claim.record(False, None)
        return legal

    def execute(
        self,
        min_runs: int = 1,
        max_runs: Optional[int] = None,
        time_budget: Optional[float] = None,
        delete_files: bool = True,
    ) -> list:
        """The schedule's execution times: recorded, or measured by TiraLib and recorded.

        The arguments are TiraLib's (``time_budget`` in milliseconds) and
        reach it only when the schedule is measured here; a recorded
        schedule returns its times as recorded.

        :raises IllegalSchedule: the schedule is illegal (recorded or found)
        :raises MeasurementTimedOut: it is recorded, or was just measured,
            as timed out
        :raises CompileFailed: it is recorded, or was just found, as failing
            to compile
        """
        claim = self._claim()
        if isinstance(claim, LookupResult):
            return self._times_of(claim)
        with claim if claim is not None else contextlib.nullcontext():  # releases it unless recorded
            remeasure = claim is not None and claim.remeasure
            if not remeasure and not self._check_legality(claim, False):
                if claim is not None:
                    claim.record(False, None)
                raise IllegalSchedule("Schedule is not legal")
            started = time.monotonic()
            try:
                times = self.schedule.execute(min_runs=min_runs, max_runs=max_runs, time_budget=time_budget,
                                              delete_files=delete_files)
            except (TimeoutError, subprocess.TimeoutExpired) as e:
                limit = getattr(e, "timeout", None)  # seconds, as the ran time
                limit = 1000.0 * (float(limit) if isinstance(limit, (int, float)) and limit > 0
                                  else time.monotonic() - started)
                if claim is not None and not remeasure:
                    claim.record(True, None, censored="timeout", timed_out_after=limit)
                raise MeasurementTimedOut(str(self.schedule), limit) from e
            except self._compile_failures as e:
                if claim is not None and not remeasure:
                    claim.record(False, None, censored="compile_failure")
                raise CompileFailed(f"schedule {str(self.schedule)!r} does not compile: {e}") from e
            times = list(times)
            if not times:
                if time_budget and time_budget > 0:
                    limit = float(time_budget)
                    if claim is not None and not remeasure:
                        claim.record(True, None, censored="timeout", timed_out_after=limit)
                    raise MeasurementTimedOut(str(self.schedule), limit)
                return times  # nothing measured, nothing to record (the claim is released)
            if claim is not None:
                claim.record(True, times)
            return times

    # -- the steps -----------------------------------------------------

    def _claim(self, wait: bool = True) -> "LookupResult | Claim | None":
        """lookup_or_claim of the schedule (None: writes are disabled, or,
        without wait, another worker is measuring it: go on without recording)."""
        try:
            return self.store.lookup_or_claim(self.program_name, self.program_source_code, str(self.schedule),
                                              lease=self._lease, wait=wait, remeasure_unstable=self._remeasure)
        except PermissionError:
            hit = self.lookup()
            if hit is not None:
                return hit
            return None

    def _check_legality(self, claim: "Claim | None", with_ast: bool) -> bool:
        try:
            return bool(self.schedule.is_legal(with_ast=with_ast))
        except self._compile_failures as e:
            if claim is not None and not claim.remeasure:
                claim.record(False, None, censored="compile_failure")
            raise CompileFailed(f"schedule {str(self.schedule)!r} does not compile: {e}") from e

    def _times_of(self, hit: LookupResult) -> list:
        self._raise_censored(hit, legality=False)
        if not hit.is_legal:
            raise IllegalSchedule("Schedule is not legal")
        return list(hit.execution_times or [])

    def _raise_censored(self, hit: LookupResult, legality: bool) -> None:
        if hit.censored == "compile_failure":
            raise CompileFailed(f"schedule {str(self.schedule)!r} is recorded as failing to compile")
        if hit.censored == "timeout" and not legality:
            raise MeasurementTimedOut(str(self.schedule), hit.timed_out_after)


def _stable_source(program: Any) -> Optional[str]:
    """The program's cpp_code without TiraLib's per-process file name.

    TiraLib's ``load_code_lines`` writes a name with a random suffix
    (``temp_files_identifier``) into the code it keeps, so that concurrent
    instances do not share temporary files; two workers of one program
    would otherwise hash two sources and never share a record.
    """
    code = getattr(program, "cpp_code", None)
    if not isinstance(code, str):
        return None
    ident, name = getattr(program, "temp_files_identifier", None), getattr(program, "name", None)
    if isinstance(ident, str) and ident and isinstance(name, str) and name:
        code = code.replace(ident, name)
    return code
