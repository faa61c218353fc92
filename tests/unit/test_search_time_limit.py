"""A wall-clock limit that has already run out (`time_limit=0`): the search leaves out its costly
steps (counted here by wrapping them, never timed), still returns a validated schedule no longer
than the baselines, says in its notes what the limit cut, and leaves nothing behind that a later
search without a limit would reuse."""
from __future__ import annotations

import importlib

import pytest

from tessel_dsl.lang.parser import parse_file
from tessel_dsl.search.baselines import build
from tessel_dsl.search.clock import Clock
from tessel_dsl.search.inflight import NAME, searched_capped
from tessel_dsl.search.notes import render
from tessel_dsl.search.refine import best_baseline
from tessel_dsl.validate import validate
from tests.paths import SPECS
from tests.unit.test_membound import chain

driver = importlib.import_module("tessel_dsl.search.driver")


def _count(monkeypatch, module, name: str) -> list[int]:
    """Wrap `module.name` so that each call is counted (the length of the list returned)."""
    calls: list[int] = []
    real = getattr(module, name)

    def counted(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, counted)
    return calls


def _forbid(monkeypatch, module, name: str) -> None:
    monkeypatch.setattr(module, name, lambda *a, **k: pytest.fail(f"{module.__name__}.{name} entered"))


def _memory_bound_chain():
    # 8 stages, two micro-batches fit per device: lower in-flight limits than memory allows give 255
    # where the memory-capped 1F1B gives 264 (test_search_inflight.py).
    return chain([3, 2, 3, 2, 3, 2, 3, 2], 2, n=8)


def test_the_in_flight_descent_stops_once_the_limit_has_run_out(monkeypatch):
    spec = _memory_bound_chain()
    plays = _count(monkeypatch, importlib.import_module("tessel_dsl.search.baselines.capped"), "_play")
    assert searched_capped(spec, 8) is not None
    assert len(plays) > 10  # without a limit the descent plays out many limits
    plays.clear()
    clock = Clock(0.0)
    # Only the baseline's own limits are played: nothing shorter is found, so nothing comes back.
    assert searched_capped(spec, 8, clock=clock) is None
    assert len(plays) == 1 and clock.skipped == ["the in-flight limit descent"]


def test_a_cut_descent_is_not_reused_without_a_limit():
    spec = _memory_bound_chain()
    capped = build(spec, "1f1b-capped", 8)
    sched, name = best_baseline(spec, 8, than=None, clock=Clock(0.0))
    assert name == "1f1b-capped" and sched.makespan(spec) == capped.makespan(spec) == 264
    # The same spec and N again, with no limit: built in full, as if the cut one never was.
    sched, name = best_baseline(spec, 8, than=None)
    assert name == NAME and sched.makespan(spec) == 255


def test_search_with_an_expired_limit_skips_its_costly_steps(monkeypatch):
    spec = parse_file(SPECS / "mshape.tsl", sets={"D": "8"})
    # What the search would spend its time on: the period walk's cyclic solves, the end re-solve.
    _forbid(monkeypatch, importlib.import_module("tessel_dsl.search.modulo"), "solve_period")
    refine = importlib.import_module("tessel_dsl.search.refine")
    _forbid(monkeypatch, refine, "solve")
    _forbid(monkeypatch, refine, "_solve_whole")
    solves = _count(monkeypatch, importlib.import_module("tessel_dsl.search.solvers.cpsat"), "solve")
    result = driver.search(spec, microbatches=16, time_limit=0)
    assert len(solves) == 1  # the one-micro-batch repetend, the cheapest valid one
    validate(spec, result.schedule)
    assert result.schedule.makespan(spec) <= build(spec, "1f1b+", 16).makespan(spec)
    assert result.schedule.repetend is not None and not result.info.proven
    said = render(result.info.notes)
    assert "time limit reached" in said and "the end re-solve for N=16 (no time left)" in said


def test_an_expired_limit_skips_the_descent_and_the_k_copy_search(monkeypatch):
    spec = _memory_bound_chain()
    plays = _count(monkeypatch, importlib.import_module("tessel_dsl.search.baselines.capped"), "_play")
    chains = _count(monkeypatch, importlib.import_module("tessel_dsl.search.chaincycle"), "chain_period_search")
    unlimited = driver.search(spec, microbatches=16)
    assert len(chains) > 0 and len(plays) > 10  # without a limit both run
    plays.clear()
    chains.clear()
    spec = _memory_bound_chain()  # a new one: the baselines built for the last spec are kept
    result = driver.search(spec, microbatches=16, time_limit=0)
    assert len(chains) == 0
    assert len(plays) == 2  # the 1F1B-capped baseline, and the descent's start from the same limits
    validate(spec, result.schedule)
    capped = build(spec, "1f1b-capped", 16)
    assert result.schedule.makespan(spec) == capped.makespan(spec) == 528 > unlimited.schedule.makespan(spec)
    said = {x.kind: x.values for x in result.info.notes}
    assert said["time-limit-skipped"]["steps"] == ["the in-flight limit descent",
                                                   "the whole schedule with memory as holding cuts",
                                                   "the search for k-copy repetends",
                                                   "the schedule re-solved a window of time at a time"]
    assert "the time limit (0 s) ran out, so the search left out the in-flight limit descent" in render(
        result.info.notes)


def test_a_baseline_at_the_bound_is_kept_without_building_it_again(monkeypatch):
    # Interleaved 1F1B on 8 devices reaches the makespan bound at N = 8, but its micro-batches
    # repeat in groups: without a limit it is built again for more micro-batches, then the search
    # proper runs, to find a repetend to keep for other N (test_search_incumbent.py).
    spec = parse_file(SPECS / "interleaved.tsl", sets={"D": "8"})
    baselines = importlib.import_module("tessel_dsl.search.baselines")
    sizes: list[int] = []
    real = baselines.build
    monkeypatch.setattr(baselines, "build", lambda s, name, n=None: sizes.append(n) or real(s, name, n))
    _forbid(monkeypatch, importlib.import_module("tessel_dsl.search.solvers.cpsat"), "solve")
    result = driver.search(spec, microbatches=8, time_limit=0)
    validate(spec, result.schedule)
    assert result.info.method == "baseline" and result.info.proven
    assert result.schedule.makespan(spec) == result.info.makespan_bound == build(spec, "interleaved-1f1b", 8).makespan(spec)
    assert set(sizes) == {8}  # built for this N only
    said = {x.kind: x.values for x in result.info.notes}
    assert said["time-limit-skipped"]["steps"] == [
        "the steady state of the baseline built for more micro-batches (a repetend for other N)"]
    assert said["baseline-at-bound"]["repetend"] is False and said["baseline-at-bound"]["cut"] is True
    assert "the time limit left none to look for a steady state" in render(result.info.notes)
