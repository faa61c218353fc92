"""A plan re-extended to another N is the same schedule for `simulate -n`, `run -n` and `compare -n`
(`search.finish.replan`): `run -n` used to extend the repetend alone, so it ran a schedule the
simulation never showed, longer where the finishing steps (a shorter baseline, the ends re-solved)
improve the plain extension."""
from __future__ import annotations

import builtins
import json
import sys

import pytest

from tessel_dsl.errors import TesselError
from tessel_dsl.lang.parser import parse_file
from tessel_dsl.plan import load_plan, make_plan, save_plan
from tessel_dsl.search.driver import search
from tessel_dsl.search.extend import extend
from tessel_dsl.simulator import simulate
from tests.helpers import run_cli
from tests.paths import SPECS


@pytest.fixture(scope="module")
def interleaved_plan(tmp_path_factory):
    """The searched plan of specs/interleaved.tsl for its N = 16, whose repetend extended plainly
    to N = 19 is longer than what the finishing steps make of it."""
    spec = parse_file(SPECS / "interleaved.tsl")
    result = search(spec)
    path = tmp_path_factory.mktemp("replan") / "interleaved.plan.json"
    save_plan(make_plan(spec, result.schedule, result.info), path)
    return path


def _slots(schedule):
    return sorted((s.block, s.mb, s.start) for s in schedule.slots)


def test_run_and_simulate_take_the_same_schedule_for_another_n(interleaved_plan):
    from tessel_dsl.cli.run import _plan_for
    from tessel_dsl.cli.simulate import load_source

    shown = load_source(interleaved_plan, microbatches=19, sets={}, mode=None, blocking=None)
    ran = _plan_for(interleaved_plan, None, 19, None)
    assert ran.schedule.microbatches == shown.schedule.microbatches == 19
    assert _slots(ran.schedule) == _slots(shown.schedule)
    assert ran.programs == shown.programs
    # The simulator, an independent replay of the programs, gives both the same makespan, and a
    # shorter one than the plain extension the run used to take.
    plan = load_plan(interleaved_plan)
    plain = make_plan(plan.spec, extend(plan.spec, plan.schedule, 19), plan.search)
    assert simulate(ran).makespan == simulate(shown).makespan < simulate(plain).makespan


def test_run_keeps_the_plans_mode_unless_told(interleaved_plan):
    from tessel_dsl.cli.run import _plan_for

    assert not any(p.blocking for p in _plan_for(interleaved_plan, None, 19, None).programs)
    assert all(p.blocking for p in _plan_for(interleaved_plan, None, 19, True).programs)


def test_compare_puts_the_plan_at_the_asked_n(interleaved_plan, capsys):
    from tessel_dsl.cli.simulate import load_source

    code, out, err = run_cli(capsys, "compare", str(interleaved_plan), "-n", "19", "-s", "gpipe", "--json")
    assert code == 0, err
    rows = {r["schedule"]: r for r in json.loads(out)[0]["rows"]}
    plan_row = next(r for name, r in rows.items() if name.startswith("plan:"))
    shown = load_source(interleaved_plan, microbatches=19, sets={}, mode=None, blocking=None)
    assert plan_row["microbatches"] == rows["gpipe"]["microbatches"] == 19
    assert plan_row["makespan"] == shown.schedule.makespan(shown.spec)


def test_without_ortools_another_n_is_refused_with_what_to_do(interleaved_plan, monkeypatch):
    from tessel_dsl.search.finish import replan

    real_import = builtins.__import__

    def no_ortools(name, *args, **kwargs):
        if name.startswith("ortools"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return real_import(name, *args, **kwargs)

    for key in [k for k in sys.modules if k.startswith("ortools")]:
        monkeypatch.delitem(sys.modules, key)
    monkeypatch.setattr(builtins, "__import__", no_ortools)
    with pytest.raises(TesselError, match=r"N=16 to N=19 .* OR-Tools, .*`tessel search <spec> -n 19`"):
        replan(load_plan(interleaved_plan), 19)
