"""The search's own repetend stages keep the steady state within M (not only the final validator).

Later stages (completion, validation) re-check memory on the finished schedule, so a repetend
model that let one unit too many through would still end in a valid schedule, just with a
different period. These tests unroll each repetend the search stages return and measure its
memory directly.
"""
from __future__ import annotations

import pytest

from tessel_dsl.analysis import lower_bound
from tessel_dsl.ir import Block, Edge, Kind, Spec
from tessel_dsl.schedule import Repetend
from tessel_dsl.search import driver
from tessel_dsl.search.modulo import solve_period
from tessel_dsl.search.period_walk import cyclic_nr_limit
from tessel_dsl.search.repetend import Counters, enumerate_search
from tests.helpers import vshape
from tests.unit.test_lower import mshape


def unrolled_peak(spec: Spec, rep: Repetend, microbatches: int | None = None) -> list[int]:
    """Per-device peak of the running memory sum when the repetend alone runs `microbatches` times.

    Block i of micro-batch m runs at (m - r_i) * P + s_i (instance k holds micro-batch k + r_i);
    blocks on one device never overlap, so summing in start order is the device's memory level.
    Micro-batches before 0 and from N on are simply absent, which only lowers memory, so the peak
    over the whole run is the steady-state peak once N spans a few repetends.
    """
    n = microbatches or 3 * rep.nr + 4
    events: list[list[tuple[int, int]]] = [[] for _ in range(spec.devices)]
    for slot in rep.slots:
        b = spec.block(slot.block)
        for m in range(n):
            for d in set(b.devices):
                events[d].append(((m - slot.mb) * rep.period + slot.start, b.memory))
    peaks = []
    for row in events:
        used = peak = 0
        for _, mem in sorted(row):
            used += mem
            peak = max(peak, used)
        peaks.append(peak)
    return peaks


def first_feasible(spec: Spec, solver: str, stop: int = 40) -> Repetend:
    """The driver's scan: the first period from the lower bound up that the cyclic model accepts."""
    limit = cyclic_nr_limit(spec)
    for period in range(lower_bound(spec), stop):
        status, rep = solve_period(spec, period, limit, solver, None)
        if status == "optimal":
            assert rep.period == period
            return rep
        assert status == "infeasible"
    raise AssertionError("no feasible period")


# V-shape D=4 (F 1, B 2; no block on every device: free windows) and M-shape D=4 (E and EB on
# every device: the common cut). Smallest feasible period at each M, worked out by hand for the
# V-shape: M >= 4 holds 1F1B's 4 micro-batches on device 0 (P = 3), M = 2..3 two (P = 6), M = 1
# one at a time (P = 12, the whole micro-batch).
@pytest.mark.parametrize("solver", ["cpsat", "z3"])
@pytest.mark.parametrize("memory, period", [(1, 12), (2, 6), (3, 6), (4, 3)])
def test_cyclic_model_respects_memory_on_vshape(solver, memory, period):
    spec = vshape(devices=4, memory=memory, fwd=1, bwd=2)
    rep = first_feasible(spec, solver)
    assert max(unrolled_peak(spec, rep)) <= memory
    assert rep.period == period


@pytest.mark.parametrize("solver", ["cpsat", "z3"])
@pytest.mark.parametrize("memory", [1, 2, 3])
def test_cyclic_model_respects_memory_with_a_common_cut(solver, memory):
    spec = mshape(devices=4, memory=memory)
    rep = first_feasible(spec, solver)
    assert max(unrolled_peak(spec, rep)) <= memory


def looped(devices: int, chunks: int, memory: int) -> Spec:
    """Interleaved stages: F{k} and B{k} on device k mod D, so a device allocates twice or more
    before it frees; that is where a loose peak can pass while the average level stays within M."""
    k = devices * chunks
    blocks = [Block(f"F{i}", Kind.FORWARD, (i % devices,), 1, 1) for i in range(k)]
    blocks += [Block(f"B{i}", Kind.BACKWARD, (i % devices,), 2, -1, forward=f"F{i}") for i in range(k)]
    edges = [Edge(f"F{i}", f"F{i + 1}") for i in range(k - 1)] + [Edge(f"F{k - 1}", f"B{k - 1}")]
    edges += [Edge(f"B{i + 1}", f"B{i}") for i in range(k - 1)]
    return Spec("looped", devices, memory, tuple(blocks), tuple(edges), 4)


