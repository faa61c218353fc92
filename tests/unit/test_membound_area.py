"""The memory-time bound (`membound.areas`, module text "Memory-time"): a hand-worked case where
it is the binding bound, and the stated makespan bound against the time-optimal solve (TO, an
independent exact model) on small specs, memory-bound and not."""
from __future__ import annotations

import pytest

from tessel_dsl.ir import Block, Edge, Kind, Spec
from tessel_dsl.search.bounds import makespan_bound
from tessel_dsl.search.membound import Ramp, areas, fillable, holdings, memory_period_bound, paced_bound
from tessel_dsl.search.optimal import optimal
from tests.unit.test_membound import chain


def two_chunks(memory: int, inner: int = 1, n: int = 4, outer: int = 1) -> Spec:
    """Two devices, two chunks each (F0 F1 F2 F3 on devices 0 1 0 1, backwards retracing them),
    every block 1 long; device 0 keeps `outer` from F0 until B0 and `inner` from F2 until B2."""
    dev, mem = [0, 1, 0, 1], [outer, 0, inner, 0]
    blocks = [Block(f"F{i}", Kind.FORWARD, (dev[i],), 1, mem[i]) for i in range(4)]
    blocks += [Block(f"B{i}", Kind.BACKWARD, (dev[i],), 1, -mem[i], forward=f"F{i}") for i in range(4)]
    edges = [Edge(f"F{i}", f"F{i + 1}") for i in range(3)] + [Edge("F3", "B3")]
    edges += [Edge(f"B{i + 1}", f"B{i}") for i in range(3)]
    return Spec("two_chunks", 2, memory, tuple(blocks), tuple(edges), n)


def test_nested_holdings_hand_worked():
    # Device 0, M=2. From F0's start to B0's end (F0 F1 F2 F3 B3 B2 B1 B0: 8) a micro-batch holds
    # 1 (B0 gives it back when it starts, but device 0 can take it again only once B0 ends); from
    # F2's start to B2's end (F2 F3 B3 B2: 4) it holds 2. Memory-time per micro-batch:
    # 1 * 8 + (2 - 1) * 4 = 12, of 2 available per unit of time: 6 per micro-batch, where the
    # busiest device's work is 4 and the counting bounds give 8 / 2 = 4 (F0..B0, two at once) and
    # 4 / 1 = 4 (F2..B2, one at a time). All intervals lie after head(F0) = 0 and end by the
    # makespan less tail(B0) = 0: makespan >= ceil(12 N / 2) = 6 N, above the counting bounds.
    # While the first F0 runs only 1 of the 2 can be in use, and while the last B0 runs only it
    # holds (counted until it ends): 2 more units of memory-time, so 6 N + 1.
    spec = two_chunks(2)
    got = {a.device: a for a in areas(spec)}
    assert (got[0].area, got[0].capacity, got[0].head, got[0].tail) == (12, 2, 0, 0)
    assert memory_period_bound(spec) == 6
    counted = {n: max([h.makespan(n) for h in holdings(spec)] + [paced_bound(spec, h, n) for h in holdings(spec)])
               for n in (4, 5, 6)}
    assert counted == {4: 20, 5: 24, 6: 28}
    assert (got[0].rise, got[0].fall) == (Ramp(0, 1, 1), Ramp(0, 1, 1))
    assert [got[0].makespan(n) for n in (4, 5, 6)] == [25, 31, 37]
    assert [makespan_bound(spec, n) for n in (4, 5, 6)] == [25, 31, 37]
    # TO proves 6 N + 2.
    for n in (2, 3):
        r = optimal(spec, n, effort=30)
        assert r.info.proven and r.schedule.makespan(spec) == 6 * n + 2


def test_memory_time_counts_only_the_memory_a_device_can_fill():
    # The hand-worked case above with every size doubled and one unit of memory more (M = 5): a
    # micro-batch holds 0, 2 or 4 on device 0, so no moment finds more than 4 in use and the
    # unit left over can't be filled. The schedules are exactly those of the case above, and so
    # are the optimum (6 N + 2) and the bound: memory-time 24 a micro-batch over 4, not 5.
    spec = two_chunks(5, inner=2, outer=2)
    got = {a.device: a for a in areas(spec)}
    assert (got[0].area, got[0].capacity) == (24, 4)
    assert memory_period_bound(spec) == 6
    assert [makespan_bound(spec, n) for n in (4, 5, 6)] == [makespan_bound(two_chunks(2), n) for n in (4, 5, 6)]
    assert [got[0].makespan(n) for n in (4, 5, 6)] == [25, 31, 37]
    r = optimal(spec, 3, effort=30)
    assert r.info.proven and r.schedule.makespan(spec) == 6 * 3 + 2


@pytest.mark.parametrize(("levels", "capacity", "fill"), [
    ({0, 235, 470}, 1400, 1175),      # two chunks of 2.35 GB in 14 GB: five, not 5.96
    ({235, 470, 1100, 630}, 1400, 1335),  # a chunk and a head's logits beside it
    ({6, 10, 15}, 29, 28),            # 6 + 6 + 6 + 10, no sum makes 29
    ({7}, 7, 7),
])
def test_fillable_is_the_largest_sum_of_levels_within_capacity(levels, capacity, fill):
    assert fillable(levels, capacity) == fill


