"""The cyclic model's memory rows (`modulo._cpsat_memory_rows`, `_z3_memory_rows`) on specs small
enough to solve in a moment, against periods worked out by hand and the unrolled memory of every
repetend the model returns (`tests/unit/test_search_memory.py::unrolled_peak`, which knows nothing of
the model). Both directions are checked: one unit of memory too few must make the period
infeasible, and exactly enough must make it feasible.
"""
from __future__ import annotations

import pytest

from tessel_dsl.ir import Block, Edge, Kind, Spec
from tessel_dsl.search.modulo import solve_period
from tests.unit.test_search_memory import unrolled_peak

SOLVERS = ["cpsat", "z3"]
F, B = Kind.FORWARD, Kind.BACKWARD


def chain(memory: int) -> Spec:
    """Two stages: F0, F1 (1 unit, +1), B1, B0 (2 units, -1). Device 0 holds a micro-batch for
    F0 + F1 + B1 + B0 = 6 units, so at the lower bound P = 3 it keeps two in flight (1F1B), and
    with M = 1 only P >= 6 fits."""
    blocks = (Block("F0", F, (0,), 1, 1), Block("F1", F, (1,), 1, 1),
              Block("B1", B, (1,), 2, -1, forward="F1"), Block("B0", B, (0,), 2, -1, forward="F0"))
    edges = (Edge("F0", "F1"), Edge("F1", "B1"), Edge("B1", "B0"))
    return Spec("chain2", 2, memory, blocks, edges, 4)


def quiet_first(memory: int) -> Spec:
    """Device 0 allocates nothing (X, 3 units); device 1 holds a micro-batch from F to B, 5 units
    apart: at P = 3 (device 0's work) device 1 keeps two in flight, so M = 1 needs P >= 5. The
    memory-free device comes first, so skipping it must not skip device 1."""
    blocks = (Block("X", F, (0,), 3, 0), Block("F", F, (1,), 1, 1), Block("B", B, (1,), 1, -1, forward="F"))
    return Spec("quiet", 2, memory, blocks, (Edge("F", "X"), Edge("X", "B")), 4)


def two_chunks(memory: int) -> Spec:
    """One device, two chunks: F0, F1 (+1 each), B1, B0 (-1 each), 1 unit each. One micro-batch
    alone peaks at 2 (after F1), whatever the period."""
    blocks = (Block("F0", F, (0,), 1, 1), Block("F1", F, (0,), 1, 1),
              Block("B1", B, (0,), 1, -1, forward="F1"), Block("B0", B, (0,), 1, -1, forward="F0"))
    return Spec("chunks", 1, memory, blocks, (Edge("F0", "F1"), Edge("F1", "B1"), Edge("B1", "B0")), 4)


def status(spec: Spec, period: int, max_nr: int, solver: str) -> str:
    st, rep = solve_period(spec, period, max_nr, solver, None)
    if st == "optimal":
        assert rep.period == period
        assert max(unrolled_peak(spec, rep)) <= spec.memory, (spec.name, period, rep)
    return st


@pytest.mark.parametrize("solver", SOLVERS)
def test_the_entry_level_decides_the_shortest_period(solver):
    assert status(chain(2), 3, 4, solver) == "optimal"
    assert status(chain(1), 3, 4, solver) == "infeasible"  # two in flight on device 0
    assert status(chain(1), 5, 4, solver) == "infeasible"  # still two (6 > 5)
    assert status(chain(1), 6, 4, solver) == "optimal"


@pytest.mark.parametrize("solver", SOLVERS)
def test_a_device_that_holds_nothing_does_not_hide_the_next(solver):
    assert status(quiet_first(2), 3, 4, solver) == "optimal"
    assert status(quiet_first(1), 3, 4, solver) == "infeasible"
    assert status(quiet_first(1), 4, 4, solver) == "infeasible"
    assert status(quiet_first(1), 5, 4, solver) == "optimal"


@pytest.mark.parametrize("solver", SOLVERS)
def test_the_peak_counts_allocations_started_before(solver):
    # The peak of one micro-batch is after its second allocation: F0 and F1 before it add up.
    assert status(two_chunks(1), 4, 3, solver) == "infeasible"
    assert status(two_chunks(1), 40, 3, solver) == "infeasible"
    assert status(two_chunks(2), 4, 3, solver) == "optimal"
    assert status(two_chunks(3), 4, 3, solver) == "optimal"


def alternating(memory: int) -> Spec:
    """One device: A (+1) -> Ar (-1) -> C (+1) -> Cr (-1), 1 unit each. Level 1, 0, 1, 0: M = 1
    fits one micro-batch at a time (P = 4). Wherever the window starts, some allocation has
    blocks after it, which must not count towards its peak."""
    blocks = (Block("A", F, (0,), 1, 1), Block("Ar", B, (0,), 1, -1, forward="A"),
              Block("C", F, (0,), 1, 1), Block("Cr", B, (0,), 1, -1, forward="C"))
    return Spec("alternating", 1, memory, blocks, (Edge("A", "Ar"), Edge("Ar", "C"), Edge("C", "Cr")), 4)


@pytest.mark.parametrize("solver", SOLVERS)
def test_blocks_after_an_allocation_do_not_count_towards_its_peak(solver):
    assert status(alternating(1), 4, 3, solver) == "optimal"
    assert status(alternating(0), 4, 3, solver) == "infeasible"


def release_first(memory: int) -> Spec:
    """One device, the release B declared first: CP-SAT's window then starts at B (a block on
    every device is a common cut), where the level is the whole micro-batch in flight, exactly
    M = 1. The entry level may equal M."""
    blocks = (Block("B", B, (0,), 1, -1, forward="F"), Block("F", F, (0,), 1, 1))
    return Spec("release-first", 1, memory, blocks, (Edge("F", "B"),), 4)


@pytest.mark.parametrize("solver", SOLVERS)
def test_the_entry_level_may_equal_m(solver):
    assert status(release_first(1), 2, 3, solver) == "optimal"
    assert status(release_first(0), 2, 3, solver) == "infeasible"
