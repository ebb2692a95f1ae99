#!/usr/bin/env python3
"""The Python side of the TiraStore benchmark (driven by tests/bench, Go).

    python3 tests/bench/pybench.py SPEC.json   > results.json

SPEC names an implementation and a plan (a list of steps, see step in
tests/bench/workload.go); this script runs the plan exactly as the Go
runner does and prints the raw timings as JSON:
``{"results": {label: {"ns": [...], "errors", "timeouts", "wrong", ...}}}``,
or ``{"skip": reason}`` when the implementation cannot run here.

Implementations:

* ``python``: the engine through the tirastore package (cffi), as users call it;
* ``ctypes``: the engine through the bare C ABI of include/tirastore.h
  (tirastore_open/call/free/close with JSON arguments), as
  examples/notebook_ctypes.py does, without the package;
* ``original-py``: ``OriginalStore`` of tests/python/test_mixed_fleet.py,
  the repository's stdlib-only reconstruction of the original library's
  protocol (lock, fresh sqlite3 connection per operation). It has no
  contains() and no record_many(): those rows are left out, and its pool is
  preloaded through the engine;
* ``persistent-cache`` and ``seed-cache``: the kernel-config caches,
  ``tirastore.PersistentCache`` and ``SeedPersistentCache`` of
  tests/python/seed_cache.py (the seed's pattern: the whole JSON file loaded
  by the constructor, every put rewriting it). They run only the config_*
  steps: ``config_open`` writes a seed JSON file of ``batch`` entries in the
  database's directory and opens a cache on it (the seed loads it,
  PersistentCache imports it into the directory's database, namespace
  ``<label>``: core/configplace.go), then
  ``config_get`` and ``config_put`` use that cache.

The ``python`` client also runs the claim section's ops
(tests/bench/claim.go): ``lookup_or_claim`` (expect: a LookupResult),
``lookup_record`` (a lookup miss, then record), ``claim_record``
(lookup_or_claim returning a Claim, then ``claim.record``) and
``claim_release`` (a Claim, then ``claim.release``), ``lookup_pair`` (a
lookup hit on key start+keys+k and a lookup_or_claim hit on key start+k,
in alternating order, each timed alone); the two-part ops also report
each part as ``<label>:<part>``.

The cliff section (tests/bench/cliff.go) adds ``lookup_set`` (lookups of
random (program, schedule) pairs over ``programs`` programs from ``start``:
program p's source is ``source`` + ``cliff_source_suffix`` with {p}, its
schedule indexes below ``records`` are present, up to ``keys`` absent;
drawn from ``seed`` outside the timing, no samples kept in a warm-up; with
``ready_file`` touched when the step starts and ``stop_file`` ending it
early) and ``rss`` (the process's
VmRSS and VmHWM from /proc/self/status, in KiB, into ``rss_kib`` and
``hwm_kib``; no timing).

Steps with ``mark_begin``/``mark_end`` stat() those (absent) paths right
before and after the step, so an strace of this process can be cut there.
"""

from __future__ import annotations

import ctypes
import json
import os
import random
import sys
import time
from pathlib import Path
from typing import Any, Callable


def schedule(fmt: str, tag: int, i: int) -> str:
    return fmt.replace("{tag}", str(tag)).replace("{i}", str(i))


class Skip(Exception):
    """This implementation cannot run here (a missing module, say)."""


# -- the three clients ---------------------------------------------------------


