"""A device's memory as what each group of tasks holds between its changes (solver-neutral).

The `Problem` semantics say: on device ``d`` the level is ``initial + sum of the deltas of the
tasks started so far`` and never exceeds the capacity. CP-SAT's reservoir constraint states that
directly, but it reasons about every pair of events and propagates little (the end re-solve of
X-shape D=4 N=8, 128 tasks: 0.35 units of deterministic time to prove that nothing is shorter).
The same level is a sum of held amounts over intervals, which a cumulative constraint checks with
timetabling and energy reasoning (0.15 units on that solve):

- split the memory tasks of a group (one micro-batch) on ``d`` into chains whose order the
  precedences enforce, ``a_1 .. a_k`` with ``start[a_1] <= ... <= start[a_k]`` (`_chains`: a
  task that frees memory joins the chain of the one that took it), and take each chain's running
  sums ``P_0 = 0, P_1, .. P_k`` (its own change to the level after each of its tasks);
- with ``low = min P_j`` the chain holds ``P_j - low >= 0`` from ``start[a_j]`` to ``start[a_{j+1}]``
  (``-low`` before ``a_1``, ``P_k - low`` after ``a_k``), and ``low`` is a constant part of the
  level: ``level(t) = initial + sum of low over chains + sum of the held amounts at t``, which is
  the original sum term by term.

Any split into enforced chains gives the same level; a task with no group, or none it can follow,
is a chain of its own, for which the identity holds trivially. So the grouping only changes how
tightly the same constraint is stated, never what it allows.
"""
from __future__ import annotations

from dataclasses import dataclass

from tessel_dsl.search.solvers.problem import Problem


@dataclass(frozen=True)
class Hold:
    """`amount` held from the start of task `since` (None: from before any task) to the start of
    task `until` (None: to after every task)."""

    since: int | None
    until: int | None
    amount: int


def holdings(problem: Problem) -> dict[int, tuple[int, list[Hold]]]:
    """Per device whose memory matters: (the constant part of its level, the holds on top of it);
    see the module docstring."""
    succ = _group_successors(problem)
    return {d: _device_holdings(problem, d, succ) for d in problem.memory_devices()}


def _group_successors(problem: Problem) -> dict[int, list[int]]:
    """Precedences inside a group that keep the order of starts (duration + lag >= 0)."""
    tasks = problem.tasks
    succ: dict[int, list[int]] = {}
    for p in problem.precedences:
        a, b = tasks[p.before], tasks[p.after]
        if a.group is not None and a.group == b.group and a.duration + p.lag >= 0:
            succ.setdefault(p.before, []).append(p.after)
    return succ


def _device_holdings(problem: Problem, d: int, succ: dict[int, list[int]]) -> tuple[int, list[Hold]]:
    tasks = problem.tasks
    on = [i for i in problem.on_device(d) if tasks[i].memory]
    groups: dict[object, list[int]] = {}
    for i in on:
        key = ("group", tasks[i].group) if tasks[i].group is not None else ("alone", i)
        groups.setdefault(key, []).append(i)
    constant = problem.init_mem(d)
    holds: list[Hold] = []
    for members in groups.values():
        for chain in _chains(members, tasks, succ):
            levels = [0]
            for i in chain:
                levels.append(levels[-1] + tasks[i].memory)
            low = min(levels)
            constant += low
            bounds = [None, *chain, None]
            for j, level in enumerate(levels):
                if level - low:
                    holds.append(Hold(bounds[j], bounds[j + 1], level - low))
    return constant, holds


def _chains(members: list[int], tasks, succ: dict[int, list[int]]) -> list[list[int]]:
    """`members` split into chains, each in an order the precedences enforce (a path of `succ`
    from each task to the next), so that each task that frees memory follows one that took it.

    A task that takes memory opens a chain; one that frees it joins the chain it is reachable
    from whose level it brings closest to zero (an allocation matched with its release), else it
    stands alone. Any split into enforced chains is exact (module docstring); this one keeps the
    holds short.
    """
    if len(members) == 1:
        return [members]
    inside = set(members)
    reach = {i: _reachable(i, succ) & inside for i in members}
    order = sorted(members, key=lambda i: -len(reach[i]))  # a task before everything it reaches
    chains: list[list[int]] = []
    levels: list[int] = []
    for i in order:
        delta = tasks[i].memory
        best = None
        if delta < 0:
            for c, chain in enumerate(chains):
                if levels[c] > 0 and i in reach[chain[-1]]:
                    key = (abs(levels[c] + delta), -c)
                    if best is None or key < best[0]:
                        best = (key, c)
        if best is None:
            chains.append([i])
            levels.append(delta)
        else:
            chains[best[1]].append(i)
            levels[best[1]] += delta
    return chains


def _reachable(a: int, succ: dict[int, list[int]]) -> set[int]:
    seen, stack = set(), [a]
    while stack:
        for b in succ.get(stack.pop(), ()):
            if b not in seen:
                seen.add(b)
                stack.append(b)
    return seen
