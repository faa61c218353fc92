"""All N micro-batches in one solve: the time-optimal schedule for small N.

Used by the driver when N is below the repetend's span, and by the extension for the same case;
kept apart from both so that neither imports the other.
"""
from __future__ import annotations

from tessel_dsl.errors import InfeasibleError, TesselError
from tessel_dsl.ir import Spec
from tessel_dsl.schedule import Slot
from tessel_dsl.search.compact import compact
from tessel_dsl.search.solvers import Objective, Precedence, Problem, Task, solve
from tessel_dsl.units import capacity_in, memory_in


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
    sol = solve(Problem(tasks, tuple(prec), spec.devices, capacity=spec.capacities), Objective.MAKESPAN,
                time_limit, solver=solver)
    if not sol.ok:
        if sol.status == "infeasible":
            raise InfeasibleError(f"no schedule of {n} micro-batches fits memory {capacity_in(spec)}")
        raise TesselError(f"the time limit ran out before any schedule of {n} micro-batches was found")
    slots = compact(spec, [Slot(t, b, mb) for (b, mb), t in zip(keys, sol.starts)])
    return slots, sol.proven
