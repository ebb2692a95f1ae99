"""A stand-in for TiraLib's ``Schedule`` and ``TiramisuProgram``, for
running examples/tiralib_worker.py (and the tests) without a Tiramisu
build.

Its public signatures are TiraLib's: ``Schedule(tiramisu_program)``,
``add_optimizations(list_optim_cmds)``, ``execute(min_runs=1, max_runs=None,
time_budget=None, delete_files=True)`` (``time_budget`` in milliseconds),
``is_legal(with_ast=False)``, ``str()`` joining the actions with "|"; a
program has ``name``, ``cpp_code`` and TiraLib's per-process
``temp_files_identifier`` (the name with a random suffix, written into
``cpp_code`` as TiraLib's ``load_code_lines`` does). Actions are their
TiraLib strings. Instead of compiling, it decides legality from the
schedule's text, and instead of running, it sleeps for a simulated time:
a measurement costs real time, as it does on a cluster, and a schedule
whose simulated run is longer than ``time_budget`` returns no time, as
TiraLib does when its budget runs out before the first run.
"""

from __future__ import annotations

import hashlib
import random
import string
import time
from typing import List, Optional

SOURCE_TEMPLATE = """#include <tiramisu/tiramisu.h>
#include "{name}_wrapper.h"
using namespace tiramisu;
int main(int argc, char **argv) {{
    tiramisu::init("{name}");
    constant N("N", 1024);
    var i("i", 0, N), j("j", 0, N);
    input A("A", {{i, j}}, p_float64);
    computation comp00("comp00", {{i, j}}, A(i, j) * 2);
    buffer b_A("b_A", {{N, N}}, p_float64, a_input);
    A.store_in(&b_A);
    tiramisu::codegen({{&b_A}}, "{name}.o");
    return 0;
}}
"""


class TiramisuProgram:
    """A program as TiraLib loads one: ``name``, ``cpp_code`` (with this
    instance's temporary file names) and ``temp_files_identifier``."""

    def __init__(self) -> None:
        self.name: str = ""
        self.cpp_code: str = ""
        self.temp_files_identifier: str = ""
        self.server = None

    @classmethod
    def from_name(cls, name: str) -> "TiramisuProgram":
        p = cls()
        p.name = name
        p.temp_files_identifier = name + "_" + "".join(random.choices(string.ascii_letters + string.digits, k=5))
        code = SOURCE_TEMPLATE.format(name=name)
        # What TiraLib's load_code_lines does to the code it keeps.
        code = code.replace(f'#include "{name}_wrapper.h"', f'// #include "{p.temp_files_identifier}_wrapper.h"')
        p.cpp_code = code.replace(f'"{name}.o"', f'"./{p.temp_files_identifier}.o"')
        return p


def _unit(text: str, salt: str) -> float:
    """A number in [0, 1) fixed by text: the same on every worker."""
    return int(hashlib.sha256((salt + text).encode()).hexdigest()[:8], 16) / 2**32


class Schedule:
    """TiraLib's Schedule, with simulated legality checks and runs."""

    #: Seconds a simulated run takes, at most (scaled by the schedule's text).
    run_seconds = 0.2
    #: The share of schedules that are illegal.
    illegal_share = 0.2

    def __init__(self, tiramisu_program: TiramisuProgram) -> None:
        self.tiramisu_program = tiramisu_program
        self.optims_list: List[str] = []
        self.legality: Optional[bool] = None
        self.executions = 0  # measurements this instance made (for the example's report)

    def add_optimizations(self, list_optim_cmds: List[str]) -> None:
        self.legality = None
        self.optims_list.extend(list_optim_cmds)

    def is_legal(self, with_ast: bool = False) -> bool:
        time.sleep(self.run_seconds / 4)  # a legality check compiles
        self.legality = _unit(str(self), "legality") >= self.illegal_share
        return self.legality

    def execute(
        self,
        min_runs: int = 1,
        max_runs: Optional[int] = None,
        time_budget: Optional[float] = None,
        delete_files: bool = True,
    ) -> List[float]:
        assert min_runs >= 0, "min_runs must be non-negative"
        if not (time_budget and time_budget > 0):
            assert min_runs > 0, "Without a time_budget, min_runs must be > 0"
            assert max_runs is None, "max_runs is ignored without a time_budget (ambiguous); set it to None"
        if self.legality is None and self.optims_list:
            self.is_legal()
        if self.legality is False:
            raise Exception("Schedule is not legal")
        self.executions += 1
        one_run = self.run_seconds * (0.2 + _unit(str(self), "speed"))
        runs = min_runs
        if time_budget and time_budget > 0:
            budget = time_budget / 1000.0
            if one_run > budget and min_runs == 0:
                time.sleep(budget)
                return []  # TiraLib: the budget ran out before the first run
            runs = max(min_runs, min(max_runs or 10**9, int(budget // one_run)))
        jitter = random.Random(str(self))
        times = []
        for _ in range(runs):
            time.sleep(one_run)
            times.append(round(one_run * 1000 * (1 + 0.01 * jitter.random()), 4))  # milliseconds, as TiraLib prints
        return times

    def __str__(self) -> str:
        return "|".join(self.optims_list)

    def __repr__(self) -> str:
        return self.__str__()
