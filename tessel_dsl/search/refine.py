"""Finishing touches for one N: the best valid starting point, then a local re-solve of its ends.

A searched schedule for N micro-batches is warmup + repetend copies + cooldown, compacted. Its
steady state is optimal (or the best found), but the joins at both ends are solved separately from
each other and from the first and last repetend copies, so for small N the makespan can trail the
time-optimal one. Two cheap steps close most of that gap:

1. **start from the best valid schedule known**: Tessel's extension and, when they fit the
   placement and memory M, the hand-written baselines marked `seeds_search` (all of them) for
   the same N (`baselines.build`); a baseline wins only with a strictly shorter makespan;
2. **re-solve the ends**: every block instance that starts in the head region (up to a couple of
   periods after the first repetend copy starts) or ends in the tail region becomes free again;
   the instances in between keep their per-device order (their times may still move). One
   makespan solve with the current schedule as the hint and a bounded budget; the answer is kept
   only when it is strictly shorter. For small N the regions cover everything and this is the
   time-optimal solve, warm-started and budgeted.

The repetend, warmup and cooldown stored in the schedule are left as they were, so the plan still
re-extends to any N without searching.
"""
from __future__ import annotations

import time
from dataclasses import replace

from tessel_dsl.errors import TesselError
from tessel_dsl.ir import Spec
from tessel_dsl.schedule import Schedule, Slot
from tessel_dsl.search.clock import Clock
from tessel_dsl.search.compact import compact
from tessel_dsl.search.lags import lag
from tessel_dsl.search.solvers import (
    Objective,
    Precedence,
    Problem,
    Solution,
    Task,
    makespan_lower_bound,
    microbatch_order,
    solve,
)
from tessel_dsl.validate import validate

REFINE_EFFORT = 1.0      # deterministic solver budget of one end re-solve (about a second of one core)
REFINE_MAX_TASKS = 800   # beyond this many block instances the one-model re-solve is not attempted
HEAD_PERIODS = 2         # how far past the first repetend copy the head region reaches
POLISH_MAX_TASKS = 4000  # `polish` (asked for with an effort) frees every instance up to this many
FULL_RESOLVE_TASKS = 160  # up to this many block instances every one is free (the whole schedule re-solved)
PROOF_EFFORT = 0.5       # budget (at most the re-solve's) of the first, proof-minded solve of a whole re-solve
WHOLE_EFFORT = 6.0       # budget of a whole re-solve of a small schedule (at most FULL_RESOLVE_TASKS instances)


_BUILT: list = []  # the last spec's applicable baselines: (spec, n, [(schedule, name)] shortest first, complete, adapted)


def best_baseline(spec: Spec, n: int, than: int | None, clock: Clock | None = None) -> tuple[Schedule, str] | None:
    """The applicable baseline with the shortest makespan below `than` (None: any) and within M,
    if any. The baselines of the last spec and N asked for are kept: a search asks twice (for
    its incumbent, then when finishing), and building them all takes seconds at 32 devices.
    With `clock` (optional), once the user's wall-clock limit has run out the in-flight descent
    (`inflight.py`) stops early, and what it gave is kept only for callers out of time too."""
    from tessel_dsl.search.baselines import RECORDS, build
    from tessel_dsl.search.baselines.chain import adapting

    # (kept per spec, N and whether placements are adapted: `chain.unfolded` changes what applies)
    kept = _BUILT and _BUILT[0][0] is spec and _BUILT[0][1] == n and _BUILT[0][4] == adapting()
    if not (kept and (_BUILT[0][3] or (clock is not None and clock.spent()))):
        found = []
        for name in (b.name for b in RECORDS if b.seeds_search):
            try:
                sched = build(spec, name, n)
            except TesselError:
                continue  # not applicable to this placement (or not for this memory)
            if sched.fits_memory(spec):
                found.append((sched.makespan(spec), len(found), sched, name))
        # The baselines the search tunes for this N (`tuned.py`), when shorter.
        from tessel_dsl.search.tuned import add_tuned

        add_tuned(spec, n, found, large=n * len(spec.blocks) > REFINE_MAX_TASKS, clock=clock)
        _BUILT[:] = [(spec, n, [(sched, name) for _, _, sched, name in sorted(found)],
                    clock is None or not clock.spent(), adapting())]
    best = _BUILT[0][2][0] if _BUILT[0][2] else None
    if best is None or (than is not None and best[0].makespan(spec) >= than):
        return None
    return best


def _regions(spec: Spec, schedule: Schedule) -> tuple[int, int]:
    """(head end, tail start): instances starting before the first or ending after the second are free."""
    rep = schedule.repetend
    span = schedule.makespan(spec)
    if rep is None or schedule.repetend_start is None or len(schedule.slots) <= FULL_RESOLVE_TASKS:
        return span, 0
    head = schedule.repetend_start + HEAD_PERIODS * rep.period
    cool = [s.start for s in schedule.cooldown]
    last_copy = (min(cool) if cool else span) - HEAD_PERIODS * rep.period
    return head, max(0, last_copy)


