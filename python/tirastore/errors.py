"""Exceptions and warnings of TiraStore beyond the built-in ones the original raised."""

from __future__ import annotations

import sqlite3


class LockLostError(sqlite3.OperationalError):
    """The database lock was broken while this call held it.

    It happens when this process stalled (a Slurm suspend, a paused VM, a
    hung filesystem call) for longer than ``stale_lock_timeout``, so that
    other processes judged the lock abandoned. The engine then refuses every
    write of the call; the message says which lock, when this process last
    confirmed it and who holds it now. A subclass of
    ``sqlite3.OperationalError``, which such a failed write raised before,
    so existing ``except`` clauses keep working::

        try:
            store.record_many(name, source, schedules)
        except tirastore.LockLostError:
            ...  # nothing of this call was committed: retry it
    """


class ProgramNotStoredError(LookupError):
    """A write by ``program_hash`` found no such program in the database.

    The library's ``record`` and ``record_many`` take a program's hash
    instead of its source once the program is stored, and write nothing
    when it is not (another database at the path, the program removed).
    :class:`~tirastore.TiraStore` then writes again with the source, so its
    users never see this error; callers of the C ABI get its status,
    ``TIRASTORE_ERR_NO_PROGRAM``.
    """


class TiraStoreWarning(RuntimeWarning):
    """What a store says when it opens, through :mod:`warnings`.

    Two things are said this way, by the ``TiraStore(...)``
    call that opens the store (the warning points at that line):

    * the CPU metadata mismatch: the database was created on another CPU
      model or ``SLURM_CPUS_PER_TASK``, so this store can read but not
      write (the original printed this banner to stdout; it is the same
      text);
    * notices: the database directory does not let other users create lock
      ticket files, or a password file was ignored.

    A subclass of :class:`RuntimeWarning`, which the notices were before.
    Python shows it on stderr once per calling line; filter it like any
    warning:

    >>> import warnings
    >>> from tirastore import TiraStore, TiraStoreWarning
    >>> TiraStore("cache.db", cpu_model="Xeon").close()
    >>> with warnings.catch_warnings():
    ...     warnings.simplefilter("ignore", TiraStoreWarning)  # or "error" to raise it
    ...     store = TiraStore("cache.db", cpu_model="EPYC")    # says nothing
    >>> store.writes_allowed
    False
    >>> store.close()
    """
