"""Finding the repetend: the period walk or the enumeration, each candidate lazily checked for
completion, and what is kept when no solve settles a period.

Step 2 of the search (`driver.py`). The one-micro-batch repetend (`repetend.serial_repetend`)
is always there to fall back on; where the walk's budget settles nothing below it, the
list-scheduled repetend (`listrep.py`) is kept instead when it is valid at a shorter period.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Callable

from tessel_dsl.analysis import lower_bound
from tessel_dsl.ir import Spec
from tessel_dsl.schedule import Repetend
from tessel_dsl.search.clock import Clock
from tessel_dsl.search.completion import Phase
from tessel_dsl.search.listrep import list_repetend
from tessel_dsl.search.modulo import POLISH_EFFORT
from tessel_dsl.search.notes import Note, note
from tessel_dsl.search.period_walk import modulo_search, period_floor
from tessel_dsl.search.repetend import (
    Counters,
    enumerate_search,
    make_repetend,
    nr_limit,
    repetend_problem,
    serial_repetend,
)
from tessel_dsl.search.solvers import Objective, solve


def _polish(spec: Spec, rep: Repetend, solver: str, left: float | None) -> Repetend:
    """Re-solve a found repetend's offsets at its period for the shortest micro-batch latency."""
    offsets = {s.block: s.mb for s in rep.slots}
    prob = repetend_problem(spec, offsets, rep.period)
    index = {b.name: i for i, b in enumerate(spec.blocks)}
    tasks = tuple(replace(t, skew=-rep.period * offsets[t.key]) for t in prob.tasks)
    hints = tuple(s.start for s in sorted(rep.slots, key=lambda s: index[s.block]))
    sol = solve(replace(prob, tasks=tasks, hints=hints), Objective.SPREAD, left, solver=solver, effort=POLISH_EFFORT)
    return make_repetend(spec, offsets, sol.starts, rep.period) if sol.ok else rep


ACCEPT_EFFORT = 5.0  # deterministic budget of one satisfiability solve of a warmup or cooldown


def find_repetend(spec: Spec, *, solver: str, method: str, clock: Clock, counters: Counters,
                  report: Callable[[str], None], witnesses: dict | None = None,
                  cap: int | None = None) -> tuple[Repetend, bool, tuple[Note, ...]]:
    """The best repetend (lazily checked for completion), whether that is proven, and notes.
    `witnesses` (if given) receives, per accepted repetend, the valid warmup and cooldown that
    showed it can be completed. With `cap`, only periods below it are looked for (a repetend at
    `cap` or above is of no use to the caller): the one-micro-batch repetend comes back when none
    is found, proven when every period below `cap` was shown infeasible."""
    from tessel_dsl.search.periodic import completion_witness

    lower, max_nr = lower_bound(spec), nr_limit(spec)
    undecided: list[Repetend] = []

    def accept(rep: Repetend) -> bool | None:
        # Satisfiability only (lazy search): the periodic warmup and cooldown when they hold,
        # else a solve with a deterministic budget; None when that budget could not tell.
        verdict, ends = completion_witness(spec, rep, solver=solver, effort=ACCEPT_EFFORT, time_limit=clock.left())
        if verdict == "unknown":
            undecided.append(rep)
            return None
        if ends is not None and witnesses is not None:
            witnesses[rep] = ends
        return verdict == "yes"

    fallback = serial_repetend(spec, solver, counters, clock.left)
    upper = fallback.period
    notes: list[Note] = []
    if method == "modulo":
        rep, proven, said, enumerate_instead = modulo_search(
            spec, fallback, solver=solver, clock=clock, counters=counters, report=report, accept=accept, cap=cap)
        notes += [said] if said is not None else []
        if not enumerate_instead:
            if rep is fallback and not proven:
                rep, said = _unsettled_fallback(spec, fallback, clock, witnesses, cap)
                if said.values.get("floor"):  # nothing below it was left to settle
                    notes, proven = [n for n in notes if n.kind != "walk-unsettled"], True
                notes.append(said)
            return rep, proven, tuple(notes)
        notes.append(note("enumerating"))
        upper = rep.period + 1 if rep is not fallback else upper
    upper = upper if cap is None else min(upper, cap)
    rep, complete = enumerate_search(
        spec, lower=lower, upper=upper, max_nr=max_nr, solver=solver, deadline=clock.left,
        counters=counters, accept=lambda r: bool(accept(r)), on_progress=lambda: report("repetend (enumerate)"))
    complete = complete and not undecided  # a candidate whose completion went unsettled was skipped
    if rep is None:
        if not complete:
            fallback, said = _unsettled_fallback(spec, fallback, clock, witnesses, cap)
            complete = bool(said.values.get("floor"))
            notes += [said] if complete else [note("enumerate-time-limit", period=counters.period * clock.unit), said]
        return fallback, complete, tuple(notes)
    rep = _polish(spec, rep, solver, clock.left())
    return rep, complete, tuple(notes)


def _unsettled_fallback(spec: Spec, fallback: Repetend, clock: Clock, witnesses: dict | None,
                        cap: int | None) -> tuple[Repetend, Note]:
    """What to keep when no solve settled a period below the one-micro-batch repetend `fallback`:
    the list-scheduled repetend when one is valid at a shorter period (`listrep.py`; its own
    warmup and cooldown become its witnesses; below `cap`, if given), else `fallback`; and the
    note that says which, and whether the period is the floor (`period_walk.period_floor`), so
    proven minimal among repetends holding each block once."""
    floor = period_floor(spec)
    above = fallback.period if cap is None else min(fallback.period, cap)
    listed = list_repetend(spec, floor, above, clock.left)
    if listed is None:
        return fallback, note("one-mb-repetend")
    rep = listed[0]
    if witnesses is not None:
        witnesses[rep] = (Phase(listed[1], False), Phase(listed[2], False))
    return rep, note("list-repetend", period=rep.period * clock.unit, nr=rep.nr, floor=rep.period <= floor)
