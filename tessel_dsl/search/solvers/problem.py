"""The solver-neutral scheduling problem every backend answers.

A `Problem` is a set of tasks (duration, devices, memory delta), precedences with an optional lag,
a memory capacity per device with an initial level, and a few optional structural constraints used
by the Tessel search (a per-device window for repetends, tasks pinned relative to a shared anchor).
Backends (`z3`, `cpsat`) turn it into their own model; nothing outside `tessel_dsl.search.solvers` sees
solver objects.

Semantics shared by all backends:

- a task occupies all its devices during ``[start, start + duration)``; a device runs one task at a
  time;
- ``Precedence(before, after, lag)`` means ``start[after] >= start[before] + duration[before] + lag``
  (a negative lag lets the successor start earlier, which the cyclic repetend needs);
- a task's memory delta counts from its start; on each device the running sum, starting from
  ``initial_memory[d]`` and taken in start order, never exceeds ``capacity`` (one number, or
  one per device);
- with ``span_limit`` set, the tasks of each device lie inside one window of that length;
- objective ``spread`` minimises ``max(start + duration + skew) - min(start + skew)``: with
  ``skew = -P * offset`` that is the time one micro-batch spends in a periodic schedule;
- a task with ``fixed`` set starts exactly at ``fixed`` (objective ``makespan``/``feasible``) or at
  ``anchor + fixed`` (objective ``anchor``, which minimises the anchor).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Hashable


class Objective(str, Enum):
    """What a solve optimises."""

    MAKESPAN = "makespan"  # minimise the latest end of any task
    FEASIBLE = "feasible"  # any solution will do
    ANCHOR = "anchor"      # minimise the anchor that `fixed` tasks are pinned to
    SPREAD = "spread"      # minimise max(start + duration + skew) - min(start + skew)


@dataclass(frozen=True)
class Task:
    """One block instance to place: `key` identifies it to the caller (e.g. ``(block, mb)``)."""

    key: Hashable
    duration: int
    devices: tuple[int, ...]
    memory: int = 0
    release: int = 0
    fixed: int | None = None
    # Added to the start when measuring the SPREAD objective (a repetend block's unrolled time).
    skew: int = 0
    # Tasks of one group (e.g. one micro-batch) whose memory changes on a device follow each other
    # in dependency order: a backend may model what the group holds as intervals between them.
    # Only a hint: the backend checks the order, and None (each task alone) is always right.
    group: Hashable | None = None


@dataclass(frozen=True)
class Precedence:
    """``start[after] >= start[before] + duration[before] + lag`` (indices into `Problem.tasks`)."""

    before: int
    after: int
    lag: int = 0


def makespan_lower_bound(problem: Problem) -> int:
    """A makespan no schedule of `problem` can beat, memory aside: each device's work, preceded by
    the earliest any of its tasks can start and followed by the shortest chain that must run
    after its last one (the one-machine "head + work + tail" relaxation), and the longest chain.

    Solvers use it to stop as soon as a schedule reaches it, instead of spending their budget
    failing to prove that nothing shorter exists.
    """
    from graphlib import CycleError, TopologicalSorter

    tasks = problem.tasks
    if not tasks:
        return 0
    preds: dict[int, list[Precedence]] = {i: [] for i in range(len(tasks))}
    succs: dict[int, list[Precedence]] = {i: [] for i in range(len(tasks))}
    for p in problem.precedences:
        preds[p.after].append(p)
        succs[p.before].append(p)
    try:
        order = list(TopologicalSorter({i: [p.before for p in ps] for i, ps in preds.items()}).static_order())
    except CycleError:  # cyclic precedences (a repetend's wrap-around): no chain reasoning
        order = None
    head = [t.fixed if t.fixed is not None else t.release for t in tasks]
    tail = [0] * len(tasks)
    if order is not None:
        for i in order:
            for p in preds[i]:
                head[i] = max(head[i], head[p.before] + tasks[p.before].duration + p.lag)
        for i in reversed(order):
            for p in succs[i]:
                tail[i] = max(tail[i], p.lag + tasks[p.after].duration + tail[p.after])
    head = [max(0, h) for h in head]
    tail = [max(0, q) for q in tail]
    bound = max(h + t.duration + q for h, t, q in zip(head, tasks, tail))
    for d in range(problem.devices):
        on = problem.on_device(d)
        if on:
            work = sum(tasks[i].duration for i in on)
            bound = max(bound, min(head[i] for i in on) + work + min(tail[i] for i in on))
    if order is not None and all(t.fixed is None for t in tasks) and all(p.lag >= 0 for p in problem.precedences):
        bound = max(bound, _idle_bound(problem, order, preds, succs))
    return bound


def _idle_bound(problem: Problem, order: list[int], preds: dict[int, list[Precedence]],
                succs: dict[int, list[Precedence]]) -> int:
    """The sharper per-device bound of `bounds.idle_bound` on a problem's tasks: before a device's
    first task that does not occupy every device, it idles while the chain leading there runs on
    other devices only (it can run nothing there but an all-device task, which can't overlap that
    chain), and the same after its last one. Lags count as zero (an all-device task may fill them);
    pinned tasks and negative lags are left to the plain bound."""
    tasks = problem.tasks
    everyone = set(range(problem.devices))
    bound = 0
    for d in range(problem.devices):
        on = problem.on_device(d)
        local = [i for i in on if not everyone <= set(tasks[i].devices)]
        if not local:
            continue
        weight = [0 if d in t.devices else t.duration for t in tasks]
        head = [0] * len(tasks)
        for i in order:
            for p in preds[i]:
                head[i] = max(head[i], head[p.before] + weight[p.before])
        tail = [0] * len(tasks)
        for i in reversed(order):
            for p in succs[i]:
                tail[i] = max(tail[i], weight[p.after] + tail[p.after])
        work = sum(tasks[i].duration for i in on)
        bound = max(bound, min(head[i] for i in local) + work + min(tail[i] for i in local))
    return bound


def microbatch_order(index: dict[tuple[str, int], int]) -> list[Precedence]:
    """Each block's micro-batches in index order, for every consecutive pair present in `index`.

    The paper's Property 1: some optimal schedule runs every block's micro-batches in order, so
    this symmetry breaking loses no makespan, shrinks the search, and keeps plans usable by
    runtimes that index micro-batches by arrival (PyTorch's loss bookkeeping).
    """
    return [Precedence(i, index[(name, mb + 1)]) for (name, mb), i in index.items() if (name, mb + 1) in index]


@dataclass(frozen=True)
class Problem:
    """A scheduling problem: tasks, precedences, per-device memory and optional windows."""

    tasks: tuple[Task, ...]
    precedences: tuple[Precedence, ...] = ()
    devices: int = 1
    # One capacity for every device, or one per device (a spec's `capacities`); None: no limit.
    capacity: int | tuple[int, ...] | None = None
    initial_memory: tuple[int, ...] = ()
    span_limit: int | None = None
    horizon: int | None = None
    # With Objective.MAKESPAN: only schedules ending before this count (the caller already has one
    # ending at it), so "infeasible" means none shorter exists. Proving that is cheaper than proving
    # the old schedule optimal (the end re-solve of X-shape D=4 N=8: 3.6 -> 1.8 s of CPU).
    makespan_below: int | None = None
    # Optional start-time hints (same order as tasks); backends may use them as a warm start.
    hints: tuple[int, ...] | None = field(default=None, compare=False)

    def cap(self, d: int) -> int:
        """Device `d`'s memory capacity (only meaningful when `capacity` is set)."""
        return self.capacity[d] if isinstance(self.capacity, tuple) else self.capacity

    def init_mem(self, d: int) -> int:
        return self.initial_memory[d] if d < len(self.initial_memory) else 0

    def on_device(self, d: int) -> list[int]:
        return [i for i, t in enumerate(self.tasks) if d in t.devices]

    def memory_devices(self) -> list[int]:
        """Devices whose memory can ever matter (some task there changes memory)."""
        if self.capacity is None:
            return []
        return [d for d in range(self.devices) if any(self.tasks[i].memory for i in self.on_device(d))
                or self.init_mem(d)]

    def default_horizon(self) -> int:
        """A horizon no optimal (or anchored) solution needs to exceed: everything run serially
        after the latest release / pinned time, plus every positive lag."""
        if self.horizon is not None:
            return self.horizon
        total = sum(t.duration for t in self.tasks)
        late = max([t.release for t in self.tasks] + [t.fixed or 0 for t in self.tasks] + [0])
        lags = sum(max(0, p.lag) for p in self.precedences)
        window = self.span_limit or 0
        return total + late + lags + window + 1


@dataclass(frozen=True)
class Solution:
    """A solve's answer. `starts` is None when no solution was found (`status` says why)."""

    status: str  # "optimal", "feasible" (time limit hit), "infeasible", "unknown" (nothing found in time)
    starts: tuple[int, ...] | None = None
    objective: int | None = None
    anchor: int = 0
    # With Objective.MAKESPAN: the best lower bound on the makespan the solver proved (equal to
    # `objective` when optimal); None when the backend does not report one.
    bound: int | None = None
    # The deterministic time the solve used (CP-SAT's); None when the backend does not report it.
    deterministic: float | None = None

    @property
    def ok(self) -> bool:
        return self.starts is not None

    @property
    def proven(self) -> bool:
        """True when the answer is known optimal (or, for `feasible`, simply found)."""
        return self.status == "optimal"