class PackageClient:
    def __init__(self, spec: dict) -> None:
        try:
            import tirastore  # noqa: PLC0415

            tirastore._native.ensure_loaded()  # the library loads on first use
        except ImportError as e:
            raise Skip(f"import tirastore failed: {e}") from None
        self.name, self.src, self.times = spec["program_name"], spec["source"], spec["times"]
        self.store = tirastore.TiraStore(spec["db"], cpu_model=spec["cpu_model"], slurm_cpus="N/A")
        self.lookup_result = tirastore.LookupResult
        self.claim_class = getattr(tirastore, "Claim", None)

    def lookup(self, s: str) -> bool:
        return self.store.lookup(self.name, self.src, s) is not None

    def lookup_in(self, src: str, s: str) -> bool:
        return self.store.lookup(self.name, src, s) is not None

    def contains(self, s: str) -> bool:
        return self.store.contains(self.name, self.src, s)

    def record(self, s: str, overwrite: bool) -> bool:
        return self.store.record(self.name, self.src, s, True, self.times, overwrite)

    def record_many(self, entries: list, overwrite: bool) -> int:
        return self.store.record_many(self.name, self.src, entries, overwrite)

    # Claims (the claim section, tests/bench/claim.go).

    def lookup_or_claim(self, s: str) -> Any:
        return self.store.lookup_or_claim(self.name, self.src, s)

    def is_result(self, out: Any) -> bool:
        return isinstance(out, self.lookup_result)

    def is_claim(self, out: Any) -> bool:
        return isinstance(out, self.claim_class)

    def claim_record(self, claim: Any) -> bool:
        return claim.record(True, self.times)

    def claim_release(self, claim: Any) -> None:
        claim.release()

    def close(self) -> None:
        self.store.close()


# The C ABI's ctypes declarations and reply decoding are the ones of the
# ctypes example (examples/notebook_ctypes.py), not a second copy.
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
import notebook_ctypes as abi  # noqa: E402

TIRASTORE_ERR_TIMEOUT = 5


def is_lock_timeout(e: Exception) -> bool:
    """A lock timeout from the package (TimeoutError) or from the C ABI."""
    return isinstance(e, TimeoutError) or (isinstance(e, abi.TiraStoreError) and e.status == TIRASTORE_ERR_TIMEOUT)


class CtypesClient:
    """The C ABI from ctypes, through the declarations of
    examples/notebook_ctypes.py (every "char **out" a c_void_p, copied then
    freed)."""

    def __init__(self, spec: dict) -> None:
        try:
            lib = abi.load(Path(spec["lib"]))
        except SystemExit as e:
            raise Skip(str(e)) from None
        self.lib = lib
        self.name, self.src, self.times = spec["program_name"], spec["source"], spec["times"]
        handle = ctypes.c_uint64(0)
        out = ctypes.c_void_p()
        opts = json.dumps({"cpu_model": spec["cpu_model"], "slurm_cpus": "N/A"}).encode()
        status = lib.tirastore_open(spec["db"].encode(), opts, ctypes.byref(handle), ctypes.byref(out))
        abi.take_reply(lib, status, out)
        self.handle = handle.value

    def call(self, method: bytes, args: dict) -> Any:
        out = ctypes.c_void_p()
        status = self.lib.tirastore_call(self.handle, method, json.dumps(args).encode(), ctypes.byref(out))
        return abi.take_reply(self.lib, status, out)

    def lookup(self, s: str) -> bool:
        return self.call(b"lookup", {"program_name": self.name, "program_source_code": self.src,
                                     "tiralib_schedule_string": s}) is not None

    def contains(self, s: str) -> bool:
        return self.call(b"contains", {"program_name": self.name, "program_source_code": self.src,
                                       "tiralib_schedule_string": s})

    def record(self, s: str, overwrite: bool) -> bool:
        return self.call(b"record", {"program_name": self.name, "program_source_code": self.src,
                                     "tiralib_schedule_string": s, "is_legal": True,
                                     "execution_times": self.times, "overwrite": overwrite})

    def record_many(self, entries: list, overwrite: bool) -> int:
        return self.call(b"record_many", {"program_name": self.name, "program_source_code": self.src,
                                          "schedules": entries, "overwrite": overwrite})

    def close(self) -> None:
        out = ctypes.c_void_p()
        abi.take_reply(self.lib, self.lib.tirastore_close(self.handle, ctypes.byref(out)), out)