def _solve_whole(problem: Problem, solver: str, time_limit: float | None, effort: float) -> Solution:
    """The whole-schedule re-solve: first a short solve aimed at proving that nothing is shorter,
    then, unless it settled the question, the usual solve; the shorter answer of the two.

    The first solve groups tasks by micro-batch, so CP-SAT states memory as held intervals
    (`solvers/holding.py`): that proved X-shape D=4 N=8 optimal in a third of the deterministic
    time of the running-sum model (0.4 against 1.4 s of CPU). As a way to *find* shorter schedules
    under a budget it was measured worse on some specs (M-shape D=8 N=8: 90 against 84) and better
    on others (NN-shape D=8 N=8: 110 against 111), hence the second solve, which is exactly the
    re-solve used before: the answer is never longer than it alone would give.
    """
    if solver != "cpsat":
        return solve(problem, Objective.MAKESPAN, time_limit, solver=solver, effort=effort)
    grouped = replace(problem, tasks=tuple(replace(t, group=t.key[1]) for t in problem.tasks))
    began = time.monotonic()
    first = solve(grouped, Objective.MAKESPAN, time_limit, solver=solver, effort=min(PROOF_EFFORT, effort))
    if first.status in ("infeasible", "optimal"):
        return first
    if time_limit is not None:  # the user's wall-clock limit covers both solves
        time_limit -= time.monotonic() - began
        if time_limit <= 0.05:
            return first
    second = solve(problem, Objective.MAKESPAN, time_limit, solver=solver, effort=effort)
    if second.status in ("infeasible", "optimal") or first.objective is None:
        return second
    return first if second.objective is None or first.objective < second.objective else second


def refine_ends(spec: Spec, schedule: Schedule, *, solver: str, time_limit: float | None,
                effort: float | None = None, cuts: list[str] | None = None,
                proofs: list[str] | None = None, polishing: bool = False) -> tuple[Schedule, bool]:
    """Re-solve the head and tail of `schedule`; returns (schedule, improved).

    `time_limit` caps the wall-clock time (None: only `effort` bounds it, so the answer is the
    same on every run); `effort` None: `WHOLE_EFFORT` when every instance is free and there are
    at most `FULL_RESOLVE_TASKS`, else `REFINE_EFFORT`. When the budget stops the solve before it
    proves its answer optimal, a line is added to `cuts`; when the whole schedule was free and the solve proved that nothing
    is shorter than the schedule returned, a line is added to `proofs` (the model holds every
    constraint of the spec, memory included, and the micro-batch order it adds loses no makespan:
    `microbatch_order`).
    """
    if len(schedule.slots) > (POLISH_MAX_TASKS if polishing else REFINE_MAX_TASKS):
        return schedule, False
    if time_limit is not None and time_limit <= 0.05:
        if cuts is not None:
            cuts.append(f"the end re-solve for N={schedule.microbatches} (no time left)")
        return schedule, False
    slots = sorted(schedule.slots, key=lambda s: (s.start, s.block, s.mb))
    index = {(s.block, s.mb): i for i, s in enumerate(slots)}
    head, tail = (schedule.makespan(spec), 0) if polishing else _regions(spec, schedule)
    whole = head >= schedule.makespan(spec)
    if effort is None:
        # A whole schedule is small (at most FULL_RESOLVE_TASKS instances): a larger budget costs
        # little and settles more (zoo deepseek_moe8 at N = 4: 314 -> 309, the optimum, proven; 1 s).
        effort = WHOLE_EFFORT if whole and len(slots) <= FULL_RESOLVE_TASKS else REFINE_EFFORT
    tasks = tuple(Task((s.block, s.mb), spec.block(s.block).time, spec.block(s.block).devices,
                       spec.block(s.block).memory) for s in slots)
    prec = [Precedence(index[(e.src, mb)], index[(e.dst, mb)], lag(spec, e.src, e.dst))
            for mb in range(schedule.microbatches) for e in spec.edges]
    prec += microbatch_order(index)
    fixed_order = [s.start >= head and s.start + spec.block(s.block).time <= tail for s in slots]
    for d in range(spec.devices):
        row = [i for i, s in enumerate(slots) if fixed_order[i] and d in spec.block(s.block).devices]
        prec += [Precedence(a, b) for a, b in zip(row, row[1:])]
    span = schedule.makespan(spec)
    # Only a strictly shorter schedule is of use: asking for one lets the solver stop with a proof
    # that none exists instead of proving the current one optimal. That cap only when the whole
    # schedule is free: with the middle's order fixed, the budgeted capped solve was measured to stop
    # at a worse schedule than the uncapped one started from the current (interleaved D=4 N=16:
    # 149 against 142).
    # A polish keeps the current schedule feasible, so the solver starts from it (the cap would
    # make the hint infeasible: chain V, D=4, N=16, lag 3: 1730 kept against 1684 found from it).
    capped = whole and not polishing
    problem = Problem(tasks, tuple(prec), spec.devices, capacity=spec.capacities, horizon=span,
                      makespan_below=span if capped else None, hints=tuple(s.start for s in slots))
    if span <= makespan_lower_bound(problem):
        return schedule, False  # already as short as this problem allows: nothing to re-solve
    sol = _solve_whole(problem, solver, time_limit, effort) if capped else \
        solve(problem, Objective.MAKESPAN, time_limit, solver=solver, effort=effort)
    if sol.status == "infeasible":
        if whole and proofs is not None:
            proofs.append(f"the end re-solve of all {schedule.microbatches} micro-batches proved that no "
                          f"schedule is shorter")
        return schedule, False  # proven: no schedule with these regions free is shorter
    if sol.status != "optimal" and cuts is not None:
        cuts.append(f"the end re-solve for N={schedule.microbatches}")
    if not sol.ok or sol.objective is None or sol.objective >= span:
        return schedule, False
    new = compact(spec, [Slot(t, s.block, s.mb) for s, t in zip(slots, sol.starts)])
    # Re-solved whole, the schedule no longer runs its repetend from a known start: the repetend
    # stays for other N only (as when a baseline's order wins, `finish.py`).
    out = replace(schedule, slots=new, repetend_start=None if whole else schedule.repetend_start)
    validate(spec, out)
    if out.makespan(spec) >= span:
        return schedule, False
    if whole and sol.status == "optimal" and proofs is not None:
        proofs.append(f"the end re-solve of all {schedule.microbatches} micro-batches proved its schedule shortest")
    return out, True


