"""The one error table (core/apierr), as the library lists it: every row's
Python class resolves, with the hierarchy callers catch, and the header's
status macros are the same rows. Python keeps no table of its own."""

from __future__ import annotations

import builtins
import json
import re
import sqlite3
from pathlib import Path

import pytest

import tirastore
from tirastore import _native

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def table() -> list[dict]:
    rows = _native.call(0, "error_table")
    assert isinstance(rows, list) and rows
    return rows


def test_rows_are_complete(table):
    for i, row in enumerate(table):
        assert list(row) == ["status", "name", "python", "doc"]
        assert row["status"] == i + 1  # status order, no gaps; 0 is TIRASTORE_OK
        assert row["name"].startswith("TIRASTORE_ERR_") and row["python"] and row["doc"]
    assert len({r["name"] for r in table}) == len(table)


def test_every_python_name_resolves(table):
    for row in table:
        name = row["python"]
        cls = _native.exception_class(name)
        assert isinstance(cls, type) and issubclass(cls, BaseException), row
        module, _, attr = name.rpartition(".")
        assert cls.__name__ == attr, (row, cls)  # not the RuntimeError fallback
        if module == "sqlite3":
            assert cls is getattr(sqlite3, attr)
        elif module == "":
            assert cls is getattr(builtins, attr, None) or cls is getattr(tirastore.errors, attr), row
        else:
            pytest.fail(f"{row}: a Python name must be a builtin, sqlite3.<name> or a class of tirastore.errors")


def test_hierarchy(table):
    cls = {r["name"]: _native.exception_class(r["python"]) for r in table}
    # What existing except clauses rely on.
    assert cls["TIRASTORE_ERR_LOCK_LOST"] is tirastore.LockLostError
    assert issubclass(cls["TIRASTORE_ERR_LOCK_LOST"], sqlite3.OperationalError)
    assert issubclass(cls["TIRASTORE_ERR_OPERATIONAL"], sqlite3.DatabaseError)
    assert cls["TIRASTORE_ERR_DATABASE"] is sqlite3.DatabaseError
    for name in ("TIRASTORE_ERR_NOT_FOUND", "TIRASTORE_ERR_PERMISSION", "TIRASTORE_ERR_TIMEOUT", "TIRASTORE_ERR_OS"):
        assert issubclass(cls[name], OSError), name
    for name in ("TIRASTORE_ERR_VALUE", "TIRASTORE_ERR_CLOSED", "TIRASTORE_ERR_HANDLE", "TIRASTORE_ERR_MISUSE"):
        assert cls[name] is ValueError, name
    assert cls["TIRASTORE_ERR_TYPE"] is TypeError
    assert cls["TIRASTORE_ERR_INTERNAL"] is RuntimeError and cls["TIRASTORE_ERR_FORKED"] is RuntimeError
    # A Ctrl-C during a lock wait is not swallowed by "except Exception".
    assert issubclass(cls["TIRASTORE_ERR_INTERRUPTED"], BaseException)
    assert not issubclass(cls["TIRASTORE_ERR_INTERRUPTED"], Exception)


@pytest.mark.parametrize(
    "name",
    [
        "NoSuchError",  # no such class anywhere
        "sqlite3.NoSuchError",
        "os.PathLike",  # only builtins, sqlite3 and tirastore.errors are looked in
        "tirastore.errors.LockLostError",
        "sqlite3",  # a module, not a class
        "print",  # a builtin that is no class
        "object",  # a class that is no exception
        "sqlite3.connect",
        "",
    ],
)
def test_unknown_names_give_runtime_error(name):
    assert _native.exception_class(name) is RuntimeError


def test_header_macros_are_the_table(table):
    header = (REPO / "include" / "tirastore.h").read_text()
    macros = re.findall(r"^#define (TIRASTORE_\w+) +(\d+) /\* (.*) \*/$", header, flags=re.M)
    assert macros[0][:2] == ("TIRASTORE_OK", "0")
    assert [(n, int(c)) for n, c, _ in macros[1:]] == [(r["name"], r["status"]) for r in table]
    for (_, _, comment), row in zip(macros[1:], table):
        assert comment == f"{row['doc']} (Python: {row['python']})"


def test_a_reply_carries_its_row(table):
    """An error reply's code and type are those of one row of the table."""
    out = _native.ffi.new("char **")
    status = _native.lib.tirastore_call(0, b"frobnicate", b"{}", out)
    try:
        err = json.loads(_native.ffi.string(out[0]).decode())["error"]
    finally:
        _native.lib.tirastore_free(out[0])
    row = next(r for r in table if r["name"] == "TIRASTORE_ERR_MISUSE")
    assert status == err["code"] == row["status"] and err["type"] == row["python"]
    with pytest.raises(ValueError, match="unknown method"):
        _native.call(0, "frobnicate")
