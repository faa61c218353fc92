"""The Tessel search driver (paper Algorithm 1 with the lazy-search optimisation of §5).

1. Bounds: the repetend period can't beat the busiest device's work (`analysis.lower_bound`), and
   at most `analysis.max_inflight` micro-batches fit in memory, which caps ``N_R``.
2. Repetend: the smallest period ``P`` for which some offset assignment schedules, found either by
   enumerating pruned assignments (`repetend.py`) or with one cyclic model per period
   (`modulo.py`). While looking, warmup and cooldown are only checked for satisfiability.
3. Completion: time-optimal warmup and cooldown, once, for the chosen repetend (`completion.py`).
4. Extension to N micro-batches and compaction (`extend.py`); N below ``N_R`` is solved directly.

Every schedule returned has passed `validate.validate`.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Callable

from .analysis import lower_bound, microbatch_memory
from .compact import compact
from .completion import solve_cooldown, solve_warmup
from .errors import InfeasibleError, TesselError
from .extend import Parts, extend
from .ir import Spec
from .plan import SearchInfo
from .repetend import Counters, enumerate_search, make_repetend, nr_limit, repetend_problem, serial_repetend
from .schedule import Repetend, Schedule, Slot
from .solvers import Objective, Precedence, Problem, Task, resolve, solve
from .validate import validate
from .modulo import POLISH_EFFORT

METHODS = ("enumerate", "modulo")
DEFAULT_METHOD = "modulo"  # measured faster (docs/search.md)


@dataclass(frozen=True)
class Progress:
    """A snapshot for live displays: what the search is doing right now."""

    phase: str
    lower_bound: int
    period: int = 0
    nr: int = 0
    best: int | None = None
    tried: int = 0
    pruned: int = 0
    elapsed: float = 0.0


@dataclass(frozen=True)
class SearchResult:
    """The searched schedule (warmup/repetend/cooldown filled when a repetend exists) and how."""

    schedule: Schedule
    info: SearchInfo


class _Clock:
    def __init__(self, time_limit: float | None):
        self.t0 = time.monotonic()
        self.limit = time_limit

    def left(self) -> float | None:
        if self.limit is None:
            return None
        return self.limit - (time.monotonic() - self.t0)

    def elapsed(self) -> float:
        return time.monotonic() - self.t0


def _check_inputs(spec: Spec, n: int, method: str) -> None:
    if n < 1:
        raise TesselError(f"the number of micro-batches must be at least 1 (got {n})")
    if method not in ("auto",) + METHODS:
        raise TesselError(f"unknown search method {method!r} (choose one of: auto, {', '.join(METHODS)})")
    need = microbatch_memory(spec)
    for d, m in enumerate(need):
        if m > spec.memory:
            raise InfeasibleError(
                f"memory M={spec.memory} is below what one micro-batch needs on device {d} ({m}); "
                f"no schedule exists: raise M to at least {max(need)} or split the blocks on device {d}")


def direct(spec: Spec, n: int, solver: str, time_limit: float | None) -> tuple[tuple[Slot, ...], bool]:
    """Time-optimal schedule of all `n` micro-batches in one solve (small N only).

    Copies of the same block run in micro-batch order (Property 1), which removes symmetric
    solutions without losing the optimum.
    """
    keys = [(b.name, mb) for mb in range(n) for b in spec.blocks]
    index = {k: i for i, k in enumerate(keys)}
    tasks = tuple(Task(k, spec.block(k[0]).time, spec.block(k[0]).devices, spec.block(k[0]).memory) for k in keys)
    prec = [Precedence(index[(e.src, mb)], index[(e.dst, mb)]) for mb in range(n) for e in spec.edges]
    prec += [Precedence(index[(b.name, mb)], index[(b.name, mb + 1)], -b.time)
             for b in spec.blocks for mb in range(n - 1)]
    sol = solve(Problem(tasks, tuple(prec), spec.devices, capacity=spec.memory), Objective.MAKESPAN,
                time_limit, solver=solver)
    if not sol.ok:
        if sol.status == "infeasible":
            raise InfeasibleError(f"no schedule of {n} micro-batches fits memory M={spec.memory}")
        raise TesselError(f"the time limit ran out before any schedule of {n} micro-batches was found")
    slots = compact(spec, [Slot(t, b, mb) for (b, mb), t in zip(keys, sol.starts)])
    return slots, sol.proven


def _polish(spec: Spec, rep: Repetend, solver: str, left: float | None) -> Repetend:
    """Re-solve a found repetend's offsets at its period for the shortest micro-batch latency."""
    offsets = {s.block: s.mb for s in rep.slots}
    prob = repetend_problem(spec, offsets, rep.period)
    index = {b.name: i for i, b in enumerate(spec.blocks)}
    tasks = tuple(replace(t, skew=-rep.period * offsets[t.key]) for t in prob.tasks)
    hints = tuple(s.start for s in sorted(rep.slots, key=lambda s: index[s.block]))
    sol = solve(replace(prob, tasks=tasks, hints=hints), Objective.SPREAD, left, solver=solver, effort=POLISH_EFFORT)
    return make_repetend(spec, offsets, sol.starts, rep.period) if sol.ok else rep


