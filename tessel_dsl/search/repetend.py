"""Repetend construction (paper §4.2): micro-batch offsets for every block, then a solver schedule.

A repetend holds every block of the spec once; block ``i`` carries a micro-batch offset ``r_i`` in
``[0, N_R)``. Repeating it, instance ``k`` runs block ``i`` on micro-batch ``r_i + k`` at
``s_i + k * P``. Its time ``t_R = max_d (E_R^d + W_R^d)`` is exactly the smallest period ``P`` at
which consecutive instances neither overlap on a device (each device's blocks fit in a window of
length ``P``) nor break a dependency across instances: for an edge ``i -> j`` the producer runs
``dist = r_i - r_j`` instances earlier, so ``s_j + P * dist >= s_i + t_i``.

Offsets are enumerated with both pruning properties of the paper: offsets never increase along a
dependency (Property 2: ``r_i >= r_j`` when ``i -> j``) and, by symmetry, only assignments that use
both offset 0 and offset ``N_R - 1`` are new at ``N_R`` (a shifted or narrower assignment is the
same repetend as one already tried). Two cheap bounds discard candidates before any solver runs:
a difference-constraint check at the target period (dependencies with their lags plus the device
windows, i.e. everything but exclusivity and memory) and the memory each device holds on entry.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterator

from tessel_dsl.analysis import max_inflight
from tessel_dsl.ir import Spec
from tessel_dsl.schedule import Repetend, Slot
from tessel_dsl.search.lags import lag
from tessel_dsl.search.solvers import Objective, Precedence, Problem, Task, solve


@dataclass
class Counters:
    """What the search did, for the progress display and `SearchInfo`."""

    tried: int = 0
    pruned: int = 0
    timed_out: int = 0
    nr: int = 0
    period: int = 0
    # One line per solve a budget or time limit cut short (so the answer may not be optimal).
    cuts: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Shape:
    """Per-spec facts the enumeration needs, computed once."""

    order: tuple[str, ...]
    time: dict[str, int]
    memory: dict[str, int]
    devices: dict[str, tuple[int, ...]]
    preds: dict[str, tuple[str, ...]]
    # longest[i][j]: longest path from the start of i to the start of j (j reachable from i)
    longest: dict[str, dict[str, int]] = field(default_factory=dict)

    @classmethod
    def of(cls, spec: Spec) -> "Shape":
        order = spec.topo_order
        time = {b.name: b.time for b in spec.blocks}
        longest: dict[str, dict[str, int]] = {}
        for i in reversed(order):
            row: dict[str, int] = {}
            for j in spec.succs[i]:
                for k, v in [(j, 0)] + list(longest[j].items()):
                    row[k] = max(row.get(k, 0), time[i] + lag(spec, i, j) + v)
            longest[i] = row
        return cls(order, time, {b.name: b.memory for b in spec.blocks},
                   {b.name: b.devices for b in spec.blocks}, dict(spec.preds), longest)


def nr_limit(spec: Spec) -> int:
    """How many micro-batches a repetend may span (the largest N_R tried).

    `analysis.max_inflight` charges every micro-batch its whole resident memory on each device,
    but a repetend's blocks belong to different micro-batches (in Chimera's X-shape the two chains
    of one micro-batch need not be in flight together), so it can undercount. The block-level
    limit is the number of copies of the smallest allocation that fit in the roomiest device's
    capacity; the exact memory
    constraints of every candidate then decide.
    """
    positive = [b.memory for b in spec.blocks if b.memory > 0]
    per_block = max(spec.capacities, default=0) // min(positive) if positive else len(spec.blocks)
    return max(1, max_inflight(spec), min(per_block, len(spec.blocks)))


def entry_memory(spec: Spec, offsets: dict[str, int]) -> tuple[int, ...]:
    """Memory each device holds when a repetend starts: the warmup's blocks ran ``r_i`` times each."""
    mem = [0] * spec.devices
    for b in spec.blocks:
        for d in b.devices:
            mem[d] += b.memory * offsets[b.name]
    return tuple(mem)


