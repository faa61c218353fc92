"""What a plan says is proven: the period among repetends holding each block once, "not proven"
whenever a budget cut a solve, and the makespan next to a stated lower bound."""
from __future__ import annotations

import json

import pytest

from tessel_dsl.lang.parser import parse_file
from tessel_dsl.plan import make_plan, plan_from_json, plan_to_json
from tessel_dsl.search import driver
from tessel_dsl.search.bounds import makespan_bound
from tessel_dsl.search.driver import search
from tessel_dsl.search.notes import render
from tessel_dsl.search.optimal import optimal
from tests.paths import ROOT


@pytest.mark.parametrize("n", [1, 3, 16])
def test_bound_is_the_1f1b_makespan_on_a_chain(n):
    spec = parse_file(ROOT / "specs/vshape.tsl")
    # V-shape: forward 1, backward 3 per stage (derive backward time 3x), D=4 as shipped.
    d = spec.devices
    assert makespan_bound(spec, n) == (n + d - 1) * 4


@pytest.mark.parametrize("name,n", [("mshape", 2), ("kshape", 3), ("xshape", 2), ("nnshape", 2)])
def test_bound_never_exceeds_the_optimum(name, n):
    spec = parse_file(ROOT / f"specs/{name}.tsl")
    best = optimal(spec, n, solver="cpsat", time_limit=60)
    assert best.info.proven
    assert makespan_bound(spec, n) <= best.schedule.makespan(spec)


@pytest.mark.parametrize("name,n,plain", [("mshape", 2, 18), ("mshape", 3, 18), ("nnshape", 2, 22)])
def test_all_device_blocks_sharpen_the_bound_to_the_optimum(name, n, plain):
    # M-shape D=4, device 3 runs F3 (1) and B3 (3) per micro-batch and the all-device E and EB (1
    # each): work 6n. Before its first F3, E -> F0 -> F1 -> F2 runs, and device 3 can fill only E's
    # unit (E of another micro-batch would need devices 0-2 too); after its last B3 it idles through
    # B2, B1, B0 (9). So 3 + 6n + 9, which TO reaches; head + work + tail with the all-device
    # blocks counted as fillers gives only the critical path (`plain`, 18 for M-shape).
    # NN-shape: 3 + 8n + 9 the same way (its embeddings E2 / E2B sit inside the chains).
    spec = parse_file(ROOT / f"specs/{name}.tsl")
    per_mb = {"mshape": 6, "nnshape": 8}[name]
    assert makespan_bound(spec, n) == 3 + per_mb * n + 9 > plain
    best = optimal(spec, n, solver="cpsat", time_limit=60)
    assert best.info.proven and best.schedule.makespan(spec) == makespan_bound(spec, n)


@pytest.mark.parametrize("name,span", [("mshape", 60), ("nnshape", 76)])
def test_reaching_the_sharper_bound_proves_the_schedule(name, span):
    # N=8: the searched schedule meets the bound, so it is time-optimal and no budgeted end
    # re-solve has anything left to find (the plan says proven, with no cut).
    spec = parse_file(ROOT / f"specs/{name}.tsl")
    r = search(spec, microbatches=8)
    assert r.schedule.makespan(spec) == r.info.makespan_bound == span
    assert r.info.proven and "not proven" not in render(r.info.notes)


def test_plan_states_the_bound_and_the_proven_period():
    spec = parse_file(ROOT / "specs/vshape.tsl")
    r = search(spec, microbatches=8)
    assert r.info.period_proven and r.info.copies == 1 and r.info.proven
    assert r.info.makespan_bound == makespan_bound(spec, 8) == r.schedule.makespan(spec)


def test_a_cut_budget_makes_the_plan_unproven(monkeypatch):
    # The solver-based search (a method named), not the constructive schedule `auto` returns. On
    # zero-bubble N=8 the best makespan found (38) is above the analytic makespan bound (35), so
    # only the solves themselves can prove it -- once the one-device relaxation and the whole
    # schedule with memory as cuts, which each prove 38 shortest by themselves, are out of the way.
    spec = parse_file(ROOT / "specs/zerobubble.tsl")
    assert makespan_bound(spec, 8) == 35 and makespan_bound(spec, 8, above=38) == 38
    from tessel_dsl.search import bounds, devrelax, heldcuts
    monkeypatch.setattr(bounds, "_LAST", [])
    monkeypatch.setattr(devrelax, "device_relaxation", lambda spec, n: (0, None))
    monkeypatch.setattr(heldcuts, "CUT_MAX_INSTANCES", 0)
    assert search(spec, microbatches=8, method="modulo").info.proven  # with the shipped budgets nothing is cut
    monkeypatch.setattr(driver, "COMPLETION_EFFORT", 1e-5)  # too little to prove the warmup optimal
    # ... and to the end re-solve, which would otherwise prove the whole schedule shortest anyway
    from tessel_dsl.search import refine
    monkeypatch.setitem(refine.refine_ends.__kwdefaults__, "effort", 1e-5)
    r = search(spec, microbatches=8, method="modulo")
    assert r.schedule.makespan(spec) > makespan_bound(spec, 8)
    assert r.info.period_proven  # the period search itself was not cut
    assert not r.info.proven
    assert "not proven" in render(r.info.notes) and "the warmup" in render(r.info.notes)


def test_a_cut_budget_does_not_unprove_a_schedule_at_the_makespan_bound(monkeypatch):
    # The same cut on K-shape: the schedule still reaches the makespan bound (52), which no schedule
    # of 8 micro-batches can beat, so it is optimal whatever the cut solve could have found.
    spec = parse_file(ROOT / "specs/kshape.tsl")
    monkeypatch.setattr(driver, "COMPLETION_EFFORT", 1e-5)
    r = search(spec, microbatches=8, method="modulo")
    assert r.schedule.makespan(spec) == makespan_bound(spec, 8) == 52
    assert r.info.proven and "not proven" not in render(r.info.notes)
    assert "lower bound" in render(r.info.notes) and "the warmup" in render(r.info.notes)


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


def test_an_end_re_solve_cut_by_its_budget_proves_nothing(monkeypatch):
    from tessel_dsl.search import refine

    spec = parse_file(ROOT / "specs/xshape.tsl")
    monkeypatch.setitem(refine.refine_ends.__kwdefaults__, "effort", 1e-5)  # the driver passes no effort
    r = search(spec, microbatches=4)
    assert r.schedule.makespan(spec) >= 38
    assert not r.info.proven and "not proven" in render(r.info.notes) and "the end re-solve" in render(r.info.notes)
