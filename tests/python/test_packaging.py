"""Packaging, as users get it: an sdist of the tree, the wheel that
`pip wheel` (and so `pip install`) builds from it through the build backend
(python/hatch_build.py compiles the Go library), and that wheel installed in
a fresh virtualenv: a working, platform-specific package that also serves C
programs (the header and the library, `tirastore.get_include()`).

The sdist, the wheel and the virtualenv are made once for this module."""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

import tirastore

REPO = Path(__file__).resolve().parents[2]

needs_go = pytest.mark.skipif(shutil.which("go") is None, reason="building the library needs Go on PATH")


def _cc() -> str | None:
    for cc in (os.environ.get("CC"), "gcc", "cc"):
        if cc and shutil.which(cc):
            return cc
    return None


needs_cc = pytest.mark.skipif(_cc() is None, reason="needs a C compiler")


def _run(cmd, **kw):
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kw)
    assert proc.returncode == 0, f"{cmd}: exit {proc.returncode}\n{proc.stdout}{proc.stderr}"
    return proc


def _new_venv(path: Path, system_site_packages: bool = False) -> Path:
    venv.EnvBuilder(with_pip=True, system_site_packages=system_site_packages).create(path)
    return path / "bin" / "python"


@pytest.fixture(scope="module")
def dists(tmp_path_factory):
    """(sdist, wheel): the sdist made by the build backend from the tree, and
    the wheel pip builds from that sdist, as from an sdist on an index.
    Building from the sdist also checks that it holds everything the build
    needs, and leaves the work tree alone."""
    if shutil.which("go") is None:
        pytest.skip("building the library needs Go on PATH")
    out = tmp_path_factory.mktemp("dist")
    tools = _new_venv(out / "tools")
    pip = [tools, "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    _run([*pip, "hatchling>=1.21"], timeout=600)
    _run([tools, "-m", "hatchling", "build", "-t", "sdist", "-d", out / "sdist"], cwd=REPO, timeout=600)
    (sdist,) = (out / "sdist").glob("tirastore-*.tar.gz")
    _run([tools, "-m", "pip", "wheel", "-q", "--disable-pip-version-check", "--no-deps",
          "-w", out / "wheel", sdist], cwd=out, timeout=900)
    (wheel,) = (out / "wheel").glob("tirastore-*.whl")
    return sdist, wheel


@pytest.fixture(scope="module")
def installed(dists, tmp_path_factory):
    """The python of a fresh virtualenv with the wheel installed."""
    env_dir = tmp_path_factory.mktemp("venv") / "venv"
    # System site-packages may lend the runtime dependencies from PyPI (cffi,
    # tqdm); tirastore itself comes from the wheel.
    py = _new_venv(env_dir, system_site_packages=True)
    _run([py, "-m", "pip", "install", "-q", "--disable-pip-version-check", dists[1]], timeout=900)
    return py


def test_pip_install_in_fresh_venv(installed, tmp_path):
    probe = (
        "import tirastore, tirastore._native as n, importlib.metadata as m, pathlib, tempfile;"
        "p = pathlib.Path(tirastore.__file__).parent;"
        "assert n.library_path() == p / 'libtirastore.so', n.library_path();"
        "assert 'site-packages' in str(p), p;"
        "assert m.version('tirastore') == tirastore.__version__;"
        "s = tirastore.TiraStore(pathlib.Path(tempfile.mkdtemp()) / 'c.db', cpu_model='X');"
        "assert s.record('p', 's', 'U(L0,4,comps=[\"c\"])', True, [1.0]);"
        "print(s.lookup('p', 's', \"U(L0,4,comps=['c'])\").execution_times)"
    )
    run = subprocess.run([str(installed), "-c", probe], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "[1.0]"
    wheel = next(installed.parent.parent.glob("lib/python3*/site-packages/tirastore-*.dist-info/WHEEL"))
    tags = wheel.read_text()
    assert "Root-Is-Purelib: false" in tags and "linux" in tags, tags


def test_installed_console_script(installed, tmp_path):
    """The wheel's `tirastore` command: in the venv's bin, runs without the
    checkout, and refuses to create a database from a typo."""
    cmd = installed.parent / "tirastore"
    assert cmd.is_file(), sorted(p.name for p in installed.parent.iterdir())
    db = tmp_path / "c.db"
    made = subprocess.run([str(installed), "-c", f"import tirastore; tirastore.TiraStore({str(db)!r}, cpu_model='X').close()"],
                          capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert made.returncode == 0, made.stderr
    run = subprocess.run([str(cmd), "stats", str(db), "--json"], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["total_records"] == 0
    typo = subprocess.run([str(cmd), "stats", str(tmp_path / "typo" / "c.db")], capture_output=True, text=True,
                          cwd=tmp_path, timeout=120)
    assert typo.returncode == 1 and "typo" in typo.stderr and not (tmp_path / "typo").exists()
    inc = subprocess.run([str(cmd), "--include"], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert inc.returncode == 0 and (Path(inc.stdout.strip()) / "tirastore.h").is_file(), inc


def _platform_tag() -> str:
    # What python/hatch_build.py computes, here without the packaging module
    # (not a dependency of the tests): the interpreter's platform.
    import sysconfig

    return sysconfig.get_platform().replace("-", "_").replace(".", "_")


def test_wheel_is_one_for_every_cpython3(dists):
    wheel = dists[1]
    # The library is dlopened through cffi's ABI mode: no Python ABI in it.
    assert wheel.name.endswith(f"-py3-none-{_platform_tag()}.whl"), wheel.name
    with zipfile.ZipFile(wheel) as z:
        (meta,) = [n for n in z.namelist() if n.endswith(".dist-info/WHEEL")]
        text = z.read(meta).decode()
    assert f"Tag: py3-none-{_platform_tag()}" in text.splitlines(), text
    assert "Root-Is-Purelib: false" in text, text


def test_wheel_and_sdist_ship_license_header_and_library(dists):
    import tarfile

    sdist, wheel = dists
    license_text = (REPO / "LICENSE").read_text()
    assert "MIT License" in license_text and "The TiraStore authors" in license_text
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        licenses = [n for n in names if ".dist-info/" in n and n.endswith("/LICENSE")]
        assert licenses, names
        assert z.read(licenses[0]).decode() == license_text
        # The header is the checked-in include/tirastore.h, not a copy that
        # could drift from it.
        assert z.read("tirastore/include/tirastore.h") == (REPO / "include" / "tirastore.h").read_bytes()
        assert z.read("tirastore/libtirastore.so")[:4] == b"\x7fELF"
        meta = z.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert "Project-URL: Source, https://github.com/tirastore/tirastore" in meta, meta[:2000]
    assert "Requires-Dist: tqdm" in meta
    with zipfile.ZipFile(wheel) as z:
        entry_points = z.read(next(n for n in z.namelist() if n.endswith(".dist-info/entry_points.txt"))).decode()
    assert "tirastore = tirastore.cli:main" in entry_points, entry_points
    with tarfile.open(sdist) as t:
        top = sdist.name[: -len(".tar.gz")]
        assert t.extractfile(f"{top}/LICENSE").read().decode() == license_text
        assert f"{top}/include/tirastore.h" in t.getnames()


def test_wheel_and_sdist_ship_the_dashboard_assets(dists, installed, tmp_path):
    """`tirastore dashboard` works offline only if its page, script, style
    and the vendored uPlot (with its licence) are in the package."""
    import tarfile

    from tirastore import dashboard

    sdist, wheel = dists
    assets = REPO / "python" / "tirastore" / "dashboard_assets"
    names = sorted(p.name for p in assets.iterdir() if p.is_file())
    # Everything the server serves, and uPlot's licence and provenance.
    wanted = {"index.html", "uPlot.LICENSE", "VENDORED.md", *dashboard._ASSETS}
    assert wanted <= set(names), (wanted, names)
    licence = (assets / "uPlot.LICENSE").read_text()
    assert "MIT License" in licence and "Leon Sorokin" in licence, licence[:200]
    with zipfile.ZipFile(wheel) as z:
        for name in names:
            assert z.read(f"tirastore/dashboard_assets/{name}") == (assets / name).read_bytes(), name
    with tarfile.open(sdist) as t:
        top = sdist.name[: -len(".tar.gz")]
        for name in names:
            f = t.extractfile(f"{top}/python/tirastore/dashboard_assets/{name}")
            assert f is not None and f.read() == (assets / name).read_bytes(), name
    # The installed package finds them where the server reads them.
    probe = ("import tirastore.dashboard as d; "
             "print(sorted(p.name for p in d.ASSETS_DIR.iterdir() if p.is_file())); print(d.ASSETS_DIR)")
    out = _run([installed, "-c", probe], cwd=tmp_path, timeout=120).stdout.splitlines()
    assert out[0] == repr(names) and "site-packages" in out[1], out


def _elf_section_names(data: bytes) -> list[str]:
    """Section names from the ELF section header table (ELF32/64, either
    byte order), with nothing but the standard library."""
    assert data[:4] == b"\x7fELF", "not an ELF file"
    elf64, e = data[4] == 2, "<" if data[5] == 1 else ">"
    if elf64:
        (shoff,) = struct.unpack_from(e + "Q", data, 0x28)
        shentsize, shnum, shstrndx = struct.unpack_from(e + "HHH", data, 0x3A)
        fmt = e + "IIQQQQ"  # sh_name, sh_type, sh_flags, sh_addr, sh_offset, sh_size
    else:
        (shoff,) = struct.unpack_from(e + "I", data, 0x20)
        shentsize, shnum, shstrndx = struct.unpack_from(e + "HHH", data, 0x2E)
        fmt = e + "IIIIII"
    assert shoff and 0 < shnum and shstrndx < shnum, "no usable section header table"
    headers = [struct.unpack_from(fmt, data, shoff + i * shentsize) for i in range(shnum)]
    strtab_off, strtab_size = headers[shstrndx][4], headers[shstrndx][5]
    strtab = data[strtab_off : strtab_off + strtab_size]
    return [strtab[h[0] : strtab.index(b"\0", h[0])].decode() for h in headers]


def _debug_sections(names: list[str]) -> list[str]:
    # Go writes DWARF as .debug_* (compressed or not) or, in older
    # releases, as .zdebug_*.
    return [n for n in names if n.startswith((".debug_", ".zdebug_"))]


@needs_cc
def test_elf_reader_sees_debug_info(tmp_path):
    # The control for the next test: a library built with -g has .debug_info
    # and the reader finds it (a reader that found nothing would pass it).
    src = tmp_path / "g.c"
    src.write_text("int tirastore_test_f(int x) { return x + 1; }\n")
    _run([_cc(), "-g", "-shared", "-fPIC", src, "-o", tmp_path / "libg.so"])
    names = _elf_section_names((tmp_path / "libg.so").read_bytes())
    assert ".debug_info" in names and ".text" in names, names


def test_wheel_library_is_stripped(dists, tmp_path):
    # build.sh links it with -s -w: no DWARF, no symbol table (.dynsym, which
    # dlopen needs, stays).
    with zipfile.ZipFile(dists[1]) as z:
        data = z.read("tirastore/libtirastore.so")
    names = _elf_section_names(data)
    assert ".text" in names and ".dynsym" in names, names
    assert not _debug_sections(names), names
    assert ".symtab" not in names, names
    if shutil.which("readelf"):  # a second opinion where binutils exist
        lib = tmp_path / "libtirastore.so"
        lib.write_bytes(data)
        out = _run(["readelf", "-S", "-W", lib]).stdout
        assert ".text" in out and ".debug_" not in out and ".zdebug_" not in out, out


def test_get_include_here():
    inc = tirastore.get_include()
    assert isinstance(inc, str) and os.path.isabs(inc), inc
    assert os.path.isfile(os.path.join(inc, "tirastore.h")), inc


C_PROGRAM = r"""
#include <stdio.h>
#include <tirastore.h>

int main(void) {
    puts(tirastore_version());
    return 0;
}
"""


@needs_cc
def test_c_program_builds_against_installed_package(installed, tmp_path):
    probe = "import os, tirastore; print(tirastore.get_include()); print(os.path.dirname(tirastore.__file__)); print(tirastore.__version__)"
    inc, libdir, version = _run([installed, "-c", probe], cwd=tmp_path, timeout=120).stdout.split("\n")[:3]
    # An installed package has its own copy, next to the library.
    assert inc == os.path.join(libdir, "include"), (inc, libdir)
    assert "site-packages" in libdir, libdir
    src = tmp_path / "app.c"
    src.write_text(C_PROGRAM)
    _run([_cc(), "-std=c11", "-Wall", "-Wextra", "-Werror", f"-I{inc}", src,
          f"-L{libdir}", "-ltirastore", f"-Wl,-rpath,{libdir}", "-o", tmp_path / "app"], timeout=120)
    out = _run([tmp_path / "app"], cwd=tmp_path, timeout=60).stdout
    assert out.strip() == version
