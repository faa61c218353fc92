"""Finishing a schedule for one N, and re-extending a searched plan to another N.

After the repetend is extended to N micro-batches, `finish` keeps the extension or a shorter
applicable baseline, then re-solves the warmup and cooldown regions (`refine.py`). `reextend`
applies the same steps to a plan's stored repetend for a different N, without searching again, and
`replan` makes a whole plan of it: the one path `tessel simulate -n` and `tessel run -n` share, so
a run executes the very schedule the simulation showed for that N.
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


def replan(plan, microbatches: int, *, blocking: bool | None = None, time_limit: float | None = None):
    """`plan` (a `tessel_dsl.plan.Plan`) for `microbatches`: its schedule re-extended (`reextend`),
    validated and lowered in `blocking` mode (default: the mode its programs were lowered in, else
    non-blocking). Ending a re-extended schedule re-solves its ends with OR-Tools; where that is not
    installed (a GPU host with torch only) this is refused with what to do instead, rather than
    running a plain extension the simulation never showed."""
    from tessel_dsl.errors import TesselError
    from tessel_dsl.plan import make_plan
    from tessel_dsl.plan_check import check_microbatch_count

    check_microbatch_count(plan.spec, microbatches)  # before any work that grows with N
    try:
        schedule = reextend(plan.spec, plan.schedule, microbatches, info=plan.search, time_limit=time_limit)
    except ModuleNotFoundError as e:
        if not (e.name or "").startswith("ortools"):
            raise
        raise TesselError(
            f"re-extending the plan from N={plan.schedule.microbatches} to N={microbatches} re-solves its ends "
            "with OR-Tools, which is not installed here; write a plan for that N where the project is installed "
            f"(`tessel search <spec> -n {microbatches}`) and run that plan without -n") from None
    keep = plan.programs[0].blocking if plan.programs else False
    return make_plan(plan.spec, schedule, plan.search, blocking=keep if blocking is None else blocking)


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
