"""Finishing a schedule for one N, and re-extending a searched plan to another N.

After the repetend is extended to N micro-batches, `finish` keeps the extension or a shorter
applicable baseline, then re-solves the warmup and cooldown regions (`refine.py`). `reextend`
applies the same steps to a plan's stored repetend for a different N, without searching again.
"""
from __future__ import annotations

from dataclasses import replace

from tessel_dsl.ir import Spec
from tessel_dsl.schedule import Schedule
from tessel_dsl.search.clock import Clock
from tessel_dsl.search.extend import extend
from tessel_dsl.search.notes import Note, note
from tessel_dsl.search.solvers import resolve
from tessel_dsl.search.timescale import divide_schedule, divide_spec, divisible, scale_schedule, time_unit


def reextend(spec: Spec, schedule: Schedule, microbatches: int, *, solver: str = "auto",
             time_limit: float | None = None, info=None) -> Schedule:
    """A searched schedule for another N without searching again: extension (or, below N_R, a
    direct solve), then the same finishing steps as `search` (baselines, end re-solve). A plan
    that runs a baseline's order and keeps no repetend (its `info` notes name the baseline) gets
    that baseline built for the new N, which is where the search would start from there."""
    if microbatches == schedule.microbatches:
        return schedule
    if schedule.repetend is None and info is not None:
        named = [x.values["baseline"] for x in info.notes if x.kind.startswith("baseline-") and "baseline" in x.values]
        if named:
            built = baseline_for(spec, named[0], microbatches)
            return Schedule(microbatches, built.slots, name=schedule.name)
    solver = resolve(solver)
    sched = extend(spec, schedule, microbatches, name=schedule.name)
    if schedule.repetend is None or microbatches < schedule.repetend.nr:
        return sched
    unit = time_unit(spec)
    if not divisible(sched, unit):
        unit = 1
    out = finish(divide_spec(spec, unit), divide_schedule(sched, unit), solver=solver,
                 clock=Clock(time_limit, unit))[0]
    return scale_schedule(out, unit)


def baseline_for(spec: Spec, name: str, microbatches: int) -> Schedule:
    """The baseline a plan names, built for another N; one the search tuned for its N is tuned
    again for this one (`tuned.rebuild`)."""
    from tessel_dsl.search.tuned import rebuild

    return rebuild(spec, name, microbatches)


def finish(spec: Spec, sched: Schedule, *, solver: str, clock: Clock,
           cuts: list[str] | None = None, proofs: list[str] | None = None) -> tuple[Schedule, list[Note]]:
    """The best valid schedule for this N: the extension, or a shorter applicable baseline, with
    its ends re-solved (`refine.py`); the stored repetend, warmup and cooldown stay for re-extension."""
    from tessel_dsl.search.refine import best_baseline, refine_ends

    notes = []
    n, span = sched.microbatches, sched.makespan(spec)
    base = best_baseline(spec, n, than=span, clock=clock)
    if base is not None:
        other, name = base
        notes.append(note("baseline-beats", baseline=name, n=n, makespan=other.makespan(spec) * clock.unit,
                          extended=span * clock.unit))
        sched = replace(sched, slots=other.slots, repetend_start=None)
    before = sched.makespan(spec)
    sched, better = refine_ends(spec, sched, solver=solver, time_limit=clock.left(), cuts=cuts, proofs=proofs)
    if better:
        notes.append(note("ends-resolved", n=n, before=before * clock.unit, after=sched.makespan(spec) * clock.unit))
    return sched, notes