def find_repetend(spec: Spec, *, solver: str, method: str, clock: _Clock, counters: Counters,
                  report: Callable[[str], None]) -> tuple[Repetend, bool, str]:
    """The best repetend (lazily checked for completion), whether that is proven, and a note."""
    lower, max_nr = lower_bound(spec), nr_limit(spec)

    def accept(rep: Repetend) -> bool:
        # Satisfiability only (lazy search); unbounded, since a repetend can't be used unchecked.
        return (solve_warmup(spec, rep, objective=Objective.FEASIBLE, solver=solver) is not None
                and solve_cooldown(spec, rep, objective=Objective.FEASIBLE, solver=solver) is not None)

    fallback = serial_repetend(spec, solver, counters)
    upper = fallback.period
    notes = []
    if method == "modulo":
        complete = True
        for period in range(lower, upper):
            counters.period, counters.nr = period, max_nr
            report("repetend (modulo)")
            left = clock.left()
            if left is not None and left <= 0:
                complete = False
                break
            from .modulo import solve_period

            counters.tried += 1
            status, rep = solve_period(spec, period, max_nr, solver, left)
            if status == "unknown":
                complete = False
                break
            if rep is not None:
                if accept(rep):
                    return rep, complete and status == "optimal", ""
                notes.append(f"the cyclic model's repetend at P={period} has no valid warmup/cooldown; enumerating")
                method = "enumerate"
                break
            counters.pruned += 1
        else:
            return fallback, complete, ""
        if method == "modulo":
            return fallback, False, f"time limit reached before period {counters.period} was settled"
    rep, complete = enumerate_search(
        spec, lower=lower, upper=upper, max_nr=max_nr, solver=solver, deadline=clock.left,
        counters=counters, accept=accept, on_progress=lambda: report("repetend (enumerate)"))
    if rep is None:
        if not complete:
            notes.append(f"time limit reached while trying period {counters.period}; using a one-micro-batch repetend")
        return fallback, complete, "; ".join(notes)
    rep = _polish(spec, rep, solver, clock.left())
    return rep, complete, "; ".join(notes)


def search(spec: Spec, *, microbatches: int | None = None, solver: str = "auto", method: str = "auto",
           time_limit: float | None = None, progress: Callable[[Progress], None] | None = None) -> SearchResult:
    """Search a Tessel schedule for `spec` and extend it to `microbatches` (default: the spec's N).

    `solver` is ``auto``, ``cpsat`` or ``z3``; `method` is ``auto``, ``enumerate`` or ``modulo``;
    with `time_limit` (seconds) the best valid schedule found so far is returned and
    ``info.proven`` is False, with ``info.note`` saying why.
    """
    n = spec.microbatches if microbatches is None else microbatches
    _check_inputs(spec, n, method)
    solver = resolve(solver)
    method = DEFAULT_METHOD if method == "auto" else method
    clock, counters = _Clock(time_limit), Counters()
    lower = lower_bound(spec)
    best: list[int | None] = [None]

    def report(phase: str) -> None:
        if progress is not None:
            progress(Progress(phase, lower, counters.period, counters.nr, best[0], counters.tried,
                              counters.pruned, clock.elapsed()))

    report("bounds")
    net = [sum(b.memory for b in spec.blocks_on(d)) for d in range(spec.devices)]
    if any(x > 0 for x in net):
        # Memory would grow with every repetend, so none can repeat: solve the N micro-batches directly.
        report("direct solve")
        slots, proven = direct(spec, n, solver, clock.left())
        sched = Schedule(n, slots, name="tessel")
        validate(spec, sched)
        dev = max(range(spec.devices), key=lambda d: net[d])
        info = SearchInfo(solver, "direct", proven, clock.elapsed(), lower, 0, 0, counters.tried, 0,
                          f"a micro-batch leaves {net[dev]} memory unit(s) on device {dev}, so no repetend can "
                          f"repeat; all {n} micro-batches were solved directly")
        return SearchResult(sched, info)

    rep, proven, note = find_repetend(spec, solver=solver, method=method, clock=clock, counters=counters,
                                      report=report)
    best[0] = rep.period
    counters.period, counters.nr = rep.period, rep.nr
    report("completion")
    warm = solve_warmup(spec, rep, solver=solver, time_limit=clock.left())
    cool = solve_cooldown(spec, rep, solver=solver, time_limit=clock.left())
    if warm is None or cool is None:  # time ran out in the optimising solve: settle for any valid one
        warm = warm or solve_warmup(spec, rep, objective=Objective.FEASIBLE, solver=solver)
        cool = cool or solve_cooldown(spec, rep, objective=Objective.FEASIBLE, solver=solver)
        proven = False
        note = note or "time limit reached during warmup/cooldown completion"
    if warm is None or cool is None:
        raise InfeasibleError(f"the repetend (P={rep.period}, N_R={rep.nr}) has no valid warmup or cooldown "
                              f"under M={spec.memory}")
    if not (warm.proven and cool.proven):
        proven = False
        note = note or "time limit reached before warmup/cooldown were proven time-optimal"
    parts = Parts(warm.slots, rep, cool.slots)
    report("extension")
    if n >= rep.nr:
        sched = extend(spec, parts, n)
    else:
        slots, direct_proven = direct(spec, n, solver, clock.left())
        proven = proven and direct_proven
        # Phases stay numbered for N = N_R so the plan can still be extended (see extend.parts_of).
        sched = Schedule(n, slots, name="tessel", warmup=parts.warmup, repetend=rep, cooldown=parts.cooldown)
        validate(spec, sched)
        note = "; ".join(x for x in (note, f"N={n} is below the repetend's N_R={rep.nr}: solved the {n} "
                                     "micro-batch(es) directly (the repetend is kept for larger N)") if x)
    if not proven and not note:
        note = "a solver call hit the time limit"
    info = SearchInfo(solver, method, proven, clock.elapsed(), lower, rep.period, rep.nr,
                      counters.tried, counters.pruned, note)
    report("done")
    return SearchResult(sched, info)
