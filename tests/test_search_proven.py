"""What a plan says is proven: the period among repetends holding each block once, "not proven"
whenever a budget cut a solve, and the makespan next to a stated lower bound."""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from tessel_dsl.lang.parser import parse_file
from tessel_dsl.plan import SearchInfo, load_plan, make_plan, plan_from_json, plan_to_json
from tessel_dsl.search import driver
from tessel_dsl.search.bounds import makespan_bound
from tessel_dsl.search.driver import search
from tessel_dsl.search.optimal import optimal

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("n", [1, 3, 16])
def test_bound_is_the_1f1b_makespan_on_a_chain(n):
    spec = parse_file(ROOT / "specs/vshape.tsl")
    # V-shape: forward 1, backward 3 per stage (derive backward time 3x), D=4 as shipped.
    d = spec.devices
    assert makespan_bound(spec, n) == (n + d - 1) * 4


@pytest.mark.parametrize("name,n", [("mshape", 2), ("kshape", 3), ("xshape", 2)])
def test_bound_never_exceeds_the_optimum(name, n):
    spec = parse_file(ROOT / f"specs/{name}.tsl")
    best = optimal(spec, n, solver="cpsat", time_limit=60)
    assert best.info.proven
    assert makespan_bound(spec, n) <= best.schedule.makespan(spec)


def test_plan_states_the_bound_and_the_proven_period():
    spec = parse_file(ROOT / "specs/vshape.tsl")
    r = search(spec, microbatches=8)
    assert r.info.period_proven and r.info.copies == 1 and r.info.proven
    assert r.info.makespan_bound == makespan_bound(spec, 8) == r.schedule.makespan(spec)


def test_a_cut_budget_makes_the_plan_unproven(monkeypatch):
    spec = parse_file(ROOT / "specs/kshape.tsl")
    assert search(spec, microbatches=8).info.proven  # with the shipped budgets nothing is cut
    monkeypatch.setattr(driver, "COMPLETION_EFFORT", 1e-5)  # too little to prove the warmup optimal
    r = search(spec, microbatches=8)
    assert r.info.period_proven  # the period search itself was not cut
    assert not r.info.proven
    assert "not proven" in r.info.note and "the warmup" in r.info.note


def test_new_fields_round_trip_and_old_plans_load():
    spec = parse_file(ROOT / "specs/vshape.tsl")
    r = search(spec, microbatches=6)
    plan = make_plan(spec, r.schedule, r.info)
    data = plan_to_json(plan)
    assert data["search"]["makespan_bound"] == r.info.makespan_bound
    assert plan_from_json(json.loads(json.dumps(data))).search == plan.search
    for key in ("period_proven", "copies", "makespan_bound"):
        del data["search"][key]
    old = plan_from_json(data).search
    assert (old.period_proven, old.copies, old.makespan_bound) == (False, 1, 0)


def test_interleaved_d4_n8_reaches_its_optimum():
    # The makespan bound is 76 here, so reaching it proves the schedule time-optimal; the
    # separately solved warmup used to leave it at 78.
    spec = parse_file(ROOT / "specs/interleaved.tsl")
    r = search(spec, microbatches=8)
    assert r.schedule.makespan(spec) == r.info.makespan_bound == makespan_bound(spec, 8) == 76
