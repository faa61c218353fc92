"""Does a given assignment of start times satisfy a `Problem`? (the semantics in `problem.py`)

Used to accept a schedule built without a solver (a witness) exactly where a solver would have
accepted it, so that a satisfiability question can be answered without solving.
"""
from __future__ import annotations

from tessel_dsl.search.solvers.problem import Problem


def satisfies(problem: Problem, starts: tuple[int, ...] | list[int], anchor: int = 0) -> bool:
    """True when `starts` meets every rule of `problem`: releases, pinned tasks (at ``anchor +
    fixed``), precedences with their lags, one task at a time per device, per-device windows of
    ``span_limit`` and the memory capacity (running sum in start order from the initial level).
    The solvers' horizon is a search bound, not a rule, and is not checked."""
    tasks = problem.tasks
    if len(starts) != len(tasks):
        return False
    for t, s in zip(tasks, starts):
        if t.fixed is not None and s != anchor + t.fixed:
            return False
        if t.fixed is None and s < t.release:
            return False
    for p in problem.precedences:
        if starts[p.after] < starts[p.before] + tasks[p.before].duration + p.lag:
            return False
    for d in range(problem.devices):
        on = sorted(problem.on_device(d), key=lambda i: starts[i])
        for a, b in zip(on, on[1:]):
            if starts[b] < starts[a] + tasks[a].duration:
                return False
        if problem.span_limit is not None and on:
            if max(starts[i] + tasks[i].duration for i in on) - min(starts[i] for i in on) > problem.span_limit:
                return False
    for d in problem.memory_devices():
        level = problem.init_mem(d)
        if level > problem.cap(d):
            return False
        # Changes at one instant count together (as in CP-SAT's reservoir); a device runs one
        # task at a time, so only zero-length tasks can share a start.
        events: dict[int, int] = {}
        for i in problem.on_device(d):
            if tasks[i].memory:
                events[starts[i]] = events.get(starts[i], 0) + tasks[i].memory
        for t in sorted(events):
            level += events[t]
            if level > problem.cap(d):
                return False
    return True
