"""Whether the library's Go runtime fits under this process's address-space limit.

Under an address-space limit (RLIMIT_AS: ``ulimit -v``, and Slurm jobs
that inherit one or derive one from their memory request), a Go runtime
that does not fit aborts the whole process when the library is loaded
("fatal error: out of memory allocating heap arena map",
"runtime/cgo: pthread_create failed"): no exception, nothing to catch.
:func:`check` runs before every load of the library (the first, and a
forked child's fresh copy, see tirastore._native) and raises MemoryError,
naming the limit, what the library needs and how to get it, when the
runtime would not fit; the process goes on, and a later call checks again
(the limit can be raised from inside, up to the hard limit).

MemoryError rather than ImportError: nothing is wrong with the
installation (the import worked, and ``pip install`` would not help);
the process lacks memory for what it asked, as when Python itself runs
out under the same limit, and code that handles a memory shortage catches
MemoryError.

The figures are the library's own: capi/addrspace.c states them once,
with the reasons, and compiles them into the library's section
``.tirastore_addrspace``, read here out of the file that is about to be
loaded (its ELF headers and that section, a few KiB; nothing is mapped
or run). The same C file's
constructor uses them in C hosts, where the library cannot refuse to load
and only says why the process is about to abort. The model (details in
capi/addrspace.c and docs/limits.md, "Address space"): the runtime needs
the library's image, ``base_mib``, ``threads`` thread stacks and one more
for every ``procs_per_thread`` Ps (GOMAXPROCS), and, if it fits, an
optional index of ``optional_mib``. Where that index does not
fit, the runtime maps its pages in the lowest ``optional_mib`` of the
address space, which is acceptable only when nothing is mapped there;
where it fits, the rest must fit after it.

Without a limit (the common case) the check costs one getrlimit (and the
import of :mod:`resource` the first time).
"""

from __future__ import annotations

import os

MIB = 1 << 20
SECTION = b".tirastore_addrspace"
FIGURES_TAG = "tirastore-address-space"


