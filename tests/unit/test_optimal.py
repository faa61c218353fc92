"""TO, the time-optimal full solve: proven optima on tiny cases, and nothing beats it."""
from __future__ import annotations

import pytest

from tessel_dsl.errors import InfeasibleError, TesselError
from tessel_dsl.search.baselines import build
from tessel_dsl.search.notes import render
from tessel_dsl.search.optimal import OptimalTimeout, optimal
from tessel_dsl.validate import validate
from tests.unit.test_baselines import kshape, mshape, nnshape, vshape, xshape


@pytest.mark.parametrize("solver", ["cpsat", "z3"])
@pytest.mark.parametrize("d,n", [(2, 2), (2, 3), (3, 2), (3, 3)])
def test_vshape_optimum_is_the_1f1b_formula(solver, d, n):
    spec = vshape(d=d, n=n)
    r = optimal(spec, solver=solver, time_limit=60)
    assert r.info.proven and r.info.method == "to" and r.info.solver == solver
    assert r.schedule.makespan(spec) == (n + d - 1) * (1 + 3)
    assert r.schedule.name == "to"
    validate(spec, r.schedule)


def test_to_runs_each_block_in_microbatch_order():
    spec = mshape(n=3)
    r = optimal(spec, time_limit=60)
    for b in spec.blocks:
        starts = [s.start for s in sorted(r.schedule.slots, key=lambda s: s.mb) if s.block == b.name]
        assert starts == sorted(starts)


# The baselines that apply to each small shape (and fit its memory, GPipe included); any other
# baseline must refuse, so a wrong refusal cannot pass as "nothing to compare".
@pytest.mark.parametrize("shape,n,applicable", [
    (vshape, 4, ("1f1b", "1f1b+", "gpipe")),
    (mshape, 4, ("1f1b+", "gpipe")),
    (nnshape, 3, ("1f1b+", "gpipe")),
    (kshape, 3, ("gpipe", "1f1b+")),  # 1F1B+ on the towers laid out one after the other
    (xshape, 2, ("chimera", "gpipe")),
], ids=lambda x: getattr(x, "__name__", None))
def test_no_valid_schedule_beats_to(shape, n, applicable):
    from tessel_dsl.search.baselines import NotApplicable

    spec = shape(n=n)
    r = optimal(spec, time_limit=60)
    assert r.info.proven
    validate(spec, r.schedule)
    best = r.schedule.makespan(spec)
    for name in ("1f1b", "1f1b+", "chimera", "gpipe"):
        if name not in applicable:
            with pytest.raises(NotApplicable):
                build(spec, name)
            continue
        s = build(spec, name)
        validate(spec, s)  # within memory too: a valid schedule TO must not lose to
        assert s.makespan(spec) >= best, name


@pytest.mark.parametrize("shape,n", [(vshape, 4), (mshape, 3), (kshape, 3)], ids=["V", "M", "K"])
def test_tessel_is_never_shorter_than_to(shape, n):
    search = pytest.importorskip("tessel_dsl.search.driver")
    spec = shape(n=n)
    r = optimal(spec, time_limit=60)
    assert r.info.proven
    t = search.search(spec, microbatches=n, time_limit=120)
    assert t.schedule.makespan(spec) >= r.schedule.makespan(spec)


def test_hint_seeds_and_bounds_the_solve():
    spec = vshape(d=3, n=4)
    hint = build(spec, "1f1b")
    r = optimal(spec, hint=hint, time_limit=60)
    assert r.info.proven and r.schedule.makespan(spec) == hint.makespan(spec)
    with pytest.raises(TesselError, match="hint has 4 micro-batches, expected 5"):
        optimal(spec, 5, hint=hint)


def test_memory_below_one_microbatch_is_infeasible():
    with pytest.raises(InfeasibleError, match="below the 2 units one micro-batch needs"):
        optimal(kshape(n=2, m=1))


def test_too_short_a_time_limit_is_reported_not_hidden():
    spec = mshape(n=10)
    try:
        r = optimal(spec, time_limit=0.05)
    except OptimalTimeout as e:
        assert "within the time limit (0.05 s)" in str(e)
    else:
        assert not r.info.proven and "not proven" in render(r.info.notes)
        validate(spec, r.schedule)


def test_bad_arguments():
    with pytest.raises(TesselError, match="at least 1 micro-batch"):
        optimal(vshape(), 0)
    with pytest.raises(TesselError, match="unknown solver"):
        optimal(vshape(), solver="gurobi")


def test_hint_is_the_fallback_when_the_limit_is_too_short():
    spec = mshape(n=12)
    hint = build(spec, "1f1b+")
    r = optimal(spec, hint=hint, time_limit=0.01)
    assert r.schedule.makespan(spec) <= hint.makespan(spec)
    assert not r.info.proven
    validate(spec, r.schedule)


@pytest.mark.parametrize("d,n", [(2, 3), (3, 4)])
def test_a_proven_to_states_its_makespan_as_its_bound(d, n):
    spec = vshape(d=d, n=n)
    r = optimal(spec, time_limit=60)
    assert r.info.proven and r.info.makespan_bound == r.schedule.makespan(spec) == (n + d - 1) * (1 + 3)


def test_an_unproven_to_states_a_bound_below_the_optimum():
    spec = mshape(n=6)
    best = optimal(spec, effort=None).schedule.makespan(spec)  # proven: 48
    cut = optimal(spec, effort=0.01)
    assert not cut.info.proven and cut.schedule.makespan(spec) > best
    assert 0 < cut.info.makespan_bound <= best


def test_cpsat_reports_the_makespan_bound_it_proved():
    from tessel_dsl.search.solvers import Precedence, Problem, Task, solve

    # A two-machine flow shop: Johnson's rule runs b (4 <= 5) before a (3 > 2): device 1 idles
    # 4, then runs b's 5 and a's 2, so 11; the other order ends at 3 + 4 + 5 = 12.
    tasks = (Task("a0", 3, (0,)), Task("a1", 2, (1,)), Task("b0", 4, (0,)), Task("b1", 5, (1,)))
    sol = solve(Problem(tasks, (Precedence(0, 1), Precedence(2, 3)), devices=2), "makespan")
    assert sol.proven and sol.objective == sol.bound == 11


def test_a_solver_stopped_short_of_its_budget_was_stopped_by_the_wall_clock(monkeypatch):
    # CP-SAT can stop at its wall-clock limit a hair before our own clock reads it; what it says
    # it spent of its deterministic budget tells the two limits apart, not our clock alone.
    from tessel_dsl.search import solvers as mod
    from tessel_dsl.search.solvers.problem import Solution

    monkeypatch.setattr(mod, "solve", lambda *a, **k: Solution("unknown", deterministic=0.01))
    with pytest.raises(OptimalTimeout, match=r"within the time limit \(30 s\)"):
        optimal(vshape(), 4, time_limit=30, effort=60)
    monkeypatch.setattr(mod, "solve", lambda *a, **k: Solution("unknown", deterministic=60.2))
    with pytest.raises(OptimalTimeout, match=r"within the solver budget \(effort 60\)"):
        optimal(vshape(), 4, time_limit=30, effort=60)
