"""The ``tirastore`` command: look after a shared database from a shell.

    tirastore stats cache.db                 # what is in it
    tirastore stats cache.db --by program    # one row per program
    tirastore export cache.db dump.jsonl --format jsonl
    tirastore import other.db dump.jsonl     # and back in
    tirastore merge cache.db clusterB.db     # records of other databases
    tirastore merge postgresql://db.example.org/tira cache.db   # a file into a server's
    tirastore backup cache.db snapshots/     # a consistent online copy
    tirastore config list tuning.json        # the kernel-config cache
    tirastore lock status cache.db           # who holds the lock, alive?
    tirastore check cache.db --repair        # after a node died holding it
    tirastore plot cache.db --program blur -o blur.png
    tirastore dashboard cache.db             # a live web page on 127.0.0.1:8050

Every subcommand has ``--help``, readable output and ``--json`` (one JSON
document on stdout). Exit status: 0 fine, 1 a problem (a missing or
corrupt database, a held lock, a missing entry), 2 a usage error. The
command opens existing databases only: a typo in a path never creates
one. All work is the library's (the same calls as :class:`TiraStore` and
:class:`PersistentCache`); this module parses arguments and prints.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import math
import os
import re
import sqlite3
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Callable, Optional, Sequence
from urllib.parse import urlsplit

from tirastore import _native
from tirastore.errors import LockLostError, TiraStoreWarning
from tirastore.persistent_cache import ConfigEntry, PersistentCache
from tirastore.store import TiraStore, _output_file

# What a problem found is (exit 1): every error the library raises.
_PROBLEMS = (OSError, sqlite3.Error, TimeoutError, ValueError, TypeError, LockLostError)


# Control characters (C0 but tab, DEL, C1): a database path, a host name,
# a schedule or a project written by anyone could hold a newline or an ANSI
# escape, which would forge lines or colours in a terminal.
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f]")


def _escape(value: Any) -> str:
    """str(value) with its control characters escaped (\\n, \\x1b), for
    the text a person reads; --json output escapes them as JSON does."""
    return _CONTROL.sub(lambda m: {"\n": "\\n", "\r": "\\r"}.get(m[0], f"\\x{ord(m[0]):02x}"), str(value))


def _escaped(doc: Any) -> Any:
    """doc with every string in it escaped (_escape), dicts and lists
    changed in place, so that a command's text, which reads them, shows
    them escaped."""
    if isinstance(doc, str):
        return _escape(doc)
    if isinstance(doc, dict):
        for k, v in doc.items():
            doc[k] = _escaped(v)
    elif isinstance(doc, list):
        doc[:] = [_escaped(v) for v in doc]
    return doc


def _message(text: str) -> str:
    """An error or warning for stderr: control characters escaped but the
    message's own line breaks, whose continuation lines are indented, so
    that every line at column 0 is one that tirastore began."""
    return "\n  ".join(_escape(line) for line in str(text).split("\n"))


class _Output:
    """Prints a command's result: JSON with --json, else the command's text,
    the result's strings escaped (_escaped)."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.json = args.json
        self.quiet = args.quiet

    def result(self, doc: Any, text: Callable[[], str]) -> None:
        if self.json:
            print(json.dumps(doc, indent=2, ensure_ascii=False, allow_nan=True))
        else:
            _escaped(doc)
            out = text()
            if out:
                print(out)

    def warn(self, message: str) -> None:
        if not self.quiet:
            print(f"tirastore: warning: {_message(message)}", file=sys.stderr)


