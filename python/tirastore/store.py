"""TiraStore: the Python face of the engine, with the original's API.

All behaviour (normalization, hashing, validation, locking, SQLite) lives in
the native library; this module only adapts it to Python: keyword
arguments, ``pathlib.Path`` results, a dataclass for lookups, exceptions,
warnings, a context manager.

>>> from tirastore import TiraStore
>>> with TiraStore("cache.db") as store:
...     store.record("blur", "void blur() {}", "S(L0,L1,4,8,comps=['c1'])", True, [0.04])
...     store.lookup("blur", "void blur() {}", "S(L0,L1,4,8,comps=['c1'])").execution_times
True
[0.04]
"""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import warnings
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Iterator, NamedTuple, Optional, Sequence, Union

from tirastore import _native
from tirastore.claim import Claim, ClaimInfo
from tirastore.errors import ProgramNotStoredError, TiraStoreWarning

PathLike = Union[str, "os.PathLike[str]"]


class TimingStats(NamedTuple):
    """Statistics of a record's finite execution times, computed by the engine.

    * ``count``: how many finite times (NaN and infinities take no part);
    * ``median`` and ``mad`` (the median absolute deviation from it, unscaled);
    * ``min``: the fastest time;
    * ``spread``: PolyBench's rule: with five or more times the fastest and
      slowest fifth are dropped, then the largest deviation from the mean
      of the rest, relative to that mean (0.05 is 5%; 0 for one time);
    * ``stable``: whether ``spread`` is within the database's noise policy
      (:meth:`TiraStore.noise_policy`); None for a result not read from a
      store;
    * ``lower_bound``: the times are not samples but a lower bound (a run
      stopped at its time limit: ``LookupResult.censored == "timeout"``).
    """

    count: int
    median: float
    mad: float
    min: float
    spread: float
    stable: bool
    lower_bound: bool = False


_UNSET = object()
_new_stats = tuple.__new__  # TimingStats from its seven values, without NamedTuple's argument parsing


@dataclass(init=False)
class LookupResult:
    """A stored measurement, as :meth:`TiraStore.lookup` returns it.

    A dataclass with the original's fields:

    * ``is_legal`` (bool): whether the schedule is legal for the program;
    * ``execution_times`` (list or None): the measured times as recorded
      (floats stay floats, ints stay ints);
    * ``schedule`` (str): the normalized schedule;
    * ``hostname``, ``username`` (str): who wrote the record last;
    * ``creation_date``, ``update_date`` (str): UTC ISO 8601 times, such as
      ``2026-02-21T15:30:12.123456+00:00``;
    * ``source_project`` (str): the ``source_project`` of the writing store.

    and (new) ``stable`` (bool, None without a finite time): whether the
    times meet the database's noise policy (:meth:`TiraStore.noise_policy`);
    the statistics of the times, ``stats`` (a :class:`TimingStats`, or None
    without a finite time), also as the properties ``median``, ``mad``,
    ``min``, ``count`` and ``spread``; ``censored`` (str or None): None for
    a measured result, ``"timeout"`` for a run stopped at its time limit
    (``execution_times`` is then ``[limit]``, a lower bound, also as
    ``timed_out_after``), ``"compile_failure"`` for a schedule that did not
    compile (``is_legal`` False: its legality is unknown).
    ``to_dict()`` keeps the original's keys.

    >>> store.record("blur", "void blur() {}", "R(L0,comps=[c1])", True, [0.041, 0.04, 0.04, 0.043, 0.04])
    True
    >>> r = store.lookup("blur", "void blur() {}", "R(L0,comps=[c1])")
    >>> r.is_legal, r.schedule, r.median, r.min, r.count, r.stable
    (True, "R(L0,comps=['c1'])", 0.04, 0.04, 5, True)
    """

    is_legal: bool
    execution_times: Optional[list]
    schedule: str
    hostname: str
    username: str
    creation_date: str
    update_date: str
    source_project: str
    stable: Optional[bool] = None
    censored: Optional[str] = None

    def __init__(
        self,
        is_legal: bool,
        execution_times: Optional[list],
        schedule: str,
        hostname: str,
        username: str,
        creation_date: str,
        update_date: str,
        source_project: str,
        stable: Optional[bool] = None,
        stats: Union[None, str, TimingStats] = None,
        censored: Optional[str] = None,
    ) -> None:
        # Written out rather than generated, for stats: not a field (the
        # original's fields and stable are), the library's statistics as it
        # sends them with every hit, one string of numbers, read when first
        # asked for (see the stats property).
        self.is_legal = is_legal
        self.execution_times = execution_times
        self.schedule = schedule
        self.hostname = hostname
        self.username = username
        self.creation_date = creation_date
        self.update_date = update_date
        self.source_project = source_project
        self.stable = stable
        self.censored = censored
        self._stats = _UNSET if stats is None else stats

    @property
    def stats(self) -> Optional[TimingStats]:
        """The statistics of the finite times (None without), computed by the library."""
        st = self._stats
        if st.__class__ is str:
            count, median, mad, low, spread = st.split()
            st = self._stats = _new_stats(
                TimingStats,
                (int(count), float(median), float(mad), float(low), float(spread), self.stable, self.censored == "timeout"),
            )
        elif st is _UNSET:  # made by hand (LookupResult(**r.to_dict())): the library computes them
            got = _native.call(0, "timing_stats", execution_times=self.execution_times)
            st = self._stats = None if got is None else TimingStats(stable=self.stable, lower_bound=self.censored == "timeout", **got)
        return st

    @property
    def timed_out_after(self) -> Optional[float]:
        """The time limit a censored ``"timeout"`` run was stopped at, in seconds (None otherwise)."""
        if self.censored != "timeout" or not self.execution_times:
            return None
        return self.execution_times[0]

    @property
    def median(self) -> Optional[float]:
        """The median of the finite times (None without)."""
        return self._stat(1)

    @property
    def mad(self) -> Optional[float]:
        """The median absolute deviation of the finite times (None without)."""
        return self._stat(2)

    @property
    def min(self) -> Optional[float]:
        """The fastest finite time (None without)."""
        return self._stat(3)

    @property
    def count(self) -> int:
        """How many finite times the record holds."""
        return self._stat(0)

    @property
    def spread(self) -> Optional[float]:
        """The relative spread of the times by PolyBench's rule (None without)."""
        return self._stat(4)

    def _stat(self, i: int) -> Any:
        """Field i of :attr:`stats`. From the library's string, the field
        alone ("count median mad min spread"): reading one number of it
        costs a fifth of reading all five, and most callers want one."""
        st = self._stats
        if st.__class__ is str:
            field = st.split(" ", i + 1)[i]
            return int(field) if i == 0 else float(field)
        st = self.stats
        if st is None:
            return 0 if i == 0 else None
        return st[i]

    def to_dict(self) -> dict[str, Any]:
        """Return the fields as a plain dict, keyed as the original's ``to_dict()``.

        :return: a new dict with the keys ``is_legal``, ``execution_times``,
            ``schedule``, ``hostname``, ``username``, ``creation_date``,
            ``update_date`` and ``source_project``

        >>> store.record("blur", "void blur() {}", "R(L0,comps=['c1'])", False, None)
        True
        >>> d = store.lookup("blur", "void blur() {}", "R(L0,comps=['c1'])").to_dict()
        >>> d["is_legal"], d["execution_times"], LookupResult(**d).to_dict() == d
        (False, None, True)
        """
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


