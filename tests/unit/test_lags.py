"""Transfer lags (search/lags.py): a spec's link puts a gap between a block and its consumer on
another device, and the search keeps it; worked by hand on small chains, and checked against the
simulator, which moves every tensor over its link on its own."""
from dataclasses import replace

from tessel_dsl.executor.models import shapes
from tessel_dsl.ir import Block, Edge, Kind, Link, Spec
from tessel_dsl.plan import make_plan
from tessel_dsl.search.compact import compact
from tessel_dsl.search.driver import search
from tessel_dsl.search.lags import edge_lags
from tessel_dsl.search.timescale import divide_spec, time_unit
from tessel_dsl.simulator import simulate


def _vshape(latency: float, d: int = 4, n: int = 1, scale: int = 1) -> Spec:
    spec = shapes.vshape(d, microbatches=n)
    spec = replace(spec, blocks=tuple(replace(b, time=b.time * scale) for b in spec.blocks))
    return replace(spec, link=Link(latency, 0.0))


def test_only_edges_that_leave_the_producers_devices_have_a_lag():
    spec = _vshape(1.0)
    # F0 -> F1 -> F2 -> F3 -> B3 -> B2 -> B1 -> B0; F3 and B3 share device 3.
    assert edge_lags(spec) == {("F0", "F1"): 1, ("F1", "F2"): 1, ("F2", "F3"): 1,
                               ("B3", "B2"): 1, ("B2", "B1"): 1, ("B1", "B0"): 1}
    assert edge_lags(_vshape(0.0)) == {}
    assert edge_lags(_vshape(0.4)) == {}  # under half a time unit: rounded away, like block times


def test_bandwidth_counts_the_tensor_bytes():
    blocks = (Block("A", Kind.FORWARD, (0,), 1, 0), Block("B", Kind.FORWARD, (1,), 1, 0),
              Block("C", Kind.FORWARD, (0, 1), 1, 0))
    from tessel_dsl.ir import Tensor

    edges = (Edge("A", "B", Tensor((1000,), "f32")), Edge("B", "C", Tensor((10,), "f32")))
    spec = Spec("t", 2, 4, blocks, edges, 1, link=Link(0.0, 1000.0))
    # A -> B: 4000 bytes at 1000 per unit = 4 units; B -> C: C also runs on B's device 1, but
    # device 0 still needs B's 40 bytes (0.04 units: none).
    assert edge_lags(spec) == {("A", "B"): 4}


def test_compact_starts_a_consumer_elsewhere_a_lag_after_its_producer():
    spec = _vshape(3.0, d=2)
    slots = compact(spec, orders=[[("F0", 0), ("B0", 0)], [("F1", 0), ("B1", 0)]])
    start = {s.block: s.start for s in slots}
    # F0 0-1, +3 -> F1 4-5, B1 5-8 (same device), +3 -> B0 11
    assert start == {"F0": 0, "F1": 4, "B1": 5, "B0": 11}


def test_the_search_keeps_every_lag_and_the_simulator_agrees():
    spec = _vshape(1.0)
    plan = make_plan(spec, search(spec).schedule)
    # One micro-batch: 4 forwards of 1, 4 backwards of 3, and a lag of 1 on six of the seven hops.
    assert plan.schedule.makespan(spec) == 4 * 1 + 4 * 3 + 6
    assert simulate(plan).makespan == 22
    spec4 = _vshape(1.0, n=4)
    plan4 = make_plan(spec4, search(spec4).schedule)
    start = {(s.block, s.mb): s.start for s in plan4.schedule.slots}
    for (a, b), lag in edge_lags(spec4).items():
        for mb in range(4):
            assert start[(b, mb)] >= start[(a, mb)] + spec4.block(a).time + lag
    assert simulate(plan4).makespan == plan4.schedule.makespan(spec4)


def test_the_time_unit_divides_the_lags_too():
    spec = _vshape(2.0, scale=2)  # F 2, B 6, lag 2: the same problem as F 1, B 3, lag 1
    assert time_unit(spec) == 2
    assert edge_lags(divide_spec(spec, 2)) == edge_lags(_vshape(1.0))
    assert time_unit(_vshape(1.0, scale=2)) == 1  # a lag of 1 does not divide by 2
    assert search(spec).schedule.makespan(spec) == 2 * 22


def test_a_link_too_fast_to_matter_changes_nothing():
    spec = shapes.vshape(4, microbatches=4)
    assert search(spec).schedule.slots == search(replace(spec, link=Link(0.2, 0.0))).schedule.slots