class OriginalClient:
    """OriginalStore of tests/python/test_mixed_fleet.py (creates the DB
    with the test CPU id); the pool is preloaded through the engine."""

    def __init__(self, spec: dict) -> None:
        repo = Path(spec["repo"])
        sys.path[:0] = [str(repo / "tests" / "python"), str(repo / "tests" / "multinode")]
        try:
            import plan  # noqa: PLC0415
            from test_mixed_fleet import OriginalStore  # noqa: PLC0415
        except Exception as e:  # noqa: BLE001  (pytest or a helper missing)
            raise Skip(f"cannot import OriginalStore from tests/python/test_mixed_fleet.py: {e!r}") from None
        self.plan = plan
        self.name, self.src, self.times = spec["program_name"], spec["source"], spec["times"]
        self.db = spec["db"]
        self.store = OriginalStore(Path(self.db), "bench", 600.0)
        self.engine = None

    def lookup(self, s: str) -> bool:
        return self.store.lookup(self.src, s) is not None

    def record(self, s: str, overwrite: bool) -> bool:
        return self.store.record(self.name, self.src, s, True, self.times, overwrite)

    def preload(self, entries: list) -> int:
        if self.engine is None:
            import tirastore  # noqa: PLC0415

            self.engine = tirastore.TiraStore(self.db, cpu_model=self.plan.TEST_CPU, slurm_cpus=self.plan.TEST_SLURM)
        return self.engine.record_many(self.name, self.src, entries)

    def done_preloading(self) -> None:
        if self.engine is not None:
            self.engine.close()
            self.engine = None

    def close(self) -> None:
        self.done_preloading()


class ConfigClient:
    """A kernel-config cache (``open_cache`` in a subclass) on seed JSON files
    written in the database's directory; one cache open at a time."""

    def __init__(self, spec: dict) -> None:
        self.dir = os.path.dirname(spec["db"])
        self.device, self.op_id = spec["config_device"], spec["config_op_id"]
        self.key_fmt, self.value = spec["config_key_format"], spec["config_value"]
        self.cache: Any = None

    def coords(self, tag: int, i: int) -> tuple[str, str, str]:
        return self.device, self.op_id, schedule(self.key_fmt, tag, i)

    def cfg(self, trial: int) -> dict:
        return dict(self.value, trial=trial)

    def config_open(self, label: str, tag: int, start: int, n: int) -> int:
        """Write the seed JSON file of entries (tag, start..start+n-1) as the
        seed writes it (json.dump), open a cache on it, return its size."""
        self.close()
        path = os.path.join(self.dir, label + ".json")
        data = {"|".join(self.coords(tag, start + j)): self.cfg(0) for j in range(n)}
        with open(path, "w") as f:
            json.dump(data, f)
        self.cache = self.open_cache(path)
        return self.size()

    def config_get(self, coords: tuple[str, str, str]) -> bool:
        return self.cache.get(*coords) is not None

    def open_cache(self, path: str) -> Any:
        raise NotImplementedError

    def size(self) -> int:
        raise NotImplementedError


class PersistentCacheClient(ConfigClient):
    """tirastore.PersistentCache: its first use (len(), in open) imports the JSON file."""

    def __init__(self, spec: dict) -> None:
        super().__init__(spec)
        try:
            from tirastore import PersistentCache, _native  # noqa: PLC0415

            _native.ensure_loaded()  # the library loads on first use
        except ImportError as e:
            raise Skip(f"from tirastore import PersistentCache failed: {e}") from None
        self.cls = PersistentCache

    def open_cache(self, path: str) -> Any:
        return self.cls("bench", path=path)

    def size(self) -> int:
        return len(self.cache)

    def config_put(self, coords: tuple[str, str, str], cfg: dict, overwrite: bool) -> bool:
        return self.cache.put(*coords, cfg, overwrite=overwrite)

    def close(self) -> None:
        if self.cache is not None:
            self.cache.close()
            self.cache = None


