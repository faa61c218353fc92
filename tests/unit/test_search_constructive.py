"""The search's solver-free path: a modulo-list repetend at the period lower bound, returned only
when its schedule reaches the makespan bound (search/construct.py)."""
from __future__ import annotations

import subprocess
import sys

import pytest

from tessel_dsl.analysis import lower_bound
from tessel_dsl.lang.parser import parse_file
from tessel_dsl.search.bounds import makespan_bound
from tessel_dsl.search.construct import bound_reaching_schedule, modulo_list_repetend
from tessel_dsl.search.driver import search
from tessel_dsl.search.extend import Parts, extend
from tessel_dsl.search.finish import reextend
from tessel_dsl.validate import validate
from tests.paths import ROOT, SPECS

PROBE = """
import sys
from tessel_dsl.lang.parser import parse_file
from tessel_dsl.search.driver import search
r = search(parse_file({path!r}), microbatches=8)
print(r.info.method, r.info.proven, 'ortools' in sys.modules)
"""


def _probe(name: str) -> str:
    code = PROBE.format(path=str(SPECS / f"{name}.tsl"))
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip().splitlines()[-1]


@pytest.mark.parametrize("name", ["vshape", "mshape", "nnshape", "kshape"])
def test_bound_reaching_schedules_need_no_solver(name):
    # OR-Tools is not even imported: nothing was left to prove.
    assert _probe(name) == "constructive True False"
    spec = parse_file(SPECS / f"{name}.tsl")
    r = search(spec, microbatches=8)
    validate(spec, r.schedule)  # the independent validator: dependencies, devices, memory
    assert r.info.period == lower_bound(spec) and r.info.period_proven
    assert r.schedule.makespan(spec) == r.info.makespan_bound == makespan_bound(spec, 8)
    assert r.info.proven and r.info.solver == "none" and [x.kind for x in r.info.notes] == ["constructive"]


def test_a_construction_that_breaks_memory_is_not_used():
    # M-shape at D=8 with M=6: the flat list schedule keeps more micro-batches in flight on
    # device 0 than M allows; the validator rejects its extension, and the search solves instead.
    spec = parse_file(ROOT / "specs/mshape.tsl", sets={"D": "8"})
    built = modulo_list_repetend(spec, lower_bound(spec))
    assert built is not None
    with pytest.raises(Exception, match="memory"):
        extend(spec, Parts(built[1], built[0], built[2]), 16)
    assert bound_reaching_schedule(spec, 16) is None


def test_the_constructive_plan_re_extends_to_other_n():
    spec = parse_file(ROOT / "specs/kshape.tsl")
    r = search(spec, microbatches=8)
    assert r.info.method == "constructive"
    for n in (r.schedule.repetend.nr, 16, 33):
        s = reextend(spec, r.schedule, n)
        validate(spec, s)
        assert s.makespan(spec) == makespan_bound(spec, n)


def test_a_named_method_always_runs_the_solver():
    spec = parse_file(ROOT / "specs/vshape.tsl")
    r = search(spec, microbatches=8, method="modulo")
    assert r.info.method == "modulo" and r.schedule.makespan(spec) == makespan_bound(spec, 8)
