"""A warmup and a cooldown read off the periodic schedule, without a solver.

A repetend of period ``P`` with offsets ``r_i`` is one window of the periodic schedule in which
block ``i`` of micro-batch ``n`` starts at ``s_i + (n - r_i) P``. Keeping micro-batches
``0 .. N_R - 1`` of that schedule gives one of ``N_R`` micro-batches whose instance 0 is the
repetend: the blocks before it (``n < r_i``) are a warmup, the ones after it (``n > r_i``) a
cooldown. Dependencies and one-block-at-a-time hold by periodicity (what the repetend's model
enforces). Memory usually does too, but not always: leaving micro-batches out of a steady state
can raise a level where a micro-batch frees memory on a device before it allocates there. So each
phase is checked against the very problem the completion solver would be given
(`completion.py`), and is only used where it passes.

The search uses these phases as witnesses: a repetend whose periodic ends pass needs no solver to
show that it can be completed (the lazy check of `driver.find_repetend`), and they are the
fallback when a budgeted completion solve stops before finding anything. They are valid, not
time-optimal.
"""
from __future__ import annotations

from tessel_dsl.ir import Spec
from tessel_dsl.schedule import Repetend, Slot
from tessel_dsl.search.completion import Phase, _device_edges, _instances, _problem, cooldown_blocks, warmup_blocks
from tessel_dsl.search.repetend import entry_memory
from tessel_dsl.search.solvers.verify import satisfies


def _unrolled(rep: Repetend, keys: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
    """(block, mb) -> start in the periodic schedule whose instance 0 is `rep` (at its own times)."""
    slot = {s.block: s for s in rep.slots}
    return {(b, n): slot[b].start + (n - slot[b].mb) * rep.period for b, n in keys}


def periodic_warmup(spec: Spec, rep: Repetend) -> Phase | None:
    """The warmup ``{B_i^n | n < r_i}`` at its periodic times, if it meets the warmup's rules
    (before each device's first repetend block, memory from empty); else None."""
    free = warmup_blocks(rep)
    if not free:
        return Phase((), True)
    at = _unrolled(rep, free)
    anchor = max(0, -min(at.values()))  # shift so that every start is >= 0, as the problem needs
    problem, keys = _problem(spec, free, _instances(rep, rep.nr), _device_edges(spec, rep, 1, True), {},
                             (0,) * spec.devices)
    starts = [at[k] + anchor if i < len(free) else anchor + problem.tasks[i].fixed for i, k in enumerate(keys)]
    if not satisfies(problem, starts, anchor):
        return None
    # Shifted like the check above: the times only order the blocks, but a plan stores them and
    # refuses a negative start.
    return Phase(tuple(sorted(Slot(at[k] + anchor, k[0], k[1]) for k in free)), True)


def periodic_cooldown(spec: Spec, rep: Repetend) -> Phase | None:
    """The cooldown ``{B_i^n | r_i < n < N_R}`` at its periodic times (numbered for N = N_R), if
    it meets the cooldown's rules (after each device's last repetend block of ``N_R`` instances,
    memory from what they leave); else None."""
    base = cooldown_blocks(rep)
    if not base:
        return Phase((), True)
    shift = rep.nr - 1  # as in `solve_cooldown`: after instances 0..N_R-1
    free = [(b, n + shift) for b, n in base]
    at = _unrolled(rep, base)
    offsets = {s.block: s.mb for s in rep.slots}
    entry = entry_memory(spec, offsets)
    net = [sum(b.memory for b in spec.blocks_on(d)) for d in range(spec.devices)]
    initial = tuple(entry[d] + rep.nr * net[d] for d in range(spec.devices))
    problem, keys = _problem(spec, free, _instances(rep, rep.nr), {},
                             _device_edges(spec, rep, rep.nr, False), initial)
    # Micro-batch n + shift of the problem is micro-batch n of the unrolled schedule, N_R - 1
    # periods later; the pinned instances are at their own times.
    starts = [at[(k[0], k[1] - shift)] + shift * rep.period if i < len(free) else problem.tasks[i].fixed
              for i, k in enumerate(keys)]
    if not satisfies(problem, starts):
        return None
    return Phase(tuple(sorted(Slot(at[k], k[0], k[1]) for k in base)), True)


def completion_witness(spec: Spec, rep: Repetend, *, solver: str, effort: float,
                       time_limit: float | None = None) -> tuple[str, tuple[Phase, Phase] | None]:
    """Can `rep` be completed? ``("yes", (warmup, cooldown))`` with a valid one of each,
    ``("no", None)`` when the solver proved a phase impossible, ``("unknown", None)`` when the
    deterministic budget `effort` (or `time_limit`) of a satisfiability solve ran out first.

    The periodic phases are tried first; the solver only for a phase whose periodic version
    breaks its rules."""
    from tessel_dsl.search.completion import solve_cooldown, solve_warmup
    from tessel_dsl.search.solvers import Objective

    found = []
    for periodic, solve in ((periodic_warmup, solve_warmup), (periodic_cooldown, solve_cooldown)):
        phase = periodic(spec, rep)
        if phase is None:
            why: list[str] = []
            phase = solve(spec, rep, objective=Objective.FEASIBLE, solver=solver, time_limit=time_limit,
                          effort=effort, why=why)
            if phase is None:
                return ("no" if why == ["infeasible"] else "unknown"), None
        found.append(phase)
    return "yes", (found[0], found[1])
