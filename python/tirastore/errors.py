"""Exceptions of TiraStore beyond the built-in ones the original raised."""

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
