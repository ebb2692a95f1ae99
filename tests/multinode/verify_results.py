#!/usr/bin/env python3
"""Verify a multi-node test run: the database against the workers' logs.

    verify_results.py --db PATH --log DIR --nworkers W --nrecords R --ncontested C
                      [--distinct-hosts | --distinct-nodes] [--summary-json FILE]

Run it after every worker has ended. It reads the database with the stdlib
sqlite3 module only (read-only) and recomputes every key with hashlib/json
(plan.py), so it judges the library without using it. It checks, exactly:

* every acknowledged unique record (record() returned, True or False) is
  present once, with its value, its normalized schedule and its writer;
* each contested record is present exactly once; at most one call ever saw
  record() return True for it, and then the stored value is that worker's
  (or the overwrite's, for the overwritten record once worker 0's overwrite
  was acknowledged); a value nobody acknowledged must come from a worker
  that was killed before it could log;
* no record or program outside the plan, no record written twice with True
  (a record that was lost and written again), no error logged by any worker,
  every worker finished (a "done" line);
* PRAGMA integrity_check is ok, no foreign-key violation;
* no lock file, no journal, and no claim file except those of killed
  processes;
* optionally, that the workers ran on distinct hosts (--distinct-hosts, for
  the Slurm run) or distinct simulated nodes (--distinct-nodes).

Prints a summary; exits 1 with the list of violations if there is any.
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import sqlite3
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import plan  # noqa: E402

# .lock_<hostname>_<pid>_<random>; the random part may contain "_".
CLAIM_RE = re.compile(r"^\.lock_(.+?)_(\d+)_")
MAX_SHOWN = 60


def load_logs(log_dir: Path, nworkers: int):
    """{w: [entries]}, plus the count of unparseable lines (a torn last line
    of a killed worker is expected: a write() cut short)."""
    logs: dict[int, list[dict]] = {}
    torn = 0
    for f in sorted(log_dir.glob("worker-*.jsonl")):
        m = re.match(r"worker-(\d+)\.jsonl$", f.name)
        if not m:
            continue
        entries, bad = read_log(f)
        logs[int(m.group(1))] = entries
        torn += bad
    return logs, torn


def read_log(f: Path) -> tuple[list, int]:
    """The entries of one JSON Lines log, and how many lines did not parse."""
    entries, torn = [], 0
    for line in f.read_text(errors="replace").splitlines():
        try:
            entries.append(json.loads(line))
        except ValueError:
            torn += 1
    return entries, torn


def lock_path_for(db: Path) -> Path:
    return db.resolve().with_suffix(".db.lock")


def verify(db: Path, log_dir: Path, nworkers: int, nrecords: int, ncontested: int,
           distinct: str = "", out=sys.stdout) -> tuple[list[str], dict]:
    v: list[str] = []  # violations
    worker_errors: list[str] = []  # errors the workers logged (listed last)
    info = collections.Counter()
    figures: dict = {}

    # ---- logs --------------------------------------------------------------
    logs, torn = load_logs(log_dir, nworkers)
    info["torn log lines"] = torn
    runs: dict[int, dict] = {}  # pid -> {"w", "done", "start"}
    hosts: dict[int, set] = collections.defaultdict(set)
    nodes: dict[int, set] = collections.defaultdict(set)
    max_dt = 0.0
    max_dt_op = None
    ncalls = 0
    dts = []
    for w in range(nworkers):
        if w not in logs:
            v.append(f"worker {w}: no log (never started)")
    for w, entries in logs.items():
        if w >= nworkers:
            v.append(f"worker {w}: unexpected log (only {nworkers} workers planned)")
        for e in entries:
            pid = e.get("pid")
            op = e.get("op")
            if op == "start":
                runs[pid] = {"w": w, "done": False}
                hosts[w].add(e.get("hostname"))
                nodes[w].add(e.get("node"))
            elif op in ("done", "exit", "abort"):
                runs.setdefault(pid, {"w": w})["done"] = True
            elif op == "error":
                worker_errors.append(f"worker {w} (pid {pid}) logged an error in phase "
                                     f"{e.get('phase')}: {e.get('type')}: {e.get('message')}")
            if "dt" in e:
                ncalls += 1
                dts.append(e["dt"])
                if e["dt"] > max_dt:
                    max_dt, max_dt_op = e["dt"], op
        if not any(e.get("op") == "done" and e.get("errors") == 0 for e in entries):
            worker_errors.append(f"worker {w}: never finished its phases without error (no clean 'done')")
    info["hosts seen"] = len(set().union(*hosts.values())) if hosts else 0
    info["nodes seen"] = len(set().union(*nodes.values())) if nodes else 0
    killed_pids = {pid for pid, r in runs.items() if not r.get("done")}
    killed_workers = {runs[p]["w"] for p in killed_pids}
    info["worker runs"] = len(runs)
    info["killed runs"] = len(killed_pids)
    dts.sort()
    figures.update(max_call_seconds=max_dt, max_call_op=max_dt_op, calls=ncalls,
                   p50_call_seconds=dts[len(dts) // 2] if dts else 0.0,
                   p99_call_seconds=dts[min(len(dts) - 1, int(len(dts) * 0.99))] if dts else 0.0)

    if distinct:
        field = hosts if distinct == "hosts" else nodes
        seen: dict = {}
        for w in sorted(field):
            for h in field[w]:
                if h in seen and seen[h] != w:
                    v.append(f"workers {seen[h]} and {w} ran on the same {distinct[:-1]} {h!r}")
                seen.setdefault(h, w)
        info[f"distinct {distinct}"] = len(seen)

    # ---- files -------------------------------------------------------------
    if not db.exists():
        v.append(f"database {db} does not exist")
        return v + worker_errors, {"info": dict(info), **figures}
    lock = lock_path_for(db)
    if lock.exists():
        try:
            content = lock.read_text()[:200]
        except OSError as e:
            content = repr(e)
        v.append(f"lock file left behind: {lock} ({content})")
    for suffix in ("-journal", "-wal", "-shm"):
        j = Path(str(db) + suffix)
        if j.exists():
            v.append(f"{j.name} left behind ({j.stat().st_size} bytes)")
    known_hosts = set().union(*hosts.values()) if hosts else set()
    for p in sorted(db.parent.iterdir()):
        if not p.name.startswith(".lock_"):
            continue
        pid = None
        for h in known_hosts:
            m = re.match(r"(\d+)_", p.name[len(".lock_" + str(h) + "_"):])
            if p.name.startswith(f".lock_{h}_") and m:
                pid = int(m.group(1))
        if pid is None:
            m = CLAIM_RE.match(p.name)
            pid = int(m.group(2)) if m else None
        if pid in killed_pids:
            info["claims of killed processes"] += 1
        else:
            v.append(f"claim file left behind by a process that was not killed: {p.name}")

    # ---- database ----------------------------------------------------------
    want = plan.planned(nworkers, nrecords, ncontested)
    try:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        try:
            ic = [r[0] for r in conn.execute("PRAGMA integrity_check")]
            if ic != ["ok"]:
                v.append("integrity_check: " + "; ".join(x.replace("\n", "; ") for x in ic[:10]))
            fk = conn.execute("PRAGMA foreign_key_check").fetchall()
            if fk:
                v.append(f"foreign_key_check: {len(fk)} violations, e.g. {fk[:3]}")
            meta = dict(conn.execute("SELECT key, value FROM db_meta").fetchall())
            if meta.get("schema_version") != "2":
                v.append(f"db_meta schema_version is {meta.get('schema_version')!r}")
            rows = conn.execute(
                "SELECT key, program_hash, schedule, result_json, source_project, creation_date,"
                " update_date, hostname FROM records NOT INDEXED").fetchall()
            progs = conn.execute("SELECT program_hash, program_name FROM programs NOT INDEXED").fetchall()
        finally:
            conn.close()
    except sqlite3.DatabaseError as e:
        v.append(f"cannot read the database: {type(e).__name__}: {e}")
        return v + worker_errors, {"info": dict(info), **figures}

    pcount = collections.Counter(h for h, _ in progs)
    for h, name in progs:
        if h not in want["programs"]:
            v.append(f"unexpected program {name!r} ({h[:12]})")
        elif name != want["programs"][h]:
            v.append(f"program {h[:12]} named {name!r}, expected {want['programs'][h]!r}")
    for h, n in pcount.items():
        if n > 1:
            v.append(f"program {h[:12]} stored {n} times")

    stored: dict[str, tuple] = {}
    count = collections.Counter(r[0] for r in rows)
    for key, n in count.items():
        if n > 1:
            v.append(f"record {key[:12]} stored {n} times")
    writer_of = {plan.project(w): w for w in range(nworkers)}
    for key, ph, sched, rj, proj, created, updated, host in rows:
        stored[key] = (rj, proj)
        w = writer_of.get(proj)
        if w is not None and hosts.get(w) and host not in hosts[w]:
            v.append(f"record {key[:12]}: hostname {host!r}, but its writer (worker {w}) ran on "
                     f"{sorted(hosts[w])}")
        spec = want["records"].get(key)
        if spec is None:
            v.append(f"unexpected record {key[:12]} (schedule {sched!r}, project {proj!r})")
            continue
        if sched != spec["schedule"]:
            v.append(f"record {key[:12]}: schedule {sched!r}, expected {spec['schedule']!r}")
        if ph != spec["program_hash"]:
            v.append(f"record {key[:12]}: program_hash {ph[:12]}, expected {spec['program_hash'][:12]}")
        if (rj, proj) not in spec["values"].values():
            v.append(f"record {key[:12]} ({spec['kind']}): value {rj} by {proj!r} is no planned value")
        if updated < created:
            v.append(f"record {key[:12]}: update_date {updated} before creation_date {created}")
    info["records in db"] = len(rows)
    info["programs in db"] = len(progs)

    # ---- acknowledgements ----------------------------------------------------
    true_acks: dict[str, list] = collections.defaultdict(list)
    acked: dict[str, list] = collections.defaultdict(list)
    overwrite_acked = False
    overwrite_attempted = False
    for w, entries in logs.items():
        for e in entries:
            op = e.get("op")
            if op not in ("unique", "contested", "overwrite") or "returned" not in e:
                continue
            if op == "unique":
                r = plan.unique_record(w, e["i"])
            elif op == "contested":
                r = plan.contested_record(w, e["c"])
            else:
                r = plan.overwrite_record(e["c"])
            key = plan.record_key(r["source"], r["schedule"])
            if e.get("key") != key:
                v.append(f"worker {w}: logged key {str(e.get('key'))[:12]} for {op} {e}, expected {key[:12]}")
            if op == "overwrite":
                overwrite_attempted = True
                if e["returned"]:
                    overwrite_acked = True
                else:
                    v.append(f"worker {w}: record(overwrite=True) returned False")
                continue
            acked[key].append((op, w, e["returned"], e.get("pid")))
            if e["returned"]:
                true_acks[key].append((w, e.get("pid")))
            info[f"acked {op} writes ({'True' if e['returned'] else 'False'})"] += 1
    if plan.OVERWRITE_WORKER in killed_workers:
        overwrite_attempted = True  # a killed run may have written it unlogged
    overwrite_key = None
    if ncontested > plan.OVERWRITE_CONTESTED:
        o = plan.overwrite_record()
        overwrite_key = plan.record_key(o["source"], o["schedule"])

    for key, spec in want["records"].items():
        got = stored.get(key)
        kind = spec["kind"]
        label = (f"unique record (w{spec['w']}, {spec['i']})" if kind == "unique"
                 else f"contested record {spec['c']}")
        wins = true_acks.get(key, [])
        if len(wins) > 1:
            v.append(f"{label}: record() returned True {len(wins)} times "
                     f"(workers/pids {wins}) - a duplicate winner or a lost and rewritten record")
        if got is None:
            if acked.get(key):
                v.append(f"{label}: LOST - acknowledged ({acked[key][:4]}) but not in the database")
            continue
        writer_values = {val: who for who, val in spec["values"].items()}
        who = writer_values.get(got)
        if who is None:
            continue  # already reported as "no planned value"
        if kind == "unique":
            if not acked.get(key) and spec["w"] not in killed_workers:
                v.append(f"{label}: present but never acknowledged, and its worker was never killed")
            continue
        # contested
        if key == overwrite_key and overwrite_acked:
            if who[0] != "overwrite":
                v.append(f"{label}: the acknowledged overwrite is not stored (value by {who})")
            continue
        if who[0] == "overwrite":
            if not overwrite_attempted:
                v.append(f"{label}: holds the overwrite value but no overwrite was attempted")
            continue
        if wins:
            if who[1] != wins[0][0]:
                v.append(f"{label}: worker {wins[0][0]} was told it won, but the stored value is "
                         f"worker {who[1]}'s")
        elif who[1] not in killed_workers:
            v.append(f"{label}: nobody was told it won, and the stored value's writer "
                     f"(worker {who[1]}) was never killed")
    info["contested records with a winner"] = sum(
        1 for key, s in want["records"].items() if s["kind"] == "contested" and true_acks.get(key))
    info["overwrite acknowledged"] = int(overwrite_acked)

    v += worker_errors
    summary = {"info": dict(info), **figures, "violations": len(v)}
    return v, summary


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--db", required=True)
    ap.add_argument("--log", required=True)
    ap.add_argument("--nworkers", type=int, required=True)
    ap.add_argument("--nrecords", type=int, required=True)
    ap.add_argument("--ncontested", type=int, required=True)
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--distinct-hosts", action="store_true", help="require one host name per worker")
    g.add_argument("--distinct-nodes", action="store_true", help="require one node label per worker")
    ap.add_argument("--summary-json", help="also write the summary as JSON here")
    args = ap.parse_args(argv)
    distinct = "hosts" if args.distinct_hosts else "nodes" if args.distinct_nodes else ""
    v, summary = verify(Path(args.db), Path(args.log), args.nworkers, args.nrecords, args.ncontested,
                        distinct)
    summary["violation_list"] = v
    print(f"verify: {args.nworkers} workers x {args.nrecords} unique + {args.ncontested} contested records")
    for k, n in sorted(summary["info"].items()):
        print(f"  {k}: {n}")
    print(f"  calls logged: {summary['calls']}, median {summary['p50_call_seconds']:.3f} s, "
          f"p99 {summary['p99_call_seconds']:.3f} s, slowest {summary['max_call_seconds']:.3f} s "
          f"({summary['max_call_op']})")
    if args.summary_json:
        Path(args.summary_json).write_text(json.dumps(summary, indent=1))
    if v:
        cats = collections.Counter(re.sub(r"[0-9a-f]{12}|\d+", "#", x)[:70] for x in v)
        print(f"FAIL: {len(v)} violations")
        for x in v[:MAX_SHOWN]:
            print("  - " + x)
        if len(v) > MAX_SHOWN:
            print(f"  ... and {len(v) - MAX_SHOWN} more; by kind:")
            for c, n in cats.most_common(15):
                print(f"    {n:5d} x {c}")
        return 1
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