class SeedCacheClient(ConfigClient):
    """SeedPersistentCache of tests/python/seed_cache.py: the constructor
    loads the JSON file; put always overwrites and returns nothing."""

    def __init__(self, spec: dict) -> None:
        super().__init__(spec)
        sys.path.insert(0, str(Path(spec["repo"]) / "tests" / "python"))
        try:
            from seed_cache import SeedPersistentCache  # noqa: PLC0415
        except Exception as e:  # noqa: BLE001
            raise Skip(f"cannot import SeedPersistentCache from tests/python/seed_cache.py: {e!r}") from None
        self.cls = SeedPersistentCache

    def open_cache(self, path: str) -> Any:
        return self.cls("bench", path=path)

    def size(self) -> int:
        return len(self.cache._data)

    def config_put(self, coords: tuple[str, str, str], cfg: dict, overwrite: bool) -> bool:
        self.cache.put(*coords, cfg)
        return True

    def close(self) -> None:
        self.cache = None


CLIENTS: dict[str, Callable[[dict], Any]] = {
    "python": PackageClient,
    "ctypes": CtypesClient,
    "original-py": OriginalClient,
    "persistent-cache": PersistentCacheClient,
    "seed-cache": SeedCacheClient,
}


# -- the plan runner (same semantics as runPlan in workload.go) ------------------


# The two-part operations of the claim plans and their parts, as
# claimParts in tests/bench/claim.go: a miss then the record of that key,
# a claim then its record, a claim then its release.
CLAIM_PARTS = {
    "lookup_record": ("lookup", "record"),
    "claim_record": ("claim", "record"),
    "claim_release": ("claim", "release"),
    "lookup_pair": ("lookup", "lookup_or_claim"),
}


def mark(path: str) -> None:
    if path:
        try:
            os.stat(path)
        except OSError:
            pass


def proc_status_kib() -> tuple[int, int]:
    """VmRSS and VmHWM of this process, in KiB."""
    got = {}
    with open("/proc/self/status") as f:
        for line in f:
            name, _, value = line.partition(":")
            if name in ("VmRSS", "VmHWM"):
                got[name] = int(value.split()[0])
    return got.get("VmRSS", 0), got.get("VmHWM", 0)


def run_lookup_set(client: Any, spec: dict, s: dict, r: dict) -> None:
    """The cliff section's lookups of random (program, schedule) pairs (see
    the module's doc); the pair and its schedule are made before the clock
    starts."""
    fmt, tag = spec["sched_format"], s["tag"]
    first, programs, present, span = s.get("start", 0), s["programs"], s["records"], s["keys"]
    srcs = [spec["source"] + spec["cliff_source_suffix"].replace("{p}", str(first + p)) for p in range(programs)]
    scheds = [schedule(fmt, tag, i) for i in range(span)]
    rng = random.Random(s.get("seed", 0))
    stop = s.get("stop_file", "")
    if s.get("ready_file"):
        open(s["ready_file"], "w").close()
    clock = time.perf_counter_ns
    ns = r["ns"]
    # A warm-up keeps no samples: a million of them would be some 30 MiB of
    # this process's memory, which the memory row measures.
    timed = not s.get("warmup", False)
    for k in range(s["n"]):
        if stop and k % 64 == 0 and os.path.exists(stop):
            break
        src, i = srcs[rng.randrange(programs)], rng.randrange(span)
        t0 = clock()
        try:
            ok = client.lookup_in(src, scheds[i]) == (i < present)
            if timed:
                ns.append(clock() - t0)
            if not ok:
                r["wrong"] += 1
                r.setdefault("first_error", f"lookup {scheds[i]} of program {srcs.index(src) + first}: unexpected result")
        except Exception as e:  # noqa: BLE001  (counted, reported, the run goes on)
            if timed:
                ns.append(clock() - t0)
            r["errors"] += 1
            if is_lock_timeout(e):
                r["timeouts"] += 1
            r.setdefault("first_error", f"{type(e).__name__}: {e}")


