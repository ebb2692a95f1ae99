"""The library under an address-space limit (RLIMIT_AS, ``ulimit -v``).

Before: under a limit of 800 to 850 MiB (Slurm jobs, login nodes) the
first call of the package killed Python: the library's Go runtime aborted
the process as it started ("fatal error: out of memory allocating heap
arena map", "runtime/cgo: pthread_create failed"). Now the package
compares the limit with what the library states it needs before loading
it (tirastore._address_space, capi/addrspace.c) and raises MemoryError
naming the limit, the need and how to raise the limit; the process goes
on, and a call after the limit was raised works. docs/limits.md,
"Address space", gives the figures.

Each scenario runs in a child process with its limit: set by preexec_fn
before the interpreter starts (the limit a job has), or by the child
itself relative to what it uses (the edges of the model, whatever the
interpreter's own size). The negative controls run the same scenarios
with the check taken out of the load path (tirastore._native._preflight,
the one hook): the child then dies of Go's fatal error, or (the low
region) the runtime maps over memory it does not own. The library's C
constructor, which C hosts get, is tested through ctypes: it cannot refuse
the load, but says why the process is about to die, and it caps glibc's
malloc arenas under a limit (a user's MALLOC_ARENA_MAX wins: the control).
"""

from __future__ import annotations

import json
import os
import re
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from tirastore import _address_space, _native

REPO = Path(__file__).resolve().parents[2]
MIB = 1 << 20
LIBRARY = str(_native.library_path())

DRIVER = r'''
import ctypes, json, os, resource, sys, warnings
spec = json.loads(sys.argv[1])
warnings.simplefilter("ignore")  # the stores' notices about their directory
import tirastore
from tirastore import _address_space, _native
import cffi  # the first load imports it: before what the process uses is measured

if spec.get("unchecked"):  # the negative controls: the load path without the check
    _native._preflight = lambda *args, **kwargs: None

LOW = 512 << 20
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
if spec.get("low_region"):
    # Occupy the lowest 512 MiB (as a position-dependent executable and its
    # heap would, in part): PROT_NONE, so it costs address space only.
    start = 1 << 20
    MAP_PRIVATE, MAP_ANONYMOUS, MAP_NORESERVE, MAP_FIXED_NOREPLACE = 0x02, 0x20, 0x4000, 0x100000
    got = libc.mmap(start, LOW - start, 0, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0)
    assert got == start, ("mmap", got, ctypes.get_errno())


def low_maps():
    out = []
    with open("/proc/self/maps") as f:
        for line in f:
            span, perms = line.split()[:2]
            a, b = (int(x, 16) for x in span.split("-"))
            if a < LOW:
                out.append([a, b, perms])
    return out


lib = _native.library_path()
n = _address_space.needs(lib)
res = {"used": n.used, "need": n.need, "full": n.full, "index_fails_below": n.index_fails_below,
       "window": n.window, "low_used": n.low_used, "low_before": low_maps()}
soft, hard = resource.getrlimit(resource.RLIMIT_AS)
where = spec.get("limit")
if where == "below":
    soft = n.minimum() - spec["by_mib"] * 2**20
elif where == "room":  # a fixed room, below what any runtime needs (its summaries and first arena alone take 680 MiB)
    soft = n.used + spec["room_mib"] * 2**20
elif where == "band":  # the optional index fits, and leaves 64 MiB for the rest
    soft = n.used + n.index_fails_below + 64 * 2**20
elif where == "window":  # room for the runtime without the index, as if the low region were free
    soft = n.used + (n.need + n.index_fails_below) // 2
# At the minimum, give or take the few MiB the driver allocates before it
# calls (what it uses is measured here, and again by the check).
elif where == "minimum":
    soft = n.minimum() + 4 * 2**20
elif where == "full":
    soft = n.used + n.full + 4 * 2**20
elif where == "fork":  # room for one runtime and a library image more, not for two runtimes
    soft = n.minimum() + 128 * 2**20
if where:
    resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
res["limit"] = soft


def work():
    store = tirastore.TiraStore(spec["db"], cpu_model="c", slurm_cpus="1")
    for i in range(200):
        store.record("p", "int main() { return 0; }", f"R(L{i},comps=['c1'])", True, [1.0, 2.0])
    found = store.lookup("p", "int main() { return 0; }", "R(L7,comps=['c1'])")
    store.close()
    assert found is not None and found.execution_times == [1.0, 2.0], found


def mapped():
    with open("/proc/self/maps") as f:
        return "libtirastore" in f.read()


def attempt():
    try:
        work()
        return "worked", ""
    except Exception as e:
        return type(e).__name__, str(e)


if spec.get("fork"):
    work()  # the parent's copy
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        outcome, message = attempt()
        unloaded = type(_native.lib).__name__ == "_LoadOnFirstUse"  # no fresh copy in its place
        os.write(w, json.dumps({"outcome": outcome, "message": message, "unloaded": unloaded}).encode())
        os._exit(0)
    os.close(w)
    chunks = []
    while True:
        chunk = os.read(r, 65536)
        if not chunk:
            break
        chunks.append(chunk)
    _, status = os.waitpid(pid, 0)
    res["child_status"] = status
    res["child"] = json.loads(b"".join(chunks)) if chunks else None
    work()  # the parent is untouched
    res["outcome"] = "parent worked"
else:
    res["outcome"], res["message"] = attempt()
    res["mapped"] = mapped()
    if res["outcome"] == "MemoryError":
        res["again"] = attempt()[0]  # each later call says it again
        if spec.get("raise_after"):
            resource.setrlimit(resource.RLIMIT_AS, (resource.RLIM_INFINITY, hard))
            res["after_raise"] = attempt()[0]
res["low_after"] = low_maps()
print(json.dumps(res))
'''

