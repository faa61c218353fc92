"""The Tessel search end to end: optimal periods, the 1F1B optimum, time limits, small N, errors."""
from __future__ import annotations

import importlib

import pytest

from tessel_dsl.errors import InfeasibleError, TesselError
from tessel_dsl.ir import Block, Edge, Kind, Mode, Spec
from tessel_dsl.search.notes import render
from tessel_dsl.validate import validate
from tests.helpers import one_f_one_b, vshape
from tests.paths import SPECS

search_mod = importlib.import_module("tessel_dsl.search.driver")
search = search_mod.search


def measured_period(schedule) -> float | None:
    """The schedule's steady gap between consecutive micro-batches, read from its start times
    by the simulator's metric (not the search's own account of its period)."""
    from tessel_dsl.simulator.metrics import steady_period

    return steady_period({(s.block, s.mb): s.start for s in schedule.slots}, schedule.microbatches)


def extend_to(spec, schedule, n):
    return importlib.import_module("tessel_dsl.search.extend").extend(spec, schedule, n)

V2_GOLDEN = """\
dev0 | F0:0 F0:1 .    .    .    B0:0 ~    ~    F0:2 B0:1 ~    ~    F0:3 B0:2 ~    ~    .    B0:3 ~    ~   
dev1 | .    F1:0 B1:0 ~    ~    F1:1 B1:1 ~    ~    F1:2 B1:2 ~    ~    F1:3 B1:3 ~    ~    .    .    .   """


def test_vshape_golden_grid():
    spec = vshape(devices=2, memory=2, fwd=1, bwd=3, microbatches=4)
    result = search(spec)
    assert result.schedule.grid(spec) == V2_GOLDEN
    assert result.info.period == 4 and result.info.nr == 2 and result.info.proven


@pytest.mark.parametrize("method", ["modulo", "enumerate"])
@pytest.mark.parametrize("devices", [2, 3, 4])
def test_vshape_equals_1f1b_for_every_n(devices, method):
    spec = vshape(devices=devices, memory=devices, fwd=1, bwd=3, microbatches=devices)
    result = search(spec, method=method)
    assert result.info.period == 4 and result.info.nr == devices
    assert measured_period(extend_to(spec, result.schedule, 16)) == 4  # F + B per device, one micro-batch each
    extend = importlib.import_module("tessel_dsl.search.extend").extend
    for n in list(range(devices, 12)) + [33, 100]:
        sched = extend(spec, result.schedule, n)
        assert sched.makespan(spec) == (n + devices - 1) * 4 == one_f_one_b(spec, n).makespan(spec)
        assert max(sched.peak_memory(spec)) <= spec.memory


def test_vshape_uneven_costs_match_1f1b():
    spec = vshape(devices=3, memory=3, fwd=1, bwd=2, microbatches=7)
    result = search(spec)
    assert result.schedule.makespan(spec) == one_f_one_b(spec, 7).makespan(spec) == (7 + 2) * 3


def test_methods_and_solvers_agree_on_small_specs():
    spec = vshape(devices=3, memory=2, fwd=1, bwd=2, microbatches=5)  # memory-bound: P above the bound
    periods = {(m, s): search(spec, method=m, solver=s).info.period
               for m in ("modulo", "enumerate") for s in ("cpsat", "z3")}
    assert len(set(periods.values())) == 1, periods
    assert next(iter(periods.values())) > 3


def test_time_limit_returns_a_valid_unproven_schedule():
    from tessel_dsl.lang.parser import parse_file

    spec = parse_file(SPECS / "nnshape.tsl", sets={"D": "8"})  # its periods take seconds to settle
    result = search(spec, time_limit=0.01, microbatches=10)
    validate(spec, result.schedule)
    assert not result.info.proven
    assert render(result.info.notes)
    assert result.info.period >= result.info.lower_bound


def test_small_n_is_solved_directly_and_keeps_the_repetend():
    spec = vshape(devices=3, memory=3, fwd=1, bwd=3, microbatches=2)
    result = search(spec)
    assert result.schedule.microbatches == 2 and result.info.nr == 3
    assert "directly" in render(result.info.notes)
    assert result.schedule.makespan(spec) == one_f_one_b(spec, 2).makespan(spec)
    extend = importlib.import_module("tessel_dsl.search.extend").extend
    assert extend(spec, result.schedule, 9).makespan(spec) == (9 + 2) * 4


def test_memory_below_one_microbatch_is_infeasible():
    spec = vshape(devices=2, memory=0, microbatches=4)
    with pytest.raises(InfeasibleError, match="below what one micro-batch needs"):
        search(spec)


def test_leaking_memory_falls_back_to_a_direct_solve():
    blocks = (Block("F0", Kind.FORWARD, (0,), 1, 1), Block("F1", Kind.FORWARD, (1,), 1, 0))
    spec = Spec("leak", 2, 3, blocks, (Edge("F0", "F1"),), microbatches=3, mode=Mode.INFER)
    result = search(spec)
    assert result.info.method == "direct" and "leaves" in render(result.info.notes)
    assert result.schedule.makespan(spec) == 4
    with pytest.raises(InfeasibleError):
        search(spec, microbatches=4)


def test_multi_device_blocks_and_branches():
    # E on both devices, then two independent branches, then a join on both devices.
    blocks = (Block("E", Kind.FORWARD, (0, 1), 1, 0), Block("A", Kind.FORWARD, (0,), 2, 1),
              Block("B", Kind.FORWARD, (1,), 1, 1), Block("J", Kind.FORWARD, (0, 1), 1, 0),
              Block("AB", Kind.BACKWARD, (0,), 2, -1, forward="A"), Block("BB", Kind.BACKWARD, (1,), 1, -1, forward="B"))
    edges = (Edge("E", "A"), Edge("E", "B"), Edge("A", "J"), Edge("B", "J"), Edge("J", "AB"), Edge("J", "BB"))
    spec = Spec("branches", 2, 3, blocks, edges, microbatches=12)
    for method in ("modulo", "enumerate"):
        result = search(spec, method=method)
        validate(spec, result.schedule)
        assert result.info.period == 6  # device 0 is busy 6 units per micro-batch


def test_bad_arguments_are_user_errors():
    spec = vshape(devices=2, memory=2)
    with pytest.raises(TesselError, match="unknown search method"):
        search(spec, method="magic")
    with pytest.raises(TesselError, match="unknown solver"):
        search(spec, solver="magic")
    with pytest.raises(TesselError, match="at least 1"):
        search(spec, microbatches=0)
