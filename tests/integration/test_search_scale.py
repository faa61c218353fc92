"""The search at 8 devices, its fallbacks, and the per-N finishing steps (baselines, end re-solve)."""
from __future__ import annotations

import importlib

import pytest

from tessel_dsl.lang.parser import parse_file
from tessel_dsl.search.baselines import build
from tessel_dsl.search.baselines.chain import unfolded
from tessel_dsl.search.bounds import makespan_bound
from tessel_dsl.search.finish import reextend
from tessel_dsl.search.lockstep import NAME as LOCK_NAME
from tessel_dsl.search.modulo import cut_block, solve_period
from tessel_dsl.search.notes import render
from tessel_dsl.search.refine import best_baseline, refine_ends
from tessel_dsl.search.repetend import repetend_problem
from tessel_dsl.search.solvers import Objective, solve
from tessel_dsl.search.warmups import NAME as WARM_NAME
from tessel_dsl.validate import validate
from tests.helpers import vshape
from tests.paths import SPECS

search_mod = importlib.import_module("tessel_dsl.search.driver")
cyclic_nr_limit = importlib.import_module("tessel_dsl.search.period_walk").cyclic_nr_limit


def _spec(name: str, devices: int = 4, mode: str = "train"):
    return parse_file(SPECS / f"{name}.tsl", sets={"D": str(devices)}, mode=mode)


def test_mshape_d8_period_is_settled():
    # M=6 cannot hold the ~5 periods one micro-batch needs below P=10 with E/EB on every device.
    spec = _spec("mshape", 8)
    assert cut_block(spec) is not None
    limit = cyclic_nr_limit(spec)
    assert solve_period(spec, 9, limit, "cpsat", None)[0] == "infeasible"
    status, rep = solve_period(spec, 10, limit, "cpsat", None)
    assert status == "optimal" and rep.period == 10
    result = search_mod.search(spec, microbatches=16)
    assert result.info.period == 10 and result.info.period_proven
    validate(spec, result.schedule)
    # 1F1B+ (the only applicable baseline) repeats every 14.
    plus = build(spec, "1f1b+", 16)
    assert result.schedule.makespan(spec) < plus.makespan(spec)


def test_nnshape_d8_reaches_a_period_far_below_1f1b_plus():
    spec = _spec("nnshape", 8)
    result = search_mod.search(spec, microbatches=12, time_limit=120)
    validate(spec, result.schedule)
    assert result.info.period <= 12  # 1F1B+ repeats every 16, the serial repetend every 36
    assert max(result.schedule.peak_memory(spec)) <= spec.memory


def test_cyclic_feasibility_is_monotone_in_the_period():
    spec = _spec("nnshape", 4)
    limit = cyclic_nr_limit(spec)
    status, rep = solve_period(spec, 8, limit, "cpsat", None)
    assert status == "optimal"
    offsets = {s.block: s.mb for s in rep.slots}
    # The same offsets schedule at every longer period (windows stretch, lags only grow).
    for period in (9, 10, 13):
        assert solve(repetend_problem(spec, offsets, period), Objective.FEASIBLE, None).ok


def test_time_limit_never_returns_worse_than_the_baselines():
    spec = _spec("mshape", 8)
    result = search_mod.search(spec, microbatches=16, time_limit=0.01)
    validate(spec, result.schedule)
    assert not result.info.proven and render(result.info.notes)
    plus = build(spec, "1f1b+", 16)
    assert result.schedule.makespan(spec) <= plus.makespan(spec)
    assert result.schedule.repetend is not None  # still re-extendable
    bigger = reextend(spec, result.schedule, 24)
    validate(spec, bigger)


