"""Z3 backend: integer start times, pairwise disjunctions per device, memory as a running sum.

The optimum is found by bisection over the objective on one incremental solver (push/pop), which
measured faster than `z3.Optimize` on the search's problems (see docs/search.md); `mode="optimize"`
keeps the alternative available for comparison.
"""
from __future__ import annotations

import time

from tessel_dsl.search.solvers.problem import Objective, Problem, Solution, makespan_lower_bound

RLIMIT_PER_EFFORT = 2_000_000  # z3 resource units per unit of `effort` (about a second's work)
SEED = 0  # z3's random seed, fixed so that a model always gets the same answer


class Fresh:
    """The z3 module with every new term and solver in a context of its own.

    z3's shared default context keeps state between solves (term numbering, the resource counter
    behind ``rlimit``), so the second of two identical solves in one process could answer
    differently; a context per solve, with a fixed seed, makes the answer depend on the
    constraints alone.
    """

    def __init__(self):
        import z3

        self._z3 = z3
        self.ctx = z3.Context()

    def __getattr__(self, name: str):
        return getattr(self._z3, name)

    def Int(self, name: str):  # noqa: N802 - mirrors z3's names
        return self._z3.Int(name, self.ctx)

    def IntVal(self, value: int):  # noqa: N802
        return self._z3.IntVal(value, self.ctx)

    def BoolVal(self, value: bool):  # noqa: N802
        return self._z3.BoolVal(value, self.ctx)

    def Solver(self):  # noqa: N802
        s = self._z3.Solver(ctx=self.ctx)
        s.set("random_seed", SEED)
        return s

    def Optimize(self):  # noqa: N802
        return self._z3.Optimize(ctx=self.ctx)


def _build(problem: Problem, objective: Objective, z3):
    horizon = problem.default_horizon()
    anchor = z3.Int("anchor") if objective is Objective.ANCHOR else None
    cons = []
    if anchor is not None:
        cons += [anchor >= 0, anchor <= horizon]
    starts = []
    for i, t in enumerate(problem.tasks):
        if t.fixed is not None:
            starts.append(anchor + t.fixed if anchor is not None else z3.IntVal(t.fixed))
        else:
            s = z3.Int(f"s{i}")
            cons += [s >= t.release, s <= horizon]
            starts.append(s)
    tasks = problem.tasks
    for d in range(problem.devices):
        on = problem.on_device(d)
        for x, i in enumerate(on):
            for j in on[x + 1:]:
                if tasks[i].fixed is not None and tasks[j].fixed is not None:
                    continue
                cons.append(z3.Or(starts[i] + tasks[i].duration <= starts[j],
                                  starts[j] + tasks[j].duration <= starts[i]))
    for p in problem.precedences:
        cons.append(starts[p.after] >= starts[p.before] + tasks[p.before].duration + p.lag)
    if problem.span_limit is not None:
        for d in range(problem.devices):
            on = problem.on_device(d)
            if on:
                a = z3.Int(f"win{d}")
                for i in on:
                    cons += [starts[i] >= a, starts[i] + tasks[i].duration <= a + problem.span_limit]
    if problem.capacity is not None:
        for d in problem.memory_devices():
            on = [i for i in problem.on_device(d) if tasks[i].memory]
            init = problem.init_mem(d)
            cons.append(z3.BoolVal(init <= problem.cap(d)))
            # The running sum peaks right after an allocation, so only those points are checked.
            for i in on:
                if tasks[i].memory <= 0:
                    continue
                before = [z3.If(starts[j] < starts[i], tasks[j].memory, 0) for j in on if j != i]
                cons.append(init + tasks[i].memory + z3.Sum(before) <= problem.cap(d)
                            if before else z3.BoolVal(init + tasks[i].memory <= problem.cap(d)))
    return starts, anchor, cons


def _lower(problem: Problem, objective: Objective) -> int:
    if objective is Objective.ANCHOR:
        return 0
    if objective is Objective.SPREAD:
        return max((t.duration for t in problem.tasks), default=0)
    return makespan_lower_bound(problem)


def solve(problem: Problem, objective: Objective = Objective.MAKESPAN, time_limit: float | None = None,
          mode: str = "bisect", effort: float | None = None) -> Solution:
    """Solve `problem` with Z3; `mode` is ``bisect`` (default) or ``optimize``.

    `effort` bounds the first check and the improving ones with Z3's deterministic resource limit
    (``rlimit``).
    """
    z3 = Fresh()

    objective = Objective(objective)
    deadline = None if time_limit is None else time.monotonic() + time_limit
    starts, anchor, cons = _build(problem, objective, z3)
    if objective is Objective.MAKESPAN:
        obj = z3.Int("makespan")
        cons += [obj >= s + t.duration for s, t in zip(starts, problem.tasks)]
        if problem.makespan_below is not None:
            cons.append(obj <= problem.makespan_below - 1)
    elif objective is Objective.SPREAD:
        lo, hi, obj = z3.Int("lo"), z3.Int("hi"), z3.Int("spread")
        for st, t in zip(starts, problem.tasks):
            cons += [lo <= st + t.skew, hi >= st + t.duration + t.skew]
        cons.append(obj == hi - lo)
    else:
        obj = anchor

    def remaining_ms() -> int | None:
        if deadline is None:
            return None
        return max(1, int((deadline - time.monotonic()) * 1000))

    def read(model) -> tuple[tuple[int, ...], int]:
        vals = tuple(model.eval(s, model_completion=True).as_long() for s in starts)
        o = model.eval(obj, model_completion=True).as_long() if obj is not None else None
        return vals, o

    if mode == "optimize" and obj is not None:
        opt = z3.Optimize()
        opt.add(*cons)
        opt.minimize(obj)
        if deadline is not None:
            opt.set("timeout", remaining_ms())
        r = opt.check()
        if r == z3.unsat:
            return Solution("infeasible")
        if r != z3.sat:
            return Solution("unknown")
        vals, o = read(opt.model())
        return Solution("optimal", vals, o, o if anchor is not None else 0)

    s = z3.Solver()
    s.add(*cons)
    if deadline is not None:
        s.set("timeout", remaining_ms())
    if effort is not None:  # the first solution is budgeted too: no solve runs unbounded
        s.set("rlimit", int(effort * RLIMIT_PER_EFFORT))
    r = s.check()
    if r == z3.unsat:
        return Solution("infeasible")
    if r != z3.sat:
        return Solution("unknown")
    best, best_obj = read(s.model())
    if effort is not None:
        s.set("rlimit", int(effort * RLIMIT_PER_EFFORT))
    if obj is None:
        return Solution("optimal", best, None)
    lo, hi = _lower(problem, objective), best_obj  # invariant: optimum in [lo, hi], hi achieved
    proven = True
    while lo < hi:
        mid = (lo + hi) // 2
        if deadline is not None:
            if time.monotonic() >= deadline:
                proven = False
                break
            s.set("timeout", remaining_ms())
        s.push()
        s.add(obj <= mid)
        r = s.check()
        if r == z3.sat:
            best, best_obj = read(s.model())
            hi = best_obj
        elif r == z3.unsat:
            lo = mid + 1
        else:
            s.pop()
            proven = False
            break
        s.pop()
    return Solution("optimal" if proven else "feasible", best, best_obj,
                    best_obj if anchor is not None else 0)
