"""All N micro-batches in one solve: the time-optimal schedule for small N.

Used by the driver when N is below the repetend's span, and by the extension for the same case;
kept apart from both so that neither imports the other; and, as `direct_search`, for specs whose
memory grows with every micro-batch, where no repetend can exist.

The solve has a deterministic budget that grows with its size (`direct_effort`): a time-optimal
model of a few hundred block instances can take far longer to settle than the rest of the search,
and a search must not hang. When the budget runs out the best schedule found is returned (not
proven optimal), or `DirectCut` is raised when there is none; callers then fall back to a
schedule built without a solver.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from tessel_dsl.analysis import lower_bound
from tessel_dsl.errors import InfeasibleError, ScheduleError, TesselError
from tessel_dsl.ir import Spec
from tessel_dsl.plan import SearchInfo
from tessel_dsl.schedule import Schedule, Slot
from tessel_dsl.search.bounds import makespan_bound
from tessel_dsl.search.clock import Clock
from tessel_dsl.search.compact import compact
from tessel_dsl.search.lags import lag
from tessel_dsl.search.notes import note
from tessel_dsl.search.result import SearchResult
from tessel_dsl.search.solvers import Objective, Precedence, Problem, Task, solve
from tessel_dsl.units import capacity_in
from tessel_dsl.validate import validate

if TYPE_CHECKING:
    from tessel_dsl.search.repetend import Counters

# Deterministic budget of one direct solve (about seconds of one core): this much per block
# instance, and at least DIRECT_MIN_EFFORT, so that small solves are never cut and large ones
# stop in time proportional to their size.
DIRECT_EFFORT_PER_TASK = 0.01
DIRECT_MIN_EFFORT = 2.0


class DirectCut(TesselError):
    """The budget (or time limit) ran out before the direct solve found any schedule."""


def direct_effort(tasks: int) -> float:
    """The deterministic budget of a direct solve of `tasks` block instances."""
    return max(DIRECT_MIN_EFFORT, DIRECT_EFFORT_PER_TASK * tasks)


def direct(spec: Spec, n: int, solver: str, time_limit: float | None,
           effort: float | None = None, hint: tuple[Slot, ...] | None = None) -> tuple[tuple[Slot, ...], bool]:
    """Time-optimal schedule of all `n` micro-batches in one solve (small N only), and whether it
    is proven optimal (False when the budget `effort`, default `direct_effort`, or `time_limit`
    stopped the solve first). Raises `DirectCut` when they stopped it before any schedule.

    `hint`, a valid schedule of the same `n` micro-batches, warm-starts the solver; the answer is
    then never longer than it (the hint itself comes back when the solver returns nothing
    shorter).

    Copies of the same block run in micro-batch order (Property 1), which removes symmetric
    solutions without losing the optimum.
    """
    keys = [(b.name, mb) for mb in range(n) for b in spec.blocks]
    index = {k: i for i, k in enumerate(keys)}
    tasks = tuple(Task(k, spec.block(k[0]).time, spec.block(k[0]).devices, spec.block(k[0]).memory) for k in keys)
    prec = [Precedence(index[(e.src, mb)], index[(e.dst, mb)], lag(spec, e.src, e.dst)) for mb in range(n) for e in spec.edges]
    prec += [Precedence(index[(b.name, mb)], index[(b.name, mb + 1)], -b.time)
             for b in spec.blocks for mb in range(n - 1)]
    hints = None
    if hint is not None:
        # Each block's copies relabelled in start order, as the model requires (the relabelling
        # that makes that rule safe keeps the hint valid).
        from tessel_dsl.search.optimal import starts_in_order

        start = starts_in_order(spec, hint)
        hints = tuple(start[k] for k in keys)
    problem = Problem(tasks, tuple(prec), spec.devices, capacity=spec.capacities, hints=hints)
    sol = solve(problem, Objective.MAKESPAN, time_limit, solver=solver,
                effort=direct_effort(len(tasks)) if effort is None else effort)
    if sol.status == "infeasible":
        raise InfeasibleError(f"no schedule of {n} micro-batches fits memory {capacity_in(spec)}")
    if hint is not None and (not sol.ok or (not sol.proven and _span(spec, sol.starts, keys) >= _span(spec, hints, keys))):
        return compact(spec, hint), False
    if not sol.ok:
        raise DirectCut(f"the solver budget or time limit ran out before any schedule of {n} micro-batches "
                        "was found")
    slots = compact(spec, [Slot(t, b, mb) for (b, mb), t in zip(keys, sol.starts)])
    return slots, sol.proven


def _span(spec: Spec, starts: tuple[int, ...], keys: list[tuple[str, int]]) -> int:
    return max(t + spec.block(b).time for (b, _mb), t in zip(keys, starts))


def one_at_a_time(spec: Spec, n: int) -> tuple[Slot, ...]:
    """The `n` micro-batches one after another (each in dependency order), compacted: a schedule
    without a solver, for when a direct solve finds none within its budget. Memory is not checked
    here (the caller validates)."""
    rows: list[list[tuple[str, int]]] = [[] for _ in range(spec.devices)]
    for mb in range(n):
        for name in spec.topo_order:
            for d in spec.block(name).devices:
                rows[d].append((name, mb))
    return compact(spec, orders=rows)


def direct_search(spec: Spec, n: int, net: list[int], *, solver: str, clock: Clock,
                   counters: Counters) -> SearchResult:
    """All N micro-batches in one solve: memory grows with every repetend (`net` > 0 on some
    device), so none can repeat. A solve that finds nothing in its budget runs them one after
    another."""
    lower = lower_bound(spec)
    dev = max(range(spec.devices), key=lambda d: net[d])
    serial = False
    try:
        slots, proven = direct(spec, n, solver, clock.left())
    except DirectCut:
        slots, proven, serial = one_at_a_time(spec, n), False, True
        try:
            validate(spec, Schedule(n, slots, name="tessel"))
        except ScheduleError as err:
            raise TesselError(f"no schedule of {n} micro-batches was found within the solver budget "
                              f"(the direct solve found none; running them one after another fails: {err}); "
                              "give a --time-limit or fewer micro-batches") from None
    sched = Schedule(n, slots, name="tessel")
    validate(spec, sched)
    notes = [note("memory-grows", memory=net[dev], device=dev, n=n, serial=serial)]
    if not proven:
        notes.append(note("direct-cut"))
    info = SearchInfo(solver, "direct", proven, clock.elapsed(), lower, 0, 0, counters.tried, 0, tuple(notes),
                      period_proven=False, copies=1, makespan_bound=makespan_bound(spec, n, above=sched.makespan(spec)))
    return SearchResult(sched, info)
