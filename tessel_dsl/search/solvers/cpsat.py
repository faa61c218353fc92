"""OR-Tools CP-SAT backend: interval variables, one no-overlap per device, a reservoir per device."""
from __future__ import annotations

import math

from tessel_dsl.search.solvers.problem import Objective, Problem, Solution, makespan_lower_bound

SEED = 1  # CP-SAT's random seed, fixed so that a model always gets the same answer


def configure(params, *, workers: int = 1, effort: float | None = None, time_limit: float | None = None) -> None:
    """Settings under which CP-SAT's answer depends on the model alone, not on machine load.

    One worker, or several in CP-SAT's interleaved (deterministic) mode; a fixed seed; `effort`
    as a deterministic time budget. Only `time_limit`, a wall-clock limit the user asked for,
    can make the answer depend on how fast the machine runs.
    """
    params.num_workers = max(1, workers)
    params.interleave_search = workers > 1
    params.random_seed = SEED
    if effort is not None:
        params.max_deterministic_time = effort
    if time_limit is not None:
        params.max_time_in_seconds = max(0.01, float(time_limit))


def run_model(model, *, effort: float | None, time_limit: float | None, presolve: bool = True,
              linearization: int | None = None) -> tuple[str, object]:
    """Solve a CP-SAT model built by a caller (the cyclic models) under `configure`'s settings:
    (status, solver), status "infeasible", "unknown" (nothing found in the budget), or "found"
    (read the values from the solver). `presolve` False skips CP-SAT's presolve, whose CPU its
    deterministic time does not count (`modulo.PRESOLVE_MAX_BLOCKS`). `linearization`: CP-SAT's
    `linearization_level`, when not its default."""
    from tessel_dsl.search.solvers.cpsat_module import cp_model

    solver = cp_model().CpSolver()
    configure(solver.parameters, effort=effort, time_limit=time_limit)
    solver.parameters.cp_model_presolve = presolve
    if linearization is not None:
        solver.parameters.linearization_level = linearization
    status = solver.solve(model)
    if status == cp_model().INFEASIBLE:
        return "infeasible", solver
    if status not in (cp_model().OPTIMAL, cp_model().FEASIBLE):
        return "unknown", solver
    return "found", solver


def _add_memory(m, problem: Problem, starts: list, anchor, horizon: int) -> tuple[bool, bool]:
    """Each device's memory: one cumulative over what groups hold (`holding.py`) when some task
    has a group, else a reservoir. Returns (can fit, a cumulative was used); it cannot fit when a
    device's fixed part alone exceeds its capacity."""
    if any(t.group is not None for t in problem.tasks):
        return _add_holds(m, problem, starts, anchor, horizon)
    for d in problem.memory_devices():
        # No grouping known: CP-SAT's reservoir states the running sum directly (a cumulative of
        # one-task holds was measured no faster, and the repetend models use this path).
        init = problem.init_mem(d)
        if init > problem.cap(d):
            return False, False
        on = [i for i in problem.on_device(d) if problem.tasks[i].memory]
        times = [starts[i] for i in on]
        changes = [problem.tasks[i].memory for i in on]
        if init:
            # The initial level is an event no later than any task (starts are >= 0).
            times.append(m.new_constant(-1) if anchor is None else anchor - 1)
            changes.append(init)
        floor = -sum(abs(c) for c in changes) - 1
        m.add_reservoir_constraint(times, changes, min(floor, 0), max(problem.cap(d), 0))
    return True, False


def _add_holds(m, problem: Problem, starts: list, anchor, horizon: int) -> tuple[bool, bool]:
    """Memory as held intervals, one cumulative per device: (can fit, a cumulative was used)."""
    from tessel_dsl.search.solvers.holding import holdings

    # Times before / after every start (pinned tasks sit at anchor + fixed).
    margin = max((t.duration for t in problem.tasks), default=0) + 1
    if anchor is not None:
        margin += max((abs(t.fixed) for t in problem.tasks if t.fixed is not None), default=0)
    low, high = -4 * horizon - margin, 4 * horizon + margin
    used = False
    for d, (constant, holds) in holdings(problem).items():
        room = problem.cap(d) - constant
        if room < 0:
            return False, used
        intervals = [m.new_interval_var(starts[h.since] if h.since is not None else low,
                                        m.new_int_var(0, high - low, ""),
                                        starts[h.until] if h.until is not None else high, "")
                     for h in holds]
        if intervals:
            m.add_cumulative(intervals, [h.amount for h in holds], room)
            used = True
    return True, used


PRESOLVE_MAX_TASKS = 500


