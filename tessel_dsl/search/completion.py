"""Schedule completion (paper §4.3): the warmup before the first repetend and the cooldown after
the last one, each solved on its own.

For a repetend with offsets ``r_i`` over ``N_R`` micro-batches:

- warmup   = ``{B_i^n | 0 <= n < r_i}``: everything that must run before the first instance;
- cooldown = ``{B_i^n | r_i < n < N_R}``: what is left after the last instance (numbered for
  ``N = N_R``; extension shifts it).

Both are posed against pinned repetend instances so the dependencies that cross into (or out of)
the repetend are honoured: the warmup against the first ``N_R`` instances, whose common start (the
anchor) is minimised; the cooldown against the last ``N_R`` instances, minimising its end. On every
device the warmup ends before that device's first repetend block and the cooldown starts after its
last one, so memory on entry to the repetend is exactly the warmup's sum (what the repetend search
assumed) and the cooldown starts from entry plus what the instances leave behind.

With ``objective=FEASIBLE`` these are the cheap satisfiability checks of the lazy search. An
``effort`` (deterministic solver budget) bounds the optimising solves: the best warmup or cooldown
found within it comes back with ``proven=False``.
"""
from __future__ import annotations

from dataclasses import dataclass

from tessel_dsl.ir import Spec
from tessel_dsl.schedule import Repetend, Slot
from tessel_dsl.search.lags import lag
from tessel_dsl.search.repetend import entry_memory
from tessel_dsl.search.solvers import Objective, Precedence, Problem, Solution, Task, microbatch_order, solve


@dataclass(frozen=True)
class Phase:
    """A solved warmup or cooldown: its slots (times only order the blocks) and how the solve went."""

    slots: tuple[Slot, ...]
    proven: bool


def warmup_blocks(rep: Repetend) -> list[tuple[str, int]]:
    return [(s.block, n) for s in rep.slots for n in range(s.mb)]


def cooldown_blocks(rep: Repetend) -> list[tuple[str, int]]:
    return [(s.block, n) for s in rep.slots for n in range(s.mb + 1, rep.nr)]


def _instances(rep: Repetend, count: int, first_mb_shift: int = 0) -> dict[tuple[str, int], int]:
    """(block, mb) -> start for `count` consecutive instances, the first at time 0."""
    return {(s.block, s.mb + k + first_mb_shift): s.start + k * rep.period
            for k in range(count) for s in rep.slots}


def _device_edges(spec: Spec, rep: Repetend, count: int, first: bool) -> dict[int, tuple[str, int]]:
    """Per device, the first block of instance 0 (first=True) or the last block of the last instance."""
    out: dict[int, tuple[str, int, int]] = {}
    for s in rep.slots:
        b = spec.block(s.block)
        t = s.start if first else s.start + b.time
        for d in b.devices:
            cur = out.get(d)
            if cur is None or (t < cur[2] if first else t > cur[2]):
                out[d] = (s.block, s.mb if first else s.mb + count - 1, t)
    return {d: (b, mb) for d, (b, mb, _t) in out.items()}


