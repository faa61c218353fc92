"""Link costs: transfer timing, link serialisation, hidden vs exposed comm, blocking vs non-blocking."""
from __future__ import annotations

import pytest

from tessel_dsl.errors import SimulationError
from tessel_dsl.ir import Block, Edge, Kind, Link, Spec, Tensor
from tessel_dsl.lang.parser import parse_file
from tessel_dsl.lower import lower
from tessel_dsl.plan import make_plan
from tessel_dsl.schedule import Schedule, Slot
from tessel_dsl.search import baselines
from tessel_dsl.simulator import simulate
from tests.paths import SPECS


def pair_spec(nbytes: int = 100) -> Spec:
    blocks = (Block("A", Kind.FORWARD, (0,), 1, 0), Block("B", Kind.FORWARD, (1,), 1, 0),
              Block("C", Kind.OTHER, (1,), 10, 0))
    return Spec("pair", 2, 4, blocks, (Edge("A", "B", Tensor((nbytes,), "u8")),))


@pytest.mark.parametrize("blocking", [False, True])
def test_transfer_takes_latency_plus_bytes_over_bandwidth(blocking):
    spec = pair_spec()
    sch = Schedule(1, (Slot(0, "A", 0), Slot(1, "B", 0), Slot(2, "C", 0)))
    report = simulate((spec, lower(spec, sch, blocking=blocking), sch), link=Link(0.5, 50.0))
    assert report.timeline[1][0] == (3.5, 4.5, "B", 0)  # 1 + 0.5 + 100/50
    assert report.comm == ((1.0, 3.5, "A", 0, 0, 1),)
    assert report.comm_total == 2.5 and report.comm_exposed == 2.5 and report.bytes_moved == 100
    assert report.drift_max == 2.5


def test_one_link_carries_one_tensor_at_a_time():
    spec = pair_spec()
    sch = Schedule(2, (Slot(0, "A", 0), Slot(1, "A", 1), Slot(2, "B", 0), Slot(3, "B", 1),
                       Slot(4, "C", 0), Slot(14, "C", 1)))
    report = simulate((spec, lower(spec, sch), sch), link=Link(0.0, 25.0))  # 4 units per transfer
    assert [c[:2] for c in report.comm] == [(1.0, 5.0), (5.0, 9.0)]


def test_transfer_behind_compute_is_hidden_in_non_blocking_mode():
    spec = pair_spec()
    sch = Schedule(1, (Slot(0, "A", 0), Slot(0, "C", 0), Slot(10, "B", 0)))
    report = simulate((spec, lower(spec, sch), sch), link=Link(2.0, 0.0))
    assert report.comm_hidden == 2.0 and report.comm_exposed == 0.0
    assert report.drift_max == 0 and report.makespan == 11


def test_negative_link_is_rejected():
    spec = pair_spec()
    sch = Schedule(1, (Slot(0, "A", 0), Slot(1, "B", 0), Slot(2, "C", 0)))
    with pytest.raises(SimulationError, match="must not be negative"):
        simulate((spec, lower(spec, sch)), link=Link(-1.0, 0.0))


@pytest.mark.parametrize("name", ["mshape", "nnshape"])
def test_blocking_costs_more_than_non_blocking_when_links_cost(name):
    spec = parse_file(SPECS / f"{name}.tsl")
    sch = baselines.build(spec, "1f1b+", 12)
    free = [simulate(make_plan(spec, sch, blocking=b), link=Link()) for b in (False, True)]
    assert all(r.ok and r.drift_max == 0 and r.makespan == sch.makespan(spec) for r in free)
    nb, bl = (simulate(make_plan(spec, sch, blocking=b), link=Link(0.5, 0.0)) for b in (False, True))
    assert nb.ok and bl.ok
    assert nb.makespan < bl.makespan
    assert nb.bubble < bl.bubble
    assert nb.comm_hidden > 0 and bl.comm_hidden == 0  # blocking never overlaps comm with compute
    assert nb.comm_total == bl.comm_total == 0.5 * nb.transfers


def test_the_report_says_when_a_size_is_a_memory_delta():
    # A declared tensor is what moves; without one the producer's memory delta (3 units of 1 byte
    # here) stands in, and the report says so rather than present it as measured traffic.
    from tessel_dsl.simulator.report import METRIC_ROWS

    transfers, sizes = dict(METRIC_ROWS)["transfers"], dict(METRIC_ROWS)["transfer sizes"]
    sch = Schedule(1, (Slot(0, "A", 0), Slot(1, "B", 0), Slot(2, "C", 0)))
    declared = simulate((pair_spec(), lower(pair_spec(), sch), sch))
    assert declared.bytes_moved == 100 and not declared.bytes_from_memory
    assert transfers(declared) == "1 (100 B)" and sizes(declared) is None  # (the row is left out)
    assert declared.to_json()["comm"]["bytes_from_memory"] is False
    blocks = (Block("A", Kind.FORWARD, (0,), 1, 3), Block("B", Kind.FORWARD, (1,), 1, 0),
              Block("C", Kind.OTHER, (1,), 10, 0))
    bare = Spec("pair", 2, 4, blocks, (Edge("A", "B"),))
    stood_in = simulate((bare, lower(bare, sch), sch))
    assert stood_in.bytes_moved == 3 and stood_in.bytes_from_memory
    assert transfers(stood_in) == "1 (3 B)" and sizes(stood_in) == "memory deltas"
