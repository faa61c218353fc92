"""TO: the time-optimal schedule of all N micro-batches, found by one solver call.

This is the paper's reference point (§3.2 and §6): every block of every micro-batch becomes one
task, and the solver minimises the makespan under the dependency, exclusivity and memory rules.
It is exact but its cost grows exponentially with N, so it is meant for small N: it proves how far
Tessel's repetend-based schedules are from the optimum.

Two facts keep the model small without losing optimal solutions:

* micro-batches are interchangeable, so some optimal schedule runs each block's instances in
  micro-batch order (relabel the k-th earliest instance of every block as micro-batch k: each
  dependency and each device's memory sum is unchanged) -- hence ``(b, n)`` before ``(b, n+1)``;
* any valid schedule already known (a baseline, or Tessel's) bounds the horizon and warm-starts
  the solver.

The solve has a deterministic budget (`TO_EFFORT`: CP-SAT's deterministic time, Z3's resource
limit), so the same spec and N give the same TO on every run and under any load; a wall-clock
limit applies only when the caller passes one.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

from tessel_dsl.analysis import lower_bound, microbatch_memory
from tessel_dsl.errors import InfeasibleError, TesselError
from tessel_dsl.ir import Spec
from tessel_dsl.plan import SearchInfo
from tessel_dsl.schedule import Schedule, Slot
from tessel_dsl.search.lags import lag
from tessel_dsl.search.notes import note, stopped_by
from tessel_dsl.units import capacity_in, memory_in
from tessel_dsl.validate import validate

TO_EFFORT = 60.0  # deterministic solver budget of one TO solve (about seconds of one core)


class OptimalTimeout(TesselError):
    """The budget or time limit ran out before the solver found any schedule."""


@dataclass(frozen=True)
class OptimalResult:
    """The TO schedule and how it was found (`info.proven` is False when the budget or limit cut
    it short; `info.notes` say which). `info.makespan_bound` is the lower bound on the makespan
    the solver proved (the makespan itself when proven; 0 when the backend reports none), so an
    unproven TO still says how far from the optimum it can be."""

    schedule: Schedule
    info: SearchInfo


def starts_in_order(spec: Spec, slots) -> dict[tuple[str, int], int]:
    """(block, micro-batch) -> start with each block's instances relabelled in order of start:
    still a valid schedule (the module text says why), and one the micro-batch order rule of
    the models here admits."""
    start: dict[tuple[str, int], int] = {}
    for b in spec.blocks:
        times = sorted(s.start for s in slots if s.block == b.name)
        start.update(((b.name, mb), t) for mb, t in enumerate(times))
    return start


def optimal(spec: Spec, microbatches: int | None = None, *, solver: str = "auto",
            time_limit: float | None = None, effort: float | None = TO_EFFORT, hint: Schedule | None = None,
            workers: int | None = None) -> OptimalResult:
    """Minimise the makespan of `microbatches` micro-batches (default: the spec's N) under M.

    `effort` is the solve's deterministic budget (None: unbounded); `time_limit` (seconds, None:
    none) adds a wall-clock limit, which makes the answer depend on the machine's speed and load.
    `hint`, if given, must be a valid schedule of the same spec and N; its makespan caps the
    horizon and its start times seed the solver. Raises InfeasibleError when no schedule fits M
    and OptimalTimeout when the budget or limit passes with no schedule found.
    """
    from tessel_dsl.search.solvers import Precedence, Problem, Task, microbatch_order, resolve, solve

    n = spec.microbatches if microbatches is None else microbatches
    if n < 1:
        raise TesselError(f"TO needs at least 1 micro-batch, got {n}")
    name = resolve(solver)
    need = microbatch_memory(spec)
    worst = max(range(spec.devices), key=lambda d: need[d] - spec.capacity(d), default=0)
    if spec.devices and need[worst] > spec.capacity(worst):
        raise InfeasibleError(f"memory {memory_in(spec.units, spec.capacity(worst))} on device {worst} is below the "
                              f"{memory_in(spec.units, need[worst])}{' units' if spec.units.memory_label == 'unit' else ''} "
                              "one micro-batch "
                              f"needs there")
    keys = [(b.name, mb) for mb in range(n) for b in spec.blocks]
    index = {k: i for i, k in enumerate(keys)}
    tasks = tuple(Task(k, spec.block(k[0]).time, spec.block(k[0]).devices, spec.block(k[0]).memory) for k in keys)
    prec = [Precedence(index[(e.src, mb)], index[(e.dst, mb)], lag(spec, e.src, e.dst)) for mb in range(n) for e in spec.edges]
    prec += microbatch_order(index)
    hints = horizon = None
    if hint is not None:
        if hint.microbatches != n:
            raise TesselError(f"TO hint has {hint.microbatches} micro-batches, expected {n}")
        # Relabel the hint so that each block's copies run in micro-batch order, as the model
        # requires (the same relabelling that makes that constraint safe keeps the hint valid).
        start = starts_in_order(spec, hint.slots)
        hints = tuple(start[k] for k in keys)
        horizon = hint.makespan(spec)
    problem = Problem(tasks, tuple(prec), spec.devices, spec.capacities, horizon=horizon, hints=hints)
    options = {"workers": workers} if workers and name == "cpsat" else {}
    t0, cpu0 = time.perf_counter(), time.process_time()
    sol = solve(problem, "makespan", time_limit, solver=name, effort=effort, **options)
    seconds, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    if sol.status == "infeasible":
        raise InfeasibleError(f"no schedule of {n} micro-batches fits memory {capacity_in(spec)}")
    # Which one stopped an unfinished solve: the wall clock only if it was given, and either it
    # has passed by our clock or the solver stopped short of its deterministic budget (CP-SAT
    # may stop a hair before our clock reads the limit: 0.05 s limits were misreported so).
    short = effort is not None and sol.deterministic is not None and sol.deterministic < effort
    if time_limit is not None and (seconds >= time_limit or short):
        cut = {"cause": "time limit", "limit": time_limit}
    else:
        cut = {"cause": "budget", "effort": effort} if effort is not None else {"cause": "solver"}
    said = note("to-proven") if sol.proven else note("to-cut", **cut)
    starts = sol.starts
    if not sol.ok:
        if hints is None:
            raise OptimalTimeout(f"TO found no schedule of {n} micro-batches within {stopped_by(cut)} ({name})")
        starts = hints  # the solver did not even get back to the known schedule: report that one
        said = note("to-hint", **cut)
    slots = tuple(sorted(Slot(t, b, mb) for (b, mb), t in zip(keys, starts)))
    schedule = Schedule(microbatches=n, slots=slots, name="to")
    validate(spec, schedule)
    lb = lower_bound(spec)
    bound = schedule.makespan(spec) if sol.proven else min(sol.bound or 0, schedule.makespan(spec))
    info = SearchInfo(solver=name, method="to", proven=sol.proven, seconds=cpu, lower_bound=lb,
                      period=0, nr=n, notes=(said,), makespan_bound=bound)
    return OptimalResult(schedule, info)
