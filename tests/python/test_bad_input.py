"""Bad input: TypeError for wrong types, ValueError for bad values.

In every case nothing is written and the store keeps working afterwards.
"""

from __future__ import annotations

import math

import pytest

from conftest import SCHED_I, SCHED_R, SCHED_S, SRC_BLUR, leftover_lock_files

WRONG_TYPES = [None, 1, 1.5, b"blur", ["blur"], ("blur",), {"a": 1}]
WRONG_TYPE_IDS = ["None", "int", "float", "bytes", "list", "tuple", "dict"]

NUL_OR_SURROGATE = ["a\x00b", "\x00", "x\ud800", "\udfff", "a\ud83d"]
NUL_IDS = ["nul-mid", "nul-only", "lone-high", "lone-low", "lone-high-2"]

BAD_TIMES_TYPE = ["1.0", "", {"a": 1.0}, {1.0}, 1.5, 3, True, b"\x00"]
BAD_TIMES_TYPE_IDS = ["str", "empty-str", "dict", "set", "float", "int", "bool", "bytes"]

BAD_ELEMENTS = [["1.0"], [None], [True], [False], [1.0, "x"], [[1.0]], [1.0, None], [1j]]
BAD_ELEMENT_IDS = ["str", "None", "True", "False", "mixed-str", "nested", "mixed-None", "complex"]

NON_FINITE = [[math.nan], [math.inf], [-math.inf], [1.0, float("nan")], [1.0, 2.0, -math.inf]]
NON_FINITE_IDS = ["nan", "inf", "-inf", "mixed-nan", "mixed-ninf"]

BAD_IS_LEGAL = [1, 0, "true", None, 1.0, [True]]
BAD_IS_LEGAL_IDS = ["int1", "int0", "str", "None", "float", "list"]


@pytest.fixture
def seeded(store):
    """A store with one record and one program, plus a checker."""
    store.record("blur", SRC_BLUR, SCHED_R, True, [1.0])

    def check_untouched_and_working():
        assert store.count() == 1
        assert store.program_count() == 1
        assert store.lookup("blur", SRC_BLUR, SCHED_R).execution_times == [1.0]
        assert store.writes_allowed is True
        # store keeps working: a valid write succeeds and is visible
        assert store.record("blur", SRC_BLUR, SCHED_S, True, [2.0]) is True
        assert store.lookup("blur", SRC_BLUR, SCHED_S).execution_times == [2.0]
        assert store.delete(store.keys()[-1]) is True
        assert store.count() == 1
        assert leftover_lock_files(store) == []

    return store, check_untouched_and_working


# ---------------------------------------------------------------------------
# record
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("bad", WRONG_TYPES, ids=WRONG_TYPE_IDS)
@pytest.mark.parametrize("pos", ["program_name", "program_source_code", "tiralib_schedule_string"])
def test_record_wrong_string_types(seeded, pos, bad):
    store, check = seeded
    args = {
        "program_name": "blur2",
        "program_source_code": "void f() {}",
        "tiralib_schedule_string": SCHED_I,
        "is_legal": True,
        "execution_times": [1.0],
    }
    args[pos] = bad
    with pytest.raises(TypeError):
        store.record(**args)
    check()


@pytest.mark.parametrize("bad", NUL_OR_SURROGATE, ids=NUL_IDS)
@pytest.mark.parametrize("pos", ["program_name", "program_source_code", "tiralib_schedule_string"])
def test_record_nul_and_surrogates(seeded, pos, bad):
    store, check = seeded
    args = {
        "program_name": "blur2",
        "program_source_code": "void f() {}",
        "tiralib_schedule_string": SCHED_I,
        "is_legal": True,
        "execution_times": [1.0],
    }
    if pos == "tiralib_schedule_string":
        # keep the schedule grammatically valid: the bad char is in a quoted name
        args[pos] = f"R(L0,comps=['{bad}'])"
    else:
        args[pos] = args[pos] + bad
    with pytest.raises(ValueError):
        store.record(**args)
    check()