def run_plan(client: Any, spec: dict) -> dict:
    fmt, times = spec["sched_format"], spec["times"]
    out = {}
    original = isinstance(client, OriginalClient)
    clock = time.perf_counter_ns
    for s in spec["steps"]:
        op, n, tag, start = s["op"], s["n"], s["tag"], s.get("start", 0)
        batch, overwrite, expect = s.get("batch", 0), s.get("overwrite", False), s["expect"]
        keys = s.get("keys", 0)
        warm = s.get("warmup", False)
        if original and not warm:
            client.done_preloading()
        if original and op == "contains":
            continue  # no contains() in OriginalStore
        if original and op == "record_many" and not warm:
            continue  # no record_many() in OriginalStore
        r = {"label": s["label"], "ns": [], "errors": 0, "timeouts": 0, "wrong": 0}
        if batch:
            r["batch"] = batch
        parts = CLAIM_PARTS.get(op)  # two-part ops: each part timed too
        part_ns: tuple[list, list] = ([], [])
        pair_ns = [0, 0]
        mark(s.get("mark_begin", ""))
        if op == "lookup_set":
            run_lookup_set(client, spec, s, r)
            n = 0
        elif op == "rss":
            r["rss_kib"], r["hwm_kib"] = proc_status_kib()
            n = 0
        for k in range(n):
            i = start + (k % keys if keys else k)
            what = ""  # what failed, when not the operation's key
            if op in ("config_get", "config_put"):
                # A fresh key (as a tuner builds it per call) and value,
                # made before the clock starts: a get is short.
                coords, cfg = client.coords(tag, i), client.cfg(start + k + 1)
            t0 = clock()
            try:
                if op == "lookup":
                    ok = client.lookup(schedule(fmt, tag, i)) == expect
                elif op == "contains":
                    ok = client.contains(schedule(fmt, tag, i)) == expect
                elif op == "record":
                    ok = client.record(schedule(fmt, tag, i), overwrite) == expect
                elif op == "record_many":
                    entries = [{"tiralib_schedule_string": schedule(fmt, tag, start + k * batch + j),
                                "is_legal": True, "execution_times": times} for j in range(batch)]
                    t0 = clock()
                    if original:
                        got = client.preload(entries)
                    else:
                        got = client.record_many(entries, overwrite)
                    ok = (got == batch) == expect
                elif op == "config_open":
                    got = client.config_open(s["label"], tag, start, batch)
                    ok = (got == batch) == expect
                    what = f"{op} {s['label']}: {got} entries of {batch}"
                elif op == "config_get":
                    ok = client.config_get(coords) == expect
                elif op == "config_put":
                    ok = client.config_put(coords, cfg, overwrite) == expect
                elif op == "lookup_pair":
                    # Both calls timed on their own, in alternating order (the
                    # first of two calls is not favoured); the schedules are
                    # made before the clock starts, as in the Go runner.
                    s_lookup, s_claim = schedule(fmt, tag, i + keys), schedule(fmt, tag, start + k)
                    ok = True
                    for which in ((0, 1) if k % 2 == 0 else (1, 0)):
                        ta = clock()
                        if which == 0:
                            ok = client.lookup(s_lookup) and ok
                        else:
                            got = client.lookup_or_claim(s_claim)
                            ok = client.is_result(got) and ok
                            if client.is_claim(got):
                                client.claim_release(got)
                        pair_ns[which] = clock() - ta
                elif op == "lookup_or_claim":
                    got = client.lookup_or_claim(schedule(fmt, tag, i))
                    ok = client.is_result(got) == expect
                    if client.is_claim(got):  # a miss where a hit was expected: give it back
                        client.claim_release(got)
                elif op == "lookup_record":
                    sched = schedule(fmt, tag, i)
                    ok = not client.lookup(sched)
                    t1 = clock()
                    if ok:
                        ok = client.record(sched, False) == expect
                elif op in ("claim_record", "claim_release"):
                    got = client.lookup_or_claim(schedule(fmt, tag, i))
                    t1 = clock()
                    ok = client.is_claim(got)
                    if ok and op == "claim_record":
                        ok = client.claim_record(got) == expect
                    elif ok:
                        client.claim_release(got)
                else:
                    raise ValueError(f"unknown op {op!r}")
                t2 = clock()
                r["ns"].append(t2 - t0)
                if op == "lookup_pair" and ok:
                    part_ns[0].append(pair_ns[0])
                    part_ns[1].append(pair_ns[1])
                elif parts and ok:
                    part_ns[0].append(t1 - t0)
                    part_ns[1].append(t2 - t1)
                if not ok:
                    r["wrong"] += 1
                    if not what:
                        key = "|".join(coords) if op in ("config_get", "config_put") else schedule(fmt, tag, i)
                        what = f"{op} {key}"
                    r.setdefault("first_error", f"{what}: unexpected result")
            except Exception as e:  # noqa: BLE001  (counted, reported, the run goes on)
                r["ns"].append(clock() - t0)
                r["errors"] += 1
                if is_lock_timeout(e):
                    r["timeouts"] += 1
                r.setdefault("first_error", f"{type(e).__name__}: {e}")
        mark(s.get("mark_end", ""))
        time.sleep(s.get("quiet_ms", 0) / 1000)  # a quiet database (see QuietMS in workload.go)
        if not warm:
            out[s["label"]] = r
            for name, ns in zip(parts or (), part_ns):
                label = f"{s['label']}:{name}"
                out[label] = {"label": label, "ns": ns, "errors": 0, "timeouts": 0, "wrong": 0}
        elif r["errors"] or r["wrong"]:
            out["warmup/" + s["label"]] = r  # a failed preload or warm-up must not go unnoticed
    return out