def _problem(spec: Spec, free: list[tuple[str, int]], pinned: dict[tuple[str, int], int],
             barrier_before: dict[int, tuple[str, int]], barrier_after: dict[int, tuple[str, int]],
             initial: tuple[int, ...]) -> tuple[Problem, list[tuple[str, int]]]:
    keys = list(free)
    free_set = set(free)
    needed: set[tuple[str, int]] = set()
    for name, mb in free:
        for p in spec.preds[name]:
            if (p, mb) not in free_set:
                needed.add((p, mb))
        for s in spec.succs[name]:
            if (s, mb) not in free_set:
                needed.add((s, mb))
    needed |= set(barrier_before.values()) | set(barrier_after.values())
    pinned_keys = sorted(k for k in needed if k in pinned)
    keys += pinned_keys
    index = {k: i for i, k in enumerate(keys)}
    tasks = [Task(k, spec.block(k[0]).time, spec.block(k[0]).devices, spec.block(k[0]).memory) for k in free]
    tasks += [Task(k, spec.block(k[0]).time, spec.block(k[0]).devices, 0, fixed=pinned[k]) for k in pinned_keys]
    prec: list[Precedence] = []
    for name, mb in keys:
        for p in spec.preds[name]:
            if (p, mb) in index and ((name, mb) in free_set or (p, mb) in free_set):
                prec.append(Precedence(index[(p, mb)], index[(name, mb)], lag(spec, p, name)))
    prec += microbatch_order({k: index[k] for k in free})
    for k in free:
        for d in spec.block(k[0]).devices:
            if d in barrier_before:
                prec.append(Precedence(index[k], index[barrier_before[d]]))
            if d in barrier_after:
                prec.append(Precedence(index[barrier_after[d]], index[k]))
    return Problem(tuple(tasks), tuple(prec), spec.devices, capacity=spec.capacities, initial_memory=initial), keys


def _phase(sol: Solution, keys: list[tuple[str, int]], count: int) -> Phase:
    return Phase(tuple(sorted(Slot(t, b, mb) for (b, mb), t in zip(keys[:count], sol.starts))), sol.proven)


def solve_warmup(spec: Spec, rep: Repetend, *, objective: Objective = Objective.ANCHOR,
                 solver: str | None = None, time_limit: float | None = None,
                 effort: float | None = None, why: list[str] | None = None) -> Phase | None:
    """The warmup, finishing on each device before its first repetend block (None: impossible, or
    nothing found within the budget; the solver's status is then appended to `why`)."""
    free = warmup_blocks(rep)
    if not free:
        return Phase((), True)
    pinned = _instances(rep, rep.nr)
    # An anchored solve pins the instances relative to a free anchor; a plain feasibility check
    # places them late enough that the warmup always has room in front of them.
    shift = 0 if objective is Objective.ANCHOR else sum(spec.block(b).time for b, _ in free)
    pinned = {k: v + shift for k, v in pinned.items()}
    problem, keys = _problem(spec, free, pinned, _device_edges(spec, rep, 1, True), {}, (0,) * spec.devices)
    sol = solve(problem, objective, time_limit, solver=solver, effort=effort)
    if not sol.ok:
        if why is not None:
            why.append(sol.status)
        return None
    return _phase(sol, keys, len(free))


def solve_cooldown(spec: Spec, rep: Repetend, *, objective: Objective = Objective.MAKESPAN,
                   solver: str | None = None, time_limit: float | None = None,
                   effort: float | None = None, why: list[str] | None = None) -> Phase | None:
    """The cooldown after `N_R` pinned instances; returned numbered for ``N = N_R`` (None: impossible,
    or nothing found within the budget; the solver's status is then appended to `why`)."""
    base = cooldown_blocks(rep)
    if not base:
        return Phase((), True)
    shift = rep.nr - 1  # the cooldown follows instances 0..N_R-1, i.e. N = 2 N_R - 1 micro-batches
    free = [(b, n + shift) for b, n in base]
    pinned = _instances(rep, rep.nr)
    offsets = {s.block: s.mb for s in rep.slots}
    entry = entry_memory(spec, offsets)
    net = [sum(b.memory for b in spec.blocks_on(d)) for d in range(spec.devices)]
    initial = tuple(entry[d] + rep.nr * net[d] for d in range(spec.devices))
    problem, keys = _problem(spec, free, pinned, {}, _device_edges(spec, rep, rep.nr, False), initial)
    sol = solve(problem, objective, time_limit, solver=solver, effort=effort)
    if not sol.ok:
        if why is not None:
            why.append(sol.status)
        return None
    phase = _phase(sol, keys, len(free))
    return Phase(tuple(sorted(Slot(s.start, s.block, s.mb - shift) for s in phase.slots)), phase.proven)