@pytest.mark.parametrize("bad", BAD_TIMES_TYPE, ids=BAD_TIMES_TYPE_IDS)
@pytest.mark.parametrize("is_legal", [True, False])
def test_record_execution_times_not_a_list(seeded, bad, is_legal):
    store, check = seeded
    with pytest.raises(TypeError):
        store.record("blur", SRC_BLUR, SCHED_I, is_legal, bad)
    check()


@pytest.mark.parametrize("bad", BAD_ELEMENTS, ids=BAD_ELEMENT_IDS)
def test_record_execution_times_bad_elements(seeded, bad):
    store, check = seeded
    with pytest.raises(TypeError):
        store.record("blur", SRC_BLUR, SCHED_I, True, bad)
    check()


@pytest.mark.parametrize("bad", NON_FINITE, ids=NON_FINITE_IDS)
def test_record_execution_times_non_finite(seeded, bad):
    store, check = seeded
    with pytest.raises(ValueError):
        store.record("blur", SRC_BLUR, SCHED_I, True, bad)
    check()


@pytest.mark.parametrize("bad", BAD_IS_LEGAL, ids=BAD_IS_LEGAL_IDS)
def test_record_is_legal_not_bool(seeded, bad):
    store, check = seeded
    with pytest.raises(TypeError):
        store.record("blur", SRC_BLUR, SCHED_I, bad, [1.0])
    check()


def test_record_overwrite_of_existing_with_bad_value_keeps_old(seeded):
    store, check = seeded
    with pytest.raises(ValueError):
        store.record("blur", SRC_BLUR, SCHED_R, True, [math.nan], overwrite=True)
    with pytest.raises(TypeError):
        store.record("blur", SRC_BLUR, SCHED_R, True, ["x"], overwrite=True)
    check()


# ---------------------------------------------------------------------------
# record_many
# ---------------------------------------------------------------------------


def _ok(sched=SCHED_S):
    return {"tiralib_schedule_string": sched, "is_legal": True, "execution_times": [1.0]}


@pytest.mark.parametrize("bad", WRONG_TYPES, ids=WRONG_TYPE_IDS)
@pytest.mark.parametrize("pos", ["program_name", "program_source_code"])
def test_record_many_wrong_program_types(seeded, pos, bad):
    store, check = seeded
    args = {"program_name": "blur2", "program_source_code": "void f() {}", "schedules": [_ok()]}
    args[pos] = bad
    with pytest.raises(TypeError):
        store.record_many(**args)
    check()


@pytest.mark.parametrize("bad", [None, 1, "R(L0,comps=[c])", {"tiralib_schedule_string": SCHED_S}])
def test_record_many_schedules_not_a_list(seeded, bad):
    store, check = seeded
    with pytest.raises(TypeError):
        store.record_many("blur", SRC_BLUR, bad)
    check()


@pytest.mark.parametrize("bad_entry", [None, "R(L0,comps=[c])", 5, [SCHED_S, True, [1.0]]])
def test_record_many_entry_not_a_dict(seeded, bad_entry):
    store, check = seeded
    with pytest.raises(TypeError):
        store.record_many("blur", SRC_BLUR, [_ok(SCHED_I), bad_entry])
    check()


@pytest.mark.parametrize(
    "field, bad",
    [
        ("tiralib_schedule_string", None),
        ("tiralib_schedule_string", 7),
        ("tiralib_schedule_string", b"R(L0,comps=[c])"),
        ("tiralib_schedule_string", ["R(L0,comps=[c])"]),
        ("is_legal", 1),
        ("is_legal", "yes"),
        ("is_legal", None),
        ("execution_times", "1.0"),
        ("execution_times", {"a": 1.0}),
        ("execution_times", 2.5),
        ("execution_times", ["1.0"]),
        ("execution_times", [None]),
        ("execution_times", [True]),
    ],
)
def test_record_many_entry_wrong_types(seeded, field, bad):
    store, check = seeded
    entry = _ok(SCHED_I)
    entry[field] = bad
    with pytest.raises(TypeError):
        store.record_many("blur", SRC_BLUR, [_ok(), entry])
    check()


@pytest.mark.parametrize("bad", NON_FINITE, ids=NON_FINITE_IDS)
def test_record_many_non_finite(seeded, bad):
    store, check = seeded
    entry = _ok(SCHED_I)
    entry["execution_times"] = bad
    with pytest.raises(ValueError):
        store.record_many("blur", SRC_BLUR, [_ok(), entry])
    check()


