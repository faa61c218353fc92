"""The Tessel search driver (paper Algorithm 1 with the lazy-search optimisation of §5).

1. Bounds: the repetend period can't beat the busiest device's work (`analysis.lower_bound`), and
   at most `analysis.max_inflight` micro-batches fit in memory, which caps ``N_R``.
2. Repetend: the smallest period ``P`` for which some offset assignment schedules, found either by
   enumerating pruned assignments (`repetend.py`) or with one cyclic model per period
   (`modulo.py`); `findrep.py` runs either. While looking, warmup and cooldown are only checked
   for satisfiability.
3. Completion: time-optimal warmup and cooldown, once, for the chosen repetend (`completion.py`).
4. Extension to N micro-batches and compaction (`extend.py`); N below ``N_R`` is solved directly.
   Finishing for that N: a shorter baseline order, the ends re-solved (`finish.py`).
5. When the period is above its lower bound, the same search for repetends holding every block
   k times (`kcopy.py`).

Every schedule returned has passed `validate.validate`.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Callable

from tessel_dsl.analysis import lower_bound, microbatch_memory
from tessel_dsl.errors import InfeasibleError, TesselError
from tessel_dsl.ir import Spec
from tessel_dsl.plan import SearchInfo
from tessel_dsl.plan_check import check_microbatch_count
from tessel_dsl.schedule import Repetend, Schedule
from tessel_dsl.search.bounds import makespan_bound, source_notes
from tessel_dsl.search.clock import Clock
from tessel_dsl.search.completion import solve_cooldown, solve_warmup
from tessel_dsl.search.direct import direct_search
from tessel_dsl.search.extend import DIRECT_MAX_TASKS, Parts, below_span, extend
from tessel_dsl.search.findrep import ACCEPT_EFFORT, find_repetend
from tessel_dsl.search.finish import finish
from tessel_dsl.search.heldcuts import CUT_EFFORT, adopt, held_cuts
from tessel_dsl.search.kcopy import with_copies
from tessel_dsl.search.membound import memory_period_bound
from tessel_dsl.search.notes import Note, budget_verdict, note
from tessel_dsl.search.repetend import Counters
from tessel_dsl.search.result import Progress, SearchResult
from tessel_dsl.search.solvers import resolve
from tessel_dsl.search.timescale import divide_spec, scale_schedule, time_unit
from tessel_dsl.search.twins import fold_twins
from tessel_dsl.search.windows import adopt_windows
from tessel_dsl.units import capacity_in, memory_in
from tessel_dsl.validate import validate

__all__ = ["METHODS", "Progress", "SearchResult", "search"]

METHODS = ("enumerate", "modulo")
DEFAULT_METHOD = "modulo"  # measured faster (docs/search.md)


def _check_inputs(spec: Spec, n: int, method: str) -> None:
    if n < 1:
        raise TesselError(f"the number of micro-batches must be at least 1 (got {n})")
    check_microbatch_count(spec, n)
    if method not in ("auto",) + METHODS:
        raise TesselError(f"unknown search method {method!r} (choose one of: auto, {', '.join(METHODS)})")
    need = microbatch_memory(spec)
    for d, m in enumerate(need):
        if m > spec.capacity(d):
            raise InfeasibleError(
                f"memory {memory_in(spec.units, spec.capacity(d))} on device {d} is below what one micro-batch "
                f"needs there ({memory_in(spec.units, m)}); no schedule exists: give device {d} at least "
                f"{memory_in(spec.units, m)} or split its blocks")


HELD_CUTS_STEP = "the whole schedule with memory as holding cuts"
WINDOWS_STEP = "the schedule re-solved a window of time at a time"
COMPLETION_EFFORT = 2.0  # deterministic solver budget of each optimising warmup / cooldown solve


def search(spec: Spec, *, microbatches: int | None = None, solver: str = "auto", method: str = "auto",
           time_limit: float | None = None, progress: Callable[[Progress], None] | None = None,
           effort: float = 0.0) -> SearchResult:
    """Search a Tessel schedule for `spec` and extend it to `microbatches` (default: the spec's N).

    `solver` is ``auto``, ``cpsat`` or ``z3``; `method` is ``auto``, ``enumerate`` or ``modulo``;
    with `time_limit` (seconds) the best valid schedule found so far is returned and
    ``info.proven`` is False, with ``info.notes`` saying why. A positive `effort` then spends
    more deterministic solver budget: on the whole schedule with memory as holding cuts, on a
    second sweep of windows (`windows.adopt_windows`), and on re-solving the whole schedule for
    this N warm-started from the one found (`refine.polish`).
    """
    n = spec.microbatches if microbatches is None else microbatches
    _check_inputs(spec, n, method)
    solver = resolve(solver)
    unit = time_unit(spec)
    base, clock = divide_spec(spec, unit), Clock(time_limit, unit)
    # A tensor-parallel group's devices run the same blocks: searched as one device (`twins.py`)
    folded = fold_twins(base)
    whole, base = base, base if folded is None else folded.spec
    # A method named by the caller always runs; `auto` first tries a schedule built without a
    # solver, and returns it when it reaches both lower bounds (nothing left to prove).
    result = _constructive(base, n, clock, progress) if method == "auto" else None
    find, cap = None, None
    if result is None and method == "auto":
        # The best plan in hand first (incumbent.py): a baseline at the makespan bound ends the
        # search; otherwise only repetends that could beat it are looked for.
        result, find, cap = _incumbent(base, n, clock, progress, solver)
    method = DEFAULT_METHOD if method == "auto" else method
    if result is None:
        result = _search(base, n, solver=solver, method=method, clock=clock, progress=progress, find=find)
    if result.info.method != "baseline" or not result.info.proven:  # at the makespan bound: nothing to win
        result = with_copies(base, n, result, search_one=_search, find_repetend=find_repetend, solver=solver,
                             method=method, clock=clock, progress=progress, per_mb_cap=cap,
                             device_chains=effort > 0)
    # The whole schedule with memory as holding cuts (`heldcuts.py`): shorter, or proven; a
    # user's --effort is spent on it too (memchain.tsl: 1473 -> 1449, the optimum, at effort 20).
    span = result.schedule.makespan(base)
    bound = makespan_bound(base, n, above=span)
    if span > bound and not clock.skip(HELD_CUTS_STEP):
        result = adopt(base, n, result, bound, time_limit=clock.left(), effort=CUT_EFFORT + effort)
    if result.schedule.makespan(base) > result.info.makespan_bound and not clock.skip(WINDOWS_STEP):
        result = adopt_windows(base, result, solver=solver, clock=clock, effort=effort)  # (`windows.py`)
    if effort > 0:
        from tessel_dsl.search.refine import polish

        result = polish(base, result, solver=solver, clock=clock, effort=effort)
    info = result.info
    if result.schedule.makespan(base) <= info.makespan_bound:  # (a step after `with_copies` reached it)
        info = replace(info, notes=tuple(x for x in info.notes if x.kind != "copies-with-effort"))
    said = (note("time-limit-skipped", limit=time_limit, steps=clock.skipped),) if clock.skipped else ()
    said += source_notes(base, n, info.makespan_bound, unit)
    if folded is not None:
        info, said = folded.unfold(whole, result.schedule, info, said)
    info = replace(info, seconds=clock.elapsed(), lower_bound=info.lower_bound * unit, period=info.period * unit,
                   makespan_bound=info.makespan_bound * unit, memory_bound=float(memory_period_bound(spec)),
                   notes=info.notes + said)
    sched = scale_schedule(result.schedule, unit)
    if unit > 1:
        validate(spec, sched)
    return SearchResult(sched, info)


def _incumbent(spec: Spec, n: int, clock: Clock, progress: Callable[[Progress], None] | None, solver: str
               ) -> tuple[SearchResult | None, Callable[..., tuple[Repetend, bool, str]] | None, int | None]:
    """(result, repetend finder, period cap) from the best applicable baseline (`incumbent.py`):
    the baseline as the result when it reaches the makespan bound or when no one-copy repetend
    could beat it; else a finder that looks only below the period that could (`useful_cap`)."""
    from functools import partial

    from tessel_dsl.search.incumbent import baseline_result, repetend_parts, useful_cap
    from tessel_dsl.search.period_walk import period_floor
    from tessel_dsl.search.refine import FULL_RESOLVE_TASKS, best_baseline

    if any(sum(b.memory for b in spec.blocks_on(d)) > 0 for d in range(spec.devices)):
        return None, None, None  # memory grows with every micro-batch: the direct solve decides
    if n * len(spec.blocks) <= FULL_RESOLVE_TASKS:
        # Small enough that the search proper is cheap (its end re-solve frees the whole
        # schedule) and returns a repetend for every N: no shortcut.
        return None, None, None
    got = best_baseline(spec, n, than=None, clock=clock)
    if got is None:
        return None, None, None
    span = got[0].makespan(spec)
    if span > makespan_bound(spec, n) and not clock.skip(HELD_CUTS_STEP):
        # The whole schedule with memory as cuts (`heldcuts.py`) may prove the baseline shortest
        # (memory-capped 1F1B on the zoo's 405B chain, 0.7 s of CPU), before the device
        # relaxations, which then are not solved; a shorter schedule it finds is taken at the
        # end of the search.
        held_cuts(spec, n, span, time_limit=clock.left(), hint=got[0])
    if span <= makespan_bound(spec, n, above=span):
        parts = repetend_parts(spec, n, got, clock)
        if parts is not None or clock.spent():
            # (out of time: optimal for this N all the same, only without a repetend for other N)
            return baseline_result(spec, n, got, clock, progress, at_bound=True, parts=parts), None, None
        # Optimal for this N, but with no steady state to keep for other N (interleaved 1F1B's
        # micro-batches repeat in groups): the search proper finds a repetend, and its finishing
        # step keeps the baseline's order for this N.
        return None, None, None
    cap = useful_cap(spec, n, span)
    if cap <= period_floor(spec):
        return baseline_result(spec, n, got, clock, progress, at_bound=False, cap=cap, solver=solver), None, cap
    return None, partial(find_repetend, cap=cap), cap


def _constructive(spec: Spec, n: int, clock: Clock,
                  progress: Callable[[Progress], None] | None) -> SearchResult | None:
    """The modulo-list schedule (`construct.py`) when it reaches the period lower bound and the
    makespan bound: both are then optimal and proven, and no solver is loaded."""
    from tessel_dsl.search.construct import bound_reaching_schedule

    lower, u = lower_bound(spec), clock.unit
    if progress is not None:
        progress(Progress("constructive", lower * u, lower * u, 0, None, 0, 0, clock.elapsed()))
    sched = bound_reaching_schedule(spec, n, clock.left)
    if sched is None:
        return None
    rep = sched.repetend
    if progress is not None:
        progress(Progress("done", lower * u, rep.period * u, rep.nr, rep.period * u, 0, 0, clock.elapsed()))
    info = SearchInfo("none", "constructive", True, clock.elapsed(), lower_bound(spec), rep.period, rep.nr,
                      0, 0, (note("constructive"),), period_proven=True, copies=1,
                      makespan_bound=makespan_bound(spec, n))
    return SearchResult(sched, info)


def _search(spec: Spec, n: int, *, solver: str, method: str, clock: Clock,
            progress: Callable[[Progress], None] | None,
            find: Callable[..., tuple[Repetend, bool, tuple[Note, ...]]] | None = None) -> SearchResult:
    """`search` on a spec whose times have no common divisor left (times in that spec's units).
    `find` (optional) replaces `find_repetend`: called with the spec and the same keywords, it
    returns (repetend, period proven, notes); completion, extension and finishing are as usual.

    Phases: a direct solve when memory grows with every micro-batch (`direct.direct_search`); else the
    repetend, its warmup and cooldown (`_complete`), the extension to N with finishing, or below
    N_R one solve of the N micro-batches (`_below_nr`); then what is proven (`notes.budget_verdict`)."""
    counters = Counters()
    lower = lower_bound(spec)
    best: list[int | None] = [None]

    def report(phase: str) -> None:
        if progress is not None:
            u = clock.unit
            progress(Progress(phase, lower * u, counters.period * u, counters.nr,
                              None if best[0] is None else best[0] * u, counters.tried,
                              counters.pruned, clock.elapsed()))

    report("bounds")
    net = [sum(b.memory for b in spec.blocks_on(d)) for d in range(spec.devices)]
    if any(x > 0 for x in net):
        report("direct solve")
        return direct_search(spec, n, net, solver=solver, clock=clock, counters=counters)

    witnesses: dict = {}
    rep, period_proven, found = (find or find_repetend)(spec, solver=solver, method=method, clock=clock,
                                                        counters=counters, report=report, witnesses=witnesses)
    best[0] = rep.period
    counters.period, counters.nr = rep.period, rep.nr
    report("completion")
    parts = _complete(spec, rep, solver=solver, clock=clock, counters=counters, witnesses=witnesses)
    notes = list(found)
    report("extension")
    proofs: list[str] = []  # solves that proved the final schedule's makespan optimal (refine.py)
    bound = makespan_bound(spec, n)
    if n >= rep.nr:
        sched = extend(spec, parts, n)
        report("refinement")
        sched, how = finish(spec, sched, solver=solver, clock=clock, cuts=counters.cuts, proofs=proofs)
        notes += how
        truncated = False
    else:
        # N < N_R too large to solve: not proven optimal unless at the makespan bound
        sched, truncated, said = _below_nr(spec, parts, n, solver=solver, clock=clock, counters=counters, bound=bound)
        notes.append(said)
        if sched.makespan(spec) > bound:
            # The finishing step's whole re-solve (its first solve states memory per micro-batch)
            # finds what the direct solve's budget missed: NN-shape bench/specs/real/nnshape8.tsl
            # at N = 6, 848 -> 779, the proven optimum, in 2 s of CPU.
            report("refinement")
            sched, how = finish(spec, sched, solver=solver, clock=clock, cuts=counters.cuts, proofs=proofs)
            notes += how
            truncated = truncated and not proofs and sched.makespan(spec) > bound
    # A schedule at the makespan bound is time-optimal for this N whatever a budget cut on the way:
    # no solve could have shortened it, so the cuts do not make it unproven.
    # So is one an exact solve of the whole schedule proved shortest (`proofs`).
    bound = makespan_bound(spec, n, above=sched.makespan(spec))  # (the sharper one only if it can matter)
    at_bound = sched.makespan(spec) <= bound
    verdict = budget_verdict(counters.cuts, at_bound, proofs)
    notes += [verdict] if verdict is not None else []
    at_bound = at_bound or bool(proofs)
    proven = period_proven and (at_bound or (not counters.cuts and not truncated))
    if not proven and not notes:
        notes.append(note("time-limit"))
    info = SearchInfo(solver, method, proven, clock.elapsed(), lower, rep.period, rep.nr,
                      counters.tried, counters.pruned, tuple(notes), period_proven=period_proven, copies=1,
                      makespan_bound=bound)
    report("done")
    return SearchResult(sched, info)


def _complete(spec: Spec, rep: Repetend, *, solver: str, clock: Clock, counters: Counters,
              witnesses: dict) -> Parts:
    """The repetend with its time-optimal warmup and cooldown. A solve cut by its budget before it
    found anything settles for the valid phases that showed the repetend can be completed; every
    phase not proven optimal is named in `counters.cuts`."""
    warm = solve_warmup(spec, rep, solver=solver, time_limit=clock.left(), effort=COMPLETION_EFFORT)
    cool = solve_cooldown(spec, rep, solver=solver, time_limit=clock.left(), effort=COMPLETION_EFFORT)
    if warm is None or cool is None:
        # The budget ran out before the optimising solve found anything: settle for the valid
        # phases that showed the repetend can be completed (or look for them, also budgeted).
        counters.cuts += [what for what, got in (("the warmup", warm), ("the cooldown", cool)) if got is None]
        ends = witnesses.get(rep)
        if ends is None:
            from tessel_dsl.search.periodic import completion_witness

            ends = completion_witness(spec, rep, solver=solver, effort=ACCEPT_EFFORT, time_limit=clock.left())[1]
        if ends is not None:
            warm, cool = warm or ends[0], cool or ends[1]
        warm, cool = (None if warm is None else replace(warm, proven=True),
                      None if cool is None else replace(cool, proven=True))  # already counted as cut
    if warm is None or cool is None:
        raise InfeasibleError(f"the repetend (P={rep.period * clock.unit}, N_R={rep.nr}) has no valid warmup or cooldown "
                              f"under {capacity_in(spec)}")
    if not warm.proven:
        counters.cuts.append("the warmup")
    if not cool.proven:
        counters.cuts.append("the cooldown")
    return Parts(warm.slots, rep, cool.slots)


def _below_nr(spec: Spec, parts: Parts, n: int, *, solver: str, clock: Clock, counters: Counters,
              bound: int) -> tuple[Schedule, bool, Note]:
    """N below the repetend's N_R: one time-optimal solve of the n micro-batches with a
    deterministic budget, seeded with the best schedule known without it: the N_R schedule without
    the micro-batches from n on, or a shorter applicable baseline. Above DIRECT_MAX_TASKS block
    instances (such a solve does not settle) the seed is used as it is. Returns the schedule,
    whether it is unproven for lack of a solve (a seed above the makespan bound), and its note."""
    from tessel_dsl.search.extend import truncated as truncate
    from tessel_dsl.search.refine import best_baseline

    rep = parts.repetend
    short = truncate(spec, parts, n)
    seed_span = max(s.start + spec.block(s.block).time for s in short)
    seed = dict(n=n, nr=rep.nr, baseline=None, dropped=rep.nr - n, seed_makespan=None)
    base = best_baseline(spec, n, than=seed_span, clock=clock)
    if base is not None:
        short, seed_span = base[0].slots, base[0].makespan(spec)
        seed.update(baseline=base[1], seed_makespan=seed_span * clock.unit)
    slots, got = below_span(spec, parts, n, solver, clock.left(), seed=short)
    too_large = n * len(spec.blocks) > DIRECT_MAX_TASKS
    if got != "optimal" and not too_large:
        counters.cuts.append(f"the direct solve of N={n}")
    # Phases stay numbered for N = N_R so the plan can still be extended (see extend.parts_of).
    sched = Schedule(n, slots, name="tessel", warmup=parts.warmup, repetend=rep, cooldown=parts.cooldown)
    validate(spec, sched)
    if got == "seed":
        truncated = sched.makespan(spec) > bound
        return sched, truncated, note("below-nr-seed", too_large=too_large, truncated=truncated, **seed)
    return sched, False, note("below-nr-solved", optimal=got == "optimal", **seed)
