"""PersistentCache: ejKernel's kernel-config cache, on a TiraStore database.

A drop-in for ``ejkernel``'s ``PersistentCache`` (same constructor, same
``get``/``put``, same serialization rules), whose entries live in a table of
a TiraStore database instead of one JSON file that every ``put`` rewrites:
concurrent tuners on many nodes keep each other's results, a ``put`` is
visible to every other process at once, and a ``put`` costs the same with
ten entries or ten thousand. All storage, locking, caching, key and file
rules live in the library (``core/config.go``, ``core/configjson.go``);
this module only adapts them to the seed's Python API.

>>> from tirastore import PersistentCache
>>> cache = PersistentCache("matmul", path="tuning/matmul.json")
>>> cache.put("gpu:0", "matmul@v1", "m=4096,n=4096", {"block_m": 128, "num_warps": 4})
True
>>> cache.get("gpu:0", "matmul@v1", "m=4096,n=4096")
Namespace(block_m=128, num_warps=4)
>>> cache.close()
"""

from __future__ import annotations

import warnings
from argparse import Namespace
from dataclasses import asdict, dataclass, is_dataclass
from pathlib import Path
from typing import Any, Callable, Generic, Iterator, Optional, TypeVar, Union

from tirastore import _native
from tirastore.errors import TiraStoreWarning
from tirastore.store import PathLike, TiraStore, _fspath

Cfg = TypeVar("Cfg")

# The most recent gets a cache remembers (see PersistentCache.get).
_MEMO = 4096


@dataclass
class ConfigEntry:
    """One stored entry, with who wrote it and when (see :meth:`PersistentCache.entries`).

    ``value`` is the stored JSON value as written (the loader is not
    applied); ``hostname`` and ``username`` name the last writer;
    ``creation_date`` and ``update_date`` are UTC ISO 8601 times.
    """

    device: str
    op_id: str
    call_key: str
    value: Any
    hostname: str
    username: str
    creation_date: str
    update_date: str
    namespace: str = ""