def polish(spec: Spec, result, *, solver: str, clock, effort: float):
    """`result` with its schedule for this N re-solved as a whole (every block instance free, the
    stored repetend kept for other N), on `effort` more deterministic budget, warm-started from
    it: kept only when strictly shorter. What a user asks for with ``tessel search --effort``.

    Each device keeps at most the peak memory the schedule already had: with room to spare the
    solver would otherwise return any schedule of the shortest length, however many micro-batches
    it keeps in flight (the 32k GPT's V on 4 x H200, 80 GB a GPU: all 16 forwards of the first
    stage before its first backward, 11.8 GB of activations on GPU 0 against 2.9 GB at the same
    length with the cap; tests/integration/test_search_polish.py).

    Where the shortest applicable baseline holds less than that on some device, the whole
    schedule is also re-solved from the baseline within the baseline's own peaks, on the same
    effort (`_lean`): when that is as short, it is kept, since it leaves more memory free at no
    cost in time."""
    from tessel_dsl.search.notes import note

    sched = result.schedule
    before = sched.makespan(spec)
    proofs: list[str] = []
    within = spec.within(sched.peak_memory(spec))
    better, improved = refine_ends(within, sched, solver=solver, time_limit=clock.left(), effort=effort,
                                   proofs=proofs, polishing=True)
    lean = _lean(spec, better, within.capacities, solver=solver, clock=clock, effort=effort)
    said = []
    if lean is not None:
        # the slots only: the plan keeps its name and the repetend it re-extends from
        better, name = replace(better, slots=lean[0].slots), lean[1]
        said.append(note("polished-lean", n=sched.microbatches, baseline=name,
                         after=better.makespan(spec) * clock.unit))
    elif not improved:
        return result
    after = better.makespan(spec)
    if after < before:
        said.insert(0, note("polished", n=sched.microbatches, effort=effort, before=before * clock.unit,
                            after=after * clock.unit))
    info = replace(result.info, notes=result.info.notes + tuple(said))
    if after <= info.makespan_bound:  # the polish reached the stated bound: nothing shorter exists
        info = replace(info, proven=True)
    return replace(result, schedule=better, info=info)


def _lean(spec: Spec, sched: Schedule, kept: tuple[int, ...], *, solver: str, clock, effort: float):
    """(a schedule as short as `sched` within the shortest baseline's peaks, that baseline's name),
    when the baseline holds less than `kept` on some device and the re-solve from it reaches
    `sched`'s makespan with less memory in all; else None."""
    n = sched.microbatches
    base = best_baseline(spec, n, than=None, clock=clock)
    if base is None:
        return None
    start, name = base
    peaks = start.peak_memory(spec)
    if all(p >= k for p, k in zip(peaks, kept)):
        return None  # the baseline is no leaner
    target = sched.makespan(spec)
    got = start
    if start.makespan(spec) > target:
        got, _ = refine_ends(spec.within(peaks), start, solver=solver,
                             time_limit=clock.left(), effort=effort, polishing=True)
    if got.makespan(spec) > target or sum(got.peak_memory(spec)) >= sum(sched.peak_memory(spec)):
        return None
    return got, name