def test_fillable_against_enumeration():
    import random

    rng = random.Random(7)
    for _ in range(300):
        levels = {rng.randint(0, 40) for _ in range(rng.randint(0, 3))} | {rng.randint(1, 40)}
        capacity = rng.randint(min(levels - {0}), 200)  # one micro-batch fits (else refused before)
        sums = {0}
        while True:
            grown = sums | {s + v for s in sums for v in levels if s + v <= capacity}
            if grown == sums:
                break
            sums = grown
        assert fillable(levels, capacity) == max(sums), (levels, capacity)


def test_bound_meets_the_optimum_where_memory_decides():
    # Chain of 4 stages, forwards 4 3 4 3 (backwards twice), M=2 on every device, N=3. Device 0
    # holds a micro-batch from F0's start to B0's end, at least the whole chain 3 * 14 = 42, two
    # at once: the third can only start once one of the first two is done, and then needs 42
    # more, so no schedule ends before 84 (time alone gives 42, one micro-batch's chain).
    # Micro-batches 0 and 1 four apart and 2 at 42 reach it, and TO proves 84 optimal.
    spec = chain([4, 3, 4, 3], 2, n=3)
    assert makespan_bound(spec, 3) == 84
    r = optimal(spec, 3, effort=30)
    assert r.info.proven and r.schedule.makespan(spec) == 84


CASES = [
    (two_chunks(2), (1, 2, 3, 4)),
    (two_chunks(3), (2, 4)),
    (two_chunks(3, inner=2), (2, 3, 4)),
    (two_chunks(4), (3, 5)),
    (two_chunks(7, inner=4, outer=2), (2, 3)),
    (chain([4, 3, 4, 3], 2), (2, 4, 6)),
    (chain([4, 3, 4, 3], 3), (4, 6)),
    (chain([4, 3, 4, 3, 4, 3], 3), (5,)),
    (chain([2, 3, 2, 3], 4), (6,)),  # memory to spare: time bounds decide
]


@pytest.mark.parametrize("index", range(len(CASES)))
def test_stated_bound_never_above_the_optimum(index):
    spec, sizes = CASES[index]
    for n in sizes:
        r = optimal(spec, n, effort=30)
        assert r.info.proven, (spec.name, spec.memory, n)
        assert makespan_bound(spec, n) <= r.schedule.makespan(spec), (spec.name, spec.memory, n)
        # with a schedule in hand above it, the one-device relaxation (`devrelax.py`) joins in
        optimum = r.schedule.makespan(spec)
        assert makespan_bound(spec, n, above=optimum + 1) <= optimum, (spec.name, spec.memory, n)


def test_where_the_analytic_bound_stays_below_the_optimum():
    # The same chain at N=6: the analytic bounds count how long and how much memory is held, not
    # how two micro-batches in flight must dodge each other on stages of unequal cost (their
    # forwards and backwards meet on every device), so they stay 3 below what TO proves (6 before
    # they counted that freeing and allocating take turns on device 0). One device alone does not
    # see it either; devices 0, 1 and 2 together do (`devrelax.py`, "Several devices at once").
    from tessel_dsl.search.devrelax import _solve, device_relaxation

    spec = chain([4, 3, 4, 3], 2, n=6)
    r = optimal(spec, 6, effort=30)
    assert r.info.proven and r.schedule.makespan(spec) == 141
    assert makespan_bound(spec, 6) == 138
    held = [h for h in holdings(spec) if h.limit < 6]
    alone = [_solve(spec, 6, (d,), [h for h in held if h.device == d], reservoir=(), effort=1)[0] for d in range(4)]
    assert max(alone) <= 138
    assert device_relaxation(spec, 6) == (141, (0, 1, 2))
    assert makespan_bound(spec, 6, above=142) == 141
    # (the whole schedule with memory as cuts does: tests/unit/test_heldcuts.py)


def bound_without(spec, n: int, monkeypatch, module: str, name: str, nothing) -> int:
    """The stated makespan bound with `module.name` answering `nothing`: what the other bounds give."""
    import importlib

    from tessel_dsl.search import bounds

    monkeypatch.setattr(importlib.import_module(module), name, lambda *_a, **_k: nothing)
    got = bounds._makespan_bound(spec, n)
    monkeypatch.undo()
    return got


# Random interleaved chains (test_memfill.py) where the memory-time bound, with the freeing
# blocks counted until they end and the filling and draining staircases, is above every other.
@pytest.mark.parametrize("seed", [22, 28, 89, 90, 125, 228])
def test_memory_time_never_above_the_time_optimum(seed, monkeypatch):
    from tests.unit.test_memfill import _interleaved

    spec, n = _interleaved(seed)
    got = max(a.makespan(n) for a in areas(spec))
    assert got > bound_without(spec, n, monkeypatch, "tessel_dsl.search.membound", "areas", [])
    best = optimal(spec, n, effort=8, workers=1)
    assert best.info.proven and got <= best.schedule.makespan(spec)
