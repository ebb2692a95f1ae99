#!/usr/bin/env python3
"""The README's Quick Start, runnable.

    python3 examples/quickstart.py [DB_PATH]

Without DB_PATH the database goes into a fresh temporary directory (removed
at the end). Records one measurement, looks it up and prints its fields,
then shows the rest of the everyday API briefly: record_many,
get_program_records, stats and export.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

try:
    from tirastore import TiraStore
except ImportError:  # run from a source checkout without `pip install -e .`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "python"))
    from tirastore import TiraStore

import tirastore

PROGRAM = "blur"
SOURCE = "void blur() { ... }"
SCHEDULE = "S(L0,L1,4,8,comps=['c1'])"


def quickstart(db_path: Path) -> None:
    print(f"tirastore {tirastore.__version__}, database {db_path}")

    # Connect (creates the DB if it doesn't exist). The with-block closes it.
    with TiraStore(db_path, source_project="autoscheduler-v2") as store:
        # Record a measurement (False instead of True: it was already there).
        written = store.record(
            program_name=PROGRAM,
            program_source_code=SOURCE,
            tiralib_schedule_string=SCHEDULE,
            is_legal=True,
            execution_times=[0.042, 0.039, 0.041],
        )
        print(f"record() wrote a new record: {written}")

        # Look up a previous measurement. Cosmetic differences in the
        # schedule (spaces, quote style) do not matter: it is normalized.
        result = store.lookup(PROGRAM, SOURCE, "S(L0, L1, 4, 8, comps=[\"c1\"])")
        if result is None:
            raise SystemExit("quickstart: lookup() missed a record it just wrote")
        print("lookup():")
        print(f"  is_legal        = {result.is_legal}")
        print(f"  execution_times = {result.execution_times}")
        print(f"  schedule        = {result.schedule}")
        print(f"  hostname        = {result.hostname}")
        print(f"  username        = {result.username}")
        print(f"  source_project  = {result.source_project}")
        print(f"  creation_date   = {result.creation_date}")
        print(f"  update_date     = {result.update_date}")

        # A schedule nobody measured yet is a miss.
        missing = store.lookup(PROGRAM, SOURCE, "R(L0,comps=['c1'])")
        print(f"lookup() of an unmeasured schedule: {missing}")

        # Batch insert: one lock, one transaction; returns how many were new.
        n = store.record_many(
            program_name=PROGRAM,
            program_source_code=SOURCE,
            schedules=[
                {"tiralib_schedule_string": SCHEDULE, "is_legal": True, "execution_times": [0.04]},
                {"tiralib_schedule_string": "I(L0,L1,comps=['c1'])", "is_legal": False, "execution_times": None},
                {"tiralib_schedule_string": "R(L0,comps=['c1'])", "is_legal": True, "execution_times": [0.03, 0.031]},
            ],
        )
        print(f"record_many() wrote {n} new record(s) of 3 (existing ones are kept)")

        print("get_program_records():")
        for r in store.get_program_records(PROGRAM, SOURCE):
            print(f"  {r.schedule:<28} legal={r.is_legal!s:<5} times={r.execution_times}")

        print(f"contains(): {store.contains(PROGRAM, SOURCE, SCHEDULE)}, count(): {store.count()}")
        print("stats():")
        for k, v in store.stats().items():
            print(f"  {k:<16} {v}")

        out = store.export(db_path.with_name("dataset.json"), fmt="json")
        exported = json.loads(out.read_text(encoding="utf-8"))
        print(f"export(): {out} holds {sum(len(p['schedules_list']) for p in exported.values())} "
              f"schedules of {len(exported)} program(s): {', '.join(exported)}")


def main(argv: list[str]) -> int:
    if len(argv) > 2 or (len(argv) == 2 and argv[1] in ("-h", "--help")):
        print("usage: quickstart.py [DB_PATH]", file=sys.stderr)
        return 2
    if len(argv) == 2:
        quickstart(Path(argv[1]))
    else:
        with tempfile.TemporaryDirectory(prefix="tirastore-quickstart-") as d:
            quickstart(Path(d) / "tiramisu_cache.db")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
