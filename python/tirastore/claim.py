"""Claims on measurements: what :meth:`TiraStore.lookup_or_claim` returns.

The protocol (who may take a claim over, and when) lives in the engine
(``core/claim.go``); this module only gives a claim its Python shape: a
handle with :meth:`Claim.record` and :meth:`Claim.release` that is also a
context manager, and :class:`ClaimInfo` for listings.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional

from tirastore import _native

if TYPE_CHECKING:
    from tirastore.store import TiraStore


class Claim:
    """This worker's claim on measuring one schedule: measure, then record.

    Returned by :meth:`TiraStore.lookup_or_claim` when the schedule is not
    recorded and no other live worker is measuring it. While the claim is
    held, other workers asking for the schedule wait for its result (or
    skip it, ``wait=False``) instead of measuring it too. It renews itself
    in the background; it ends with :meth:`record` (the result and the end
    of the claim in one transaction) or :meth:`release` (given up: a
    waiting worker takes it over at once). As a context manager it is
    released on leaving the block unless it was recorded, whether or not
    an exception is leaving it.

    If the process dies, its claims are taken over at once by workers on
    the same host, and after *lease* seconds without renewal by workers on
    other hosts (as they are when it is stopped: a suspended Slurm job, a
    paused VM). A late :meth:`record`, after such a takeover, still stores
    the result if nobody has recorded the schedule meanwhile (and returns
    True, ending the taker's claim with it); otherwise it returns False, as
    :meth:`TiraStore.record` does for an existing record.

    A claim belongs to the process that made it: it cannot be pickled, and
    in a child made by ``fork()`` it cannot be recorded or released.

    Attributes: ``program_name``, ``tiralib_schedule_string`` (as given),
    ``lease`` (seconds), ``token`` (the claim's name in the database),
    ``remeasure`` (True for a claim on a recorded but unstable schedule,
    made with ``remeasure_unstable=True``, or on a record none of whose
    runs matches the store's fingerprint rules: its :meth:`record` appends
    the new times to the record's, as a new run, and must be a legal
    result), ``mismatch`` (for the latter, ``{field: [theirs, ours]}`` of
    the closest run; else None).
    """

    __slots__ = (
        "_store", "_copy", "_source", "program_name", "tiralib_schedule_string", "lease", "token", "remeasure",
        "mismatch", "_ended",
    )

    def __init__(self, store: "TiraStore", source: str, reply: dict[str, Any]) -> None:
        self._store = store
        self._copy = _native.lib_copy
        self._source = source
        self.program_name: str = reply["program_name"]
        self.tiralib_schedule_string: str = reply["tiralib_schedule_string"]
        self.lease: float = reply["lease"]
        self.token: str = reply["token"]
        self.remeasure: bool = reply["remeasure"]
        self.mismatch: Optional[dict[str, list[str]]] = reply["mismatch"]
        self._ended = False

    def _check(self, what: str) -> None:
        if self._copy != _native.lib_copy:
            raise ValueError(f"Claim.{what}(): this claim belongs to the process that made it (this is a forked child or another interpreter)")

    def record(
        self,
        is_legal: bool,
        execution_times: Optional[list] = None,
        *,
        censored: Optional[str] = None,
        timed_out_after: Optional[float] = None,
    ) -> bool:
        """Record the measurement and end the claim, in one transaction.

        :param bool is_legal: whether the schedule is legal for the program
        :param execution_times: the measured times (as for
            :meth:`TiraStore.record`)
        :param censored: ``"timeout"`` or ``"compile_failure"`` for a
            result without a time of its own, with *timed_out_after* for a
            timeout (as for :meth:`TiraStore.record`); a re-measurement
            takes only times: release it instead
        :return: True if written; False if someone recorded the schedule
            meanwhile (possible only after the claim expired), or, for a
            re-measurement, if the record became stable or reached its cap
            meanwhile
        :raises ValueError: the claim has ended (recorded or released), or
            the result is invalid (no times for a legal schedule, NaN, ...)
        :raises PermissionError: writes are disabled by the CPU check
        """
        self._check("record")
        wrote = self._store._call(
            "claim_record",
            token=self.token,
            program_source_code=self._source,
            is_legal=is_legal,
            execution_times=execution_times,
            censored=censored,
            timed_out_after=timed_out_after,
        )
        self._ended = True
        return wrote

    def release(self) -> None:
        """Give the claim up without a result: a waiting worker takes it over.

        Releasing an ended claim does nothing.
        """
        if self._ended:
            return
        self._check("release")
        self._store._call("claim_release", token=self.token)
        self._ended = True

    @property
    def ended(self) -> bool:
        """Whether the claim was recorded or released."""
        return self._ended

    @property
    def taken_over(self) -> bool:
        """Whether the claim expired and another worker took it over (or an
        operator removed it): found by the renewals. :meth:`record` still
        stores the result if nobody has."""
        if self._ended or self._copy != _native.lib_copy:
            return False
        return self._store._call("claim_status", token=self.token) == "taken_over"

    def __enter__(self) -> "Claim":
        return self

    def __exit__(self, *exc: Any) -> None:
        if not self._ended and self._copy == _native.lib_copy:
            self.release()

    def __reduce__(self) -> Any:
        raise TypeError("a Claim cannot be pickled: it belongs to the process that made it")

    def __repr__(self) -> str:
        state = "ended" if self._ended else "held"
        return f"Claim(program_name={self.program_name!r}, tiralib_schedule_string={self.tiralib_schedule_string!r}, lease={self.lease:g}, {state})"


@dataclass(frozen=True)
class ClaimInfo:
    """A claim as :meth:`TiraStore.claims` lists it: who is measuring what.

    ``hostname``, ``pid``, ``slurm_job_id`` and ``slurm_cluster`` (None
    outside Slurm) and ``username`` name the holder, ``job_state`` is what
    Slurm says of its job (``"RUNNING"``, ``"SUSPENDED"``, ``"CANCELLED"``,
    ...; None when the job is of another cluster or Slurm did not answer),
    ``job_ended`` whether that state says the job is over (its claim then
    goes to the next caller); ``program_name``, ``program_hash``,
    ``tiralib_schedule_string`` (normalized) and ``key`` the measurement;
    ``lease`` (seconds), ``renewals``, ``claimed_at`` and ``renewed_at``
    (UTC ISO 8601, the holder's clock) its life; ``dead`` is True when its
    holder is provably gone (it ran on this host), so that the next caller
    takes it over.
    """

    key: str
    program_hash: str
    program_name: str
    tiralib_schedule_string: str
    hostname: str
    pid: int
    slurm_job_id: Optional[str]
    slurm_cluster: Optional[str]
    job_state: Optional[str]
    job_ended: bool
    username: str
    lease: float
    renewals: int
    claimed_at: str
    renewed_at: str
    dead: bool