def _result(found: dict[str, Any]) -> LookupResult:
    """The LookupResult of a record as the library replies it (a hit's hot
    path): its keys are the result's attributes, but ``stats``, the
    library's string of statistics (null without a finite time), which is
    kept as ``_stats`` until read; ``stable`` and ``censored``, when not
    sent, are the class's defaults. Set in one assignment rather than
    through ``__init__``, whose eleven keyword arguments cost a hit more
    than its statistics do."""
    found["_stats"] = found.pop("stats", None)
    r = _new_object(LookupResult)
    r.__dict__ = found
    return r


_new_object = object.__new__


def _fspath(where: str, name: str, value: Any) -> str:
    try:
        path = os.fspath(value)
    except TypeError:
        raise TypeError(f"{where}(): {name} must be str or os.PathLike, not {type(value).__name__}") from None
    if isinstance(path, bytes):
        raise TypeError(f"{where}(): {name} must be str or os.PathLike[str], not bytes")
    return path


# What the engine takes for a URL rather than a file path
# (storage.IsServerURL, core/storage/location.go): an RFC 3986 scheme, then
# "://".
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")


def _is_url(location: str) -> bool:
    """Whether the engine takes *location* for a URL, not a file path: a
    ``postgresql://`` or ``postgres://`` URL names a database on a server,
    and an open refuses a URL of any other kind. The engine decides this
    when it opens a store (which then says whether it is a server's); this
    mirrors its rule for the one place that must know without opening,
    :attr:`PersistentCache.db_path` (tests/python/test_persistent_cache.py
    checks it against the engine on a table of locations).

    >>> _is_url("postgresql://db.example.org/tira"), _is_url("mysql://h/db"), _is_url("runs/a://b.db")
    (True, True, False)
    """
    return _URL.match(location) is not None


@contextlib.contextmanager
def _output_file(purpose: str, path: str, databases: Sequence[str] = (), inputs: Sequence[str] = (),
                 mode: str = "wb", **open_args: Any) -> Iterator[tuple[Path, IO[Any]]]:
    """Write an output file that Python fills (a plot, the CLI's conflicts file).

    The library checks *path* (never a database in *databases* or one of its
    files, nor another database, nor a file in *inputs*: ValueError) and
    creates a temporary file beside it; this yields (the absolute path, a
    file object on the temporary file's descriptor). On a normal exit the
    file is renamed over the path; on an exception it is removed.
    """
    r = _native.call(0, "output_create", purpose=purpose, output_path=path, databases=list(databases),
                     inputs=list(inputs))
    try:
        f = os.fdopen(r["fd"], mode, **open_args)
    except BaseException:
        os.close(r["fd"])
        _native.call(0, "output_abort", token=r["token"])
        raise
    try:
        with f:
            yield Path(r["path"]), f
    except BaseException:
        _native.call(0, "output_abort", token=r["token"])
        raise
    _native.call(0, "output_commit", token=r["token"])


# Program hashes of recently used sources (computed by the library), shared
# by the stores of this process: see TiraStore._program.
_program_hashes: dict[str, str] = {}

# Stores open in this process, for the exit handler below.
_open_stores: "weakref.WeakSet[TiraStore]" = weakref.WeakSet()


@atexit.register
def _close_idle_stores() -> None:
    """Close, at interpreter exit, every store that no thread is using.

    A store keeps its SQLite connection and its lock ticket file (a small
    file beside the database) open between calls; closing removes the ticket.
    A store still busy in a thread that the exiting program abandons is left
    alone, since exit must not wait; its ticket is removed later by the next
    process of this host that takes the lock.
    """
    for store in list(_open_stores):
        if not store._closed and store._handle > 0 and store._copy == _native.lib_copy:
            try:
                _native.call(store._handle, "close_if_idle")
            except Exception:
                pass


