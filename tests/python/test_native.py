"""The Python binding against the C contract: declarations, version, errors."""

from __future__ import annotations

import importlib.metadata
import re
import subprocess
import sys
from pathlib import Path

import pytest

import tirastore
from tirastore import _native

REPO = Path(__file__).resolve().parents[2]


def _prototypes(text: str) -> set[str]:
    """Function prototypes of a C text, comments dropped, whitespace normalized."""
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    protos = re.findall(r"^[A-Za-z_][\w \*]*\btirastore_\w+\s*\([^;]*\)\s*;", text, flags=re.M)
    norm = set()
    for p in protos:
        p = re.sub(r"\s+", " ", p).replace(" *", "*").replace("* ", "*").replace(" (", "(").strip()
        norm.add(p)
    return norm


def test_cdef_matches_header():
    header = (REPO / "include" / "tirastore.h").read_text()
    assert _prototypes(_native.CDEF) == _prototypes(header)
    assert len(_prototypes(header)) == 5


def test_one_version_everywhere():
    assert tirastore.__version__ == _native.version()
    assert tirastore.__version__ == importlib.metadata.version("tirastore")
    go = (REPO / "core" / "version.go").read_text()
    assert f'const Version = "{tirastore.__version__}"' in go
    assert _native.call(0, "version") == tirastore.__version__


def test_library_found_through_env(tmp_path):
    """$TIRASTORE_LIB wins over the copy next to the package."""
    lib = Path(_native.library_path())
    code = "import tirastore, tirastore._native as n; tirastore.normalize_schedule(''); print(n.library_path(), n.loaded_from)"
    env = {"TIRASTORE_LIB": str(lib), "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == [str(lib), str(lib)]
    # A missing library: the import works (it loads nothing), the first call
    # says which file is missing and how to get one.
    env["TIRASTORE_LIB"] = str(tmp_path / "missing.so")
    bad = subprocess.run([sys.executable, "-c", "import tirastore; tirastore.normalize_schedule('')"], env=env,
                         capture_output=True, text=True)
    assert bad.returncode != 0 and "ImportError: tirastore: the native library" in bad.stderr, bad.stderr
    assert "missing.so" in bad.stderr and "TIRASTORE_LIB" in bad.stderr


@pytest.mark.parametrize(
    "method, args, exc, text",
    [
        ("frobnicate", {}, ValueError, "unknown method"),
        ("normalize_schedule", {}, TypeError, "missing required argument schedule"),
        ("normalize_schedule", {"schedule": "x", "extra": 1}, TypeError, "unexpected argument"),
        ("lookup", {"program_name": "a", "program_source_code": "b", "tiralib_schedule_string": ""}, ValueError, "handle 0"),
    ],
)
def test_call_errors_map_to_exceptions(method, args, exc, text):
    with pytest.raises(exc, match=text):
        _native.call(0, method, **args)


def test_unencodable_argument_is_a_type_error():
    with pytest.raises(TypeError, match="normalize_schedule"):
        _native.call(0, "normalize_schedule", schedule=object())


def test_numpy_like_numbers_are_accepted(tmp_path):
    """Number-like objects (numpy scalars register as numbers.Real) go through as floats."""
    import numbers

    class Real(numbers.Real):  # a minimal stand-in for numpy.float32
        def __init__(self, v):
            self.v = v

        def __float__(self):
            return float(self.v)

        # the abstract methods numbers.Real requires; unused here
        __abs__ = __add__ = __ceil__ = __eq__ = __floor__ = __floordiv__ = __le__ = __lt__ = None
        __mod__ = __mul__ = __neg__ = __pos__ = __pow__ = __radd__ = __rfloordiv__ = __rmod__ = None
        __rmul__ = __round__ = __rpow__ = __rtruediv__ = __truediv__ = __trunc__ = None

    with tirastore.TiraStore(tmp_path / "c.db", cpu_model="X") as s:
        assert s.record("p", "src", "U(L0,4,comps=['c'])", True, [Real(0.5)])
        assert s.lookup("p", "src", "U(L0,4,comps=['c'])").execution_times == [0.5]