def memory_ok(spec: Spec, offsets: dict[str, int]) -> bool:
    """A necessary memory condition: the entry level, and the level right after the largest
    allocation once every release has happened, fit in M."""
    entry = entry_memory(spec, offsets)
    for d in range(spec.devices):
        ms = [b.memory for b in spec.blocks_on(d)]
        neg = sum(m for m in ms if m < 0)
        top = max([m for m in ms if m > 0], default=0)
        cap = spec.capacity(d)
        if entry[d] > cap or entry[d] + neg + top > cap or entry[d] + sum(ms) > cap:
            return False
    return True


def cyclic_bound_ok(spec: Spec, shape: Shape, offsets: dict[str, int], period: int) -> bool:
    """Is the difference-constraint relaxation feasible at `period`? (Bellman-Ford, no positive cycle.)

    Nodes are the blocks plus one window start per device; exclusivity and memory are left out, so
    a False here proves no schedule exists for these offsets at this period.
    """
    names = list(shape.order)
    nodes = names + [("win", d) for d in range(spec.devices)]
    arcs: list[tuple[object, object, int]] = []
    for e in spec.edges:
        arcs.append((e.src, e.dst, shape.time[e.src] + lag(spec, e.src, e.dst) - period * (offsets[e.src] - offsets[e.dst])))
    for n in names:
        for d in shape.devices[n]:
            arcs.append((("win", d), n, 0))
            arcs.append((n, ("win", d), shape.time[n] - period))
    dist = {n: 0 for n in nodes}
    for _ in range(len(nodes)):
        changed = False
        for u, v, w in arcs:
            if dist[u] + w > dist[v]:
                dist[v] = dist[u] + w
                changed = True
        if not changed:
            return True
    return False


def iter_offsets(spec: Spec, shape: Shape, nr: int, period: int, counters: Counters) -> Iterator[dict[str, int]]:
    """Offset assignments for `nr` micro-batches that might reach `period` (pruned as documented)."""
    order = shape.order
    same_dev_reach = {
        j: [(i, shape.longest[i][j] + shape.time[j]) for i in order
            if j in shape.longest[i] and set(shape.devices[i]) & set(shape.devices[j])]
        for j in order
    }
    offsets: dict[str, int] = {}

    def rec(k: int) -> Iterator[dict[str, int]]:
        if k == len(order):
            vals = offsets.values()
            if min(vals) != 0 or max(vals) != nr - 1:
                return  # a shifted or narrower copy of an assignment tried at a smaller N_R
            if not memory_ok(spec, offsets) or not cyclic_bound_ok(spec, shape, offsets, period):
                counters.pruned += 1
                return
            yield dict(offsets)
            return
        j = order[k]
        top = min((offsets[p] for p in shape.preds[j]), default=nr - 1)  # Property 2
        for r in range(top, -1, -1):
            # Same-device pair i ->* j: both fit in one window only if P * (1 + r_i - r_j) covers the path.
            if any(period * (1 + offsets[i] - r) < need for i, need in same_dev_reach[j]):
                counters.pruned += 1
                continue
            offsets[j] = r
            yield from rec(k + 1)
            del offsets[j]

    yield from rec(0)


def repetend_problem(spec: Spec, offsets: dict[str, int], period: int) -> Problem:
    """The solver problem of one candidate at a fixed period."""
    index = {b.name: i for i, b in enumerate(spec.blocks)}
    tasks = tuple(Task(b.name, b.time, b.devices, b.memory) for b in spec.blocks)
    prec = tuple(Precedence(index[e.src], index[e.dst], lag(spec, e.src, e.dst) - period * (offsets[e.src] - offsets[e.dst]))
                 for e in spec.edges)
    return Problem(tasks, prec, spec.devices, capacity=spec.capacities,
                   initial_memory=entry_memory(spec, offsets), span_limit=period)


def make_repetend(spec: Spec, offsets: dict[str, int], starts: tuple[int, ...], period: int) -> Repetend:
    """A `Repetend` with times normalised so its first block starts at 0."""
    base = min(starts)
    slots = tuple(sorted(Slot(s - base, b.name, offsets[b.name]) for b, s in zip(spec.blocks, starts)))
    return Repetend(max(offsets.values()) + 1, period, slots)


