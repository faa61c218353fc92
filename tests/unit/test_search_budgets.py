"""No solve on the search path is unbounded: each has a deterministic budget, and a solve cut by it
leaves a valid plan that says what was cut (zero-bubble's ZB-V placement at D=8 and N=16 ran
for more than 10 minutes in an unbudgeted direct solve and completion checks)."""
from __future__ import annotations

import importlib

import pytest

from tessel_dsl import validate
from tessel_dsl.lang.parser import parse_file
from tessel_dsl.plan import make_plan, plan_to_json
from tessel_dsl.search.driver import search
from tessel_dsl.search.notes import render
from tests.helpers import loose_bounds
from tests.paths import SPECS

direct_mod = importlib.import_module("tessel_dsl.search.direct")
driver = importlib.import_module("tessel_dsl.search.driver")


def _instances(spec, n):
    return sorted((b.name, m) for m in range(n) for b in spec.blocks)


def _cut_direct(monkeypatch) -> None:
    """A direct solve with no budget, and nothing after it that would prove the plan anyway: the
    stated bound (loosened) and the finishing step's whole re-solve (off, as on a large spec)."""
    monkeypatch.setattr(direct_mod, "DIRECT_MIN_EFFORT", 0.0)
    monkeypatch.setattr(direct_mod, "DIRECT_EFFORT_PER_TASK", 0.0)
    loose_bounds(monkeypatch)
    monkeypatch.setattr(importlib.import_module("tessel_dsl.search.refine"), "REFINE_MAX_TASKS", 0)


def _interleaved():
    return parse_file(SPECS / "interleaved.tsl")  # D=4: N_R=4, so N=3 is solved directly


def test_a_cut_direct_solve_leaves_a_valid_plan_that_says_so(monkeypatch):
    spec, n = _interleaved(), 3
    whole = search(spec, microbatches=n)
    assert whole.info.proven and whole.info.nr > n  # with its budget the direct solve settles this one
    optimum = whole.schedule.makespan(spec)
    _cut_direct(monkeypatch)
    cut = search(spec, microbatches=n)
    sched = cut.schedule
    validate(spec, sched)
    assert sched.fits_memory(spec)
    assert sorted((s.block, s.mb) for s in sched.slots) == _instances(spec, n)
    assert not cut.info.proven
    assert "not proven" in render(cut.info.notes) and f"the direct solve of N={n}" in render(cut.info.notes)
    assert sched.makespan(spec) >= optimum


def test_a_direct_solve_with_no_budget_and_nothing_to_start_from_says_so():
    spec = _interleaved()
    with pytest.raises(direct_mod.DirectCut, match="budget"):
        direct_mod.direct(spec, 3, "cpsat", None, effort=0.0)


def test_a_cut_direct_solve_is_the_same_twice():
    # A budget small enough to stop the solve part-way, with a schedule found but not proven:
    # what comes back must not depend on the run (deterministic time, one worker, a fixed seed).
    spec = parse_file(SPECS / "nnshape.tsl", sets={"D": "8"})
    first = direct_mod.direct(spec, 6, "cpsat", None, effort=0.2)
    second = direct_mod.direct(spec, 6, "cpsat", None, effort=0.2)
    assert not first[1]
    assert first == second


def test_a_cut_search_is_the_same_plan_twice(monkeypatch):
    spec, n = _interleaved(), 3
    _cut_direct(monkeypatch)
    first, second = search(spec, microbatches=n), search(spec, microbatches=n)
    assert not first.info.proven

    def plan(result) -> dict:
        data = plan_to_json(make_plan(spec, result.schedule, result.info))
        data["search"].pop("seconds")
        return data

    assert plan(first) == plan(second)


def test_every_cpsat_solve_of_a_search_has_a_deterministic_budget(monkeypatch):
    """Below N_R (direct solve) and above it (completion, end re-solve), no CP-SAT call runs without
    a deterministic-time limit."""
    from ortools.sat.python import cp_model

    seen = []
    original = cp_model.CpSolver.solve

    def spy(self, *args, **kwargs):
        seen.append(self.parameters.max_deterministic_time)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(cp_model.CpSolver, "solve", spy)
    spec = _interleaved()
    for n in (3, 8):
        search(spec, microbatches=n, solver="cpsat")
    assert len(seen) >= 6
    assert all(t < float("inf") for t in seen), seen


@pytest.mark.parametrize("name", ["kshape", "interleaved", "mshape"])
def test_periodic_warmup_and_cooldown_complete_the_repetend(name):
    """The warmup and cooldown read off the periodic schedule, joined with the repetend by the
    extension, give a schedule the independent validator accepts, for several N."""
    from tessel_dsl.search.extend import Parts, extend
    from tessel_dsl.search.periodic import periodic_cooldown, periodic_warmup

    spec = parse_file(SPECS / f"{name}.tsl")
    rep = search(spec, microbatches=8).schedule.repetend
    warm, cool = periodic_warmup(spec, rep), periodic_cooldown(spec, rep)
    assert warm is not None and cool is not None
    assert sorted((s.block, s.mb) for s in warm.slots) == sorted(
        (s.block, m) for s in rep.slots for m in range(s.mb))
    assert sorted((s.block, s.mb) for s in cool.slots) == sorted(
        (s.block, m) for s in rep.slots for m in range(s.mb + 1, rep.nr))
    for n in (rep.nr, rep.nr + 3):
        sched = extend(spec, Parts(warm.slots, rep, cool.slots), n)
        validate(spec, sched)
        assert sorted((s.block, s.mb) for s in sched.slots) == _instances(spec, n)


def test_the_completion_check_needs_no_solver_when_the_periodic_ends_hold(monkeypatch):
    completion = importlib.import_module("tessel_dsl.search.completion")
    calls = []
    for fn in ("solve_warmup", "solve_cooldown"):
        original = getattr(completion, fn)

        def spy(*args, _original=original, **kwargs):
            calls.append(kwargs.get("objective"))
            return _original(*args, **kwargs)

        monkeypatch.setattr(completion, fn, spy)
    monkeypatch.setattr(driver, "solve_warmup", completion.solve_warmup)
    monkeypatch.setattr(driver, "solve_cooldown", completion.solve_cooldown)
    spec = parse_file(SPECS / "kshape.tsl")
    search(spec, microbatches=8, method="modulo")  # the solver path (not the constructive one)
    # Only the two optimising completion solves ran; no satisfiability check did.
    assert len(calls) == 2 and all(c is None for c in calls)


def test_an_undecided_completion_check_leaves_the_period_open(monkeypatch):
    """When neither the periodic ends nor a (zero) budget settle whether a repetend can be
    completed, the period stays open: the search ends with a valid plan, not proven."""
    periodic = importlib.import_module("tessel_dsl.search.periodic")
    monkeypatch.setattr(periodic, "periodic_warmup", lambda spec, rep: None)
    monkeypatch.setattr(periodic, "periodic_cooldown", lambda spec, rep: None)
    findrep = importlib.import_module("tessel_dsl.search.findrep")
    monkeypatch.setattr(findrep, "ACCEPT_EFFORT", 0.0)
    # (and no list-scheduled repetend, whose own warmup and cooldown would settle it: test_listrep.py)
    monkeypatch.setattr(findrep, "list_repetend", lambda *args: None)
    spec = parse_file(SPECS / "vshape.tsl")
    result = search(spec, microbatches=8, method="modulo")
    validate(spec, result.schedule)
    assert not result.info.proven and not result.info.period_proven
    assert "not settled" in render(result.info.notes) or "were settled" in render(result.info.notes)