# Smallest periods as both backends find them (each is a proven optimum of the cyclic model).
@pytest.mark.parametrize("solver", ["cpsat", "z3"])
@pytest.mark.parametrize("devices, memory, period", [(2, 2, 10), (2, 3, 7), (3, 2, 15)])
def test_cyclic_model_respects_memory_on_interleaved_stages(solver, devices, memory, period):
    spec = looped(devices, 2, memory)
    rep = first_feasible(spec, solver)
    assert max(unrolled_peak(spec, rep)) <= memory
    assert rep.period == period


@pytest.mark.parametrize("solver", ["cpsat", "z3"])
def test_memory_below_one_microbatch_is_infeasible_at_any_period(solver):
    # Two chunks per device: one micro-batch alone holds 2 units there, so M = 1 admits no
    # repetend however long the period.
    spec = looped(2, 2, 1)
    generous = 4 * sum(b.time for b in spec.blocks)
    assert solve_period(spec, generous, cyclic_nr_limit(spec), solver, None) == ("infeasible", None)


@pytest.mark.parametrize("solver", ["cpsat", "z3"])
@pytest.mark.parametrize("memory", [1, 2, 3])
def test_enumeration_respects_memory(solver, memory):
    spec = vshape(devices=3, memory=memory, fwd=1, bwd=2)
    rep, complete = enumerate_search(spec, lower=1, upper=40, max_nr=cyclic_nr_limit(spec), solver=solver,
                                     deadline=lambda: None, counters=Counters(), accept=lambda r: True)
    assert rep is not None and complete
    assert max(unrolled_peak(spec, rep)) <= memory


@pytest.mark.parametrize("method", ["modulo", "enumerate"])
def test_search_result_repetend_respects_memory(method):
    spec = vshape(devices=4, memory=3, fwd=1, bwd=2)
    result = driver.search(spec, microbatches=8, method=method)
    rep = result.schedule.repetend
    assert rep is not None
    assert max(unrolled_peak(spec, rep)) <= 3
    assert max(result.schedule.peak_memory(spec)) <= 3


def test_unrolled_peak_of_1f1b():
    # The reference itself: 1F1B's repetend on a D=4 V-shape holds 4, 3, 2, 1 micro-batches.
    from tessel_dsl.schedule import Slot

    spec = vshape(devices=4, memory=4, fwd=1, bwd=2)
    offsets = {"F0": 3, "F1": 2, "F2": 1, "F3": 0, "B3": 0, "B2": 0, "B1": 0, "B0": 0}
    starts = {"F0": 0, "B0": 1, "F1": 0, "B1": 1, "F2": 0, "B2": 1, "F3": 0, "B3": 1}
    rep = Repetend(4, 3, tuple(sorted(Slot(starts[b], b, r) for b, r in offsets.items())))
    assert unrolled_peak(spec, rep) == [4, 3, 2, 1]


# The enumeration's cheap memory pruning must never drop a candidate that fits: at the boundary
# (every level exactly M) it keeps it, one unit more and it prunes.
ONE_F_ONE_B = {"F0": 3, "F1": 2, "F2": 1, "F3": 0, "B3": 0, "B2": 0, "B1": 0, "B0": 0}


def test_memory_pruning_keeps_exact_fits_and_drops_overflows():
    from tessel_dsl.search.repetend import memory_ok

    # Device 0 enters 1F1B's repetend holding 3 units; releasing B0 first keeps it at 3.
    assert memory_ok(vshape(devices=4, memory=3), ONE_F_ONE_B)
    assert not memory_ok(vshape(devices=4, memory=2), ONE_F_ONE_B)


def test_memory_pruning_counts_allocations_without_releases():
    from tessel_dsl.search.repetend import memory_ok

    # Device 0 runs two blocks that each keep 1 unit and free nothing (memory grows per
    # micro-batch): entering with 1 unit, M=2 cannot take both allocations.
    blocks = (Block("A", Kind.FORWARD, (0,), 1, 1), Block("C", Kind.FORWARD, (0,), 1, 1))
    spec = Spec("leaky", 1, 2, blocks, (Edge("A", "C"),))
    assert not memory_ok(spec, {"A": 1, "C": 0})
    assert memory_ok(spec, {"A": 0, "C": 0})
    assert memory_ok(Spec("leaky", 1, 3, blocks, (Edge("A", "C"),)), {"A": 1, "C": 0})