def library_figures(path: os.PathLike | str) -> tuple[int, dict[str, int]] | None:
    """(the size of the library's image when mapped, its address-space
    figures) read from the ELF file at path; None if it has none (not an
    ELF file, or a library built before the figures existed)."""
    import struct

    try:
        with open(path, "rb") as f:
            ehdr = f.read(64)
            if len(ehdr) < 64 or ehdr[:4] != b"\x7fELF" or ehdr[4] != 2 or ehdr[5] != 1:  # ELF64, little-endian
                return None
            phoff, shoff = struct.unpack_from("<QQ", ehdr, 32)
            phentsize, phnum, shentsize, shnum, shstrndx = struct.unpack_from("<HHHHH", ehdr, 54)
            f.seek(phoff)
            phdrs = f.read(phentsize * phnum)
            lo, hi = None, 0
            for i in range(phnum):
                p_type, _, _, vaddr, _, _, memsz = struct.unpack_from("<IIQQQQQ", phdrs, i * phentsize)
                if p_type == 1:  # PT_LOAD
                    lo = vaddr if lo is None else min(lo, vaddr)
                    hi = max(hi, vaddr + memsz)
            if lo is None or shnum == 0 or shstrndx >= shnum:
                return None
            f.seek(shoff)
            shdrs = f.read(shentsize * shnum)

            def section(i: int) -> tuple[int, int, int]:  # name offset, file offset, size
                name, _, _, _, offset, size = struct.unpack_from("<IIQQQQ", shdrs, i * shentsize)
                return name, offset, size

            _, stroff, strsize = section(shstrndx)
            f.seek(stroff)
            names = f.read(strsize)
            for i in range(shnum):
                name, offset, size = section(i)
                if names[name:name + len(SECTION) + 1] == SECTION + b"\0" and 0 < size <= 4096:
                    f.seek(offset)
                    text = f.read(size).split(b"\0", 1)[0].decode("ascii", "replace")
                    break
            else:
                return None
    except (OSError, struct.error):
        return None
    words = text.split()
    if len(words) < 2 or words[0] != FIGURES_TAG:
        return None
    figures = {}
    for word in words[2:]:
        key, _, value = word.partition("=")
        if value.isdigit():
            figures[key] = int(value)
    if not {"base_mib", "threads", "procs_per_thread", "optional_mib", "before_mib", "arena_mib"} <= figures.keys():
        return None
    page = 4096
    return (hi - (lo // page) * page + page - 1) // page * page, figures


def _vmsize() -> int:
    """The address space this process uses (VmSize), in bytes; 0 if unknown."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[0]) * os.sysconf("SC_PAGESIZE")
    except (OSError, ValueError, IndexError):
        return 0


def _low_region_used(size: int) -> bool:
    """Whether anything is mapped below size bytes (True if unknown)."""
    try:
        with open("/proc/self/maps", "rb") as f:
            return any(int(line.split(b"-", 1)[0], 16) < size for line in f)
    except (OSError, ValueError):
        return True


def _thread_stack(resource) -> int:
    """A thread's stack and guard page as glibc gives them by default: the
    soft RLIMIT_STACK (at least 16 KiB), or 2 MiB on x86-64 where it is
    unlimited (8 MiB assumed elsewhere)."""
    page = os.sysconf("SC_PAGESIZE")
    soft = resource.getrlimit(resource.RLIMIT_STACK)[0]
    if soft == resource.RLIM_INFINITY:
        size = 2 * MIB if os.uname().machine in ("x86_64", "amd64") else 8 * MIB
    else:
        size = max(16 << 10, (soft + page - 1) // page * page)
    return size + page


def _procs() -> int:
    """The Ps the runtime will have: GOMAXPROCS if it is a number > 0, else
    the CPUs this process may run on (Go also lowers it to a cgroup's CPU
    quota: not counted, which only overstates)."""
    value = os.environ.get("GOMAXPROCS", "")
    if value.isdigit() and int(value) > 0:
        return min(int(value), 1 << 16)
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _user_arenas() -> int:
    """The malloc arenas the user allowed (MALLOC_ARENA_MAX, or the tunable
    glibc.malloc.arena_max, which wins): 0 if unset, -1 for glibc's default
    (8 per core)."""
    value = os.environ.get("MALLOC_ARENA_MAX")
    tunables = os.environ.get("GLIBC_TUNABLES", "")
    key = "glibc.malloc.arena_max="
    if key in tunables:
        value = tunables.split(key, 1)[1].split(":", 1)[0]
    if not value:
        return 0
    digits = value.strip()[:9]
    n = int(digits) if digits.isdigit() else 0
    return n if n > 0 else -1


def _mib(n: float) -> int:
    return int(n // MIB) + (1 if n % MIB else 0)


class Needs:
    """What the library at a path needs of this process's address space
    now, in bytes (see the module's docstring):

    * ``used``: what the process uses (VmSize);
    * ``need``: the room its runtime needs where its optional index does
      not fit; ``full``: where it does;
    * ``index_fails_below``: the room below which that index surely does
      not fit;
    * ``window``: whether the runtime may run without the index (nothing
      is mapped in the lowest ``optional`` bytes, and need is below
      index_fails_below).
    """

    def __init__(self, image: int, fig: dict[str, int], used: int, stack: int, procs: int, arenas: int,
                 low_used: bool) -> None:
        threads = fig["threads"] + -(-procs // fig["procs_per_thread"])
        # The library's constructor caps the arenas at one unless the user chose.
        extra_arenas = threads if arenas < 0 else max(0, min(arenas - 1, threads))
        self.figures = fig
        self.threads = threads
        self.used = used
        self.optional = fig["optional_mib"] * MIB
        self.need = image + fig["base_mib"] * MIB + threads * stack + extra_arenas * fig["arena_mib"] * MIB
        self.full = self.need + self.optional
        # By the runtime's try at the index it has reserved at least the
        # image, its first thread's stack and before_mib.
        self.index_fails_below = image + fig["before_mib"] * MIB + stack + self.optional
        self.low_used = low_used
        self.window = self.need < self.index_fails_below and not low_used

    def fits(self, room: int) -> bool:
        """Whether the runtime starts with room bytes of address space to spare."""
        return room >= self.full or (self.window and self.need <= room < self.index_fails_below)

    def minimum(self) -> int:
        """The smallest limit (bytes) the check accepts."""
        return self.used + (self.need if self.window else self.full)


def needs(path: os.PathLike | str) -> Needs | None:
    """What the library at path needs now; None where that is unknown (no
    figures in the file, no /proc)."""
    import resource

    found = library_figures(path)
    used = _vmsize()
    if found is None or used == 0:
        return None
    image, fig = found
    return Needs(image, fig, used, _thread_stack(resource), _procs(), _user_arenas(),
                 _low_region_used(fig["optional_mib"] * MIB))


def check(path: os.PathLike | str, forked: bool = False) -> None:
    """Raise MemoryError if the library at path cannot start under this
    process's address-space limit (see the module's docstring)."""
    try:
        import resource
    except ImportError:  # not a Unix
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY:
        return
    n = needs(path)
    if n is None:
        return
    room = soft - n.used
    if n.fits(room):
        return
    want = n.need if n.window and room < n.need else n.full
    opt = n.figures["optional_mib"]
    why = ""
    if want == n.full:
        if n.low_used:
            why = (f" (its optional {opt} MiB index included: something is mapped in the lowest {opt} MiB of the "
                   f"address space, where the runtime would put that index's pages otherwise, over what is there)")
        elif n.window:
            why = (f" (at this limit the runtime's optional {opt} MiB index fits, and then the rest does not; "
                   f"below {_mib(n.used + n.index_fails_below)} MiB in all it would run without it)")
        else:
            why = f" (its optional {opt} MiB index included)"
    minimum = _mib(n.used + want)
    if hard != resource.RLIM_INFINITY and hard < minimum * MIB:
        raise_it = (f"The hard limit, {_mib(hard)} MiB, is lower: only whoever set it can raise it (in a Slurm "
                    f"job, ask for more memory, --mem or --mem-per-cpu, where the cluster derives the limit from "
                    f"it, or submit with --propagate=NONE if it is the login shell's limit).")
    else:
        raise_it = (f"Raise it before starting Python: `ulimit -v {minimum * 1024}` (KiB) or `ulimit -v unlimited` "
                    f"in the shell or the job script; in a Slurm job whose limit comes from the login shell, "
                    f"submit with --propagate=NONE, or ask for more memory (--mem) where the cluster derives the "
                    f"limit from it.")
    fork_note = ""
    if forked:
        fork_note = " (this forked child loads a copy of its own beside its parent's, see tirastore._native)"
    raise MemoryError(
        f"TiraStore: the address-space limit of this process (RLIMIT_AS, `ulimit -v`) is {_mib(soft)} MiB and the "
        f"process uses {_mib(n.used)} MiB of it; the native library {os.fspath(path)}{fork_note} needs "
        f"{_mib(want)} MiB more to start its Go runtime{why}: a limit of at least {minimum} MiB. Nothing was "
        f"loaded (the runtime would have aborted the process). {raise_it} "
        f"See \"Address space\" in docs/limits.md."
    )
