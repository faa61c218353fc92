"""Memory lower bounds (`search/membound.py`): hand-worked values, soundness against an exhaustive
search of tiny specs (written here, independent of the search), and the one-copy chain bound
against the cyclic model's own infeasibility proofs."""
from __future__ import annotations

import itertools
import random
from dataclasses import replace

import pytest

from tessel_dsl.ir import Block, Edge, Kind, Spec
from tessel_dsl.search.bounds import makespan_bound
from tessel_dsl.search.driver import search
from tessel_dsl.search.membound import memory_makespan_bound, memory_period_bound
from tessel_dsl.search.modulo import solve_period
from tessel_dsl.search.onecopy import chain_stages, one_copy_chain_bound
from tessel_dsl.search.optimal import optimal
from tessel_dsl.search.period_walk import cyclic_nr_limit, period_floor
from tests.helpers import vshape


def chain(fwd: list[int], memory: int, mem: list[int] | None = None, n: int = 4) -> Spec:
    """F0..F{D-1} -> B{D-1}..B0, stage i on device i, backward twice the forward, F_i holding
    mem[i] (default 1) until B_i frees it."""
    d = len(fwd)
    mem = mem or [1] * d
    blocks = [Block(f"F{i}", Kind.FORWARD, (i,), fwd[i], mem[i]) for i in range(d)]
    blocks += [Block(f"B{i}", Kind.BACKWARD, (i,), 2 * fwd[i], -mem[i], forward=f"F{i}") for i in range(d)]
    edges = [Edge(f"F{i}", f"F{i + 1}") for i in range(d - 1)] + [Edge(f"F{d - 1}", f"B{d - 1}")]
    edges += [Edge(f"B{i + 1}", f"B{i}") for i in range(d - 1)]
    return Spec("chain", d, memory, tuple(blocks), tuple(edges), n)


# --- hand-worked values -------------------------------------------------------------------------

def test_one_microbatch_at_a_time_on_the_first_device():
    # D=2, F 1, B 2, M=1: device 0 holds one micro-batch from F0's start to B0's end, at least
    # F0 + F1 + B1 + B0 = 1 + 1 + 2 + 2 = 6, so N micro-batches need 6N; running them one after
    # another achieves it.
    spec = vshape(devices=2, memory=1, fwd=1, bwd=2)
    assert memory_period_bound(spec) == 6
    for n in (1, 2, 5):
        assert memory_makespan_bound(spec, n) == 6 * n == makespan_bound(spec, n)
    assert optimal(spec, 3, time_limit=None).schedule.makespan(spec) == 18


def test_two_in_flight_on_three_stages():
    # D=3, F 1, B 2, M=2. Device 0: holding >= 1+1+1+2+2+2 = 9, two at once: 4.5 per micro-batch,
    # makespan >= ceil(N/2) * 9. Time alone: (N + D - 1) * 3 (the 1F1B makespan).
    # Paced: F0's m-th start (0-based) is at least L = 0, 1, 9, 10, 18, 19 (each start 1 after
    # the one before, and 9 after the one two before). Device 2 gets nothing of a micro-batch
    # before 2 after its F0 starts, then 3 of work each, then at least B1 + B0 = 4 after:
    # N=6: L_4 + 2 + 2 * 3 + 4 = 30; N=5: L_4 + 2 + 1 * 3 + 4 = 27;
    # N=4: L_2 + 2 + 2 * 3 + 4 = 21.
    spec = vshape(devices=3, memory=2, fwd=1, bwd=2)
    assert memory_period_bound(spec) == 4.5
    assert [memory_makespan_bound(spec, n) for n in (4, 5, 6)] == [21, 27, 30]
    assert makespan_bound(spec, 6) == 30  # time alone: 24
    # the time-optimal solver (independent of these bounds) proves each of them the optimum
    for n, want in ((4, 21), (5, 27), (6, 30)):
        r = optimal(spec, n, time_limit=None)
        assert r.info.proven and r.schedule.makespan(spec) == want


def test_roomy_memory_adds_nothing():
    spec = vshape(devices=4, memory=4, fwd=1, bwd=2)
    # device 0 holds 12 per micro-batch, 4 at once: 3 per micro-batch, the busiest stage's work
    assert memory_period_bound(spec) == 3
    assert period_floor(spec) == 3 and one_copy_chain_bound(spec) == 3
    assert makespan_bound(spec, 8) == (8 + 3) * 3


def test_a_device_whose_memory_can_go_negative_is_left_out():
    # B0 frees memory before anything on device 0 allocates it (a made-up spec): a micro-batch
    # could lower another's holding, so the argument does not apply there.
    spec = vshape(devices=2, memory=1, fwd=1, bwd=2)
    blocks = tuple(replace(b, memory=-1) if b.name == "F0" else replace(b, memory=1) if b.name == "B0" else b
                   for b in spec.blocks)
    odd = replace(spec, blocks=blocks)
    assert memory_period_bound(odd) == 3  # device 1 only: F1 + B1 = 3, one at a time


# --- soundness: never above the optimum of an exhaustive search ---------------------------------

