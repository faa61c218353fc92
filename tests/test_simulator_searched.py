"""Searched plans of the paper's placements, simulated: agreement with the plan, zero steady-state bubble."""
from __future__ import annotations

from pathlib import Path

import pytest

from tessel_dsl.analysis import busy_time
from tessel_dsl.ir import Link
from tessel_dsl.lang.parser import parse_file
from tessel_dsl.plan import make_plan
from tessel_dsl.search.driver import search
from tessel_dsl.simulator import simulate

SPECS = Path(__file__).resolve().parent.parent / "specs"
N = 24


def searched(name: str):
    spec = parse_file(SPECS / f"{name}.tsl")
    result = search(spec, microbatches=N)
    return spec, result


def steady_bubble(spec, period: float) -> float:
    """Idle share of one steady-state period: every device does one micro-batch's work per period."""
    return 1.0 - sum(busy_time(spec)) / (period * spec.devices)


@pytest.mark.parametrize("name", ["vshape", "xshape"])
def test_simulation_matches_the_searched_plan(name):
    spec, result = searched(name)
    for blocking in (False, True):
        report = simulate(make_plan(spec, result.schedule, result.info, blocking=blocking), link=Link())
        assert report.ok, report.problems()
        if blocking:
            # Rendezvous can hold a sender until its peer is free, so the period may only grow
            # (the paper's argument for non-blocking communication).
            assert report.period >= result.info.period
        else:
            assert report.period == result.info.period
            assert report.drift_max == 0
            assert report.makespan == result.schedule.makespan(spec)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["vshape", "xshape", "mshape", "nnshape", "kshape"])
def test_searched_steady_state_has_no_bubble(name):
    spec, result = searched(name)
    # Free links, as the paper's schedule model assumes (a spec's own link cost stretches the period).
    report = simulate(make_plan(spec, result.schedule, result.info), link=Link())
    assert report.ok and report.period is not None
    assert steady_bubble(spec, report.period) == pytest.approx(0.0), (
        f"{name}: simulated steady-state period {report.period}, lower bound {report.lower_bound}")