def test_nr_limit_bounds():
    from tessel_dsl.search.repetend import nr_limit

    assert nr_limit(vshape(devices=4, memory=1)) == 1  # one micro-batch at a time
    assert nr_limit(vshape(devices=4, memory=4)) == 4
    no_memory = Spec("free", 2, 1, (Block("A", Kind.FORWARD, (0,), 1, 0), Block("C", Kind.FORWARD, (1,), 1, 0)),
                     (Edge("A", "C"),))
    assert nr_limit(no_memory) == 2  # nothing allocates: at most one copy of each block in flight


def test_nr_limit_is_the_in_flight_limit_when_blocks_are_few():
    from tessel_dsl.search.repetend import nr_limit

    # Two blocks, room for ten micro-batches: the in-flight limit (10), not the block count (2).
    spec = Spec("one", 1, 10, (Block("F", Kind.FORWARD, (0,), 1, 1), Block("B", Kind.BACKWARD, (0,), 1, -1, forward="F")),
                (Edge("F", "B"),))
    assert nr_limit(spec) == 10


def test_memory_pruning_with_devices_that_hold_nothing():
    from tessel_dsl.search.repetend import memory_ok

    spec = Spec("zero", 2, 1, (Block("A", Kind.FORWARD, (0,), 1, 0), Block("C", Kind.FORWARD, (1,), 1, 0)),
                (Edge("A", "C"),))
    assert memory_ok(spec, {"A": 1, "C": 0})


def test_memory_pruning_reads_each_devices_own_capacity():
    from dataclasses import replace

    from tessel_dsl.search.repetend import memory_ok

    # 1F1B enters its repetend with 3, 2, 1, 0 units on devices 0..3 (and each device's F then B
    # keeps the level there): capacities 3, 2, 1, 0 fit exactly; 1 on device 1 does not, although
    # the spec's default M=3 would.
    spec = vshape(devices=4, memory=3)
    assert memory_ok(replace(spec, device_memory=(3, 2, 1, 0)), ONE_F_ONE_B)
    assert not memory_ok(replace(spec, device_memory=(3, 1, 3, 3)), ONE_F_ONE_B)
    # Nothing allocates on either device: no memory at all is enough.
    free = Spec("zero", 2, 0, (Block("A", Kind.FORWARD, (0,), 1, 0), Block("C", Kind.FORWARD, (1,), 1, 0)),
                (Edge("A", "C"),))
    assert memory_ok(free, {"A": 1, "C": 0})


@pytest.mark.parametrize("solver", ["cpsat", "z3"])
def test_enumeration_holds_every_device_to_its_own_capacity(solver):
    from dataclasses import replace

    # V-shape D=3, F 1 and B 2: 1F1B needs 3, 2, 1 units. With only 1 unit on device 1 (and
    # plenty elsewhere) the repetend may keep one micro-batch there, whatever device 0 holds.
    spec = replace(vshape(devices=3, memory=3, fwd=1, bwd=2), device_memory=(3, 1, 3))
    rep, complete = enumerate_search(spec, lower=1, upper=40, max_nr=cyclic_nr_limit(spec), solver=solver,
                                     deadline=lambda: None, counters=Counters(), accept=lambda r: True)
    assert rep is not None and complete
    peaks = unrolled_peak(spec, rep)
    assert peaks[1] <= 1 and all(peaks[d] <= spec.capacity(d) for d in range(3)), peaks


@pytest.mark.parametrize("solver", ["cpsat", "z3"])
@pytest.mark.parametrize("memory", [2, 4])
def test_enumerated_repetend_keeps_every_dependency(solver, memory):
    # Block b of micro-batch m starts at (m - r_b) * P + s_b, so an edge a -> b inside one
    # micro-batch holds when s_b + P * (r_a - r_b) >= s_a + t_a: checked on the unrolled times,
    # not on the solver's own rows.
    spec = vshape(devices=4, memory=memory, fwd=1, bwd=2)
    rep, _ = enumerate_search(spec, lower=1, upper=40, max_nr=cyclic_nr_limit(spec), solver=solver,
                              deadline=lambda: None, counters=Counters(), accept=lambda r: True)
    at = {s.block: (s.start, s.mb) for s in rep.slots}
    assert rep.nr > 1  # offsets differ, so the micro-batch distance matters
    for e in spec.edges:
        (sa, ra), (sb, rb) = at[e.src], at[e.dst]
        assert sb + rep.period * (ra - rb) >= sa + spec.block(e.src).time, (e, rep)
