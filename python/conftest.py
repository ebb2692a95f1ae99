"""Setup for the docstring examples of the tirastore package, which
`make test` runs as doctests (pytest --doctest-modules python/tirastore).

Every example runs in a new temporary directory that is also the working
directory while it runs (so ``TiraStore("cache.db")`` and
``store.export("dataset.json")`` write there, not into the work tree), with
``store``: a TiraStore on a new database there (source_project "doctest"),
closed afterwards. The directory gets mode 1777, as a shared database
directory has, so the store opens without the notice about a private one.
"""

from __future__ import annotations

import os

import pytest


@pytest.fixture(autouse=True)
def _doctest_store(doctest_namespace, tmp_path, monkeypatch):
    from tirastore import TiraStore

    os.chmod(tmp_path, 0o1777)
    monkeypatch.chdir(tmp_path)
    store = TiraStore(tmp_path / "store.db", source_project="doctest")
    doctest_namespace["store"] = store
    yield
    store.close()
    doctest_namespace.pop("store", None)
