"""TiraStore: the Python face of the engine, with the original's API.

All behaviour (normalization, hashing, validation, locking, SQLite) lives in
the native library; this module only adapts it to Python: keyword
arguments, ``pathlib.Path`` results, a dataclass for lookups, exceptions, a
context manager.

>>> import tempfile, os
>>> from tirastore import TiraStore
>>> with TiraStore(os.path.join(tempfile.mkdtemp(), "cache.db")) as store:
...     store.record("blur", "void blur() {}", "S(L0,L1,4,8,comps=['c1'])", True, [0.04])
...     store.lookup("blur", "void blur() {}", "S(L0,L1,4,8,comps=['c1'])").execution_times
True
[0.04]
"""

from __future__ import annotations

import atexit
import os
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Union

from tirastore import _native

PathLike = Union[str, "os.PathLike[str]"]


@dataclass
class LookupResult:
    """A stored measurement, as :meth:`TiraStore.lookup` returns it."""

    is_legal: bool
    execution_times: Optional[list]
    schedule: str
    hostname: str
    username: str
    creation_date: str
    update_date: str
    source_project: str

    def to_dict(self) -> dict[str, Any]:
        """The fields as a plain dict (same keys as the original)."""
        return {
            "is_legal": self.is_legal,
            "execution_times": self.execution_times,
            "schedule": self.schedule,
            "hostname": self.hostname,
            "username": self.username,
            "creation_date": self.creation_date,
            "update_date": self.update_date,
            "source_project": self.source_project,
        }


def _fspath(where: str, name: str, value: Any) -> str:
    try:
        path = os.fspath(value)
    except TypeError:
        raise TypeError(f"{where}(): {name} must be str or os.PathLike, not {type(value).__name__}") from None
    if isinstance(path, bytes):
        raise TypeError(f"{where}(): {name} must be str or os.PathLike[str], not bytes")
    return path


# Program hashes of recently used sources (computed by the library), shared
# by the stores of this process: see TiraStore._program.
_program_hashes: dict[str, str] = {}

# Stores open in this process, for the exit handler below.
_open_stores: "weakref.WeakSet[TiraStore]" = weakref.WeakSet()


@atexit.register
def _close_idle_stores() -> None:
    """Close, at interpreter exit, every store that no thread is using.

    A store keeps its SQLite connection and its lock claim file (a small
    file beside the database) open between calls; closing removes the claim.
    A store still busy in a thread that the exiting program abandons is left
    alone, since exit must not wait; its claim is removed later by the next
    process of this host that takes the lock.
    """
    for store in list(_open_stores):
        if store._handle > 0 and store._gen == _native.generation:
            try:
                _native.call(store._handle, "close_if_idle")
            except Exception:
                pass