CANDIDATE_EFFORT = 2.0  # deterministic solver budget for scheduling one offset assignment


def solve_candidate(spec: Spec, offsets: dict[str, int], period: int, solver: str,
                    time_limit: float | None, counters: Counters) -> Repetend | None:
    """Schedule one offset assignment at `period`; None when it cannot (or could not within the
    budget `CANDIDATE_EFFORT` or the time limit: `counters.timed_out` then counts it)."""
    counters.tried += 1
    sol = solve(repetend_problem(spec, offsets, period), Objective.FEASIBLE, time_limit, solver=solver,
                effort=CANDIDATE_EFFORT)
    if sol.status == "unknown":
        counters.timed_out += 1
    if not sol.ok:
        return None
    return make_repetend(spec, offsets, sol.starts, period)


def serial_repetend(spec: Spec, solver: str, counters: Counters,
                    left: Callable[[], float | None] = lambda: None) -> Repetend:
    """An always-available fallback: one micro-batch at a time (N_R = 1), shortest such period
    (or, once the time `left` returns has run out, the shortest found so far).

    The periods are walked as numbers, not step by step: a spec in nanoseconds has periods of
    millions of units. Both tests are monotone in the period (a window that holds the micro-batch
    at P holds it at P + 1), and at the sum of every block's time the blocks run one after another.
    """
    shape = Shape.of(spec)
    offsets = {b.name: 0 for b in spec.blocks}
    low = max(1, max(sum(b.time for b in spec.blocks_on(d)) for d in range(spec.devices)))
    high = max(low, sum(b.time for b in spec.blocks))
    while low < high:  # the smallest period the difference constraints allow
        mid = (low + high) // 2
        if cyclic_bound_ok(spec, shape, offsets, mid):
            high = mid
        else:
            low = mid + 1

    def at(period: int, limited: bool = False) -> Repetend | None:
        return solve_candidate(spec, offsets, period, solver, left() if limited else None, counters)

    period = low
    for _ in range(SERIAL_STEPS):  # usually the first period already schedules
        rep = at(period)
        if rep is not None:
            return rep
        period += 1
    step, failed = SERIAL_STEPS, period - 1
    while (rep := at(period)) is None:  # gallop, then bisect back between the last failure and it
        failed, period, step = period, period + step, step * 2
    while period - failed > 1:
        remaining = left()
        if remaining is not None and remaining <= 0:
            break  # a longer period than need be, but a valid one (this is only the fallback)
        mid = (failed + period) // 2
        got = at(mid, limited=True)
        if got is None:
            failed = mid
        else:
            period, rep = mid, got
    return rep


SERIAL_STEPS = 8  # periods the fallback tries one by one before it gallops


def enumerate_search(spec: Spec, *, lower: int, upper: int, max_nr: int, solver: str,
                     deadline: Callable[[], float | None], counters: Counters,
                     accept: Callable[[Repetend], bool], on_progress: Callable[[], None] = lambda: None
                     ) -> tuple[Repetend | None, bool]:
    """Smallest period first: for P = lower, lower+1, ... < upper try every N_R and candidate.

    Returns (repetend or None, complete) where `complete` is False when the time ran out or a
    solver call gave up, so a None / the answer is not proven minimal. `accept` is the lazy
    completion check (warmup and cooldown satisfiable).
    """
    shape = Shape.of(spec)
    complete = True
    for period in range(lower, upper):
        counters.period = period
        left = deadline()
        if left is not None and left <= 0:  # also when every candidate of a period is pruned
            return None, False
        for nr in range(1, max_nr + 1):
            counters.nr = nr
            for offsets in iter_offsets(spec, shape, nr, period, counters):
                left = deadline()
                if left is not None and left <= 0:
                    return None, False
                timed = counters.timed_out
                rep = solve_candidate(spec, offsets, period, solver, left, counters)
                complete &= counters.timed_out == timed
                on_progress()
                if rep is not None and accept(rep):
                    return rep, complete
    return None, complete