GO_FATAL = re.compile(r"fatal error: |runtime/cgo: pthread_create failed|failed to reserve page summary memory")


def child_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("TIRASTORE_FAILPOINTS", "MALLOC_ARENA_MAX", "GLIBC_TUNABLES", "GOMAXPROCS")}
    env["TIRASTORE_LIB"] = LIBRARY
    env.update(extra)
    return env


def soft_limit(mib: int):
    """A preexec_fn: the child starts under a soft limit of mib MiB (the hard
    one left as it is, so that the child can raise it)."""
    def set_it():
        resource.setrlimit(resource.RLIMIT_AS, (mib * MIB, resource.getrlimit(resource.RLIMIT_AS)[1]))
    return set_it


def run(tmp_path: Path, preexec_mib: int | None = None, env: dict[str, str] | None = None,
        **spec) -> subprocess.CompletedProcess:
    spec["db"] = str(tmp_path / "as.db")
    return subprocess.run([sys.executable, "-c", DRIVER, json.dumps(spec)], capture_output=True, text=True,
                          env=env or child_env(), timeout=600,
                          preexec_fn=soft_limit(preexec_mib) if preexec_mib else None)


def result(r: subprocess.CompletedProcess) -> dict:
    assert r.returncode == 0, f"the child died ({r.returncode}):\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}"
    return json.loads(r.stdout.strip().splitlines()[-1])


