#!/usr/bin/env python3
"""Verify a multi-node test run: the database against the workers' logs.

    verify_results.py --db PATH --log DIR --nworkers W --nrecords R --ncontested C
                      [--distinct-hosts | --distinct-nodes] [--summary-json FILE]
                      [--nclaims N --claimers W1,W2,... --claim-lease S]

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
* no lock file, no journal, and no lock ticket file except those of killed
  processes;
* optionally, that the workers ran on distinct hosts (--distinct-hosts, for
  the Slurm run) or distinct simulated nodes (--distinct-nodes);
* with --nclaims N --claimers LIST (torture.py's claimers, logs
  DIR/claim-N.jsonl): each claim schedule recorded exactly once, with the
  value of a claimer run that measured it, the one told True if any (else
  a run killed after its record committed); every value read back is the
  stored one; nobody claimed a schedule after it was read back recorded;
  a schedule measured more than once only because every measurer but the
  last was killed inside its claim (an earlier measurer that acknowledged
  its record, True or False, is a failure; the last may be told False, by
  a killed holder's record that reached the database before its death); a
  claim of a killed claimer taken over from another host no sooner than
  --claim-lease after it was asked for; no row in the claims table but
  claims of killed runs; no claimer error, every claimer done.

Prints a summary; exits 1 with the list of violations if there is any.
"""

from __future__ import annotations

import argparse
import collections
import json
import math
import re
import sqlite3
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import plan  # noqa: E402

# .lock_<hostname>_<pid>_<random>; the random part may contain "_".
TICKET_RE = re.compile(r"^\.lock_(.+?)_(\d+)_")
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
           distinct: str = "", out=sys.stdout, *, nclaims: int = 0, claimers=(),
           lease: float = 0.0) -> tuple[list[str], dict]:
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
            m = TICKET_RE.match(p.name)
            pid = int(m.group(2)) if m else None
        if pid in killed_pids:
            info["lock tickets of killed processes"] += 1
        else:
            v.append(f"lock ticket file left behind by a process that was not killed: {p.name}")

    # ---- database ----------------------------------------------------------
    want = plan.planned(nworkers, nrecords, ncontested)
    cplan = plan.claim_plan(nclaims) if nclaims else {}
    if cplan:
        want["programs"][plan.program_hash(plan.CLAIM_SOURCE)] = plan.CLAIM_PROGRAM
    claim_rows: dict = {}
    claim_table: list = []
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
            if conn.execute("SELECT count(*) FROM sqlite_master WHERE type = 'table'"
                            " AND name = 'claims'").fetchone()[0]:
                claim_table = conn.execute("SELECT key, schedule, hostname, pid, token FROM claims").fetchall()
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
        if key in cplan:
            claim_rows[key] = (sched, ph, rj, proj)
            if sched != cplan[key]["schedule"]:
                v.append(f"claim record {key[:12]}: schedule {sched!r}, expected {cplan[key]['schedule']!r}")
            if ph != cplan[key]["program_hash"]:
                v.append(f"claim record {key[:12]}: program_hash {ph[:12]}, expected "
                         f"{cplan[key]['program_hash'][:12]}")
            if updated < created:
                v.append(f"record {key[:12]}: update_date {updated} before creation_date {created}")
            continue
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

    if nclaims:
        cv, claims, left = verify_claims(log_dir, list(claimers), nclaims, claim_rows, claim_table, lease)
        claims["claim records in db"] = len(claim_rows)
        claims["left"] = left
        figures["claims"] = claims
        v += cv
    elif claim_table:
        v.append(f"claims table: {len(claim_table)} claims, but no claimer ran")
    v += worker_errors
    summary = {"info": dict(info), **figures, "violations": len(v)}
    return v, summary



# ---- the claimers (torture.py --claim-per-node) ------------------------------


def load_claim_logs(log_dir: Path, claimers: list) -> tuple[dict, int]:
    """{w: [entries]} of the claimers' logs (DIR/claim-N.jsonl), and the
    count of torn lines."""
    logs: dict[int, list] = {}
    torn = 0
    for w in claimers:
        f = log_dir / f"claim-{w}.jsonl"
        if f.exists():
            logs[w], bad = read_log(f)
            torn += bad
    return logs, torn