@pytest.mark.parametrize("bad", NUL_OR_SURROGATE, ids=NUL_IDS)
def test_record_many_nul_and_surrogates(seeded, bad):
    store, check = seeded
    with pytest.raises(ValueError):
        store.record_many("blur" + bad, SRC_BLUR, [_ok()])
    with pytest.raises(ValueError):
        store.record_many("blur", SRC_BLUR + bad, [_ok()])
    with pytest.raises(ValueError):
        store.record_many("blur", SRC_BLUR, [_ok(), _ok(f"R(L0,comps=['{bad}'])")])
    check()


def test_record_many_tuple_times_accepted(store):
    entry = {"tiralib_schedule_string": SCHED_S, "is_legal": True, "execution_times": (1, 2.0)}
    assert store.record_many("blur", SRC_BLUR, [entry]) == 1
    got = store.lookup("blur", SRC_BLUR, SCHED_S).execution_times
    assert got == [1, 2.0] and [type(x) for x in got] == [int, float]


# ---------------------------------------------------------------------------
# read paths
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("bad", WRONG_TYPES, ids=WRONG_TYPE_IDS)
@pytest.mark.parametrize("pos", [0, 1, 2])
def test_lookup_and_contains_wrong_types(seeded, pos, bad):
    store, check = seeded
    args = ["blur", SRC_BLUR, SCHED_R]
    args[pos] = bad
    with pytest.raises(TypeError):
        store.lookup(*args)
    with pytest.raises(TypeError):
        store.contains(*args)
    check()


@pytest.mark.parametrize("bad", NUL_OR_SURROGATE, ids=NUL_IDS)
@pytest.mark.parametrize("pos", [0, 1, 2])
def test_lookup_and_contains_nul_and_surrogates(seeded, pos, bad):
    store, check = seeded
    args = ["blur", SRC_BLUR, SCHED_R]
    args[pos] = args[pos] + bad
    with pytest.raises(ValueError):
        store.lookup(*args)
    with pytest.raises(ValueError):
        store.contains(*args)
    check()


@pytest.mark.parametrize("bad", WRONG_TYPES, ids=WRONG_TYPE_IDS)
def test_program_queries_wrong_types(seeded, bad):
    store, check = seeded
    with pytest.raises(TypeError):
        store.get_program_source(bad)
    with pytest.raises(TypeError):
        store.get_program_records("blur", bad)
    with pytest.raises(TypeError):
        store.get_program_records(bad, SRC_BLUR)
    check()


@pytest.mark.parametrize("bad", [None, 1, b"k", ["k"]])
def test_get_delete_wrong_types(seeded, bad):
    store, check = seeded
    with pytest.raises(TypeError):
        store.get(bad)
    with pytest.raises(TypeError):
        store.delete(bad)
    check()


# ---------------------------------------------------------------------------
# every TypeError names the method and the argument
# ---------------------------------------------------------------------------

# Python type names as the messages give them (a tuple travels as a JSON
# list, so it is reported as one).
TYPE_NAMES = {"None": "None", "int": "int", "float": "float", "bytes": "bytes",
              "list": "list", "tuple": "list", "dict": "dict"}

STR_ARGS = [
    ("lookup", ["program_name", "program_source_code", "tiralib_schedule_string"]),
    ("contains", ["program_name", "program_source_code", "tiralib_schedule_string"]),
    ("record", ["program_name", "program_source_code", "tiralib_schedule_string"]),
    ("lookup_many", ["program_name", "program_source_code"]),
    ("record_many", ["program_name", "program_source_code"]),
    ("get_program_source", ["program_name"]),
    ("get_program_records", ["program_name", "program_source_code"]),
    ("get", ["key"]),
    ("delete", ["key"]),
    ("put", ["key", "program_hash", "schedule", "result_json"]),
]


