"""Constraint-solver backends behind one small interface.

``solve(problem, objective, time_limit, solver=...)`` answers a `Problem` with the ``cpsat``
(OR-Tools CP-SAT) or ``z3`` backend. Solver libraries are imported lazily, inside the backends, so
importing this package costs nothing.
"""
from __future__ import annotations

from tessel_dsl.search.solvers.problem import (
    Objective,
    Precedence,
    Problem,
    Solution,
    Task,
    makespan_lower_bound,
    microbatch_order,
)

__all__ = ["DEFAULT_SOLVER", "SOLVERS", "Objective", "Precedence", "Problem", "Solution", "Task",
           "makespan_lower_bound", "microbatch_order", "resolve", "solve"]

SOLVERS = ("cpsat", "z3")
DEFAULT_SOLVER = "cpsat"  # measured faster on the search's problems (docs/search.md)


def resolve(solver: str | None) -> str:
    """Map ``auto``/None to the default backend; reject unknown names with a clear message."""
    from tessel_dsl.errors import TesselError

    name = DEFAULT_SOLVER if solver in (None, "auto") else solver
    if name not in SOLVERS:
        raise TesselError(f"unknown solver {solver!r} (choose one of: auto, {', '.join(SOLVERS)})")
    return name


def solve(problem: Problem, objective: Objective | str = Objective.MAKESPAN, time_limit: float | None = None,
          solver: str | None = None, effort: float | None = None, **options) -> Solution:
    """Solve `problem` for `objective` within `time_limit` seconds with the named backend.

    `effort` (optional) is a deterministic work budget for optimising: when it runs out the best
    solution so far comes back with status ``feasible``, identically on every run.

    Returns a `Solution`; `status` is ``optimal``, ``feasible`` (time limit hit with a solution),
    ``infeasible`` or ``unknown`` (time limit hit without one).
    """
    name = resolve(solver)
    if not problem.tasks:
        return Solution("optimal", (), 0)
    if name == "z3":
        from tessel_dsl.search.solvers.z3 import solve as run
    else:
        from tessel_dsl.search.solvers.cpsat import solve as run
    return run(problem, Objective(objective), time_limit, effort=effort, **options)


__all__ = ["microbatch_order", "Objective", "Precedence", "Problem", "Solution", "Task", "SOLVERS", "DEFAULT_SOLVER", "resolve", "solve"]
