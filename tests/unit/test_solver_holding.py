"""Memory stated as what groups of tasks hold (`solvers/holding.py`) means the same as the running sum.

The reference is the z3 backend, which ignores groups and states memory as the running sum in
start order, and a direct recount of the level from a solution's start times.
"""
from __future__ import annotations

import random

from tessel_dsl.search.solvers import Objective, Precedence, Problem, Task, solve
from tessel_dsl.search.solvers.holding import holdings


def running_levels(problem: Problem, starts: tuple[int, ...], d: int) -> dict[int, int]:
    """Device `d`'s level just after each start time: the documented semantics, counted directly."""
    on = [i for i in problem.on_device(d) if problem.tasks[i].memory]
    return {t: problem.init_mem(d) + sum(problem.tasks[i].memory for i in on if starts[i] <= t)
            for t in {starts[i] for i in on}}


def held_levels(problem: Problem, starts: tuple[int, ...], d: int) -> dict[int, int]:
    """The same levels summed from `holdings`: constant part plus every hold active at t."""
    constant, holds = holdings(problem)[d]
    out = {}
    for t in running_levels(problem, starts, d):
        active = [h for h in holds if (h.since is None or starts[h.since] <= t)
                  and (h.until is None or t < starts[h.until])]
        out[t] = constant + sum(h.amount for h in active)
    return out


def pipelines(mbs: int, cap: int) -> Problem:
    """Two pipelines in opposite directions over two devices (X-shape in small): per micro-batch,
    forwards take 1 unit of memory and their backwards give it back; the two pipelines' tasks on
    one device are not ordered against each other, so a group is two chains, not one."""
    tasks, prec = [], []
    for mb in range(mbs):
        base = len(tasks)
        tasks += [Task(("f0", mb), 1, (0,), 1, group=mb), Task(("f1", mb), 1, (1,), 1, group=mb),
                  Task(("b1", mb), 2, (1,), -1, group=mb), Task(("b0", mb), 2, (0,), -1, group=mb),
                  Task(("g1", mb), 1, (1,), 1, group=mb), Task(("g0", mb), 1, (0,), 1, group=mb),
                  Task(("c0", mb), 2, (0,), -1, group=mb), Task(("c1", mb), 2, (1,), -1, group=mb)]
        prec += [Precedence(base + a, base + b) for a, b in ((0, 1), (1, 2), (2, 3), (4, 5), (5, 6), (6, 7))]
    return Problem(tuple(tasks), tuple(prec), 2, capacity=cap)


def test_two_unordered_pipelines_give_two_chains_per_group_and_the_running_sum_s_optimum():
    p = pipelines(3, 2)
    constant, holds = holdings(p)[0]
    assert constant == 0
    # per micro-batch on device 0: f0 holds 1 until b0, g0 holds 1 until c0 (no hold is unbounded)
    assert sorted((p.tasks[h.since].key, p.tasks[h.until].key, h.amount) for h in holds) == sorted(
        [(("f0", mb), ("b0", mb), 1) for mb in range(3)] + [(("g0", mb), ("c0", mb), 1) for mb in range(3)])
    grouped = solve(p, Objective.MAKESPAN, solver="cpsat")
    reference = solve(p, Objective.MAKESPAN, solver="z3")
    assert grouped.status == reference.status == "optimal"
    assert grouped.objective == reference.objective
    for d in range(2):
        assert max(running_levels(p, grouped.starts, d).values()) <= 2


def random_grouped_problem(rng: random.Random) -> Problem:
    n, devices = rng.randint(2, 8), rng.randint(1, 3)
    tasks = []
    for i in range(n):
        devs = tuple(sorted(rng.sample(range(devices), rng.randint(1, min(2, devices)))))
        tasks.append(Task(i, rng.randint(1, 3), devs, rng.choice([-2, -1, 0, 1, 1, 2]),
                          group=rng.choice([None, 0, 0, 1])))
    prec = tuple(Precedence(a, b, rng.choice([0, 0, 1, -1])) for a in range(n) for b in range(a + 1, n)
                 if rng.random() < 0.35)
    init = tuple(rng.choice([0, 0, 1, 2]) for _ in range(devices))
    return Problem(tuple(tasks), prec, devices, capacity=rng.randint(1, 4), initial_memory=init)
