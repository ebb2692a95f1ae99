"""The record plan of the multi-node test, shared by the worker, the verifier
and the harnesses (torture.py, the pytest files).

Everything here is plain stdlib Python written from docs/COMPAT.md,
never a call into the library under test, so the verifier can judge the
library with it: the record keys and program hashes are recomputed by the
tests' one reference of the rules (core/schedule/testdata/reference.py).

The plan for W workers, R unique records each and C contested records:

* unique record (w, i), 0 <= i < R: owned by worker w alone. Program
  ``mn_w<w>_p<i // 8>`` (eight schedules per program, so programs are shared
  between records and inserted "if absent"), a schedule written with
  cosmetic whitespace and double quotes so that normalization is exercised,
  and a value that is a pure function of (w, i); one record in seven is
  illegal (no execution times).
* contested record c, 0 <= c < C: every worker records it, each with its own
  value (a function of (w, c)), so the stored value names the winner.
* the overwrite: worker OVERWRITE_WORKER overwrites contested record
  OVERWRITE_CONTESTED with OVERWRITE_VALUE (overwrite=True).

Every worker stamps its records with source_project ``mn-w<w>``, so the
stored row also names its writer.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

OVERWRITE_WORKER = 0
OVERWRITE_CONTESTED = 0
SCHEDULES_PER_PROGRAM = 8
TEST_CPU = "tirastore-multinode-test-cpu"
TEST_SLURM = "N/A"


# ---------------------------------------------------------------------------
# Oracles from COMPAT.md (independent of the library): the one reference of
# the schedule, program and key rules, core/schedule/testdata/reference.py
# ---------------------------------------------------------------------------

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "core" / "schedule" / "testdata"))
import reference  # noqa: E402

normalize_schedule = reference.normalize_schedule
normalize_program = reference.normalize_program
program_hash = reference.program_hash
record_key = reference.record_key


def result_json(is_legal: bool, times: Optional[list]) -> str:
    """What the original stores in result_json (key order, no spaces)."""
    return json.dumps({"is_legal": is_legal, "execution_times": times}, separators=(",", ":"))


# ---------------------------------------------------------------------------
# The plan
# ---------------------------------------------------------------------------


def project(w: int) -> str:
    return f"mn-w{w}"


def unique_record(w: int, i: int) -> dict:
    """Unique record i of worker w: name, source, schedule, value."""
    p = i // SCHEDULES_PER_PROGRAM
    name = f"mn_w{w}_p{p}"
    source = (
        "#include <tiramisu/tiramisu.h>\n"
        f"/* program {p} of worker {w} */\n"
        f"void mn_w{w}_p{p}() {{\n  int x = {w * 1000 + p}; // body\n}}\n"
    )
    # Cosmetic spaces and double quotes: the stored schedule is the
    # normalized one, S(L0,L1,<w>,<i>,comps=['c<w>']).
    schedule = f'S( L0 , L1 , {w} , -{i} , comps=["c{w}", c{i}] )'
    legal = i % 7 != 3
    times = [round(0.001 * (w + 1) + 1e-6 * i, 9), float(i + 1), w + i / 1024] if legal else None
    return {"kind": "unique", "w": w, "i": i, "name": name, "source": source,
            "schedule": schedule, "is_legal": legal, "times": times}


def contested_program(c: int) -> tuple[str, str]:
    q = c % 3
    return f"mn_contested_{q}", f"void contested_{q}() {{ /* shared by all workers */ int y = {q}; }}"


def contested_record(w: int, c: int) -> dict:
    """Worker w's version of contested record c."""
    name, source = contested_program(c)
    schedule = f"T2(L0,L1,{c},{c + 1},comps=['k{c}'])"
    return {"kind": "contested", "w": w, "c": c, "name": name, "source": source,
            "schedule": schedule, "is_legal": True, "times": [float(w) + 0.25, c + 0.5]}


def overwrite_record(c: int = OVERWRITE_CONTESTED) -> dict:
    r = contested_record(OVERWRITE_WORKER, c)
    r.update(kind="overwrite", times=[12345.0, float(c)], is_legal=True)
    return r


def planned(nworkers: int, nrecords: int, ncontested: int) -> dict:
    """Everything that may legitimately be in the database.

    Returns {"records": {key: {...spec, "values": {value-id: (w, is_legal,
    times)}}}, "programs": {hash: name}}.
    """
    records: dict[str, dict] = {}
    programs: dict[str, str] = {}
    for w in range(nworkers):
        for i in range(nrecords):
            r = unique_record(w, i)
            key = record_key(r["source"], r["schedule"])
            records[key] = {"kind": "unique", "w": w, "i": i,
                            "schedule": normalize_schedule(r["schedule"]),
                            "program_hash": program_hash(r["source"]),
                            "values": {("unique", w): (result_json(r["is_legal"], r["times"]), project(w))}}
            programs[program_hash(r["source"])] = r["name"]
    for c in range(ncontested):
        key = None
        for w in range(nworkers):
            r = contested_record(w, c)
            key = record_key(r["source"], r["schedule"])
            ent = records.setdefault(key, {"kind": "contested", "c": c,
                                           "schedule": normalize_schedule(r["schedule"]),
                                           "program_hash": program_hash(r["source"]),
                                           "values": {}})
            ent["values"][("contested", w)] = (result_json(r["is_legal"], r["times"]), project(w))
            programs[program_hash(r["source"])] = r["name"]
        if c == OVERWRITE_CONTESTED and nworkers > OVERWRITE_WORKER and key is not None:
            o = overwrite_record(c)
            records[key]["values"][("overwrite", OVERWRITE_WORKER)] = (
                result_json(o["is_legal"], o["times"]), project(OVERWRITE_WORKER))
    return {"records": records, "programs": programs}


# ---------------------------------------------------------------------------
# The claimers' plan (torture.py --claim-per-node): one program, N schedules
# that every claimer measures through lookup_or_claim
# ---------------------------------------------------------------------------

CLAIM_PROGRAM = "mn_claims"
CLAIM_SOURCE = "void mn_claims() { /* measured once, by whoever claims it first */ int z = 7; }"


def claim_schedule(s: int) -> str:
    """Claim schedule s as the claimers give it (cosmetic spaces: the stored
    and claimed schedule is the normalized one)."""
    return f"S( L0, L1, {s + 1}, {2 * s + 1}, comps=['cm'] )"


def claim_times(s: int, w: int, pid: int) -> list:
    """What the run pid of claimer w "measures" for schedule s: the stored
    value names the run that measured it."""
    return [s + 0.5, float(w), float(pid)]


def claim_plan(nclaims: int) -> dict:
    """{key: {"s", "schedule" (normalized), "program_hash"}} of the claim schedules."""
    h = program_hash(CLAIM_SOURCE)
    return {record_key(CLAIM_SOURCE, claim_schedule(s)):
            {"s": s, "schedule": normalize_schedule(claim_schedule(s)), "program_hash": h}
            for s in range(nclaims)}