class TiraStore:
    """A measurement cache in one SQLite file shared by many processes and nodes.

    Opens the database at *db_path*, creating it (and its directory) if it
    does not exist. Every operation takes the database's lock, built on an
    atomic ``link()`` that works on Lustre and NFS, so any number of
    processes on any number of nodes may use one database at once. A
    database remembers the CPU it was created on: a store on another CPU
    model or ``SLURM_CPUS_PER_TASK`` can read but not write, and says so
    with a :class:`~tirastore.TiraStoreWarning` pointing at this call.

    A store may be shared by threads, keeps working in children of
    ``fork()`` and ``multiprocessing``, can be pickled, and is a context
    manager; :meth:`close` releases it.

    :param db_path: the SQLite database file (str or path-like), or the
        ``postgresql://`` URL of a database on a PostgreSQL server (libpq's
        URL, environment variables and ``~/.pgpass``; see
        docs/postgresql.md). :attr:`db_path` is then the
        URL without its password, a str
    :param str source_project: stamped on every record this store writes
    :param cpu_model: the CPU model written into a new database and
        compared with an existing one's; None detects the local CPU's brand
        string
    :param slurm_cpus: the same for ``SLURM_CPUS_PER_TASK``; None reads the
        environment (``"N/A"`` when unset)
    :param bool allow_cpu_mismatch: keep writes enabled when the CPU check
        fails (for admin tasks such as imports)
    :param float stale_lock_timeout: seconds a lock may go unconfirmed
        before other processes count its holder as dead and break it
        (None: 600, the original's default; it must be positive)
    :param lock_timeout: seconds an operation waits for the lock before
        raising :exc:`TimeoutError` naming the holder (new; None: 600,
        0: try once, negative: wait forever)
    :param bool create: keyword only (new): False opens an existing
        database only, raising :exc:`FileNotFoundError` instead of creating
        it and its directory (for tools, where a typo must not create one)
    :param shared: keyword only (new), who may use a database file this
        call creates: None (default) as the original, every user (the file
        0666 whatever the umask, a directory the call creates 1777); True
        the same, and a :class:`~tirastore.TiraStoreWarning` when the
        existing directory keeps other users out; False private (0600, a
        new directory as the umask makes it), as are its exports
        and backups. An existing database keeps its mode
    :param tools: keyword only (new), the versions of the tools that
        measured, such as ``{"tiramisu": "0.3.1", "gcc": "13.2"}``: stored,
        with the host, CPU, cores, Slurm allocation, governor, load and
        date, in the run context of every record this store writes (see
        :meth:`runs`); at most 32, names up to 64 bytes, values up to 256
    :param match: keyword only (new), fingerprint rules: this store trusts
        only the runs of a record whose run context matches its own on the
        fields named, each ``"exact"``, ``"any"`` or, for ``cpu_model``,
        ``"family"`` (the same CPU vendor, family and model number: another
        SKU of one microarchitecture); fields: ``host``, ``cpu_model``,
        ``cpu_flags``, ``cores``, ``slurm_cpus_per_task``, ``governor``,
        ``tools``. A lookup then returns the matching runs' times alone,
        and a record none of whose runs matches (measured elsewhere, or by
        the original library, which keeps no context) is a miss:
        :meth:`lookup_or_claim` claims it, the claim's ``mismatch`` says
        what differed, and its record appends a run. None (default): every
        record matches, as in the original
    :raises TypeError: an argument has the wrong type
    :raises ValueError: *db_path* contains a NUL character, or a timeout is
        not a finite number
    :raises sqlite3.DatabaseError: the file is not a TiraStore database, or
        has another schema version; the server is not PostgreSQL, or its
        schema is newer than this library's
    :raises PermissionError: a server refused the login (password, TLS,
        ``pg_hba.conf``)
    :raises OSError: the database or its directory cannot be created or
        opened (:exc:`PermissionError`, ...)

    Besides the errors each method lists, every method may raise
    :exc:`TimeoutError` (the lock was not obtained within *lock_timeout*),
    :exc:`KeyboardInterrupt` (Ctrl-C while waiting for the lock),
    :exc:`~tirastore.LockLostError` (a write lost the lock after a stall),
    :exc:`sqlite3.OperationalError` or :exc:`OSError` (the filesystem
    failed), and :exc:`ValueError` once the store is closed.

    The examples of the methods use ``store``, a store on a new database.

    >>> store = TiraStore("cache.db", source_project="autoscheduler-v2")
    >>> store
    TiraStore(db_path='.../cache.db', source_project='autoscheduler-v2', writes_allowed=True)
    >>> store.close()
    """

    def __init__(
        self,
        db_path: PathLike,
        source_project: str = "",
        cpu_model: Optional[str] = None,
        slurm_cpus: Optional[str] = None,
        allow_cpu_mismatch: bool = False,
        stale_lock_timeout: Optional[float] = None,
        lock_timeout: Optional[float] = None,
        *,
        create: bool = True,
        shared: Optional[bool] = None,
        tools: Optional[dict[str, str]] = None,
        match: Optional[dict[str, str]] = None,
    ) -> None:
        if shared is not None and not isinstance(shared, bool):
            raise TypeError(f"TiraStore(): shared must be None or a bool, not {type(shared).__name__}")
        self._open(
            db_path, source_project, cpu_model, slurm_cpus, allow_cpu_mismatch, stale_lock_timeout, lock_timeout, create,
            None if shared is None else "all" if shared else "private", tools=tools, match=match,
        )

    def _open(
        self,
        db_path: PathLike,
        source_project: str,
        cpu_model: Optional[str],
        slurm_cpus: Optional[str],
        allow_cpu_mismatch: bool,
        stale_lock_timeout: Optional[float],
        lock_timeout: Optional[float],
        create: bool = True,
        sharing: Optional[str] = None,
        stacklevel: int = 3,
        tools: Optional[dict[str, str]] = None,
        match: Optional[dict[str, str]] = None,
    ) -> None:
        """The constructor's work, for it and for classes built on a store
        (PersistentCache), so that the open's warnings point at the line of
        their caller, two frames up."""
        # A closed store keeps its handle: the library answers a closed
        # handle with the engine's closed-store message. Closed until the
        # open succeeds, so that __del__ of a failed open does nothing.
        self._handle = 0
        self._closed = True
        self._copy = _native.lib_copy
        self._written: set[str] = set()  # see _write
        path = _fspath("TiraStore", "db_path", db_path)
        options = {
            "source_project": source_project,
            "cpu_model": cpu_model,
            "slurm_cpus": slurm_cpus,
            "allow_cpu_mismatch": allow_cpu_mismatch,
            "stale_lock_timeout": stale_lock_timeout,
            "lock_timeout": lock_timeout,
        }
        if create is not True:  # only when asked: the options of a pickled store stay the original's
            options["create"] = create
        if sharing is not None:  # PersistentCache's choice (the library's config_location)
            options["sharing"] = sharing
        for name, value in (("tools", tools), ("match", match)):
            if value is None:
                continue
            # JSON has str keys only: json.dumps would turn 1 into "1"
            # unseen, so a key of another type is the caller's mistake.
            bad = [k for k in value if not isinstance(k, str)] if isinstance(value, dict) else []
            if bad:
                raise TypeError(f"TiraStore(): {name} keys must be str, not {type(bad[0]).__name__} ({bad[0]!r})")
            options[name] = value
        self._handle, info = _native.open_store(path, options)
        self._closed = False
        _open_stores.add(self)
        self._options = options
        self._set_location(path, info)
        self.source_project = info["source_project"]
        self.allow_cpu_mismatch = allow_cpu_mismatch
        self._writes_allowed = bool(info["writes_allowed"])
        # Said through warnings (stderr by default, filterable), pointing at
        # the caller's TiraStore(...) line: the CPU-mismatch banner (the
        # original printed it to stdout) and the notices (a directory others
        # cannot use, an ignored password file).
        if info["warning"]:
            warnings.warn(info["warning"], TiraStoreWarning, stacklevel=stacklevel)
        for notice in info.get("notices") or ():
            warnings.warn(notice, TiraStoreWarning, stacklevel=stacklevel)

    def _set_location(self, given: str, info: dict[str, Any]) -> None:
        """db_path: the database file's absolute Path, or a server's URL
        without its password (a str); _location: what re-opens it (the URL
        as given, with its password if it had one)."""
        if info.get("server"):
            self.db_path = info["db_path"]
            self._location = given
        else:
            self.db_path = Path(info["db_path"])
            self._location = info["db_path"]

    def _call(self, method: str, **args: Any) -> Any:
        if self._copy != _native.lib_copy:  # forked or unpickled: re-open in this process's copy
            self._reopen()
        return _native.call(self._handle, method, **args)

    def _call_as(self, where: str, method: str, args: dict[str, Any]) -> Any:
        """:meth:`_call` through :func:`tirastore._native.call_as`."""
        if self._copy != _native.lib_copy:
            self._reopen()
        return _native.call_as(where, self._handle, method, args)

    def _reopen(self) -> None:
        """Open this store's handle in the library copy of the current process.

        A handle belongs to one copy of the library (see the "Fork safety"
        notes of ``tirastore._native``): after a fork the child has a fresh
        copy in which the parent's handle number means nothing, so the store
        re-opens by path and options. The parent's handle is left alone.
        """
        with _native.reopen_lock:
            gen = _native.lib_copy
            if self._copy == gen:
                return
            if not self._closed:
                self._handle, info = _native.open_store(self._location, self._options)
                _open_stores.add(self)
                self._writes_allowed = bool(info["writes_allowed"])
            else:
                # A closed store stays closed. Its number belongs to another
                # copy of the library and may name another store in this one.
                self._handle = 0
            self._copy = gen

    # -- pickling (multiprocessing spawn/forkserver, or any pickled task) ---

    def __getstate__(self) -> dict[str, Any]:
        return {
            "db_path": self._location,
            "server": not isinstance(self.db_path, Path),
            "shown_path": str(self.db_path),
            "options": dict(self._options),
            "source_project": self.source_project,
            "allow_cpu_mismatch": self.allow_cpu_mismatch,
            "writes_allowed": self._writes_allowed,
            "closed": self.closed,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        # The handle is opened lazily, on first use, in this process's copy.
        self._options = dict(state["options"])
        self._location = state["db_path"]
        self.db_path = state.get("shown_path", state["db_path"]) if state.get("server") else Path(state["db_path"])
        self.source_project = state["source_project"]
        self.allow_cpu_mismatch = state["allow_cpu_mismatch"]
        self._writes_allowed = bool(state["writes_allowed"])
        self._closed = bool(state["closed"])
        self._handle = 0 if self._closed else -1  # -1: not yet opened here
        self._copy = -1
        self._written = set()

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

    def _write(self, method: str, source: Any, **args: Any) -> Any:
        """A record or record_many: by the program's hash once this store
        has written the program by its source (the library then skips the
        source and the program row), else by the source. If the database
        no longer has the program (another database at the path, the
        program removed), the library writes nothing and says so, and the
        write goes again with the source."""
        h = _program_hashes.get(source) if type(source) is str and source in self._written else None
        if h is not None:
            try:
                return self._call(method, program_hash=h, **args)
            except ProgramNotStoredError:
                self._written.discard(source)
        ref = {"program_source_code": source}
        out = self._call(method, **args, **ref)
        self._remember(ref)
        if type(source) is str and source in _program_hashes:
            if len(self._written) >= 64:
                self._written.clear()
            self._written.add(source)
        return out

    def lookup(self, program_name: str, program_source_code: str, tiralib_schedule_string: str) -> Optional[LookupResult]:
        """Return the stored measurement of a schedule of a program, or None.

        The record is found by the program's normalized source (comments,
        ``#include`` lines and whitespace do not matter) and the normalized
        schedule (nor do whitespace and quotes there).

        :param str program_name: the program's name
        :param str program_source_code: the program's source code
        :param str tiralib_schedule_string: the schedule
        :return: a :class:`LookupResult`, or None if nothing is recorded
        :raises TypeError: an argument is not a str
        :raises ValueError: an argument contains a NUL character or a lone
            surrogate; the record's result is stored nested deeper than a
            stored value may be (``limits()["max_value_depth"]``; written
            by an old writer or by SQL: the message names the record, and
            ``tirastore check`` lists every such one)

        >>> store.record("blur", "void blur() {}", "U(L0,4,comps=['c1'])", True, [0.5])
        True
        >>> store.lookup("blur", "void blur() { }", "U(L0, 4, comps=[c1])").execution_times
        [0.5]
        >>> store.lookup("blur", "void blur() {}", "U(L0,8,comps=['c1'])") is None
        True
        """
        ref = self._program(program_source_code)
        found = self._call("lookup", program_name=program_name, tiralib_schedule_string=tiralib_schedule_string, **ref)
        self._remember(ref)
        return None if found is None else _result(found)

    def lookup_many(
        self, program_name: str, program_source_code: str, schedules: list[str]
    ) -> list[Optional[LookupResult]]:
        """Look up several schedules of one program, taking the lock once.

        :meth:`lookup` for each schedule, in order, at the cost of one
        lock acquisition (new; the original has no batch read).

        :param str program_name: the program's name
        :param str program_source_code: the program's source code
        :param schedules: a list of schedule strings
        :return: a list with one entry per schedule, in order: a
            :class:`LookupResult`, or None if nothing is recorded
        :raises TypeError: an argument or an entry of *schedules* is not a str
        :raises ValueError: a string contains a NUL character or a lone
            surrogate

        >>> store.record("blur", "void blur() {}", "S(L0,L1,4,8,comps=['c1'])", True, [0.04])
        True
        >>> found = store.lookup_many("blur", "void blur() {}", ["S(L0,L1,4,8,comps=['c1'])", "U(L2,4,comps=['c1'])"])
        >>> [r and r.execution_times for r in found]
        [[0.04], None]
        """
        ref = self._program(program_source_code)
        found = self._call("lookup_many", program_name=program_name, schedules=schedules, **ref)
        self._remember(ref)
        return [None if r is None else _result(r) for r in found]

    def lookup_or_claim(
        self,
        program_name: str,
        program_source_code: str,
        tiralib_schedule_string: str,
        lease: Optional[float] = None,
        wait: bool = True,
        remeasure_unstable: bool = False,
    ) -> Union[LookupResult, Claim, None]:
        """Look a schedule up, or claim it for this worker to measure (new).

        Workers of one search reach the same schedule at nearly the same
        moment; with :meth:`lookup` each of them misses and measures it.
        This returns the :class:`LookupResult` when the schedule is
        recorded; else a :class:`~tirastore.Claim`, which makes every other
        worker asking for it wait for this one's result: measure, then
        ``claim.record(is_legal, times)``. When another live worker already
        holds the claim, ``wait=True`` waits until its result is recorded
        (and returns it) or its claim ends without one (and returns the
        claim to this caller); ``wait=False`` returns None at once. The
        wait ends with :exc:`TimeoutError` after *lock_timeout*, and on
        Ctrl-C. The original library's workers sharing the database do not
        see claims: they measure and record as before.

        :param str program_name: the program's name
        :param str program_source_code: the program's source code
        :param str tiralib_schedule_string: the schedule; it must pass
            :func:`~tirastore.validate_schedule`
        :param lease: seconds other workers let the claim go unrenewed (its
            holder stopped or dead on another host) before taking it over
            (None: 60; it renews itself every third of it while held)
        :param bool wait: whether to wait for another worker's claim
        :param bool remeasure_unstable: a recorded schedule whose times
            break the database's noise policy (:meth:`noise_policy`; the
            result's ``stable`` is False) is claimed to be measured again,
            until it is stable or has had ``max_remeasures`` more runs: the
            claim's :meth:`~tirastore.Claim.record` appends its times to the
            record's (``claim.remeasure`` is True). While another worker
            measures it again, the record is returned as it stands
        :return: a :class:`LookupResult`, a :class:`~tirastore.Claim`, or
            None (claimed by another worker, *wait* False)
        :raises ValueError: an invalid schedule or lease, a NUL character or
            lone surrogate in a string
        :raises TypeError: an argument has the wrong type
        :raises PermissionError: the schedule is not recorded and writes
            are disabled by the CPU check

        >>> claim = store.lookup_or_claim("blur", "void blur() {}", "U(L0,4,comps=['c1'])")
        >>> claim
        Claim(program_name='blur', tiralib_schedule_string="U(L0,4,comps=['c1'])", lease=60, held)
        >>> store.lookup_or_claim("blur", "void blur() {}", "U(L0,4,comps=['c1'])", wait=False) is None
        True
        >>> claim.record(True, [0.5])
        True
        >>> store.lookup_or_claim("blur", "void blur() {}", "U(L0,4,comps=['c1'])").execution_times
        [0.5]
        """
        ref = self._program(program_source_code)
        if lease is not None:  # the defaults are the library's: not sent
            ref["lease"] = lease
        if wait is not True:
            ref["wait"] = wait
        if remeasure_unstable is not False:
            ref["remeasure_unstable"] = remeasure_unstable
        out = self._call(
            "lookup_or_claim", program_name=program_name, tiralib_schedule_string=tiralib_schedule_string, **ref
        )
        self._remember(ref)
        return self._outcome(program_source_code, out)

    def lookup_many_or_claim(
        self,
        program_name: str,
        program_source_code: str,
        schedules: list[str],
        lease: Optional[float] = None,
        wait: bool = False,
        remeasure_unstable: bool = False,
    ) -> list[Union[LookupResult, Claim, None]]:
        """:meth:`lookup_or_claim` for several schedules of one program, taking
        the lock once (new).

        The outcomes are in the order of *schedules*: a
        :class:`LookupResult` (recorded), a :class:`~tirastore.Claim` (this
        worker measures it) or None (another worker is measuring it). With
        ``wait=True`` it returns only once no None is left, waiting for the
        other workers' results or claims (one lock acquisition per poll for
        the whole batch).

        :param str program_name: the program's name
        :param str program_source_code: the program's source code
        :param schedules: a list of schedule strings
        :param lease: as for :meth:`lookup_or_claim`
        :param bool wait: whether to wait for other workers' claims
        :param bool remeasure_unstable: as for :meth:`lookup_or_claim`
        :return: a list with one outcome per schedule
        :raises ValueError: as for :meth:`lookup_or_claim`, naming the
            entry (``schedules[i]: ...``); nothing is claimed then
        :raises TypeError: an argument or an entry of *schedules* has the
            wrong type
        :raises PermissionError: as for :meth:`lookup_or_claim`

        >>> out = store.lookup_many_or_claim("blur", "void blur() {}", ["R(L0,comps=['c1'])", "U(L1,2,comps=['c1'])"])
        >>> [type(o).__name__ for o in out]
        ['Claim', 'Claim']
        >>> [c.record(True, [0.1]) for c in out]
        [True, True]
        """
        ref = self._program(program_source_code)
        if remeasure_unstable is not False:
            ref["remeasure_unstable"] = remeasure_unstable
        out = self._call(
            "lookup_many_or_claim", program_name=program_name, schedules=schedules, lease=lease, wait=wait, **ref
        )
        self._remember(ref)
        return [self._outcome(program_source_code, o) for o in out]

    def _outcome(self, source: str, out: dict[str, Any]) -> Union[LookupResult, Claim, None]:
        if "result" in out:
            return _result(out["result"])
        if "claim" in out:
            return Claim(self, source, out["claim"])
        return None

    def claims(self) -> list[ClaimInfo]:
        """List the claims in the database: who is measuring what (new).

        :return: a list of :class:`~tirastore.ClaimInfo`, oldest first

        >>> with store.lookup_or_claim("blur", "void blur() {}", "S(L0,L1,2,2,comps=['c1'])") as claim:
        ...     [c.tiralib_schedule_string for c in store.claims()]
        ["S(L0,L1,2,2,comps=['c1'])"]
        >>> store.claims()
        []
        """
        return [ClaimInfo(**c) for c in self._call("claims")]

    def record(
        self,
        program_name: str,
        program_source_code: str,
        tiralib_schedule_string: str,
        is_legal: bool,
        execution_times: Optional[list] = None,
        overwrite: bool = False,
        *,
        censored: Optional[str] = None,
        timed_out_after: Optional[float] = None,
    ) -> bool:
        """Store one measurement of a schedule of a program.

        The source is stored once per program, under the hash of its
        normalized form (the first *program_name* stored for it stays); the
        record keeps the normalized schedule, the result, this host and
        user, the dates and this store's ``source_project``.

        :param str program_name: the program's name
        :param str program_source_code: the program's source code
        :param str tiralib_schedule_string: the schedule; it must pass
            :func:`~tirastore.validate_schedule`
        :param bool is_legal: whether the schedule is legal for the program
        :param execution_times: the measured times: a non-empty list of
            numbers when *is_legal*, else a list or None
        :param bool overwrite: replace an existing record (keeping its
            creation date)
        :param censored: (new) a result without a time of its own:
            ``"timeout"``, the run was stopped at *timed_out_after*
            (is_legal True, no *execution_times*; the record's time is that
            limit, a lower bound), or ``"compile_failure"`` (is_legal
            False, no times). Workers of the original library read them as
            a legal schedule as slow as its limit and as an illegal one.
        :param timed_out_after: the time limit of a ``"timeout"``, in the
            unit of the execution times (it is stored as the record's time)
        :return: True if written; False if the record existed and
            *overwrite* is False
        :raises ValueError: an invalid schedule, no *execution_times* for a
            legal schedule, a censored result that does not fit the rules
            above, a NaN or infinite time, a NUL character or lone
            surrogate in a string, a source longer than
            ``tirastore.limits()["max_text_bytes"]`` (256 MiB; refused
            before it is sent: docs/limits.md)
        :raises TypeError: an argument has the wrong type
        :raises PermissionError: writes are disabled by the CPU check

        >>> store.record("blur", "void blur() {}", "R(L0,comps=['c1'])", True, [0.04, 0.039])
        True
        >>> store.record("blur", "void blur() {}", "R(L0,comps=['c1'])", True, [0.05])
        False
        >>> store.record("blur", "void blur() {}", "R(L0,comps=['c1'])", True, [0.05], overwrite=True)
        True
        >>> store.record("blur", "void blur() {}", "U(L0,4,comps=['c1'])", True, censored="timeout", timed_out_after=30.0)
        True
        >>> r = store.lookup("blur", "void blur() {}", "U(L0,4,comps=['c1'])")
        >>> r.censored, r.timed_out_after, r.execution_times, r.stats.lower_bound
        ('timeout', 30.0, [30.0], True)
        """
        censoring = {}  # sent only when given: a measured result's request stays as it was
        if censored is not None:
            censoring["censored"] = censored
        if timed_out_after is not None:
            censoring["timed_out_after"] = timed_out_after
        return self._write(
            "record",
            program_source_code,
            program_name=program_name,
            tiralib_schedule_string=tiralib_schedule_string,
            is_legal=is_legal,
            execution_times=execution_times,
            overwrite=overwrite,
            **censoring,
        )

    def record_many(self, program_name: str, program_source_code: str, schedules: list, overwrite: bool = False) -> int:
        """Store many measurements of one program in one transaction.

        :meth:`record` for each entry, all or nothing: every entry is
        checked first, and if one is wrong nothing is written and the error
        names it (``schedules[1]: ...``). Existing records are left alone
        unless *overwrite*.

        :param str program_name: the program's name
        :param str program_source_code: the program's source code
        :param schedules: a list of dicts, one per measurement, each with
            the keys ``tiralib_schedule_string`` (str), ``is_legal`` (bool)
            and ``execution_times`` (list of numbers, or None when not
            legal), and optionally ``censored`` and ``timed_out_after``,
            as :meth:`record` takes them
        :param bool overwrite: replace existing records
        :return: the number of records written
        :raises ValueError: an entry is invalid (as for :meth:`record`)
        :raises TypeError: an argument or an entry has the wrong type
        :raises PermissionError: writes are disabled by the CPU check

        >>> store.record_many("blur", "void blur() {}", [
        ...     {"tiralib_schedule_string": "R(L0,comps=['c1'])", "is_legal": True, "execution_times": [0.03]},
        ...     {"tiralib_schedule_string": "I(L0,L1,comps=['c1'])", "is_legal": False, "execution_times": None},
        ... ])
        2
        """
        return self._write(
            "record_many",
            program_source_code,
            program_name=program_name,
            schedules=schedules,
            overwrite=overwrite,
        )

    def contains(self, program_name: str, program_source_code: str, tiralib_schedule_string: str) -> bool:
        """Return whether a measurement is recorded for a schedule of a program.

        ``lookup(...) is not None``, without reading the record.

        :param str program_name: the program's name
        :param str program_source_code: the program's source code
        :param str tiralib_schedule_string: the schedule
        :return: True if a record exists
        :raises TypeError: an argument is not a str
        :raises ValueError: an argument contains a NUL character or a lone
            surrogate

        >>> store.contains("blur", "void blur() {}", "R(L0,comps=['c1'])")
        False
        >>> store.record("blur", "void blur() {}", "R(L0,comps=['c1'])", False, None)
        True
        >>> store.contains("blur", "void blur() {}", "R(L0,comps=['c1'])")
        True
        """
        ref = self._program(program_source_code)
        found = self._call("contains", program_name=program_name, tiralib_schedule_string=tiralib_schedule_string, **ref)
        self._remember(ref)
        return found

    # -- programs ----------------------------------------------------------

    def get_program_source(self, program_name: str) -> list[dict[str, str]]:
        """Return every source version stored under a program name.

        There are several when sources that differ after normalization were
        recorded under one name.

        :param str program_name: the program's name
        :return: a list of dicts ``{"program_hash": str, "source_code": str}``,
            ordered by hash; empty for an unknown name
        :raises TypeError: *program_name* is not a str

        >>> store.record("blur", "void blur() {}", "R(L0,comps=['c1'])", False, None)
        True
        >>> [s["source_code"] for s in store.get_program_source("blur")]
        ['void blur() {}']
        """
        return self._call("get_program_source", program_name=program_name)

    def get_program_records(self, program_name: str, program_source_code: str) -> list[LookupResult]:
        """Return every measurement recorded for a program, oldest first.

        :param str program_name: the program's name
        :param str program_source_code: the program's source code
        :return: a list of :class:`LookupResult`, by creation date
        :raises TypeError: an argument is not a str
        :raises ValueError: an argument contains a NUL character or a lone
            surrogate

        >>> store.record("blur", "void blur() {}", "R(L0,comps=['c1'])", True, [0.04])
        True
        >>> [r.schedule for r in store.get_program_records("blur", "void blur() {}")]
        ["R(L0,comps=['c1'])"]
        """
        rows = self._call("get_program_records", program_name=program_name, program_source_code=program_source_code)
        return [_result(r) for r in rows]

    # -- backup & export ---------------------------------------------------

    def backup(self, backup_path: Optional[PathLike] = None) -> Path:
        """Write a consistent snapshot of the database into a new file.

        The snapshot is taken under the lock and written to a temporary
        file renamed into place, so it is never seen half written.

        :param backup_path: the file to write (str or path-like; an
            existing directory, or a path ending in ``/``, receives a file of
            the database's name; a missing directory is created, as opening
            a database does);
            None names it ``<stem>_<UTC %Y%m%dT%H%M%SZ>.db`` beside the
            database
        :return: the absolute :class:`~pathlib.Path` of the snapshot
        :raises TypeError: *backup_path* is not a str or path-like
        :raises ValueError: *backup_path* is the database itself (by name or
            as the same file), one of its files (its lock, journal, a lock
            claim, ...), or another database than an earlier backup of this
            one: nothing is written
        :raises OSError: the file cannot be written

        >>> store.backup("snapshot.db").name
        'snapshot.db'
        """
        dest = None if backup_path is None else _fspath("TiraStore.backup", "backup_path", backup_path)
        return Path(self._call("backup", backup_path=dest))

    def export(self, output_path: PathLike, fmt: str = "json", *, runs: bool = False) -> Path:
        """Export every program and its measurements to a JSON or JSON Lines file.

        The original's format: one entry per program, keyed by its name
        (``<name>_v1``, ``<name>_v2``, ... when one name has several
        sources), each ``{"Tiramisu_cpp": source, "schedules_list":
        [{"schedule_str", "is_legal", "execution_times"}, ...],
        "program_name": name}``.

        :param output_path: the file to write (str or path-like)
        :param str fmt: ``"json"`` (one indented object) or ``"jsonl"``
            (one object per program and line)
        :param bool runs: keyword (new): also give each schedule the
            ``"runs"`` of its record (as :meth:`runs` lists them, each with
            its context, without the times), which ``tirastore import``
            stores; other readers of the format ignore the key
        :return: the :class:`~pathlib.Path` written
        :raises ValueError: *fmt* is neither ``"json"`` nor ``"jsonl"``, or
            *output_path* is the database itself (by name or as the same
            file), one of its files (its lock, journal, a lock ticket, ...)
            or another database: nothing is written
        :raises TypeError: an argument has the wrong type
        :raises OSError: the file cannot be written

        >>> import json
        >>> store.record("blur", "void blur() {}", "R(L0,comps=['c1'])", True, [0.04])
        True
        >>> json.loads(store.export("dataset.json").read_text())["blur"]["schedules_list"]
        [{'schedule_str': "R(L0,comps=['c1'])", 'is_legal': True, 'execution_times': [0.04]}]
        """
        args: dict[str, Any] = {"runs": runs} if runs is not False else {}
        return Path(self._call("export", output_path=_fspath("TiraStore.export", "output_path", output_path), fmt=fmt, **args))

    # -- admin -------------------------------------------------------------

    def get(self, key: str) -> Optional[dict[str, Any]]:
        """Return the raw record stored under a key, with its program (admin use).

        :param str key: a record key, as :meth:`keys` lists them
        :return: a dict of the record's columns (``key``, ``program_hash``,
            ``schedule``, ``result_json``, ``hostname``, ``username``,
            ``creation_date``, ``update_date``, ``source_project``) plus
            ``program_name`` and ``source_code``; None for an unknown key
        :raises TypeError: *key* is not a str

        >>> store.record("blur", "void blur() {}", "R(L0,comps=['c1'])", True, [0.04])
        True
        >>> row = store.get(store.keys()[0])
        >>> row["program_name"], row["result_json"]
        ('blur', '{"is_legal":true,"execution_times":[0.04]}')
        """
        return self._call("get", key=key)

    def put(self, key: str, program_hash: str, schedule: str, result_json: str, overwrite: bool = False) -> bool:
        """Insert or replace a record by raw key (admin use).

        Nothing is normalized or derived: *key*, *schedule* and
        *result_json* are stored as given, with this host, user, time and
        ``source_project``. The program must be stored already.

        :param str key: the record key
        :param str program_hash: the hash of a stored program
        :param str schedule: the schedule, stored as is
        :param str result_json: ``{"is_legal": ..., "execution_times": ...}``
            as JSON text
        :param bool overwrite: replace an existing record
        :return: True if written; False if *key* existed and *overwrite* is
            False
        :raises ValueError: *result_json* is not such JSON, nests deeper
            than ``limits()["max_value_depth"]`` (100) levels, or the
            program is not stored
        :raises TypeError: an argument has the wrong type
        :raises PermissionError: writes are disabled by the CPU check

        >>> store.record("blur", "void blur() {}", "R(L0,comps=['c1'])", True, [0.04])
        True
        >>> row = store.get(store.keys()[0])
        >>> store.put(row["key"], row["program_hash"], row["schedule"], '{"is_legal":false,"execution_times":null}')
        False
        >>> store.put(row["key"], row["program_hash"], row["schedule"], '{"is_legal":false,"execution_times":null}', overwrite=True)
        True
        """
        return self._call(
            "put", key=key, program_hash=program_hash, schedule=schedule, result_json=result_json, overwrite=overwrite
        )

    def delete(self, key: str) -> bool:
        """Delete the record stored under a key.

        :param str key: a record key, as :meth:`keys` lists them
        :return: True if the record existed
        :raises TypeError: *key* is not a str
        :raises PermissionError: writes are disabled by the CPU check

        >>> store.record("blur", "void blur() {}", "R(L0,comps=['c1'])", True, [0.04])
        True
        >>> key = store.keys()[0]
        >>> store.delete(key), store.delete(key)
        (True, False)
        """
        return self._call("delete", key=key)

    def count(self) -> int:
        """Return the number of records in the database.

        >>> store.count()
        0
        """
        return self._call("count")

    def program_count(self) -> int:
        """Return the number of distinct programs in the database.

        >>> store.record("blur", "void blur() {}", "R(L0,comps=['c1'])", True, [0.04])
        True
        >>> store.program_count()
        1
        """
        return self._call("program_count")

    def stats(self) -> dict[str, Any]:
        """Return a summary of the database.

        :return: a dict with ``total_records``, ``legal_records``,
            ``illegal_records``, ``total_programs``, ``source_projects`` and
            ``users`` (lists of the distinct values), ``cpu_model`` and
            ``slurm_cpus`` (the database's metadata)

        >>> store.record("blur", "void blur() {}", "R(L0,comps=['c1'])", True, [0.04])
        True
        >>> s = store.stats()
        >>> s["total_records"], s["legal_records"], s["source_projects"]
        (1, 1, ['doctest'])
        """
        return self._call("stats")

    def runs(self, program_name: str, program_source_code: str, tiralib_schedule_string: str) -> Optional[list[dict[str, Any]]]:
        """Return the measurement runs of a record, oldest first (new).

        A record's ``execution_times`` may come from several runs (its first
        measurement, re-measurements of a noisy record, a merge); each run
        is a dict ``{"count", "times", "context", "fingerprint",
        "slurm_job_id", "load_avg", "mhz", "date"}``: its part of the times,
        the context it was taken in (a dict of ``host``, ``cpu_model``,
        ``cpu_vendor``, ``cpu_family``, ``cpu_model_id``, ``cpu_flags``,
        ``cores``, ``slurm_cpus_per_task``, ``governor`` and ``tools``, named
        by ``fingerprint``; None for a record written by the original
        library, which keeps none), and the 1-minute load average, CPU
        frequency (None where unreadable) and date of the run; with
        fingerprint rules (``TiraStore(match=...)``), ``differs`` maps each
        field on which the run's context differs from this store's to
        ``[theirs, ours]`` (None when it matches, or without rules).

        :return: the list, or None when the schedule has no record

        >>> store = TiraStore("runs.db", tools={"gcc": "13.2"})
        >>> store.record("blur", "void blur() {}", "R(L0,comps=['c1'])", True, [0.04, 0.041])
        True
        >>> [run] = store.runs("blur", "void blur() {}", "R(L0,comps=['c1'])")
        >>> run["times"], run["context"]["tools"]
        ([0.04, 0.041], {'gcc': '13.2'})
        """
        return self._call(
            "runs",
            program_name=program_name,
            program_source_code=program_source_code,
            tiralib_schedule_string=tiralib_schedule_string,
        )

    def noise_policy(self) -> dict[str, Any]:
        """Return the database's noise policy (new).

        :return: ``{"max_spread": float, "max_remeasures": int}``: a record
            whose times spread more than ``max_spread`` (a fraction, by
            PolyBench's rule: see :class:`TimingStats`) is unstable, and
            ``lookup_or_claim(..., remeasure_unstable=True)`` hands it out to
            be measured again, at most ``max_remeasures`` times. A database
            that never set one follows PolyBench's 5% and 3 re-measurements.

        >>> store.noise_policy()
        {'max_spread': 0.05, 'max_remeasures': 3}
        """
        return self._call("noise_policy")

    def set_noise_policy(self, max_spread: Optional[float] = None, max_remeasures: Optional[int] = None) -> dict[str, Any]:
        """Store a new noise policy in the database (new); omitted fields keep their value.

        Every store opened on the database afterwards follows it; open
        stores keep the policy they read when they opened, this one excepted.

        :param max_spread: the largest relative spread of a stable record,
            above 0 and at most 10 (0.05 is 5%)
        :param max_remeasures: how many more runs an unstable record may get
            (0 to 100)
        :return: the policy now stored
        :raises ValueError: a value out of bounds
        :raises PermissionError: writes are disabled (CPU metadata mismatch)

        >>> store.set_noise_policy(max_spread=0.1)
        {'max_spread': 0.1, 'max_remeasures': 3}
        """
        args: dict[str, Any] = {}
        if max_spread is not None:
            args["max_spread"] = max_spread
        if max_remeasures is not None:
            args["max_remeasures"] = max_remeasures
        return self._call("set_noise_policy", **args)

    def program_stats(self) -> list[dict[str, Any]]:
        """Count the records of every program (new; ``tirastore stats --by program``).

        :return: a list of dicts ``{"program_name", "program_hash",
            "records", "legal", "illegal", "first_record", "last_record"}``
            (the creation dates of the program's oldest and newest records,
            None without records), by name then hash, from one read

        >>> store.record("blur", "void blur() {}", "R(L0,comps=['c1'])", True, [0.04])
        True
        >>> [(p["program_name"], p["records"], p["legal"]) for p in store.program_stats()]
        [('blur', 1, 1)]
        """
        return self._call("program_stats")

    def keys(self, limit: int = 0, offset: int = 0) -> list[str]:
        """Return the record keys, oldest record first.

        :param int limit: at most this many keys, when above 0 (0: all)
        :param int offset: skip this many first (when *limit* is above 0)
        :return: a list of SHA-256 hex keys, by creation date
        :raises TypeError: an argument is not an int

        >>> store.record_many("blur", "void blur() {}", [
        ...     {"tiralib_schedule_string": f"U(L0,{n},comps=['c1'])", "is_legal": False, "execution_times": None}
        ...     for n in (2, 4, 8)])
        3
        >>> len(store.keys()), len(store.keys(limit=2)), len(store.keys(limit=2, offset=2))
        (3, 2, 1)
        """
        return self._call("keys", limit=limit, offset=offset)

    @property
    def writes_allowed(self) -> bool:
        """Whether this store may write: False when the CPU check failed on open.

        >>> store.writes_allowed
        True
        """
        return self._writes_allowed

    @property
    def cpu_model(self) -> Optional[str]:
        """The CPU model stored in the database's metadata (None if absent).

        >>> with TiraStore("xeon.db", cpu_model="Intel(R) Xeon(R) Gold 6248 CPU @ 2.50GHz") as s:
        ...     s.cpu_model
        'Intel(R) Xeon(R) Gold 6248 CPU @ 2.50GHz'
        """
        return self._call("cpu_model")

    @property
    def slurm_cpus(self) -> Optional[str]:
        """The ``SLURM_CPUS_PER_TASK`` stored in the database's metadata (None if absent).

        >>> with TiraStore("eight.db", slurm_cpus="8") as s:
        ...     s.slurm_cpus
        '8'
        """
        return self._call("slurm_cpus")

    # -- lifetime ----------------------------------------------------------

    @property
    def closed(self) -> bool:
        """True after :meth:`close`."""
        return self._closed

    def close(self) -> None:
        """Release the handle; later calls raise ValueError. Closing twice is harmless."""
        if self._closed:
            return
        self._closed = True
        # The handle is kept: calls on it now get the library's closed-store
        # error. A handle of another library copy belongs to the parent's copy
        # of the library (dead in this process): the parent closes it, not us.
        if self._handle > 0 and self._copy == _native.lib_copy:
            _native.close_store(self._handle)

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