class PersistentCache(Generic[Cfg]):
    """A kernel-config cache shared by every process and node that opens it.

    It remembers, for kernel autotuners, the best configuration found for a
    (device, operation, call signature), under the seed's key
    ``"device|op_id|call_key"``.

    *path* chooses the database:

    * None: the seed's default file, ``~/ejkernel-presistent-cache/<opname>.json``
      (spelling kept), mapped as a ``.json`` path is;
    * a path ending in ``.json``: a seed JSON file. The entries live in the
      TiraStore database beside it, ``<stem>.tirastore.db``. A file already
      there is imported into the database the first time any process opens
      it, in one transaction, and never again; the file itself is never
      rewritten (old readers keep reading it) unless :meth:`export_json` is
      called. If it changes later (an old tuner still writes it), opening
      warns (:class:`~tirastore.TiraStoreWarning`) and :meth:`import_json`
      imports the new entries;
    * any other path: the TiraStore database itself, which may also hold
      TiraStore records (the CPU check of records does not apply here);
    * a ``postgresql://`` URL: a database on a PostgreSQL server, shared by
      tuners where no shared filesystem exists (no JSON file is involved).

    :param str opname: the operation's name; it only picks the default path
    :param path: the JSON file or database (str or path-like), a
        ``postgresql://`` URL, or None
    :param loader: applied to a stored value by :meth:`get`
    :param dumper: applied to a configuration by :meth:`put`
    :param cfg_type: the class :meth:`get` builds from a dict (``cfg_type(**d)``);
        None gives an :class:`argparse.Namespace`
    :param lock_timeout: seconds an operation waits for the database's lock
        (as for :class:`~tirastore.TiraStore`; None: 600)
    :param stale_lock_timeout: seconds after which a silent lock holder is
        presumed dead (None: 600)
    :param bool create: False opens an existing database only
        (:exc:`FileNotFoundError` otherwise), as tools do
    :raises TypeError: an argument has the wrong type
    :raises ValueError: the JSON file is not a PersistentCache file (its
        top level is not an object of ``"device|op_id|call_key"`` keys)
    :raises OSError: the database or the JSON file cannot be read or created

    Besides the errors each method lists, every method may raise what
    :class:`~tirastore.TiraStore`'s methods raise (:exc:`TimeoutError` for
    the lock, :exc:`KeyboardInterrupt`, :exc:`~tirastore.LockLostError`,
    :exc:`OSError`), and :exc:`ValueError` once the cache is closed.
    """

    def __init__(
        self,
        opname: str,
        path: Optional[PathLike] = None,
        loader: Optional[Callable[[Any], Cfg]] = None,
        dumper: Optional[Callable[[Cfg], Any]] = None,
        cfg_type: Optional[type] = None,
        *,
        lock_timeout: Optional[float] = None,
        stale_lock_timeout: Optional[float] = None,
        create: bool = True,
    ) -> None:
        self._store: Optional[TiraStore] = None
        # Recent gets: (encoded arguments, stamp, value) by coordinates. An
        # autotuner asks for the same few keys again and again; while the
        # library says a stamp is fresh (one fstat and one header read, no
        # lock, no JSON), its value is what a get would decode again.
        self._memo: dict[tuple[str, str, str], tuple[bytes, int, Any]] = {}
        self._memo_copy = _native.lib_copy
        given = None if path is None else _fspath("PersistentCache", "path", path)
        where = _native.call(0, "config_location", opname=opname, path=given)
        self.loader = loader
        self.dumper = dumper
        self.cfg_type = cfg_type
        #: The JSON file this cache imports and exports by default (None
        #: when *path* names the database itself).
        self.json_path: Optional[Path] = None if where["json_path"] is None else Path(where["json_path"])
        #: What opening did with the JSON file (see :meth:`import_json`),
        #: or None without one.
        self.imported: Optional[dict[str, Any]] = None
        # The CPU check guards records, which this class never writes.
        store = TiraStore.__new__(TiraStore)
        store._open(
            where["db_path"],
            source_project="",
            cpu_model=None,
            slurm_cpus=None,
            allow_cpu_mismatch=True,
            stale_lock_timeout=stale_lock_timeout,
            lock_timeout=lock_timeout,
            create=create,
        )
        self._store = store
        #: The seed's attribute: the path as given, or the default file.
        self.path = given if given is not None else str(self.json_path)
        if self.json_path is not None:
            try:
                self.imported = store._call("config_import", path=str(self.json_path), once=True)
            except BaseException:
                store.close()  # a malformed file: nothing was imported, nothing stays open
                raise
            if self.imported["notice"]:
                warnings.warn(self.imported["notice"], TiraStoreWarning, stacklevel=2)

    @property
    def db_path(self) -> Union[Path, str]:
        """The absolute path of the database that holds the entries (a
        server's URL without its password, for a ``postgresql://`` path)."""
        return self._live().db_path

    def _live(self) -> TiraStore:
        if self._store is None:
            raise ValueError("PersistentCache: the cache was not opened")
        return self._store

    # -- the seed's API ----------------------------------------------------

    def get(self, device: str, op_id: str, call_key: str) -> Optional[Cfg]:
        """Return the configuration stored for the coordinates, or None.

        As the seed: the loader, when given, is applied to the stored value;
        a dict result then becomes ``cfg_type(**d)``, or an
        :class:`argparse.Namespace` when *cfg_type* is None. A stored None
        (JSON null) reads as a miss. A repeated get is answered without the
        lock and without decoding again, once the library has checked that
        nothing committed since (one header read); a ``put`` of any other
        process is seen at once. As with the seed, the stored value's
        containers are shared between gets (and with the loader): do not
        change them in place.

        :param str device: the device fingerprint (``"gpu:0"``, ``"tpu:v4"``)
        :param str op_id: the operation with its version (``"matmul@v1"``)
        :param str call_key: the call signature
        :raises TypeError: an argument is not a str
        :raises ValueError: an argument contains a NUL character or a lone
            surrogate, or the value is stored nested deeper than a stored
            value may be (see :meth:`put`; written before that limit or not
            through TiraStore: the message names the entry)
        """
        store = self._live()
        if self._memo_copy != _native.lib_copy:  # forked or unpickled: stamps of another library copy
            self._memo.clear()
            self._memo_copy = _native.lib_copy
        coords = (device, op_id, call_key)
        try:
            memo = self._memo.get(coords)
        except TypeError:  # an unhashable argument: the library names it
            memo = None
        if memo is not None and memo[1] and _native.config_fresh(store._handle, memo[1]):
            raw = memo[2]  # what the library answered, and would answer again now
        else:
            payload = memo[0] if memo is not None else _native.encode_args(
                "PersistentCache.get", device=device, op_id=op_id, call_key=call_key
            )
            found = store._call_encoded(b"config_value", payload)
            raw, stamp = (None, 0) if found is None else found
            if type(device) is str and type(op_id) is str and type(call_key) is str:
                if memo is None and len(self._memo) >= _MEMO:
                    self._memo.clear()
                self._memo[coords] = (payload, stamp, raw)
        if raw is None:
            return None
        out = self.loader(raw) if self.loader is not None else raw
        if isinstance(out, dict):
            out = Namespace(**out) if self.cfg_type is None else self.cfg_type(**out)
        return out

    def put(self, device: str, op_id: str, call_key: str, cfg: Cfg, overwrite: bool = True) -> bool:
        """Store a configuration for the coordinates, in one small transaction.

        Serialized as the seed does: the dumper when given, else a
        dataclass's :func:`~dataclasses.asdict`, else ``cfg.model_dump()``
        (pydantic v2), else *cfg* itself, which must then be JSON
        serializable (NaN and infinities are stored as Python's json writes
        them). The value may nest at most 100 levels of lists and dicts
        (``tirastore.limits()["max_value_depth"]``; docs/limits.md): Python's
        json reads each level on the interpreter's stack, so a deeper value
        could not be read back by a caller that is itself deep in its
        stack. Its JSON text may be at most 256 MiB
        (``limits()["max_text_bytes"]``).

        :param bool overwrite: True (the seed's behaviour): the last writer
            wins; False: an existing entry stays, so that concurrent tuners
            agree on the first result
        :return: True if written; False if an entry existed and *overwrite*
            is False
        :raises TypeError: an argument is not a str, or the value is not
            JSON serializable (the message names the key)
        :raises ValueError: an argument contains a NUL character or a lone
            surrogate, or the value nests deeper than 100 levels (the
            message names the key and the limit)
        """
        if self.dumper is not None:
            val = self.dumper(cfg)
        elif is_dataclass(cfg) and not isinstance(cfg, type):
            val = asdict(cfg)
        elif hasattr(cfg, "model_dump"):
            val = cfg.model_dump()
        else:
            val = cfg
        return self._live()._call(
            "config_put", device=device, op_id=op_id, call_key=call_key, value=val, overwrite=overwrite
        )

    # -- beyond the seed ---------------------------------------------------

    def delete(self, device: str, op_id: str, call_key: str) -> bool:
        """Remove the entry of the coordinates; return whether there was one."""
        return self._live()._call("config_delete", device=device, op_id=op_id, call_key=call_key)

    def clear(self) -> int:
        """Remove every entry; return how many there were."""
        return self._live()._call("config_clear")

    def __len__(self) -> int:
        return self._live()._call("config_len")

    def entries(self, device: Optional[str] = None, op_id: Optional[str] = None) -> list[ConfigEntry]:
        """Return the stored entries of a device and/or an operation, by key.

        An entry whose value is stored nested deeper than a stored value
        may be (100 levels, the library's ``max_value_depth``: every
        write refuses such a value, but an old writer or a direct SQL
        write may have stored one) is left out with a
        :class:`~tirastore.TiraStoreWarning` naming it, so that it does not
        make the other entries unreadable; :meth:`get` of it raises
        ValueError, ``tirastore check`` lists every one, and
        :meth:`delete` or :meth:`put` replaces it.

        :param device: only this device's entries (None: every device)
        :param op_id: only this operation's entries (None: every operation)
        :return: a list of :class:`ConfigEntry` (raw values, with who
            wrote them and when), from one consistent read
        """
        return self._entries(device, op_id)

    def _rows(self, device: Optional[str], op_id: Optional[str]) -> list[dict[str, Any]]:
        """The library's rows; a value too deep to send carries ``"error"`` in its place."""
        return self._live()._call("config_entries", device=device, op_id=op_id)

    def _entries(self, device: Optional[str], op_id: Optional[str], stacklevel: int = 3) -> list[ConfigEntry]:
        out = []
        for r in self._rows(device, op_id):
            if "error" in r:
                warnings.warn(r["error"], TiraStoreWarning, stacklevel=stacklevel)
            else:
                out.append(ConfigEntry(**r))
        return out

    def items(self, device: Optional[str] = None, op_id: Optional[str] = None) -> Iterator[tuple[tuple[str, str, str], Cfg]]:
        """Iterate over ``((device, op_id, call_key), cfg)`` pairs, cfg as :meth:`get` returns it.

        The entries are read at once (one consistent read), then converted
        one by one; entries whose value is None are left out, as :meth:`get`
        reads them as misses, and so are values stored too deeply nested
        to read, with a warning (see :meth:`entries`).
        """
        for e in self._entries(device, op_id):
            if e.value is None:
                continue
            out = self.loader(e.value) if self.loader is not None else e.value
            if isinstance(out, dict):
                out = Namespace(**out) if self.cfg_type is None else self.cfg_type(**out)
            yield (e.device, e.op_id, e.call_key), out

    def __iter__(self) -> Iterator[tuple[str, str, str]]:
        """Iterate over the ``(device, op_id, call_key)`` of every entry, by key (also of
        an entry whose value is too deeply nested to read: see :meth:`entries`)."""
        return iter([(r["device"], r["op_id"], r["call_key"]) for r in self._rows(None, None)])

    def __contains__(self, coords: object) -> bool:
        """``(device, op_id, call_key) in cache``: an entry is stored (its value may be None)."""
        if not (isinstance(coords, tuple) and len(coords) == 3):
            return False
        device, op_id, call_key = coords
        return self._live()._call("config_get", device=device, op_id=op_id, call_key=call_key) is not None

    def import_json(self, path: Optional[PathLike] = None, overwrite: bool = False) -> dict[str, Any]:
        """Import a seed JSON file (``{"device|op_id|call_key": value}``) in one transaction.

        All or nothing: a malformed file or key imports nothing. The file is
        remembered, so that opening a cache on it does not import it again.

        :param path: the file (None: :attr:`json_path`)
        :param bool overwrite: the file's entries replace the cache's of the
            same key (default: the cache's stay)
        :return: a dict with ``path``, ``entries`` (in the file), ``added``,
            ``replaced``, ``kept`` and ``imported_at``
        :raises ValueError: the file is not a PersistentCache file, or no
            path is given and the cache has no JSON file
        :raises OSError: the file cannot be read (:exc:`FileNotFoundError`, ...)
        """
        return self._live()._call("config_import", path=self._json_arg("import_json", path), overwrite=overwrite)

    def export_json(self, path: Optional[PathLike] = None) -> Path:
        """Write every entry to a JSON file in the seed's format, replacing it atomically.

        What the seed's ``json.dump`` writes (``{"device|op_id|call_key":
        value, ...}``, here by key), so that old readers and tools see the
        cache's entries; written to a temporary file and renamed over
        *path*, as the seed did.

        :param path: the file (None: :attr:`json_path`)
        :return: the absolute :class:`~pathlib.Path` written
        :raises ValueError: no path is given and the cache has no JSON file,
            or *path* is the cache's database, one of its files (its lock,
            journal, ...) or another database: nothing is written
        :raises OSError: the file cannot be written
        """
        out = self._live()._call("config_export", output_path=self._json_arg("export_json", path))
        return Path(out["path"])

    def _json_arg(self, where: str, path: Optional[PathLike]) -> str:
        if path is not None:
            return _fspath(f"PersistentCache.{where}", "path", path)
        if self.json_path is None:
            raise ValueError(f"PersistentCache.{where}(): this cache has no JSON file (its path names the database): give a path")
        return str(self.json_path)

    # -- pickling (multiprocessing spawn, any pickled task) -----------------

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_memo"] = {}  # stamps mean something in this process only
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._memo_copy = -1  # never a library copy: the first get starts afresh

    # -- lifetime ----------------------------------------------------------

    @property
    def closed(self) -> bool:
        """True after :meth:`close`."""
        return self._store is None or self._store.closed

    def close(self) -> None:
        """Release the database; later calls raise ValueError. Closing twice is harmless."""
        if self._store is not None:
            self._store.close()

    def __enter__(self) -> "PersistentCache[Cfg]":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        where = str(self._store.db_path) if self._store is not None else None
        return f"PersistentCache(path={self.path!r}, db_path={where!r})"