def _table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A plain text table, columns padded to their widest cell."""
    cells = [[str(h) for h in headers]] + [["" if c is None else str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _progress(out: "_Output", total: int, unit: str, desc: str) -> Any:
    """A tqdm bar on a terminal's stderr; nothing when stderr is not a
    terminal (Slurm logs), with --quiet or --json. tqdm is what this
    community already has installed (a dependency of the package)."""
    from tqdm import tqdm  # noqa: PLC0415 - only the long commands need it

    quiet = out.quiet or out.json or not sys.stderr.isatty()
    return tqdm(total=total, unit=unit, unit_scale=True, desc=desc, disable=quiet, leave=False, file=sys.stderr)


# Records per library call of a long command: big enough that the calls
# cost nothing next to the work, small enough for a lively progress bar.
_SLICE = 5000


def _open_store(args: argparse.Namespace) -> TiraStore:
    # The CPU check guards record writes; these commands read, or write the
    # config table, which it does not concern.
    return TiraStore(args.db, allow_cpu_mismatch=True, lock_timeout=args.lock_timeout, create=False)


def _open_cache(args: argparse.Namespace, create: bool = False) -> PersistentCache:
    return PersistentCache("tirastore", path=args.db, lock_timeout=args.lock_timeout, create=create)


def _namespace(args: argparse.Namespace, cache: PersistentCache, every: bool = False) -> Optional[str]:
    """--namespace, else the JSON path's own (its stem), else "" (None:
    every namespace, where *every* and DB names the database itself)."""
    if args.namespace is not None:
        return args.namespace
    if every and cache.json_path is None:
        return None
    return cache.namespace


# -- the commands ----------------------------------------------------------------
#
# Each command is its function and, beside it, the arguments it takes and
# what its --help says (its docstring is the description at the top):
# @_command registers them together, in the order `tirastore --help` lists
# them (the order of this file); _parser() only assembles them.

_Run = Callable[[argparse.Namespace, _Output], int]


@dataclasses.dataclass(frozen=True)
class _Command:
    """A subcommand as :func:`_parser` builds it."""

    words: tuple[str, ...]  # ("stats",), or a group's action: ("config", "list")
    summary: str  # its line in the listing of its parent's --help
    # The top of its own --help: the function's docstring, which argparse
    # rewraps (none under python -OO, which drops docstrings).
    description: Optional[str]
    arguments: Callable[[argparse.ArgumentParser], None]  # adds its own, after the common options
    run: _Run


_COMMANDS: list[_Command] = []
# The commands that group actions (config, lock): name -> (summary, description).
_GROUPS: dict[str, tuple[str, str]] = {}


def _command(words: str, summary: str, arguments: Callable[[argparse.ArgumentParser], None]) -> Callable[[_Run], _Run]:
    """Register the function below as the command *words* ("stats", or a
    group's action, "config list"); see :class:`_Command`."""

    def register(run: _Run) -> _Run:
        _COMMANDS.append(_Command(tuple(words.split()), summary, run.__doc__, arguments, run))
        return run

    return register


def _group(name: str, summary: str, description: str) -> None:
    """Declare a command that groups the actions registered as "NAME ACTION"."""
    _GROUPS[name] = (summary, description)


def _add_db(p: argparse.ArgumentParser,
            what: str = "the TiraStore database: an existing file, or a postgresql:// URL") -> None:
    p.add_argument("db", metavar="DB", help=what)


def _stats_arguments(p: argparse.ArgumentParser) -> None:
    _add_db(p)
    p.add_argument("--by", choices=["program"], help="add a table with one row per program")
    p.add_argument("--program", metavar="NAME",
                   help="add a table of the program's records, fastest first: times, min, median, MAD, spread, stable")


@_command("stats", "counts, programs, users, CPU metadata, size", _stats_arguments)
def cmd_stats(args: argparse.Namespace, out: _Output) -> int:
    """What a database holds: records, programs, users, projects, CPU metadata, file size and kernel-config entries."""
    with _open_store(args) as store:
        s = store.stats()
        s["file_size"] = os.stat(store.db_path).st_size if _is_file(store) else None
        s["db_path"] = str(store.db_path)
        s["config_entries"] = len(store._call("config_entries", namespace=None))  # every namespace
        s["stability"] = store._call("stability")
        programs = store.program_stats() if args.by == "program" else None
        records = _record_stats(store, args.program) if args.program is not None else None
    if programs is not None:
        s["programs"] = programs
    if records is not None:
        s["records"] = records

    def text() -> str:
        lines = [
            f"database        {s['db_path']}" + (f" ({s['file_size']:,} bytes)" if s["file_size"] is not None else ""),
            f"records         {s['total_records']:,} ({s['legal_records']:,} legal, {s['illegal_records']:,} illegal)",
            f"programs        {s['total_programs']:,}",
            f"users           {', '.join(s['users']) or '-'}",
            f"projects        {', '.join(repr(p) for p in s['source_projects']) or '-'}",
            f"cpu_model       {s['cpu_model']}",
            f"slurm_cpus      {s['slurm_cpus']}",
            f"config entries  {s['config_entries']:,}",
            _stability_text(s["stability"]),
        ]
        if programs is not None:
            rows = [
                (p["program_name"], p["program_hash"][:12], p["records"], p["legal"], p["illegal"], p["last_record"])
                for p in programs
            ]
            lines += ["", _table(["program", "hash", "records", "legal", "illegal", "last record"], rows)]
        if records is not None:
            lines += ["", f"records of {args.program!r}, fastest first (in the unit of their times):",
                      _record_table(records)]
        return "\n".join(lines)

    out.result(s, text)
    return 0


def _record_stats(store: TiraStore, name: str) -> list[dict[str, Any]]:
    """The records of every source version of the program name with the
    library's statistics of their times: the timed ones by median, fastest
    first, then the censored, the illegal and the untimed ones."""
    versions = store.get_program_source(name)
    if not versions:
        raise ValueError(f"no program named {name!r} in {store.db_path}")
    rows = []
    for v in versions:
        for r in store.get_program_records(name, v["source_code"]):
            rows.append({"program_hash": v["program_hash"], "schedule": r.schedule, "is_legal": r.is_legal,
                         "count": r.count, "min": r.min, "median": r.median, "mad": r.mad, "spread": r.spread,
                         "stable": r.stable, "censored": r.censored, "hostname": r.hostname,
                         "creation_date": r.creation_date})

    def order(r: dict[str, Any]) -> tuple:
        timed = r["is_legal"] and r["censored"] is None and r["median"] is not None
        return (0, r["median"]) if timed else (1 if r["censored"] else 2 if not r["is_legal"] else 3, 0.0)

    return sorted(rows, key=order)


def _record_table(records: list[dict[str, Any]]) -> str:
    """The text table of _record_stats."""
    def num(x: Optional[float]) -> str:
        return "-" if x is None else f"{x:.4g}"

    def state(r: dict[str, Any]) -> str:
        if r["censored"] == "timeout":
            return f"timed out after {num(r['min'])}"
        if r["censored"]:
            return r["censored"].replace("_", " ")
        if not r["is_legal"]:
            return "illegal"
        return "-" if r["stable"] is None else "stable" if r["stable"] else "unstable"

    rows = [(r["schedule"], r["count"], num(r["min"]), num(r["median"]), num(r["mad"]),
             "-" if r["spread"] is None or r["censored"] else f"{r['spread']:.1%}", state(r), r["hostname"])
            for r in records]
    return _table(["schedule", "times", "min", "median", "MAD", "spread", "state", "host"], rows)


def _stability_text(st: dict[str, Any]) -> str:
    """The stats line of the noise policy: how many timed records meet it."""
    p = st["policy"]
    rule = f"spread <= {p['max_spread'] * 100:.4g}% (PolyBench's rule), up to {p['max_remeasures']} re-measurements"
    censored = ""
    if st["timed_out"] or st["compile_failures"]:
        censored = (f"\ncensored        {st['timed_out']:,} timed out (their limit a lower bound), "
                    f"{st['compile_failures']:,} failed to compile")
    if not st["timed"]:
        return f"noise policy    {rule}; no timed record{censored}"
    return (f"noise policy    {rule}\n"
            f"stability       {st['timed'] - st['unstable']:,} of {st['timed']:,} timed records stable, "
            f"{st['unstable']:,} unstable; median spread {st['median_spread']:.2%}{censored}")


def _export_arguments(p: argparse.ArgumentParser) -> None:
    _add_db(p)
    p.add_argument("out", metavar="OUT", help="the file to write")
    p.add_argument("--format", choices=["json", "jsonl"], default="json", help="one JSON object, or one line per program")
    p.add_argument("--runs", action="store_true",
                   help="give each schedule the runs of its record, with their contexts (import stores them)")


@_command("export", "write every record in the original's export format", _export_arguments)
def cmd_export(args: argparse.Namespace, out: _Output) -> int:
    """Write every program and its measurements to OUT in the original TiraStore's export format (docs/COMPAT.md),
    under the lock; OUT is replaced atomically."""
    with _open_store(args) as store:
        path = store.export(args.out, fmt=args.format, runs=args.runs)
        n = store.count()
    doc = {"path": str(path), "format": args.format, "records": n}
    out.result(doc, lambda: f"exported {n:,} records to {doc['path']}")
    return 0


# What a slice of import or merge counts (the library's TransferResult).
_COUNTS = ("programs", "records", "added", "same", "conflicts", "replaced", "merged")


def _add_slice(totals: dict[str, int], r: dict[str, Any], conflicts: Any, **extra: Any) -> None:
    """Add a slice's counts to totals; write its conflicts, if asked, one JSON line each."""
    for k in _COUNTS:
        totals[k] += r[k]
    if conflicts is not None:
        for c in r["conflict_list"]:
            conflicts.write(json.dumps(dict(c, **extra), ensure_ascii=False, allow_nan=True) + "\n")


def _counts_text(t: dict[str, Any], overwrite: bool) -> str:
    merged = f", {t['merged']:,} measured in both (their samples merged)" if t.get("merged") else ""
    return (f"{t['records']:,} records of {t['programs']:,} programs: {t['added']:,} added, {t['same']:,} already "
            f"there{merged}, {t['conflicts']:,} conflicting (same key, another result; {'replaced' if overwrite else 'kept'})")


def _is_file(store: TiraStore) -> bool:
    """Whether the store's database is a file (else it is on a server)."""
    return isinstance(store.db_path, Path)


def _label(store: TiraStore) -> str:
    """A short name of a database for a progress bar: the file's name, a
    server's database name."""
    if _is_file(store):
        return store.db_path.name
    return urlsplit(str(store.db_path)).path.strip("/") or "server"


def _exists(location: str, lock_timeout: Optional[float] = None) -> bool:
    """Whether there is a database at location (a file, a server's tables):
    the library's open that creates nothing says. An empty file is none
    (the library refuses it as such): a command that creates its
    destination makes one in it, as TiraStore() does."""
    try:
        TiraStore(location, allow_cpu_mismatch=True, lock_timeout=lock_timeout, create=False).close()
    except FileNotFoundError:
        return False
    except sqlite3.DatabaseError:
        if os.path.isfile(location) and os.path.getsize(location) == 0:
            return False
        raise
    return True


def _conflicts_file(args: argparse.Namespace, databases: Sequence[str], inputs: Sequence[str] = ()) -> Any:
    """The --conflicts file, checked by the library before anything is
    written (never one of *databases* or their files, nor another database,
    nor an input) and renamed into place when the command succeeds; a null
    context without --conflicts."""
    if not args.conflicts:
        return contextlib.nullcontext((None, None))
    return _output_file("conflicts", args.conflicts, databases=databases, inputs=inputs, mode="w", encoding="utf-8")


def _add_conflicts(p: argparse.ArgumentParser) -> None:
    p.add_argument("--conflicts", metavar="FILE", help="write the conflicting records to FILE (JSON Lines), renamed into place when the command succeeds")


def _add_private(p: argparse.ArgumentParser) -> None:
    p.add_argument("--private", dest="shared", action="store_const", const=False, default=None,
                   help="a database this command creates is yours alone (0600), not every user's (0666, the original's)")


def _import_arguments(p: argparse.ArgumentParser) -> None:
    _add_db(p, "the database to import into (created if missing)")
    p.add_argument("input", metavar="IN", help="the export file")
    p.add_argument("--overwrite", action="store_true", help="conflicting records take the file's result")
    _add_private(p)
    _add_conflicts(p)
    p.add_argument("--allow-cpu-mismatch", action="store_true",
                   help="import although DB was created on another CPU model or SLURM_CPUS_PER_TASK")


@_command("import", "read an export (json or jsonl) back into a database", _import_arguments)
def cmd_import(args: argparse.Namespace, out: _Output) -> int:
    """Read a file in the original's export format (what `tirastore export` writes, json or jsonl: told apart by its
    first line) into DB, a slice at a time; DB is created if it does not exist. Records already there with the same
    result are skipped; a record with the same key and another result is a conflict, kept unless --overwrite.
    Imported records are stamped with this host, user and time."""
    # A missing or refused input creates no database.
    size = os.stat(args.input).st_size
    _native.call(0, "import_check", input_path=args.input, format="export")
    created = not _exists(args.db, args.lock_timeout)
    totals = dict.fromkeys(_COUNTS, 0)
    with _conflicts_file(args, [args.db], [args.input]) as (_, conflicts):
        # The one command besides config import-ejkernel that creates a
        # database on purpose: an export is read into a new one.
        with TiraStore(args.db, allow_cpu_mismatch=args.allow_cpu_mismatch, lock_timeout=args.lock_timeout,
                       shared=args.shared) as store:
            shown = str(store.db_path)
            offset: Optional[int] = 0
            with _progress(out, size, "B", "import") as bar:
                while offset is not None:
                    r = store._call("import", input_path=args.input, offset=offset, max_records=_SLICE,
                                    overwrite=args.overwrite, list_conflicts=conflicts is not None)
                    _add_slice(totals, r, conflicts)
                    bar.update((r["next"] if r["next"] is not None else size) - offset)
                    offset = r["next"]
    doc = dict(totals, db_path=shown, created=created)
    out.result(doc, lambda: (f"created {doc['db_path']}\n" if created else "") + "imported "
               + _counts_text(totals, args.overwrite))
    return 0


def _merge_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("dst", metavar="DST", help="the database to merge into (created if missing)")
    p.add_argument("sources", metavar="SRC", nargs="+", help="databases to read (existing files)")
    p.add_argument("--overwrite", action="store_true", help="conflicting records take the source's result")
    _add_private(p)
    _add_conflicts(p)
    p.add_argument("--allow-cpu-mismatch", action="store_true", help="merge sources measured on other CPUs")


@_command("merge", "copy the records of other databases into one", _merge_arguments)
def cmd_merge(args: argparse.Namespace, out: _Output) -> int:
    """Copy the records of each SRC (other clusters' databases, other experiments') into DST, a slice of programs at
    a time, each slice read under the source's own lock and written in one transaction. Rows keep who measured them
    and when. A record already in DST with the same result is skipped; the same key with another result is a
    conflict, kept unless --overwrite. A source measured on another CPU model or SLURM_CPUS_PER_TASK is refused
    unless --allow-cpu-mismatch. DST is created if it does not exist."""
    for src in args.sources:  # every source must exist before anything is written
        if not _exists(src, args.lock_timeout):
            raise FileNotFoundError(2, f"no database at {src}")
    created = not _exists(args.dst, args.lock_timeout)
    report = []
    with _conflicts_file(args, [args.dst, *args.sources]) as (_, conflicts):
        # The CPU check that matters is the sources' against DST's (the
        # library's merge makes it); this host measures nothing.
        meta: dict[str, Any] = {}
        if created:  # a new DST takes its first source's CPU metadata
            with TiraStore(args.sources[0], allow_cpu_mismatch=True, lock_timeout=args.lock_timeout, create=False) as s:
                meta = {"cpu_model": s.cpu_model, "slurm_cpus": s.slurm_cpus}
        with TiraStore(args.dst, allow_cpu_mismatch=True, lock_timeout=args.lock_timeout, shared=args.shared,
                       **meta) as dst:
            shown = str(dst.db_path)
            for src in args.sources:
                with TiraStore(src, allow_cpu_mismatch=True, lock_timeout=args.lock_timeout, create=False) as s:
                    total = s.count()
                    src_shown, label = str(s.db_path), _label(s)
                totals = dict.fromkeys(_COUNTS, 0)
                after = None
                with _progress(out, total, "rec", f"merge {label}") as bar:
                    while True:
                        r = dst._call("merge", source_path=src, after=after, max_records=_SLICE, overwrite=args.overwrite,
                                      allow_cpu_mismatch=args.allow_cpu_mismatch, list_conflicts=conflicts is not None)
                        _add_slice(totals, r, conflicts, source=src)
                        bar.update(r["records"])
                        if r["next"] is None:
                            break
                        after = r["next"]
                report.append(dict(totals, source=src_shown))
    doc = {"db_path": shown, "created": created, "sources": report}

    def text() -> str:
        lines = [f"created {doc['db_path']}"] if created else []
        lines += [f"{t['source']}: {_counts_text(t, args.overwrite)}" for t in report]
        return "\n".join(lines)

    out.result(doc, text)
    return 0


def _backup_arguments(p: argparse.ArgumentParser) -> None:
    _add_db(p)
    p.add_argument("path", metavar="PATH", nargs="?", help="where to write the snapshot")


@_command("backup", "a consistent online snapshot", _backup_arguments)
def cmd_backup(args: argparse.Namespace, out: _Output) -> int:
    """Copy the database under its lock into a new file, renamed into place when complete. PATH may be a file or an
    existing directory; its directory is created. Without PATH: <stem>_<UTC time>.db beside the database."""
    with _open_store(args) as store:
        path = store.backup(args.path)
    size = os.stat(path).st_size
    doc = {"path": str(path), "size": size}
    out.result(doc, lambda: f"backed up to {doc['path']} ({size:,} bytes)")
    return 0


def _entry_doc(e: Any) -> dict[str, Any]:
    return {
        "namespace": e.namespace,
        "device": e.device,
        "op_id": e.op_id,
        "call_key": e.call_key,
        "value": e.value,
        "hostname": e.hostname,
        "username": e.username,
        "creation_date": e.creation_date,
        "update_date": e.update_date,
    }


def _value_text(v: Any) -> str:
    return json.dumps(v, ensure_ascii=False, allow_nan=True)


def _config_rows(cache: PersistentCache, namespace: Optional[str], device: Optional[str],
                 op_id: Optional[str]) -> list[dict[str, Any]]:
    """The library's entries of a namespace (None: of every one); a value
    too deep to send carries "error" in its place."""
    return cache._opened("entries")._call("config_entries", namespace=namespace, device=device, op_id=op_id)


def _key_text(args: argparse.Namespace) -> str:
    """The entry the arguments name, as the library's messages name it."""
    key = f"{args.device}|{args.op_id}|{args.call_key}"
    return f"{key} in namespace {args.namespace}" if args.namespace else key


_group("config", "the kernel-config cache (ejKernel's PersistentCache)",
       "The kernel-config table of a database. DB is a TiraStore database, or a "
       "PersistentCache .json path (its entries live in persistent-cache.tirastore.db beside it, "
       "in the namespace of its stem).")


def _add_config_db(p: argparse.ArgumentParser) -> None:
    _add_db(p, "the database, or a PersistentCache .json path")


def _add_namespace(p: argparse.ArgumentParser, what: str, default: str = 'a .json DB\'s stem, else ""') -> None:
    p.add_argument("--namespace", metavar="NS", help=f"{what} (a namespace is one cache of the database, ejKernel's "
                   f"one per operation; default: {default})")


def _config_list_arguments(p: argparse.ArgumentParser) -> None:
    _add_config_db(p)
    p.add_argument("--device", help="only this device's entries")
    p.add_argument("--op", help="only this operation's entries")
    _add_namespace(p, "only this namespace's entries", "a .json DB's own, its stem, else every namespace")


@_command("config list", "list the entries, by key", _config_list_arguments)
def cmd_config_list(args: argparse.Namespace, out: _Output) -> int:
    with _open_cache(args) as cache:
        entries = []
        for r in _config_rows(cache, _namespace(args, cache, every=True), args.device, args.op):
            if "error" in r:  # stored too deeply nested to read: the others are listed
                warnings.warn(r["error"], TiraStoreWarning)
            else:
                entries.append(_entry_doc(ConfigEntry(**r)))
    def text() -> str:
        cols = ["device", "op_id", "call_key", "value", "updated"]
        rows = [(e["device"], e["op_id"], e["call_key"], _value_text(e["value"]), e["update_date"]) for e in entries]
        if any(e["namespace"] for e in entries):
            cols, rows = ["namespace", *cols], [(e["namespace"], *r) for e, r in zip(entries, rows)]
        return _table(cols, rows) if rows else "(no entries)"

    out.result(entries, text)
    return 0


def _entry_arguments(p: argparse.ArgumentParser) -> None:
    """The arguments of config get and config delete: one entry."""
    _add_config_db(p)
    p.add_argument("device")
    p.add_argument("op_id")
    p.add_argument("call_key")
    _add_namespace(p, "the entry's namespace")


@_command("config get", "print one entry's value", _entry_arguments)
def cmd_config_get(args: argparse.Namespace, out: _Output) -> int:
    with _open_cache(args) as cache:
        args.namespace = _namespace(args, cache)
        rows = [r for r in _config_rows(cache, args.namespace, args.device, args.op_id) if r["call_key"] == args.call_key]
        if rows and "error" in rows[0]:  # stored too deeply nested to read: the library says which and why
            raise ValueError(rows[0]["error"])
        found = [ConfigEntry(**r) for r in rows]
    if not found:
        print(f"tirastore: no entry {_escape(_key_text(args))} in {_escape(args.db)}", file=sys.stderr)
        return 1
    doc = _entry_doc(found[0])
    out.result(doc, lambda: _value_text(doc["value"]))
    return 0


@_command("config delete", "remove one entry", _entry_arguments)
def cmd_config_delete(args: argparse.Namespace, out: _Output) -> int:
    with _open_cache(args) as cache:
        args.namespace = _namespace(args, cache)
        deleted = cache._opened("delete")._call("config_delete", namespace=args.namespace, device=args.device,
                                                op_id=args.op_id, call_key=args.call_key)
    key = _key_text(args)
    out.result({"deleted": deleted, "key": f"{args.device}|{args.op_id}|{args.call_key}", "namespace": args.namespace},
               lambda: f"deleted {_escape(key)}" if deleted else "")
    if not deleted:
        print(f"tirastore: no entry {_escape(key)} in {_escape(args.db)}", file=sys.stderr)
    return 0 if deleted else 1


def _config_import_arguments(p: argparse.ArgumentParser) -> None:
    _add_config_db(p)
    p.add_argument("file", metavar="FILE.json")
    p.add_argument("--overwrite", action="store_true", help="the file's entries replace existing ones")
    _add_namespace(p, "import into this namespace")


@_command("config import-ejkernel", "import a PersistentCache JSON file", _config_import_arguments)
def cmd_config_import(args: argparse.Namespace, out: _Output) -> int:
    """Import ejKernel's PersistentCache JSON file ({"device|op_id|call_key": value}) in one transaction, all or
    nothing. Creates DB if it does not exist."""
    # A missing or refused file creates no database.
    _native.call(0, "import_check", input_path=args.file, format="config", namespace=args.namespace or "")
    with _open_cache(args, create=True) as cache:  # its purpose: the only command that creates a database
        res = cache._opened("import_json")._call("config_import", namespace=_namespace(args, cache),
                                                 path=args.file, overwrite=args.overwrite)
    out.result(
        res,
        lambda: f"imported {res['path']}: {res['entries']:,} entries, {res['added']:,} added, "
        f"{res['replaced']:,} replaced, {res['kept']:,} kept",
    )
    return 0


def _config_export_arguments(p: argparse.ArgumentParser) -> None:
    _add_config_db(p)
    p.add_argument("file", metavar="FILE.json")
    _add_namespace(p, "export this namespace's entries")


@_command("config export-ejkernel", "write the entries as a PersistentCache JSON file", _config_export_arguments)
def cmd_config_export(args: argparse.Namespace, out: _Output) -> int:
    """Write every entry of a namespace in ejKernel's PersistentCache format (json.dump's), replacing FILE
    atomically."""
    with _open_cache(args) as cache:
        done = cache._opened("export_json")._call("config_export", namespace=_namespace(args, cache),
                                                  output_path=args.file)
    path, n = done["path"], done["entries"]
    out.result({"path": str(path), "entries": n}, lambda: f"exported {n:,} entries to {_escape(path)}")
    return 0


def _ago(iso: str, now: float) -> str:
    """How long ago an ISO 8601 date of the holder's clock was, for people."""
    from datetime import datetime  # noqa: PLC0415

    try:
        secs = now - datetime.fromisoformat(iso).timestamp()
    except ValueError:
        return "?"
    return f"{secs:.0f}s" if secs < 120 else f"{secs / 60:.0f}min" if secs < 7200 else f"{secs / 3600:.1f}h"


@_command("claims", "who is measuring what (claims of lookup_or_claim)", _add_db)
def cmd_claims(args: argparse.Namespace, out: _Output) -> int:
    """List the claims of lookup_or_claim: the schedules being measured, by whom (host, pid, Slurm job and what
    Slurm says of it, user), how long ago they were claimed and last renewed (by the holder's clock), their lease, and whether the holder is
    provably dead (on this host)."""
    with _open_store(args) as store:
        claims = [dataclasses.asdict(c) for c in store.claims()]
    now = time.time()

    def text() -> str:
        if not claims:
            return "no claims: nobody is measuring"
        rows = [
            (c["program_name"], c["tiralib_schedule_string"], c["hostname"], c["pid"], _job_text(c),
             c["username"], _ago(c["claimed_at"], now), f"{c['lease']:g}s", _ago(c["renewed_at"], now),
             "dead" if c["dead"] else "alive?")
            for c in claims
        ]
        table = _table(["program", "schedule", "host", "pid", "Slurm job", "user", "age", "lease", "renewed", "holder"],
                       rows)
        return f"{table}\n{len(claims)} claim(s); ages by the holders' clocks; a dead holder's claim goes to the next caller"

    out.result(claims, text)
    return 0


def _job_text(c: dict[str, Any]) -> str:
    """A claim's Slurm job: its id and, when Slurm said, its state."""
    if not c["slurm_job_id"]:
        return "-"
    return f"{c['slurm_job_id']} {c['job_state']}" if c["job_state"] else c["slurm_job_id"]


def _holder_text(st: dict[str, Any]) -> str:
    if not st["held"]:
        return f"{st['lock_path']}: free"
    h = st["holder"]
    if h is None:
        verdict = f"; stale (unchanged for over {st['stale_lock_timeout']:g} s)" if st["abandoned"] else ""
        return (f"{st['lock_path']}: held, but not a lock record ({st['unreadable']}); "
                f"unchanged for {st['unchanged_seconds']:.1f} s{verdict}")
    if h["on_this_host"]:
        state = "alive" if h["alive"] else "dead (its process is gone)"
    else:
        state = "on another host: alive unknown"
    verdict = ""
    if h["stale"]:
        verdict = f"; stale (older than {st['stale_lock_timeout']:g} s, no heartbeat)"
    elif h["overdue"]:
        verdict = f"; overdue (no heartbeat for over {st['stale_lock_timeout']:g} s)"
    beat = f", heartbeat every {h['heartbeat_interval']:g} s" if h["heartbeat_interval"] else ", no heartbeat (an original worker)"
    return (
        f"{st['lock_path']}: held by {h['hostname']} pid {h['pid']}, {h['age_seconds']:.1f} s old{beat}; {state}{verdict}"
    )


def _seconds(text: str) -> float:
    """A number of seconds (--lock-timeout, --stale-lock-timeout): a
    finite number, else a usage error; what its values mean and which
    are allowed, the library says."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds (a finite number)")
    return value


def _add_stale_lock_timeout(p: argparse.ArgumentParser) -> None:
    p.add_argument("--stale-lock-timeout", type=_seconds, default=None, metavar="SECONDS",
                   help="count a holder without heartbeat as dead after this (default: the library's, 600)")


def _check_arguments(p: argparse.ArgumentParser) -> None:
    _add_db(p)
    p.add_argument("--repair", action="store_true",
                   help="break an abandoned lock, remove leftover tickets and stale claims, move aside a foreign journal "
                        "that cannot be a crashed writer's")
    journal = p.add_mutually_exclusive_group()
    journal.add_argument("--apply-journal", dest="journal", action="store_const", const="apply",
                         help="roll back a refused journal that you vetted as a crashed writer's")
    journal.add_argument("--discard-journal", dest="journal", action="store_const", const="discard",
                         help="move a refused journal aside without applying it (another user planted it)")
    _add_stale_lock_timeout(p)


@_command("check", "integrity, orphans, schema, journal, lock, leftovers", _check_arguments)
def cmd_check(args: argparse.Namespace, out: _Output) -> int:
    """Check a database: SQLite's integrity_check under the lock, records without their program, results that are
    not JSON objects, the schema version, a crashed writer's journal or a foreign one (never rolled back), the lock (holder,
    age, alive?) and its leftover ticket files. Exit 1 on any problem. --repair does what is safe: break an abandoned
    lock (never a live holder's; a lock file that is not a record only once unchanged for the stale timeout), remove
    the ticket files of dead processes and stale measurement claims, move aside a foreign journal that cannot be a
    crashed writer's (never applying it); damaged tables are reported, never rewritten. A refused journal that may
    be a crashed writer's is left in place until you choose: --apply-journal rolls it back, --discard-journal moves
    it aside."""
    rep = _native.call(0, "check", db_path=args.db, stale_lock_timeout=args.stale_lock_timeout,
                       lock_timeout=args.lock_timeout, repair=args.repair, journal=args.journal)

    def text() -> str:
        t = rep["tables"]
        lines = [f"database        {rep['db_path']}"]
        if t is not None:
            lines[0] += f": {rep['records']:,} records, {rep['programs']:,} programs, schema_version {rep['schema_version']}"
            lines.append(f"integrity       {'ok' if t['integrity'] == ['ok'] else '; '.join(t['integrity'][:5])}")
            if t["orphan_records"] >= 0:
                lines += [f"orphan records  {t['orphan_records']:,}", f"bad results     {t['bad_results']:,}",
                          f"too deep values {t['too_deep_values']:,}"]
        if rep["lock"] is None:  # a server's database: no lock file, no tickets
            lines.append("lock            none (a server's database: the server serializes writers)")
        else:
            lines += [f"lock            {_holder_text(rep['lock'])}", f"leftover tickets {len(rep['leftover_claims'])}"]
        lines.append(f"stale measurement claims {len(rep['stale_measurement_claims'])}")
        lines += [f"notice          {n}" for n in rep["notices"]]
        lines += [f"repaired        {r}" for r in rep["repaired"]]
        lines += [f"PROBLEM         {p}" for p in rep["problems"]]
        lines.append("ok" if rep["ok"] else f"{len(rep['problems'])} problem(s) found")
        return "\n".join(lines)

    out.result(rep, text)
    return 0 if rep["ok"] else 1


_group("lock", "who holds a database's lock; break an abandoned one",
       "The database's hard-link lock, looked at without opening the database.")


def _lock_status_arguments(p: argparse.ArgumentParser) -> None:
    _add_db(p)
    _add_stale_lock_timeout(p)


@_command("lock status", "the holder, its age, whether it is alive", _lock_status_arguments)
def cmd_lock_status(args: argparse.Namespace, out: _Output) -> int:
    """Who holds the lock, since when, and whether it is alive, and the command that removes it when it looks
    abandoned. Exit 1 when it looks abandoned (its process gone from this host, or stale) or is not a lock record."""
    st = _native.call(0, "lock_status", db_path=args.db, stale_lock_timeout=args.stale_lock_timeout)
    # The advice (the command that removes it) is the library's.
    def text() -> str:
        hint = f"\n{'looks abandoned: ' if st['abandoned'] else ''}{st['advice']}" if st["advice"] else ""
        return _holder_text(st) + hint

    out.result(st, text)
    return 1 if st["abandoned"] or (st["held"] and st["holder"] is None) else 0


def _lock_break_arguments(p: argparse.ArgumentParser) -> None:
    _add_db(p)
    _add_stale_lock_timeout(p)
    p.add_argument("--force", action="store_true", help="also break a holder younger than the stale timeout")


@_command("lock break", "remove an abandoned lock", _lock_break_arguments)
def cmd_lock_break(args: argparse.Namespace, out: _Output) -> int:
    """Remove the lock if its holder is dead on this host or stale, or if it is not a lock record and has not
    changed for the stale timeout; a holder that promised heartbeats and missed them is watched for a few seconds
    first. A live process on this host is never broken; --force breaks any other holder (say so only if you know it
    is gone: its writes are then fenced) and a file that is not a record at once. The removal is the engine's
    race-free one: never a lock taken meanwhile."""
    before = _native.call(0, "lock_status", db_path=args.db, stale_lock_timeout=args.stale_lock_timeout)
    h = before["holder"]
    if h is not None and h["overdue"] and not args.force:
        out.warn(f"{h['hostname']} pid {h['pid']} promised a heartbeat every {h['heartbeat_interval']:g} s and missed "
                 f"them: watching the lock for {h['watch_seconds']:g} s before breaking it")
    st = _native.call(0, "lock_break", db_path=args.db, stale_lock_timeout=args.stale_lock_timeout, force=args.force)
    out.result(st, lambda: ("broke the lock: " if st["broken"] else "nothing to break: ") + _holder_text(st))
    return 0


def _plot_arguments(p: argparse.ArgumentParser) -> None:
    _add_db(p)
    p.add_argument("--program", required=True, help="the program's name")
    p.add_argument("--hash", help="only the source version with this program hash")
    p.add_argument("-o", "--output", required=True, metavar="FILE", help="FILE.png, FILE.svg or FILE.pdf")


@_command("plot", "execution times of a program's schedules, best so far", _plot_arguments)
def cmd_plot(args: argparse.Namespace, out: _Output) -> int:
    """Plot the execution time of every recorded schedule of a program in creation order with the best-so-far line.
    Needs matplotlib: pip install "tirastore[plot]"."""
    from tirastore.plot import plot_program  # matplotlib is an optional extra: imported there

    with _open_store(args) as store:
        path = plot_program(store, args.program, args.output, program_hash=args.hash)
    out.result({"path": str(path)}, lambda: f"wrote {_escape(path)}")
    return 0


def _port(text: str) -> int:
    """--port: a port number, 0 to 65535 (a usage error otherwise)."""
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{port} is not a port number (0 to 65535; 0: any free port)")
    return port


def _dashboard_arguments(p: argparse.ArgumentParser) -> None:
    _add_db(p)
    p.add_argument("--port", type=_port, default=8050, help="the port to listen on (default 8050; 0: any free port)")
    p.add_argument("--host", default="127.0.0.1", metavar="ADDR",
                   help="the address to listen on (default 127.0.0.1, reached with ssh -L "
                        "8050:127.0.0.1:8050 login-node; ::1 for IPv6's loopback)")
    who = p.add_mutually_exclusive_group()
    who.add_argument("--token", nargs="?", const="", default=None, metavar="TOKEN",
                     help="the token every request must carry (default: $TIRASTORE_DASHBOARD_TOKEN, else a random "
                          "one; the printed URL carries it); at least 16 letters, digits or . _ ~ -")
    who.add_argument("--no-token", action="store_true",
                     help="no token, on a loopback address only: every user of this machine can then read the "
                          "page (for a single-user machine)")
    _add_stale_lock_timeout(p)


@_command("dashboard", "a live, read-only web page of the database", _dashboard_arguments)
def cmd_dashboard(args: argparse.Namespace, out: _Output) -> int:
    """Serve a live, read-only web page of DB until interrupted: per program the best time so far, the counts and
    the spread of the repeated times of the fastest schedules; throughput by host, user and project; the claims in
    flight; the database's health (size, records, lock, the last check). Records written by other processes appear
    within seconds. It listens on 127.0.0.1 unless --host says otherwise, and every request must carry a token
    (random unless given; the printed URL carries it): every local user can connect to 127.0.0.1."""
    from tirastore import dashboard  # noqa: PLC0415 - only this command needs the server

    if args.no_token:
        token = None
    else:
        token = args.token or os.environ.get("TIRASTORE_DASHBOARD_TOKEN") or dashboard.new_token()
    try:
        dashboard.check_bind(args.host, token)
    except dashboard.TokenRequired as e:
        print(f"tirastore: error: {e}", file=sys.stderr)
        return 2

    def announce(url: str, shown: str) -> None:
        # shown: the store's db_path, a server's URL without its password.
        out.result({"url": url, "db_path": shown}, lambda: f"serving {_escape(shown)} on {url} (Ctrl-C stops)")

    dashboard.serve(args.db, host=args.host, port=args.port, token=token, lock_timeout=args.lock_timeout,
                    stale_lock_timeout=args.stale_lock_timeout, announce=announce)
    return 0


# -- the parser ------------------------------------------------------------------


class _IncludeAction(argparse.Action):
    """--include: print get_include() and exit, as --version does."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kw: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, **kw)

    def __call__(self, parser: argparse.ArgumentParser, *args: Any) -> None:
        from tirastore import get_include  # noqa: PLC0415

        print(get_include())
        parser.exit()


def _parser() -> argparse.ArgumentParser:
    """The whole command line: the top level's own options, and the
    registered commands, each after the options every command has."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--json", action="store_true", help="print the result as one JSON document")
    common.add_argument("-q", "--quiet", action="store_true", help="no warnings or progress on stderr")
    common.add_argument(
        "--lock-timeout",
        type=_seconds,
        default=None,
        metavar="SECONDS",
        help="how long to wait for the database's lock (default: the library's, 600; 0: try once)",
    )

    top = argparse.ArgumentParser(
        prog="tirastore",
        description="Look after a shared TiraStore database: stats, export, backup, the kernel-config cache, plots.",
        epilog="Exit status: 0 fine, 1 a problem found, 2 a usage error. Databases are never created by accident.",
    )
    top.add_argument("--version", action="version", version=f"tirastore {_native.version()}")
    top.add_argument("--include", action=_IncludeAction, help="print the directory of tirastore.h (for C and C++) and exit")
    sub = top.add_subparsers(dest="command", metavar="COMMAND", required=True)
    groups: dict[str, Any] = {}  # a group's name -> the subparsers of its actions
    for c in _COMMANDS:
        parent = sub
        if len(c.words) > 1:
            name = c.words[0]
            if name not in groups:  # the group is listed where its first action is registered
                summary, description = _GROUPS[name]
                g = sub.add_parser(name, help=summary, description=description)
                groups[name] = g.add_subparsers(dest=f"{name}_command", metavar="ACTION", required=True)
            parent = groups[name]
        p = parent.add_parser(c.words[-1], parents=[common], help=c.summary, description=c.description)
        c.arguments(p)
        p.set_defaults(run=c.run)
    return top


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the command line *argv* (default: sys.argv[1:]); return the exit status."""
    args = _parser().parse_args(argv)
    out = _Output(args)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            status = args.run(args, out)
        except KeyboardInterrupt:
            print("tirastore: interrupted", file=sys.stderr)
            return 130
        except ModuleNotFoundError as e:  # an optional extra (plot)
            print(f"tirastore: {_message(e)}", file=sys.stderr)
            return 1
        except _PROBLEMS as e:
            print(f"tirastore: error: {_message(e)}", file=sys.stderr)
            status = 1
        finally:
            for w in caught:
                out.warn(str(w.message))
    return status


if __name__ == "__main__":
    sys.exit(main())