def test_best_baseline_only_when_strictly_shorter_and_within_memory():
    spec = _spec("mshape", 4)
    plus = build(spec, "1f1b+", 8)
    best, name = best_baseline(spec, 8, than=None)  # 1F1B+ with its warmups searched: shorter
    assert name == WARM_NAME and best.makespan(spec) < plus.makespan(spec) and best.fits_memory(spec)
    assert best_baseline(spec, 8, than=best.makespan(spec)) is None
    sched, name = best_baseline(spec, 8, than=best.makespan(spec) + 1)
    assert name == WARM_NAME and sched.makespan(spec) == best.makespan(spec)
    # K-shape as written has no chain, so no 1F1B applies and of the baselines only GPipe in waves,
    # which applies to any placement, is left; the lockstep play (`lockstep.py`) runs the towers'
    # stages between the all-device join and meets the makespan bound, so it is the plan in hand.
    # With its towers laid out one after the other, the 1F1B family applies too.
    kspec = _spec("kshape", 4)
    gpipe = build(kspec, "gpipe", 8)
    with unfolded():
        sched, name = best_baseline(kspec, 8, than=10 ** 6)
        assert name == LOCK_NAME and sched.makespan(kspec) == makespan_bound(kspec, 8) < gpipe.makespan(kspec)
        assert best_baseline(kspec, 8, than=sched.makespan(kspec)) is None
    sched, name = best_baseline(kspec, 8, than=10 ** 6)
    assert name != "gpipe" and sched.makespan(kspec) < gpipe.makespan(kspec) and sched.fits_memory(kspec)


# Up to refine.FULL_RESOLVE_TASKS instances the whole schedule is free, so the re-solve reaches the
# time-optimal makespan (interleaved: 76, which equals the makespan bound, so it is the optimum).
@pytest.mark.parametrize("name, n, optimum", [("interleaved", 8, 76), ("zerobubble", 8, 38)])
def test_end_resolve_reaches_the_optimum_at_small_n(name, n, optimum):
    spec = _spec(name, 4)
    parts_only = search_mod.search(spec, microbatches=n + 20, method="modulo")
    extended = importlib.import_module("tessel_dsl.search.extend").extend(spec, parts_only.schedule, n)
    assert extended.makespan(spec) > optimum  # the joins of warmup, repetend and cooldown leave gaps
    refined, better = refine_ends(spec, extended, solver="cpsat", time_limit=None)
    assert better and refined.makespan(spec) == optimum
    validate(spec, refined)
    assert refined.repetend == extended.repetend and refined.warmup == extended.warmup


def test_end_resolve_skips_the_solver_when_already_at_the_bound(monkeypatch):
    # 1F1B on a V-shape meets head + work + tail on the last device: nothing to re-solve.
    spec = vshape(devices=4, memory=4, fwd=1, bwd=3, microbatches=8)
    sched = build(spec, "1f1b", 8)
    from tessel_dsl.search import refine

    monkeypatch.setattr(refine, "solve", lambda *a, **k: pytest.fail("solver called"))
    assert refine_ends(spec, sched, solver="cpsat", time_limit=None) == (sched, False)


def test_search_result_at_small_n_is_pinned_to_the_optimum():
    # The repetend joins leave 88, memory-aware interleaved 1F1B's order 85; the end re-solve (the
    # whole schedule free at this size) brings it to 76, which meets the makespan lower bound, so
    # it is the optimum, not just a good schedule.
    spec = _spec("interleaved", 4)
    result = search_mod.search(spec, microbatches=8)
    validate(spec, result.schedule)
    assert result.schedule.makespan(spec) == 76
    said = {x.kind: x.values for x in result.info.notes}
    assert said["baseline-beats"] == {"baseline": "interleaved-1f1b", "n": 8, "makespan": 85, "extended": 88}
    assert said["ends-resolved"] == {"n": 8, "before": 85, "after": 76}
    assert result.info.makespan_bound == 76


def test_reextend_keeps_vshape_at_the_1f1b_optimum():
    spec = vshape(devices=4, memory=4, fwd=1, bwd=3, microbatches=4)
    result = search_mod.search(spec)
    for n in (4, 5, 9, 20):
        sched = reextend(spec, result.schedule, n)
        assert sched.makespan(spec) == (n + 3) * 4
        validate(spec, sched)