def solve(problem: Problem, objective: Objective = Objective.MAKESPAN, time_limit: float | None = None,
          workers: int = 1, effort: float | None = None) -> Solution:
    """Solve `problem` with CP-SAT (see `tessel_dsl.search.solvers.problem` for the semantics).

    `effort` caps CP-SAT's deterministic time, so a budgeted optimisation gives the same answer
    on every run; without `time_limit` nothing else limits the solve.
    """
    from tessel_dsl.search.solvers.cpsat_module import cp_model as _cp_model

    cp_model = _cp_model()

    objective = Objective(objective)
    m = cp_model.CpModel()
    horizon = problem.default_horizon()
    anchor = m.new_int_var(0, horizon, "anchor") if objective is Objective.ANCHOR else None
    starts: list = []
    intervals: list = []
    for i, t in enumerate(problem.tasks):
        if t.fixed is not None:
            s = anchor + t.fixed if anchor is not None else m.new_constant(t.fixed)
        else:
            s = m.new_int_var(t.release, horizon, f"s{i}")
        starts.append(s)
        intervals.append(m.new_fixed_size_interval_var(s, t.duration, f"iv{i}"))
    for d in range(problem.devices):
        on = problem.on_device(d)
        if len(on) > 1:
            m.add_no_overlap([intervals[i] for i in on])
    for p in problem.precedences:
        m.add(starts[p.after] >= starts[p.before] + problem.tasks[p.before].duration + p.lag)
    if problem.span_limit is not None:
        for d in range(problem.devices):
            on = problem.on_device(d)
            if not on:
                continue
            a = m.new_int_var(-horizon, horizon, f"win{d}")
            for i in on:
                m.add(starts[i] >= a)
                m.add(starts[i] + problem.tasks[i].duration <= a + problem.span_limit)
    held = False
    if problem.capacity is not None:
        fits, held = _add_memory(m, problem, starts, anchor, horizon)
        if not fits:
            return Solution("infeasible")
    makespan = None
    if objective is Objective.MAKESPAN and problem.tasks:
        # The bound lets CP-SAT stop (proven) once a schedule reaches it.
        makespan = m.new_int_var(min(makespan_lower_bound(problem), 2 * horizon), 2 * horizon, "makespan")
        for s, t in zip(starts, problem.tasks):
            m.add(makespan >= s + t.duration)
        if problem.makespan_below is not None:
            m.add(makespan <= problem.makespan_below - 1)
        m.minimize(makespan)
    elif anchor is not None:
        m.minimize(anchor)
    spread = None
    if objective is Objective.SPREAD and problem.tasks:
        skews = [t.skew for t in problem.tasks]
        lo = m.new_int_var(-2 * horizon + min(skews), 2 * horizon + max(skews), "lo")
        hi = m.new_int_var(-2 * horizon + min(skews), 2 * horizon + max(skews), "hi")
        m.add_min_equality(lo, [s + t.skew for s, t in zip(starts, problem.tasks)])
        m.add_max_equality(hi, [s + t.duration + t.skew for s, t in zip(starts, problem.tasks)])
        spread = hi - lo
        m.minimize(spread)
    if problem.hints is not None:
        for s, h, t in zip(starts, problem.hints, problem.tasks):
            if t.fixed is None:
                m.add_hint(s, h)
    solver = cp_model.CpSolver()
    configure(solver.parameters, workers=workers, effort=effort, time_limit=time_limit)
    # CP-SAT's presolve is not charged to the deterministic budget: on a large model (an 8-GPU
    # V's warmup, 965 tasks) it took 22 s of CPU within an effort of 2 and the solve still found
    # nothing; without it the same budget costs 6 s. Small models keep it (it often proves them).
    solver.parameters.cp_model_presolve = len(problem.tasks) <= PRESOLVE_MAX_TASKS
    if held:
        # Without the LP relaxation: on memory stated as held intervals the proof that nothing is
        # shorter took a third of the deterministic time (X-shape D=4 N=8 end re-solve).
        solver.parameters.linearization_level = 0
    status = solver.solve(m)
    if status == cp_model.INFEASIBLE:
        return Solution("infeasible")
    # CP-SAT's objective bound is a float; the makespan is an integer, so its ceiling still holds.
    bound = math.ceil(solver.best_objective_bound - 1e-6) if makespan is not None else None
    used = solver.response_proto.deterministic_time
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return Solution("unknown", bound=bound, deterministic=used)
    values = tuple(int(solver.value(s)) for s in starts)
    proven = status == cp_model.OPTIMAL or objective is Objective.FEASIBLE
    obj = None
    if makespan is not None:
        obj = int(solver.value(makespan))
    elif anchor is not None:
        obj = int(solver.value(anchor))
    elif spread is not None:
        obj = int(solver.value(spread))
    return Solution("optimal" if proven else "feasible", values, obj,
                    int(solver.value(anchor)) if anchor is not None else 0, bound=bound, deterministic=used)