def _valid_args(method):
    prog = {"program_name": "blur", "program_source_code": SRC_BLUR}
    return {
        "lookup": {**prog, "tiralib_schedule_string": SCHED_R},
        "contains": {**prog, "tiralib_schedule_string": SCHED_R},
        "record": {**prog, "tiralib_schedule_string": SCHED_I, "is_legal": True, "execution_times": [1.0]},
        "lookup_many": {**prog, "schedules": [SCHED_R]},
        "record_many": {**prog, "schedules": [_ok(SCHED_I)]},
        "get_program_source": {"program_name": "blur"},
        "get_program_records": dict(prog),
        "get": {"key": "0" * 64},
        "delete": {"key": "0" * 64},
        "put": {"key": "0" * 64, "program_hash": "0" * 64, "schedule": SCHED_R,
                "result_json": '{"is_legal":false,"execution_times":null}'},
    }[method]


@pytest.mark.parametrize("bad", WRONG_TYPES, ids=WRONG_TYPE_IDS)
@pytest.mark.parametrize("method, arg", [(m, a) for m, args in STR_ARGS for a in args])
def test_type_errors_name_method_and_argument(seeded, method, arg, bad):
    store, check = seeded
    args = _valid_args(method)
    args[arg] = bad
    with pytest.raises(TypeError) as e:
        getattr(store, method)(**args)
    got = TYPE_NAMES[WRONG_TYPE_IDS[WRONG_TYPES.index(bad)]]
    assert str(e.value) == f"TiraStore.{method}(): {arg} must be str, not {got}"
    check()


@pytest.mark.parametrize(
    "call, message",
    [
        # bytes, which JSON cannot carry: the library still names the argument
        (lambda s: s.lookup("blur", b"void f() {}", SCHED_R),
         "TiraStore.lookup(): program_source_code must be str, not bytes"),
        (lambda s: s.record("blur", SRC_BLUR, b"R(L0,comps=[c])", True, [1.0]),
         "TiraStore.record(): tiralib_schedule_string must be str, not bytes"),
        # int where a str is expected
        (lambda s: s.record(7, SRC_BLUR, SCHED_I, True, [1.0]),
         "TiraStore.record(): program_name must be str, not int"),
        (lambda s: s.lookup_many("blur", SRC_BLUR, [SCHED_R, 3]),
         "TiraStore.lookup_many(): schedules[1] must be str, not int"),
        # record's other arguments
        (lambda s: s.record("blur", SRC_BLUR, SCHED_I, 1, [1.0]),
         "TiraStore.record(): is_legal must be bool, not int"),
        (lambda s: s.record("blur", SRC_BLUR, SCHED_I, True, {1.0}),
         "TiraStore.record(): execution_times must be a list of numbers or None, not set"),
        (lambda s: s.record("blur", SRC_BLUR, SCHED_I, True, [1.0, 2j]),
         "TiraStore.record(): execution_times[1] must be int or float, not complex"),
        (lambda s: s.record("blur", SRC_BLUR, SCHED_I, True, [1.0], overwrite=b"yes"),
         "TiraStore.record(): overwrite must be bool, not bytes"),
        # entries of record_many
        (lambda s: s.record_many("blur", SRC_BLUR, [_ok(SCHED_I), b"entry"]),
         "TiraStore.record_many(): schedules[1] must be dict, not bytes"),
        (lambda s: s.record_many("blur", SRC_BLUR, [_ok(SCHED_I), {**_ok(), "tiralib_schedule_string": b"R(L0,comps=[c])"}]),
         "TiraStore.record_many(): schedules[1].tiralib_schedule_string must be str, not bytes"),
        (lambda s: s.record_many("blur", SRC_BLUR, [{**_ok(SCHED_I), "is_legal": "yes"}]),
         "TiraStore.record_many(): schedules[0].is_legal must be bool, not str"),
        (lambda s: s.record_many("blur", SRC_BLUR, [_ok(SCHED_I), {**_ok(), "execution_times": [1.0, b"2"]}]),
         "TiraStore.record_many(): schedules[1].execution_times[1] must be int or float, not bytes"),
        (lambda s: s.record_many("blur", SRC_BLUR, {"entries": 1}),
         "TiraStore.record_many(): schedules must be a list of dicts, not dict"),
        # a dict key JSON cannot write: reported by the binding, naming the argument
        (lambda s: s.record_many("blur", SRC_BLUR, [{**_ok(), ("a", "b"): 1}]),
         "TiraStore.record_many(): schedules: keys must be str, int, float, bool or None, not tuple"),
        # the other methods
        (lambda s: s.keys(limit="10"), "TiraStore.keys(): limit must be int, not str"),
        (lambda s: s.keys(offset=1.5), "TiraStore.keys(): offset must be int, not float"),
        (lambda s: s.export("out.json", fmt=b"json"), "TiraStore.export(): fmt must be str or None, not bytes"),
        (lambda s: s.export(5), "TiraStore.export(): output_path must be str or os.PathLike, not int"),
        (lambda s: s.backup(b"/tmp/x.db"), "TiraStore.backup(): backup_path must be str or os.PathLike[str], not bytes"),
        (lambda s: s.put("0" * 64, "0" * 64, SCHED_R, "{}", overwrite=object()),
         "TiraStore.put(): overwrite must be bool, not object"),
    ],
    ids=lambda x: "" if callable(x) else x.split(":")[0] + ":" + x.split(":")[1].split(" must")[0],
)
def test_type_error_messages(seeded, call, message):
    store, check = seeded
    with pytest.raises(TypeError) as e:
        call(store)
    assert str(e.value) == message
    check()


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"db_path": b"/tmp/x.db"}, "TiraStore(): db_path must be str or os.PathLike[str], not bytes"),
        ({"db_path": 3}, "TiraStore(): db_path must be str or os.PathLike, not int"),
        ({"source_project": b"p"}, "TiraStore(): source_project must be str or None, not bytes"),
        ({"cpu_model": 6248}, "TiraStore(): cpu_model must be str or None, not int"),
        ({"allow_cpu_mismatch": "yes"}, "TiraStore(): allow_cpu_mismatch must be bool, not str"),
        ({"stale_lock_timeout": "600"}, "TiraStore(): stale_lock_timeout must be float, not str"),
        ({"lock_timeout": [1]}, "TiraStore(): lock_timeout must be float, not list"),
    ],
    ids=lambda x: next(iter(x)) if isinstance(x, dict) else "",
)
def test_constructor_type_error_messages(tmp_path, kwargs, message):
    from tirastore import TiraStore

    kwargs = {"db_path": tmp_path / "cache.db", **kwargs}
    with pytest.raises(TypeError) as e:
        TiraStore(**kwargs)
    assert str(e.value) == message