# -- the throughput worker (same protocol as throughputWorker in worker.go) -----


def cpu_ns() -> int:
    """This process's CPU time so far, user + system, every thread (cpuNS in worker.go)."""
    import resource  # noqa: PLC0415

    ru = resource.getrusage(resource.RUSAGE_SELF)
    return int((ru.ru_utime + ru.ru_stime) * 1e9)


def run_throughput(client: Any, spec: dict) -> int:
    """One throughput worker (role "throughput"; tpSpec in worker.go):
    warm up, print "ready", wait for the start line on stdin, run the ops
    back to back, print the report (tpResult in worker.go) and close stdout.
    It then waits until the harness closes stdin before it closes its store
    and exits, so that no interpreter tears down while other workers still
    run (an autoscheduler's workers live for hours: their exit is not part
    of their throughput)."""
    import random  # noqa: PLC0415

    tp = spec["tp"]
    fmt = spec["sched_format"]
    wid, pool, miss_frac = tp["wid"], tp["pool"], tp["miss_frac"]
    tag, pool_tag, miss_tag = tp["tag"], tp["pool_tag"], tp["miss_tag"]
    rng = random.Random(tp["seed"] * 1_000_003 + wid)
    for _ in range(tp["warmup"]):
        client.lookup(schedule(fmt, pool_tag, rng.randrange(pool)))
    nrec = int(tp["ops"] * tp["record_frac"] + 0.5)
    ops = [True] * nrec + [False] * (tp["ops"] - nrec)  # True: record
    rng.shuffle(ops)
    lookup_ns: list[int] = []
    record_ns: list[int] = []
    acked: list[int] = []
    r: dict[str, Any] = {"wid": wid, "pid": os.getpid(), "errors": 0, "timeouts": 0, "wrong": 0}

    def fail(e: Exception, what: str) -> None:
        r["errors"] += 1
        if is_lock_timeout(e):
            r["timeouts"] += 1
        r.setdefault("first_error", f"{what}: {type(e).__name__}: {e}")

    print("ready", flush=True)
    sys.stdin.readline()
    clock = time.perf_counter_ns
    r["start_unix_ns"] = time.time_ns()
    cpu0 = cpu_ns()
    nxt = 0
    for is_record in ops:
        if is_record:
            i, nxt = nxt, nxt + 1
            sched = schedule(fmt, tag, i)
            t0 = clock()
            try:
                ok = client.record(sched, False)
            except Exception as e:  # noqa: BLE001  (counted, reported, the run goes on)
                record_ns.append(clock() - t0)
                fail(e, "record")
                continue
            record_ns.append(clock() - t0)
            if ok:
                acked.append(i)
            else:
                r["wrong"] += 1
                r.setdefault("first_error", f"record of new key {i} returned False")
            continue
        miss = rng.random() < miss_frac
        if miss:
            sched = schedule(fmt, miss_tag, rng.randrange(1 << 30))
        else:
            sched = schedule(fmt, pool_tag, rng.randrange(pool))
        t0 = clock()
        try:
            found = client.lookup(sched)
        except Exception as e:  # noqa: BLE001
            lookup_ns.append(clock() - t0)
            fail(e, "lookup")
            continue
        lookup_ns.append(clock() - t0)
        if found == miss:
            r["wrong"] += 1
            r.setdefault("first_error", f"lookup {sched}: found={found}")
    r["end_unix_ns"] = time.time_ns()
    r["cpu_ns"] = cpu_ns() - cpu0
    r.update(lookup_ns=lookup_ns, record_ns=record_ns, acked=acked)
    sys.stdout.write(json.dumps(r))
    sys.stdout.flush()
    # Close the pipe (the harness reads to its end), keep fd 1 valid.
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    os.close(null)
    sys.stdin.read()  # until the harness closes it: every worker has reported
    return 0