def verify_claims(log_dir: Path, claimers: list, nclaims: int, rows: dict, table: list,
                  lease: float) -> tuple[list, dict, list]:
    """Check the claim schedules' records and the claims table against the
    claimers' logs. rows: {key: (schedule, program_hash, result_json,
    source_project)} of the claim program's records; table: the rows of
    the claims table. Returns (violations, figures, the claims left)."""
    v: list[str] = []
    errs: list[str] = []
    info: collections.Counter = collections.Counter()
    cplan = plan.claim_plan(nclaims)
    by_s = {spec["s"]: key for key, spec in cplan.items()}
    logs, torn = load_claim_logs(log_dir, claimers)
    info["torn claim log lines"] = torn
    runs: dict = {}  # pid -> {"w", "host", "done", "last"}
    meas: dict = collections.defaultdict(list)   # s -> [measuring dicts]
    founds: dict = collections.defaultdict(list)  # s -> ["found" entries]
    lookups: list = []
    holds: list = []  # measuring -> recorded: how long a claim was held (at least)
    for w in claimers:
        if w not in logs:
            v.append(f"claimer {w}: no claim log (never started)")
            continue
        pending: dict = {}  # (pid, s) -> the measuring awaiting its "recorded"
        held: dict = collections.defaultdict(set)  # pid -> claimed, not yet measured or ended
        for e in logs[w]:
            pid, op = e.get("pid"), e.get("op")
            r = runs.setdefault(pid, {"w": w, "host": None, "done": False, "last": 0.0})
            r["last"] = max(r["last"], e.get("t", 0.0))
            if op == "start":
                r["host"] = e.get("hostname")
            elif op in ("done", "exit"):
                r["done"] = True
            elif op == "error":
                errs.append(f"claimer {w} (pid {pid}) logged an error in phase {e.get('phase')}: "
                            f"{e.get('type')}: {e.get('message')}")
            elif op == "found":
                founds[e.get("s")].append(e)
            elif op == "claimed":
                held[pid].update(e.get("s", []))
            elif op == "measuring":
                m = {"s": e.get("s"), "w": w, "pid": pid, "asked": e.get("asked", 0.0),
                     "t": e.get("t", 0.0), "rec": None}
                meas[m["s"]].append(m)
                pending[(pid, m["s"])] = m
                held[pid].discard(m["s"])
            elif op == "recorded":
                m = pending.pop((pid, e.get("s")), None)
                if m is None:
                    v.append(f"claimer {w} (pid {pid}): 'recorded' of schedule {e.get('s')} without 'measuring'")
                else:
                    m["rec"] = e
                    info[f"claim records acknowledged ({bool(e.get('returned'))})"] += 1
                    holds.append(e.get("t", 0.0) - m["t"])
            elif op == "released":
                pending.pop((pid, e.get("s")), None)
                held[pid].discard(e.get("s"))
            if op in ("found", "measuring", "busy") and "dt" in e:
                lookups.append(e["dt"])
            if op in ("found", "busy"):
                info[f"lookups answered {op}"] += 1
        for (pid, s), m in pending.items():
            m["open"] = True  # its run ended (or died) inside this claim
        for pid, ss in held.items():
            runs[pid]["unmeasured"] = len(ss)
        if not any(e.get("op") == "done" and e.get("errors") == 0 for e in logs[w]):
            errs.append(f"claimer {w}: never finished its claims without error (no clean 'done')")
    killed = {pid for pid, r in runs.items() if not r["done"]}
    info["claimer runs"] = len(runs)
    info["killed claimer runs"] = len(killed)
    all_meas = [m for ms in meas.values() for m in ms]
    info["measurements"] = len(all_meas)
    for m in all_meas:
        if m.get("open") and m["pid"] not in killed:
            v.append(f"claimer {m['w']} (pid {m['pid']}): schedule {m['s']} measured but never recorded, "
                     f"and the run was not killed")
    in_claim = {m["pid"] for m in all_meas if m.get("open") and m["pid"] in killed}
    in_claim |= {pid for pid in killed if runs[pid].get("unmeasured")}
    info["killed inside a claim (runs)"] = len(in_claim)
    info["claims open at a kill"] = (sum(1 for m in all_meas if m.get("open") and m["pid"] in killed)
                                     + sum(runs[p].get("unmeasured", 0) for p in killed))
    lookups.sort()
    figures = {"lookup_p50": lookups[len(lookups) // 2] if lookups else 0.0,
               "lookup_max": lookups[-1] if lookups else 0.0,
               "hold_max": max(holds, default=0.0)}
    # A live claim held longer than its lease can be taken over if its
    # renewals fail meanwhile (they need the lock): a figure, not a fault.
    info["claims held longer than the lease"] = sum(1 for h in holds if h > lease)

    dup_schedules = extra = legit = expired_live = 0
    same_host_takeovers = other_host_takeovers = 0
    worst_same = worst_other = 0.0
    committed_then_killed = 0
    posthumous = 0
    for s in range(nclaims):
        key = by_s[s]
        label = f"claim schedule {s} ({key[:12]})"
        ms = sorted(meas.get(s, []), key=lambda m: m["t"])
        trues = [m for m in ms if m["rec"] is not None and m["rec"].get("returned")]
        if len(trues) > 1:
            v.append(f"{label}: Claim.record() returned True {len(trues)} times "
                     f"(claimers/pids {[(m['w'], m['pid']) for m in trues]}) - claimed twice at once")
        got = rows.get(key)
        if got is None:
            v.append(f"{label}: LOST - not recorded at the end "
                     f"({len(ms)} measurements, {len(trues)} acknowledged True)")
            continue
        sched, ph, rj, proj = got
        try:
            val = json.loads(rj)
            times = val.get("execution_times")
            sw, spid = int(times[1]), int(times[2])
            ok = val.get("is_legal") is True and len(times) == 3 and times[0] == s + 0.5
        except (ValueError, TypeError, IndexError, AttributeError):
            ok, sw, spid = False, None, None
        if not ok:
            v.append(f"{label}: stored value {rj} is no claimer's measurement of it")
            continue
        if proj != plan.project(sw):
            v.append(f"{label}: stored value of claimer {sw} carries project {proj!r}")
        for f in founds.get(s, []):
            if f.get("times") != times or f.get("is_legal") is not True:
                v.append(f"{label}: claimer {f['w']} (pid {f['pid']}) read {f.get('times')}, "
                         f"but {times} is stored")
        mine = [m for m in ms if m["pid"] == spid and m["w"] == sw]
        if not mine:
            v.append(f"{label}: holds the measurement of claimer {sw} pid {spid}, which never measured it")
            continue
        mr = mine[-1]
        if mr["rec"] is None:
            committed_then_killed += 1
        elif not mr["rec"].get("returned"):
            v.append(f"{label}: holds the value of claimer {sw} pid {spid}, whose record returned False")
        if trues and trues[0]["pid"] != spid:
            v.append(f"{label}: LOST - claimer {trues[0]['w']} (pid {trues[0]['pid']}) was told it recorded, "
                     f"but claimer {sw} pid {spid}'s value is stored")
        # When was it provably recorded? Nobody may claim it after that.
        known = min([f["t"] for f in founds.get(s, [])] + [m["rec"]["t"] for m in trues], default=math.inf)
        for m in ms:
            if m["asked"] > known:
                v.append(f"{label}: claimer {m['w']} (pid {m['pid']}) claimed it {m['asked'] - known:.3f} s "
                         f"after it was recorded and read back")
        if len(ms) > 1:
            dup_schedules += 1
            extra += len(ms) - 1
        # Measured more than once: legitimate only if every measurer but
        # the last was killed inside its claim (its claim was then taken
        # over), or held it past its lease while its renewals waited for
        # the lock. The last may learn that its record came second: a
        # killed holder's record can still commit after its death, after
        # its claim was taken over.
        bad = killed_redo = False
        for i, m in enumerate(ms[:-1]):
            nxt = ms[i + 1]
            if m.get("open") and m["pid"] in killed:
                killed_redo = True
                continue
            # A live holder whose renewals could not get the busy lock for
            # a lease loses its claim: the lease's rule (its own record
            # waits for the lock too). Both of its necessary conditions
            # must hold: the holder's record returned a lease or more
            # after it asked (the claim was made after it asked), and the
            # taker claimed a lease or more after that.
            if (m["rec"] is not None and m["rec"].get("t", 0.0) - m["asked"] >= lease
                    and nxt["t"] - m["asked"] >= lease):
                expired_live += 1
                continue
            bad = True
            if m["rec"] is not None:
                v.append(f"{label}: MEASURED TWICE - claimer {m['w']} (pid {m['pid']}) measured it and was "
                         f"not killed during its claim (its record returned {m['rec'].get('returned')}, taken "
                         f"over: {m['rec'].get('taken_over')}), and claimer {nxt['w']} (pid {nxt['pid']}) "
                         f"measured it {nxt['t'] - m['t']:.3f} s later ({nxt['t'] - m['asked']:.3f} s after the "
                         f"first asked, whose record returned {m['rec'].get('t', 0.0) - m['asked']:.3f} s after "
                         f"it asked; lease {lease:g} s); claimer {sw} pid {spid}'s value is stored")
        if (len(ms) > 1 and not bad and mr.get("open") and ms[-1] is not mr and ms[-1]["rec"] is not None
                and not ms[-1]["rec"].get("returned")):
            posthumous += 1
        if len(ms) > 1 and not bad and killed_redo:
            legit += 1
        # Takeovers of the claims of killed claimers, and the lease.
        for i, m in enumerate(ms[:-1]):
            if not m.get("open"):
                continue
            nxt = ms[i + 1]
            same = runs.get(m["pid"], {}).get("host") == runs.get(nxt["pid"], {}).get("host")
            # From the later of its holder's last sign of life and the
            # taker's call to the taker's claim.
            delay = nxt["t"] - max(runs[m["pid"]]["last"], nxt["asked"])
            if same:
                same_host_takeovers += 1
                worst_same = max(worst_same, delay)
            else:
                other_host_takeovers += 1
                worst_other = max(worst_other, delay)
                early = m["asked"] + lease - nxt["t"]
                if early > 0.05:
                    v.append(f"{label}: the claim of killed claimer {m['w']} (pid {m['pid']}, host "
                             f"{runs[m['pid']]['host']}) was taken over on host {runs[nxt['pid']]['host']} "
                             f"{nxt['t'] - m['asked']:.3f} s after its call, before its lease "
                             f"({lease:g} s) could run out")
    info["schedules measured more than once"] = dup_schedules
    info["extra measurements"] = extra
    info["schedules measured again after a kill inside the claim"] = legit
    info["live claims taken over after their lease (renewals waited for the lock)"] = expired_live
    info["killed after recording, before the acknowledgement"] = committed_then_killed
    info["takers whose record came second to the killed holder's"] = posthumous
    info["claims of killed claimers taken over on their host"] = same_host_takeovers
    info["claims of killed claimers taken over from another host"] = other_host_takeovers
    figures["takeover_same_max"] = worst_same
    figures["takeover_other_max"] = worst_other

    left = []
    hosts_pids = {(r["host"], pid): pid for pid, r in runs.items()}
    for key, sched, host, pid, token in table:
        spec = cplan.get(key)
        if spec is None:
            v.append(f"claims table: a claim on {key[:12]} ({sched!r}), which is no claim schedule")
            continue
        p = hosts_pids.get((host, pid))
        if p is None or p not in killed:
            v.append(f"claims table: claim on schedule {spec['s']} left by {host} pid {pid}, which was "
                     f"not a killed claimer run")
        else:
            info["claims left by killed workers"] += 1
        left.append({"s": spec["s"], "key": key, "hostname": host, "pid": pid})
    info["claims left by killed workers"] += 0
    return v + errs, {"info": dict(info), **figures}, left


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
    ap.add_argument("--nclaims", type=int, default=0, help="claim schedules of the claimers (torture.py)")
    ap.add_argument("--claimers", default="", help="comma-separated ids of the claimers")
    ap.add_argument("--claim-lease", type=float, default=0.0, help="the claimers' lease (s)")
    args = ap.parse_args(argv)
    distinct = "hosts" if args.distinct_hosts else "nodes" if args.distinct_nodes else ""
    claimers = [int(x) for x in args.claimers.split(",") if x]
    v, summary = verify(Path(args.db), Path(args.log), args.nworkers, args.nrecords, args.ncontested,
                        distinct, nclaims=args.nclaims, claimers=claimers, lease=args.claim_lease)
    summary["violation_list"] = v
    print(f"verify: {args.nworkers} workers x {args.nrecords} unique + {args.ncontested} contested records")
    for k, n in sorted(summary["info"].items()):
        print(f"  {k}: {n}")
    print(f"  calls logged: {summary['calls']}, median {summary['p50_call_seconds']:.3f} s, "
          f"p99 {summary['p99_call_seconds']:.3f} s, slowest {summary['max_call_seconds']:.3f} s "
          f"({summary['max_call_op']})")
    if "claims" in summary:
        c = summary["claims"]
        print(f"verify claims: {len(claimers)} claimers x {args.nclaims} schedules, lease {args.claim_lease:g} s")
        for k, n in sorted(c["info"].items()):
            print(f"  {k}: {n}")
        print(f"  claim records in db: {c['claim records in db']}")
        print(f"  longest claim (measuring to recorded): {c['hold_max']:.3f} s")
        print(f"  lookup_or_claim calls: median {c['lookup_p50']:.3f} s, slowest {c['lookup_max']:.3f} s; "
              f"longest takeover of a killed claim: {c['takeover_same_max']:.3f} s on its host, "
              f"{c['takeover_other_max']:.3f} s from another")
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