def _exact(spec: Spec, n: int) -> int | None:
    """The shortest makespan over every per-device order (each device: its blocks' instances in any
    order with each F before its B), each played as early as possible; None if memory never fits.
    Written here, sharing nothing with the search."""
    per_dev = [[(b.name, m) for b in spec.blocks_on(d) for m in range(n)] for d in range(spec.devices)]
    time = {b.name: b.time for b in spec.blocks}
    mem = {b.name: b.memory for b in spec.blocks}
    preds = {b.name: [e.src for e in spec.edges if e.dst == b.name] for b in spec.blocks}
    after: dict[str, set[str]] = {b.name: set() for b in spec.blocks}  # transitive predecessors
    for _ in spec.blocks:
        for b in spec.blocks:
            for p in preds[b.name]:
                after[b.name] |= {p} | after[p]

    def orders(items):
        for perm in itertools.permutations(items):
            pos = {k: i for i, k in enumerate(perm)}
            if all(pos[(p, m)] < pos[(blk, m)] for blk, m in perm for p in after[blk] if (p, m) in pos):
                yield perm

    best = None
    for combo in itertools.product(*(list(orders(items)) for items in per_dev)):
        if any(max(itertools.accumulate(mem[b] for b, _ in row)) > spec.capacity(d) for d, row in enumerate(combo)):
            continue
        start: dict = {}
        pending = [list(row) for row in combo]
        free = [0] * spec.devices
        progress = True
        while progress and any(pending):
            progress = False
            for d, row in enumerate(pending):
                if row:
                    blk, m = row[0]
                    if all((p, m) in start for p in preds[blk]):
                        t = max([free[d]] + [start[(p, m)] + time[p] for p in preds[blk]])
                        start[(blk, m)] = t
                        free[d] = t + time[blk]
                        row.pop(0)
                        progress = True
        if any(pending):
            continue  # the orders wait on each other
        span = max(start[k] + time[k[0]] for k in start)
        best = span if best is None or span < best else best
    return best


@pytest.mark.parametrize("seed", range(6))
def test_never_above_an_exhaustive_optimum(seed):
    rng = random.Random(seed)
    fwd = [rng.randint(1, 3) for _ in range(2)]
    mem = [rng.randint(1, 2) for _ in range(2)]
    spec = chain(fwd, memory=rng.randint(max(mem), 3), mem=mem)
    for n in (2, 3):
        best = _exact(spec, n)
        assert best is not None
        assert memory_makespan_bound(spec, n) <= best
        assert makespan_bound(spec, n) <= best


def test_exhaustive_optimum_meets_the_bound_when_memory_decides():
    spec = chain([1, 2], memory=1)  # one at a time on both devices: 3 + 6 = 9 per micro-batch
    assert memory_makespan_bound(spec, 3) == 27 == _exact(spec, 3)


# --- one-copy repetends on a chain ---------------------------------------------------------------

def test_chain_bound_hand_worked():
    # Three stages, F 1, B 2, two micro-batches per device: w_0 <= 1, so of three stages two share
    # a warmup; a run of two stages costs (1 + 2) * 2 = 6 per period.
    assert one_copy_chain_bound(vshape(devices=3, memory=2)) == 6
    # Four stages, two per device: [0, 1] and [2, 3] share, 6 each (a run of three would cost 9).
    assert one_copy_chain_bound(vshape(devices=4, memory=2)) == 6
    # One per device: every stage has w = 0, one run of all four stages: 12 = the round trip.
    assert one_copy_chain_bound(vshape(devices=4, memory=1)) == 12
    # Uneven stages F 1, 2, 1: either pair costs 3 + 6 = 9.
    assert one_copy_chain_bound(chain([1, 2, 1], memory=2)) == 9
    # Device 0's micro-batches take 2 of its 4 units: two at once, so w_0 <= 1 and the four
    # stages make two runs, [0, 1] and [2, 3], 6 each.
    assert one_copy_chain_bound(chain([1, 1, 1, 1], memory=4, mem=[2, 1, 1, 1])) == 6
    assert chain_stages(vshape(devices=3, memory=2)) == [(1, 2, 1, 2)] * 3


@pytest.mark.parametrize("devices, memory, bound", [(3, 2, 6), (4, 2, 6), (4, 3, 6)])
def test_cyclic_model_agrees_below_the_chain_bound(devices, memory, bound):
    # The cyclic model (modulo.py) of each period below the bound is infeasible, and the bound
    # itself is feasible: the search's own solver, not this module, says so.
    spec = vshape(devices=devices, memory=memory)
    assert one_copy_chain_bound(spec) == bound
    assert solve_period(spec, bound - 1, cyclic_nr_limit(spec), "cpsat", None, 20.0)[0] == "infeasible"
    assert solve_period(spec, bound, cyclic_nr_limit(spec), "cpsat", None, 20.0)[1] is not None


def test_search_starts_at_the_floor_and_states_the_memory_bound(monkeypatch):
    from tessel_dsl.search import modulo

    asked = []
    real = modulo.solve_period

    def spy(sp, period, *args, **kw):
        asked.append((len(sp.blocks), period))
        return real(sp, period, *args, **kw)

    monkeypatch.setattr(modulo, "solve_period", spy)
    spec = vshape(devices=3, memory=2, microbatches=8)
    r = search(spec)
    assert r.info.period == 6 and r.info.period_proven
    # the floor is feasible: no period below it is tried for the one-copy repetend
    assert [p for blocks, p in asked if blocks == len(spec.blocks)] == [6]
    assert r.info.memory_bound == 4.5 and r.info.lower_bound == 3
    # paced (as above): L_6 = 27, then 2 + 2 * 3 + 4 on device 2
    assert r.info.makespan_bound == makespan_bound(spec, 8) == 39