def run_serve(client: Any, spec: dict) -> int:
    """Role "serve" (tests/bench/pairedfloor.go): after a ``{"ready": true}``
    line, one write per line of stdin, ``{"tag", "start", "batch"}``: a
    record of that schedule (batch 1) or a record_many of ``batch``
    schedules from ``start``, made before the clock starts and timed as
    run_plan times them; each is answered with ``{"ns", "ok"}`` (or
    ``"error"``). Ends at the end of stdin."""
    fmt, times = spec["sched_format"], spec["times"]
    clock = time.perf_counter_ns
    out = sys.stdout
    out.write(json.dumps({"ready": True}) + "\n")
    out.flush()
    for line in sys.stdin:
        req = json.loads(line)
        tag, start, batch = req["tag"], req["start"], req["batch"]
        r: dict = {}
        if batch == 1:
            sched = schedule(fmt, tag, start)
            t0 = clock()
            try:
                r["ok"] = client.record(sched, False) is True
            except Exception as e:  # noqa: BLE001
                r["error"] = f"{type(e).__name__}: {e}"
        else:
            entries = [{"tiralib_schedule_string": schedule(fmt, tag, start + j),
                        "is_legal": True, "execution_times": times} for j in range(batch)]
            t0 = clock()
            try:
                r["ok"] = client.record_many(entries, False) == batch
            except Exception as e:  # noqa: BLE001
                r["error"] = f"{type(e).__name__}: {e}"
        r["ns"] = clock() - t0
        out.write(json.dumps(r) + "\n")
        out.flush()
    return 0


def main(argv: list[str]) -> int:
    with open(argv[1]) as f:
        spec = json.load(f)
    try:
        client = CLIENTS[spec["impl"]](spec)
    except Skip as e:
        print(json.dumps({"skip": str(e)}))
        return 0
    except Exception as e:  # noqa: BLE001
        print(json.dumps({"error": f"open: {type(e).__name__}: {e}"}))
        return 1
    if spec.get("role") in ("throughput", "serve"):
        try:
            return (run_throughput if spec["role"] == "throughput" else run_serve)(client, spec)
        finally:
            client.close()
    try:
        results = run_plan(client, spec)
    finally:
        client.close()
    print(json.dumps({"results": results}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