def assert_clear_error(res: dict) -> None:
    """A MemoryError that names the limit, the need and how to raise the
    limit, with the library not loaded."""
    assert res["outcome"] == "MemoryError", res
    m = res["message"]
    limit_mib = -(-res["limit"] // MIB)
    assert f"the address-space limit of this process (RLIMIT_AS, `ulimit -v`) is {limit_mib} MiB" in m, m
    assert re.search(r"needs \d+ MiB more to start its Go runtime", m), m
    assert re.search(r"a limit of at least \d+ MiB", m), m
    assert "ulimit -v" in m and "docs/limits.md" in m, m
    assert not res["mapped"], "the library was loaded"
    assert res["again"] == "MemoryError", res


def test_job_limit_of_720_mib(tmp_path):
    """A limit the interpreter starts with, far below the need: MemoryError,
    the process lives, and once it raises its limit the same call works."""
    res = result(run(tmp_path, preexec_mib=720, raise_after=True))
    assert_clear_error(res)
    assert res["after_raise"] == "worked", res


def test_just_below_the_minimum(tmp_path):
    """16 MiB below the smallest limit the check accepts (about 870 MiB for a
    bare interpreter on 2 CPUs, within the margin of the figures: the
    runtime might have started): MemoryError, naming that minimum."""
    res = result(run(tmp_path, limit="below", by_mib=16))
    assert_clear_error(res)
    # The minimum named is the one measured before the limit was set, give or
    # take what the process allocated since.
    named = int(re.search(r"a limit of at least (\d+) MiB", res["message"])[1])
    assert 0 <= named * MIB - (res["limit"] + 16 * MIB) < 8 * MIB, (named, res["limit"])


def test_far_below_the_minimum(tmp_path):
    """700 MiB of room, which no runtime starts in: MemoryError."""
    assert_clear_error(result(run(tmp_path, limit="room", room_mib=700)))


def test_band_where_the_optional_index_fits(tmp_path):
    """A limit with room for the runtime's optional 512 MiB index but not
    for the rest after it: refused too, though a smaller one would pass."""
    res = result(run(tmp_path, limit="band"))
    assert_clear_error(res)
    assert "optional 512 MiB index fits, and then the rest does not" in res["message"], res["message"]


@pytest.mark.parametrize("limit", ["room", "band"])
def test_negative_control_unchecked(tmp_path, limit):
    """Without the check, the same limits (700 MiB of room, and the band)
    kill the child with Go's fatal error."""
    r = run(tmp_path, limit=limit, room_mib=700, unchecked=True)
    assert r.returncode != 0, f"the child survived:\n{r.stdout[-2000:]}"
    assert GO_FATAL.search(r.stderr), r.stderr[-3000:]


def test_job_limit_of_720_mib_unchecked(tmp_path):
    r = run(tmp_path, preexec_mib=720, unchecked=True)
    assert r.returncode != 0, f"the child survived:\n{r.stdout[-2000:]}"
    assert GO_FATAL.search(r.stderr), r.stderr[-3000:]
    # The library's constructor said why first (what a C host sees).
    assert "libtirastore: the address-space limit (RLIMIT_AS, ulimit -v) is 720 MiB" in r.stderr, r.stderr[-3000:]


@pytest.mark.parametrize("limit", ["minimum", "full"])
def test_at_the_minimum_it_works(tmp_path, limit):
    """At exactly the smallest limit the check accepts (with and without the
    optional index), a store opens, records and looks up: the figures hold."""
    res = result(run(tmp_path, limit=limit))
    if limit == "minimum" and not res["window"]:
        pytest.skip("this interpreter maps the lowest 512 MiB: its minimum is the full one")
    assert res["outcome"] == "worked", res


def test_comfortable_job_limit(tmp_path):
    """A limit of 2 GiB set before the interpreter starts: it just works."""
    res = result(run(tmp_path, preexec_mib=2048))
    assert res["outcome"] == "worked", res


def test_low_region_in_use(tmp_path):
    """Room enough for the runtime without its optional index, but the lowest
    512 MiB are in use (as by a position-dependent executable and its heap):
    refused, since the runtime would put that index's pages there."""
    res = result(run(tmp_path, limit="window", low_region=True))
    assert res["low_used"] and not res["window"], res
    assert_clear_error(res)
    assert "something is mapped in the lowest 512 MiB" in res["message"], res["message"]
    assert res["low_after"] == res["low_before"], res


def test_negative_control_low_region_overwritten(tmp_path):
    """Without the check the runtime starts at that limit, and maps pages of
    its own over the region it does not own (MAP_FIXED): what corrupted
    Python's heap under a position-dependent interpreter."""
    res = result(run(tmp_path, limit="window", low_region=True, unchecked=True))
    assert res["outcome"] == "worked", res
    assert len(res["low_before"]) == 1 and res["low_before"][0][2] == "---p", res["low_before"]
    replaced = [m for m in res["low_after"] if m[2].startswith("rw")]
    assert replaced, f"no page of the runtime in the low region: {res['low_after']}"


def test_forked_child(tmp_path):
    """A limit with room for one runtime: the parent loads its copy, a forked
    child's first call (a fresh copy, see _native "Fork safety") raises
    MemoryError instead of killing the child, and the parent goes on."""
    res = result(run(tmp_path, limit="fork", fork=True))
    assert res["child_status"] == 0, res
    child = res["child"]
    assert child["outcome"] == "MemoryError", child
    assert "this forked child loads a copy of its own" in child["message"], child["message"]
    assert child["unloaded"], child
    assert res["outcome"] == "parent worked"


def test_negative_control_forked_child_unchecked(tmp_path):
    """Without the check the forked child dies of Go's fatal error (its
    stderr is its parent's); the parent goes on."""
    r = run(tmp_path, limit="fork", fork=True, unchecked=True)
    res = result(r)
    assert res["child"] is None and res["child_status"] != 0, res
    assert GO_FATAL.search(r.stderr), r.stderr[-3000:]
    assert res["outcome"] == "parent worked"


# ---------------------------------------------------------------------------
# C hosts: the library's constructor (capi/addrspace.c), through ctypes
# ---------------------------------------------------------------------------

C_HOST = r'''
import ctypes, sys
lib = ctypes.CDLL(sys.argv[1])
lib.tirastore_version.restype = ctypes.c_char_p
print(lib.tirastore_version().decode())
'''

ARENAS = r'''
import ctypes, json, sys, threading, warnings
warnings.simplefilter("ignore")
import tirastore
store = tirastore.TiraStore(sys.argv[1], cpu_model="c", slurm_cpus="1")


def work(k):
    for i in range(50):
        store.record("p", "int main() { return 0; }", f"R(L{k * 100 + i},comps=['c1'])", True, [1.0])
        store.lookup("p", "int main() { return 0; }", f"R(L{k * 100 + i},comps=['c1'])")


threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
for t in threads:
    t.start()
for t in threads:
    t.join()
store.close()
libc = ctypes.CDLL(None)
libc.fopen.restype = ctypes.c_void_p
libc.fopen.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
libc.malloc_info.argtypes = [ctypes.c_int, ctypes.c_void_p]
libc.fclose.argtypes = [ctypes.c_void_p]
path = sys.argv[2]
fp = libc.fopen(path.encode(), b"w")
libc.malloc_info(0, fp)
libc.fclose(fp)
print(json.dumps({"arenas": open(path).read().count("<heap nr=")}))
'''


def test_c_host_told_why(tmp_path):
    """A C host (here ctypes) cannot be refused the load: the constructor
    writes why the process is about to die, then Go's fatal error follows."""
    r = subprocess.run([sys.executable, "-c", C_HOST, LIBRARY], capture_output=True, text=True, env=child_env(),
                       timeout=300, preexec_fn=soft_limit(720))
    assert r.returncode != 0, r.stdout
    said = r.stderr.find("libtirastore: the address-space limit (RLIMIT_AS, ulimit -v) is 720 MiB")
    assert said >= 0, r.stderr[-3000:]
    assert re.search(r"Start the process with a limit of at least \d+ MiB \(ulimit -v \d+\)", r.stderr), \
        r.stderr[-3000:]
    fatal = GO_FATAL.search(r.stderr, said + 1)
    assert fatal, r.stderr[-3000:]


def test_c_host_quiet_with_room(tmp_path):
    r = subprocess.run([sys.executable, "-c", C_HOST, LIBRARY], capture_output=True, text=True, env=child_env(),
                       timeout=300, preexec_fn=soft_limit(2048))
    assert r.returncode == 0, r.stderr[-3000:]
    assert "libtirastore" not in r.stderr, r.stderr


@pytest.mark.parametrize("user_arenas, capped", [(None, True), ("8", False)])
def test_malloc_arenas_capped_under_a_limit(tmp_path, user_arenas, capped):
    """Under a limit, the runtime's threads and later Python threads share
    glibc's one arena (each further arena reserves 64 MiB); a user's own
    MALLOC_ARENA_MAX wins (the control: several arenas then)."""
    env = child_env(**({"MALLOC_ARENA_MAX": user_arenas} if user_arenas else {}))
    r = subprocess.run([sys.executable, "-c", ARENAS, str(tmp_path / "a.db"), str(tmp_path / "malloc_info.xml")],
                       capture_output=True, text=True, env=env, timeout=600, preexec_fn=soft_limit(3072))
    assert r.returncode == 0, r.stderr[-3000:]
    arenas = json.loads(r.stdout.strip().splitlines()[-1])["arenas"]
    if capped:
        assert arenas == 1, arenas
    else:
        assert arenas > 1, arenas


# ---------------------------------------------------------------------------
# The figures
# ---------------------------------------------------------------------------


def test_figures_are_read_from_the_library():
    """The package reads the figures that capi/addrspace.c states out of the
    library file, and the image size from its program headers."""
    image, figures = _address_space.library_figures(LIBRARY)
    c = (REPO / "capi" / "addrspace.c").read_text()
    stated = {m[0].lower(): int(m[1]) for m in re.findall(r"^#define TIRASTORE_AS_(\w+) (\d+)$", c, flags=re.M)}
    assert len(stated) == 6 and figures == stated, (figures, stated)
    assert 16 * MIB < image < 256 * MIB, image
    with open(LIBRARY, "rb") as f:
        assert f.read(4) == b"\x7fELF"


def test_no_figures_no_check(tmp_path):
    """A file without the figures (a library built before them) is loaded
    unchecked: nothing is known to check it against."""
    not_elf = tmp_path / "x.so"
    not_elf.write_bytes(b"not a library")
    assert _address_space.library_figures(not_elf) is None
    assert _address_space.library_figures(sys.executable) is None