class TiraStore:
    """A measurement cache in one SQLite file shared by many processes and nodes.

    Parameters are the original's: ``db_path`` (created if missing),
    ``source_project`` (stamped on new records), ``cpu_model`` and
    ``slurm_cpus`` (detected when None), ``allow_cpu_mismatch``,
    ``stale_lock_timeout`` (seconds before another holder's lock counts as
    abandoned), plus ``lock_timeout``: how long an operation waits for the
    lock before raising ``TimeoutError`` naming the holder (None: 600 s;
    negative: forever).
    """

    def __init__(
        self,
        db_path: PathLike,
        source_project: str = "",
        cpu_model: Optional[str] = None,
        slurm_cpus: Optional[str] = None,
        allow_cpu_mismatch: bool = False,
        stale_lock_timeout: float = 600.0,
        lock_timeout: Optional[float] = 600.0,
    ) -> None:
        self._handle = 0
        self._gen = _native.generation
        path = _fspath("TiraStore", "db_path", db_path)
        options = {
            "source_project": source_project,
            "cpu_model": cpu_model,
            "slurm_cpus": slurm_cpus,
            "allow_cpu_mismatch": allow_cpu_mismatch,
            "stale_lock_timeout": stale_lock_timeout,
            "lock_timeout": lock_timeout,
        }
        self._handle, info = _native.open_store(path, options)
        _open_stores.add(self)
        self._options = options
        self.db_path = Path(info["db_path"])
        self.source_project = info["source_project"]
        self.allow_cpu_mismatch = allow_cpu_mismatch
        self._writes_allowed = bool(info["writes_allowed"])
        if info["warning"]:
            print(info["warning"])
        if info.get("notices"):
            # A node-local file that failed its checks (planted by another
            # user, say): the store works without the speed-up it serves.
            import warnings

            for notice in info["notices"]:
                warnings.warn(notice, RuntimeWarning, stacklevel=2)

    def _call(self, method: str, **args: Any) -> Any:
        if self._gen != _native.generation:  # forked or unpickled: re-open in this process's copy
            self._reopen()
        return _native.call(self._handle, method, **args)

    def _reopen(self) -> None:
        """Open this store's handle in the library copy of the current process.

        A handle belongs to one copy of the library (see the "Fork safety"
        notes of ``tirastore._native``): after a fork the child has a fresh
        copy in which the parent's handle number means nothing, so the store
        re-opens by path and options. The parent's handle is left alone.
        """
        with _native.reopen_lock:
            gen = _native.generation
            if self._gen == gen:
                return
            if self._handle:  # a closed store stays closed
                self._handle, info = _native.open_store(str(self.db_path), self._options)
                _open_stores.add(self)
                self._writes_allowed = bool(info["writes_allowed"])
            self._gen = gen

    # -- pickling (multiprocessing spawn/forkserver, or any pickled task) ---

    def __getstate__(self) -> dict[str, Any]:
        return {
            "db_path": str(self.db_path),
            "options": dict(self._options),
            "source_project": self.source_project,
            "allow_cpu_mismatch": self.allow_cpu_mismatch,
            "writes_allowed": self._writes_allowed,
            "closed": self.closed,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        # The handle is opened lazily, on first use, in this process's copy.
        self._options = dict(state["options"])
        self.db_path = Path(state["db_path"])
        self.source_project = state["source_project"]
        self.allow_cpu_mismatch = state["allow_cpu_mismatch"]
        self._writes_allowed = bool(state["writes_allowed"])
        self._handle = 0 if state["closed"] else -1  # -1: not yet opened here
        self._gen = -1

    # -- lookup & record ---------------------------------------------------

    @staticmethod
    def _program(source: Any) -> dict[str, Any]:
        """The program argument of a read: the source's hash once a read
        with this very source has succeeded (reads accept ``program_hash``),
        so that a long source is not encoded and parsed again at every
        lookup; until then the source itself, which the library validates."""
        h = _program_hashes.get(source) if type(source) is str else None
        return {"program_source_code": source} if h is None else {"program_hash": h}

    @staticmethod
    def _remember(ref: dict[str, Any]) -> None:
        """After a successful read sent by source: remember its hash."""
        source = ref.get("program_source_code")
        if type(source) is str and source not in _program_hashes:
            if len(_program_hashes) >= 64:
                _program_hashes.clear()
            _program_hashes[source] = _native.call(0, "make_program_hash", source=source)

    def lookup(self, program_name: str, program_source_code: str, tiralib_schedule_string: str) -> Optional[LookupResult]:
        """Return the stored :class:`LookupResult`, or None on a miss."""
        ref = self._program(program_source_code)
        found = self._call("lookup", program_name=program_name, tiralib_schedule_string=tiralib_schedule_string, **ref)
        self._remember(ref)
        return None if found is None else LookupResult(**found)

    def lookup_many(
        self, program_name: str, program_source_code: str, schedules: list[str]
    ) -> list[Optional[LookupResult]]:
        """Look up several schedules of one program at once (one lock acquisition).

        Returns one entry per schedule, in order: a :class:`LookupResult`, or
        None on a miss.

        >>> store.lookup_many("p", src, ["S(L0,L1,4,8,comps=['c1'])", "U(L2,4,comps=['c1'])"])
        [LookupResult(...), None]
        """
        ref = self._program(program_source_code)
        found = self._call("lookup_many", program_name=program_name, schedules=schedules, **ref)
        self._remember(ref)
        return [None if r is None else LookupResult(**r) for r in found]

    def record(
        self,
        program_name: str,
        program_source_code: str,
        tiralib_schedule_string: str,
        is_legal: bool,
        execution_times: Optional[list] = None,
        overwrite: bool = False,
    ) -> bool:
        """Store one measurement; False when it existed and overwrite is False."""
        return self._call(
            "record",
            program_name=program_name,
            program_source_code=program_source_code,
            tiralib_schedule_string=tiralib_schedule_string,
            is_legal=is_legal,
            execution_times=execution_times,
            overwrite=overwrite,
        )

    def record_many(self, program_name: str, program_source_code: str, schedules: list, overwrite: bool = False) -> int:
        """Store many schedules of one program in one transaction; returns how many were written."""
        return self._call(
            "record_many",
            program_name=program_name,
            program_source_code=program_source_code,
            schedules=schedules,
            overwrite=overwrite,
        )

    def contains(self, program_name: str, program_source_code: str, tiralib_schedule_string: str) -> bool:
        """Whether a record exists for the input."""
        ref = self._program(program_source_code)
        found = self._call("contains", program_name=program_name, tiralib_schedule_string=tiralib_schedule_string, **ref)
        self._remember(ref)
        return found

    # -- programs ----------------------------------------------------------

    def get_program_source(self, program_name: str) -> list[dict[str, str]]:
        """Every stored source version of a program name: dicts with program_hash and source_code."""
        return self._call("get_program_source", program_name=program_name)

    def get_program_records(self, program_name: str, program_source_code: str) -> list[LookupResult]:
        """Every record of a program, oldest first."""
        rows = self._call("get_program_records", program_name=program_name, program_source_code=program_source_code)
        return [LookupResult(**r) for r in rows]

    # -- backup & export ---------------------------------------------------

    def backup(self, backup_path: Optional[PathLike] = None) -> Path:
        """Write a consistent snapshot of the database; returns its Path."""
        dest = None if backup_path is None else _fspath("backup", "backup_path", backup_path)
        return Path(self._call("backup", backup_path=dest))

    def export(self, output_path: PathLike, fmt: str = "json") -> Path:
        """Export every program and its schedules as ``json`` or ``jsonl``; returns the Path."""
        return Path(self._call("export", output_path=_fspath("export", "output_path", output_path), fmt=fmt))

    # -- admin -------------------------------------------------------------

    def get(self, key: str) -> Optional[dict[str, Any]]:
        """The raw record (joined with its program) for a SHA-256 key, or None."""
        return self._call("get", key=key)

    def put(self, key: str, program_hash: str, schedule: str, result_json: str, overwrite: bool = False) -> bool:
        """Low-level insert/update by raw key; the program must exist."""
        return self._call(
            "put", key=key, program_hash=program_hash, schedule=schedule, result_json=result_json, overwrite=overwrite
        )

    def delete(self, key: str) -> bool:
        """Delete a record by key; True if it existed."""
        return self._call("delete", key=key)

    def count(self) -> int:
        """Number of records."""
        return self._call("count")

    def program_count(self) -> int:
        """Number of distinct programs."""
        return self._call("program_count")

    def stats(self) -> dict[str, Any]:
        """Summary: record counts, programs, projects, users, CPU metadata."""
        return self._call("stats")

    def keys(self, limit: int = 0, offset: int = 0) -> list[str]:
        """Record keys by creation date; ``limit > 0`` paginates."""
        return self._call("keys", limit=limit, offset=offset)

    @property
    def writes_allowed(self) -> bool:
        """False when the CPU check disabled writes at connection time."""
        return self._writes_allowed

    @property
    def cpu_model(self) -> Optional[str]:
        """The CPU model stored in the database metadata."""
        return self._call("cpu_model")

    @property
    def slurm_cpus(self) -> Optional[str]:
        """The SLURM_CPUS_PER_TASK value stored in the database metadata."""
        return self._call("slurm_cpus")

    # -- lifetime ----------------------------------------------------------

    @property
    def closed(self) -> bool:
        """True after :meth:`close`."""
        return self._handle == 0

    def close(self) -> None:
        """Release the handle; later calls raise ValueError. Closing twice is harmless."""
        handle, self._handle = self._handle, 0
        # A handle of another generation belongs to the parent's copy of the
        # library (dead in this process): the parent closes it, not us.
        if handle and self._gen == _native.generation:
            _native.close_store(handle)

    def __enter__(self) -> "TiraStore":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    def __repr__(self) -> str:
        return (
            f"TiraStore(db_path={str(self.db_path)!r}, "
            f"source_project={self.source_project!r}, "
            f"writes_allowed={self._writes_allowed})"
        )