def test_a_directory_as_the_database_path_says_a_file_is_expected(tmp_path):
    """TiraStore("some-dir") with a directory of the caller's: an
    IsADirectoryError saying a database file's path is expected (with an
    example), not the advice about files another user planted; nothing is
    created in it."""
    from tirastore import TiraStore

    d = tmp_path / "results"
    d.mkdir()
    for given in (d, f"{d}/"):
        with pytest.raises(IsADirectoryError, match="is a directory") as e:
            TiraStore(given)
        assert str(d / "cache.db") in str(e.value) and "planted" not in str(e.value)
    assert list(d.iterdir()) == []


@pytest.mark.parametrize("bad", ["(" * 200_000, "U(L0,4,comps=['c1'])|" + "Z" * 300_000, "S(L0," + "é" * 100_000 + ")"])
def test_a_huge_invalid_schedule_is_not_echoed_whole(seeded, bad):
    """The error of a megabyte-long invalid schedule quotes its beginning
    (the reason's first 300 characters, as the original's begins) and says
    how long the reason was, rather than repeating the input, twice for an
    unknown name. Control: a short invalid schedule's message is the
    original's reason whole."""
    from conftest import oracle_validate_schedule

    store, check = seeded
    with pytest.raises(ValueError) as e:
        store.record("blur", SRC_BLUR, bad, False)
    ok, reason = oracle_validate_schedule(bad)
    msg = str(e.value)
    assert not ok and len(msg) < 500, len(msg)
    assert msg.startswith("Invalid schedule string: " + reason[:250]), msg[:300]
    assert msg.endswith(f"... ({len(reason)} characters in all)"), msg[-80:]
    with pytest.raises(ValueError) as e:
        store.record("blur", SRC_BLUR, "Z(L0,comps=['c1'])", False)
    assert str(e.value) == "Invalid schedule string: " + oracle_validate_schedule("Z(L0,comps=['c1'])")[1]
    check()
