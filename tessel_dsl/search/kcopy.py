"""The search over repetends that hold every block k times (k = 2 .. MAX_COPIES).

`copies.py` turns a k-copy repetend into a one-copy search on an unrolled spec and folds the
schedule back; this module decides when that is worth trying, runs it for each k, and keeps the
schedule with the shortest makespan. The one-copy search is passed in (`search_one`), so this
module needs nothing from the driver that calls it.
"""
from __future__ import annotations

from dataclasses import replace
from fractions import Fraction
from functools import partial
from typing import Callable

from tessel_dsl.errors import ScheduleError
from tessel_dsl.ir import Spec
from tessel_dsl.search.bounds import makespan_bound
from tessel_dsl.search.clock import Clock
from tessel_dsl.search.notes import Note, note
from tessel_dsl.search.result import Progress, SearchResult
from tessel_dsl.validate import validate

MAX_COPIES = 2           # repetends holding each block up to this many times are tried ...
COPIES_MAX_BLOCKS = 24   # ... while the unrolled spec has at most this many blocks (effort grows fast)
CHAIN_MAX_COPIES = 2     # on a device chain the small exact model of `chaincycle.py` tries k = 2 .. this
# Without --effort, a device chain beyond one stage per device gets a short walk of two copies and
# the periodic schedule cut to N, with no search of its ends (`_light_cut`): deterministic budgets
# of the whole walk and of each period's solve. On bench/specs/real/nnshape8.tsl (MEM=24) and
# m8_llama.tsl it costs 7 and 8 s of CPU for 3867 -> 3642 and 1988 -> 1916 ms.
LIGHT_WALK_EFFORT = 4.0
LIGHT_PERIOD_EFFORT = 2.5
LIGHT_STEP = "the short walk of two-copy periods on this chain"
# ... and only where two copies could gain at least this share of the period per micro-batch: on
# an 8-GPU Gemma-2-27B M-shape (924 ms a micro-batch, floor 886.5) the walk spent 11.6 s of CPU
# on a range of 4 % and settled nothing.
LIGHT_MIN_GAP = 0.05
# A block on every device holding at most this share of the least room is left out of the walk's model
SMALL_HOLD = 0.01


def with_copies(spec: Spec, n: int, result: SearchResult, *, search_one: Callable[..., SearchResult],
                find_repetend: Callable[..., tuple], solver: str, method: str, clock: Clock,
                progress: Callable[[Progress], None] | None, per_mb_cap: int | None = None,
                device_chains: bool = False) -> SearchResult:
    """Try repetends holding each block k = 2 .. MAX_COPIES times (`copies.py`) when the one-copy
    period is above the lower bound (at the bound no k can do better per micro-batch); keep the
    schedule with the shortest makespan for this N (ties keep the one-copy schedule, which the
    plan can re-extend to other N). `search_one` is the one-copy search (`driver._search`) and
    `find_repetend` its repetend finder (`driver.find_repetend`), passed in so that this module
    imports nothing from the driver that calls it. `per_mb_cap` (optional): only periods per
    micro-batch below it can beat the best plan in hand (`incumbent.useful_cap`). `device_chains`:
    also use the exact chain model on device chains beyond one stage per device (`devchain.py`)."""
    from tessel_dsl.search.copies import fold

    info = result.info
    per_mb = Fraction(info.period) if info.period else None
    if per_mb_cap is not None:
        per_mb = Fraction(per_mb_cap) if per_mb is None else min(per_mb, Fraction(per_mb_cap))
    if info.method == "direct" or method != "modulo" or per_mb is None or per_mb <= info.lower_bound:
        return result
    from tessel_dsl.search.chaincycle import applies

    best, span = result, result.schedule.makespan(spec)
    # A baseline kept because no one-copy repetend reaches `per_mb_cap` (it is at or below
    # `period_floor`, a proven bound) settles every one-copy period below the cap.
    kept_baseline = info.method == "baseline"
    proven_all, tried = info.period_proven or (kept_baseline and per_mb_cap is not None), 1
    # Device chains beyond one stage per device (an embedding or a head beside a stage, split
    # backward, blocks on every device) only with `device_chains` (`tessel search --effort`):
    # their model costs tens of seconds of CPU on an 8-stage chain and, on the zoo's memory-bound
    # chains, found no shorter plan.
    chain = applies(spec, CHAIN_MAX_COPIES, device_chains)
    # Without it, a device chain gets the short walk below instead of the general search of the
    # unrolled spec: on bench/specs/m4_llama8b.tsl (a 4-GPU M-shape, 12 blocks) that search took
    # 33 s of CPU for 14368 ms, the walk 5 s for 13876.
    light = not chain and applies(spec, CHAIN_MAX_COPIES, True)
    unused: list[Note] = []  # k-copy repetends with a shorter period per micro-batch that were not used
    for k in range(2, (CHAIN_MAX_COPIES if chain else MAX_COPIES) + 1):
        if light or (not chain and len(spec.blocks) * k > COPIES_MAX_BLOCKS) or clock.skip("the search for k-copy repetends"):
            break
        if chain:
            find, settled, periodic = _chain_finder(spec, k, per_mb, solver=solver, clock=clock)
            if find is None:  # no k-copy period below the best per micro-batch was found
                tried, proven_all = k, proven_all and settled
                continue
            r = search_one(_unrolled(spec, k, n), -(-n // k), solver=solver, method=method, clock=clock,
                           progress=progress, find=find)
        else:
            # Only periods below k times the best per micro-batch can help: the walk stops there
            # (it used to bisect up to the one-micro-batch repetend's period, on full budgets).
            cap = -(-(k * per_mb).numerator // (k * per_mb).denominator)
            r = search_one(_unrolled(spec, k, n), -(-n // k), solver=solver, method=method, clock=clock,
                           progress=progress, find=partial(find_repetend, cap=cap))
        if r.info.method == "direct":
            break
        tried, proven_all = k, proven_all and r.info.period_proven
        sched = fold(spec, r.schedule, k, n)
        if chain:
            # The periodic schedule itself, cut to N micro-batches, can have shorter ends than the
            # search's warmup and cooldown of the unrolled spec (on an 8-stage chain with
            # embedding and head at N = 32: 3871 ms against 4527)
            cut = periodic(n, r.schedule.name)
            if cut.makespan(spec) < sched.makespan(spec):
                sched = cut
        validate(spec, sched)
        if Fraction(r.info.period, k) < per_mb and sched.makespan(spec) >= span:
            u = clock.unit
            unused.append(note("copies-unused", k=k, period=r.info.period * u, n=n,
                               makespan=sched.makespan(spec) * u, best_makespan=span * u))
        if sched.makespan(spec) < span and Fraction(r.info.period, k) < per_mb:
            u = clock.unit
            beat = note("copies-beat", k=k, period=r.info.period * u, one_copy_period=info.period * u,
                        makespan=sched.makespan(spec) * u, one_copy_makespan=span * u)
            best = replace(r, schedule=sched, info=replace(r.info, lower_bound=info.lower_bound, nr=r.info.nr * k,
                                                             repetend_copies=k, notes=(beat, *r.info.notes)))
            span, per_mb = sched.makespan(spec), Fraction(r.info.period, k)
    if light and not clock.skip(LIGHT_STEP):
        cut = _light_cut(spec, n, best, per_mb, clock)
        if cut is not None:
            # the one-copy repetend the plan keeps for other N keeps its own claim (held once)
            best, span, tried, proven_all = cut, cut.schedule.makespan(spec), 1, cut.info.period_proven
    out = best.info
    # (the baseline's own steady state, if still the answer, keeps its own claim)
    period_proven = out.period_proven if best is result and kept_baseline else proven_all
    if unused:
        # The plan keeps a repetend whose period per micro-batch a k-copy one beats: its period is
        # proven only among repetends holding each block as often as it does.
        tried = out.repetend_copies
        period_proven = out.period_proven
        out = replace(out, notes=(*out.notes, *unused))
    bound = makespan_bound(spec, n, above=best.schedule.makespan(spec))
    if best.schedule.makespan(spec) > bound and not chain and applies(spec, CHAIN_MAX_COPIES, True):
        # The exact chain model was left out for want of --effort: the user cannot know it exists.
        out = replace(out, notes=(*out.notes, note("copies-with-effort", k=CHAIN_MAX_COPIES)))
    return replace(best, info=replace(
        out, copies=tried, period_proven=period_proven, proven=period_proven and out.proven,
        makespan_bound=bound))


def _unrolled(spec: Spec, k: int, n: int) -> Spec:
    """`spec` with `k` copies unrolled, its makespan bound at ceil(n / k) taken from `spec`'s at n."""
    from tessel_dsl.search.bounds import derives
    from tessel_dsl.search.copies import unroll

    out = unroll(spec, k)
    derives(out, -(-n // k), spec, n)
    return out


def _chain_finder(spec: Spec, k: int, per_mb: Fraction, *, solver: str, clock: Clock):
    """For a chain (`chaincycle.py`): the smallest period of `k` copies below `k * per_mb`, as a
    repetend finder for the one-copy search of the unrolled spec, whether every period below
    it was proven infeasible, and the periodic schedule cut to N micro-batches (a function of N
    and the schedule's name); (None, proven, None) when no period below `k * per_mb` was found
    (proven: every one tried was shown infeasible, so none exists). The lowest period tried is `k` times the larger of the busiest device's work and the
    memory bound (`membound.py`), both lower bounds for any schedule."""
    from tessel_dsl.search.chaincycle import chain_period_search, periodic_schedule
    from tessel_dsl.search.construct import flat_repetend
    from tessel_dsl.search.copies import unroll
    from tessel_dsl.search.periodic import completion_witness

    period, starts, settled = chain_period_search(spec, k, *_period_range(spec, k, per_mb), left=clock.left)
    if period is None:
        return None, settled, None
    uspec = unroll(spec, k)
    built = flat_repetend(uspec, starts, period)
    if built is None:  # (not expected on a chain) the usual search is not run either
        return None, False, None
    rep = built[0]
    u = clock.unit
    said = () if settled else (note("copies-unsettled", k=k, period=period * u),)

    def find(s: Spec, *, witnesses: dict | None = None, **_) -> tuple:
        if witnesses is not None:
            verdict, ends = completion_witness(s, rep, solver=solver, effort=0.0, time_limit=clock.left())
            if ends is not None:
                witnesses[rep] = ends
        return rep, settled, said

    return find, settled, partial(periodic_schedule, spec, starts, k, period)


def _small_holds_dropped(spec: Spec) -> Spec:
    """`spec` with the memory of each block on every device that holds at most `SMALL_HOLD` of the
    least room of any device (and of the blocks that free it) set to none, for the short walk
    alone; `spec` itself when there is none. Such a block (an embedding's or a head's few MB a
    micro-batch split over every GPU) holds from early in a micro-batch to its end on every
    device, and its holds made the walk's budget run out before the low periods: on
    bench/results/plan.md's mshape-spec at D = 8 (10 MB against 1 GB a stage, 1 ms units) the walk
    settles at 19 for two micro-batches with them and 17 without, and the search's plan is 299 ms
    with them and 285 without. The cut is then validated on `spec` itself."""
    room = min(spec.capacities)
    small = {b.name for b in spec.blocks if len(b.devices) == spec.devices > 1 and 0 < b.memory <= SMALL_HOLD * room}
    if not small:
        return spec
    blocks = tuple(replace(b, memory=0) if b.name in small or b.forward in small else b for b in spec.blocks)
    return replace(spec, blocks=blocks)


def _period_range(spec: Spec, k: int, per_mb: Fraction) -> tuple[int, int]:
    """The periods of `k` copies worth trying: from `k` times the larger of the busiest device's
    work and the memory bound (`membound.py`), both lower bounds for any schedule, up to below
    `k` times the best period per micro-batch in hand."""
    from tessel_dsl.analysis import lower_bound
    from tessel_dsl.search.membound import memory_period_bound

    floor = max(Fraction(lower_bound(spec)), memory_period_bound(spec)) * k
    return -(-floor.numerator // floor.denominator), -(-(per_mb * k).numerator // (per_mb * k).denominator)


def _light_cut(spec: Spec, n: int, best: SearchResult, per_mb: Fraction, clock: Clock) -> SearchResult | None:
    """`best` with its slots replaced by a two-copy periodic schedule cut to `n` micro-batches
    (`chaincycle.periodic_schedule`), when a short walk (`LIGHT_WALK_EFFORT`) finds a period
    below twice `per_mb` and the cut is shorter; None otherwise. No search of the two-copy
    repetend's warmup and cooldown runs (that is what makes the full model cost tens of seconds):
    the plan keeps `best`'s repetend to re-extend to other N, with that repetend's claim on its
    period; the makespan is not proven, the cut being neither that repetend's extension nor
    optimal for its own period."""
    from tessel_dsl.schedule import Schedule
    from tessel_dsl.search.chaincycle import chain_period_search, periodic_schedule

    low, high = _period_range(spec, 2, per_mb)
    if (high - low) < LIGHT_MIN_GAP * high:
        return None
    walked = _small_holds_dropped(spec)
    period, starts, _ = chain_period_search(walked, 2, low, high, effort=LIGHT_PERIOD_EFFORT,
                                            walk=LIGHT_WALK_EFFORT, left=clock.left)
    if period is None:
        return None
    cut = periodic_schedule(walked, starts, 2, period, n, "tessel")
    before = best.schedule.makespan(spec)
    if cut.makespan(spec) >= before:
        return None
    try:
        validate(spec, cut)
    except ScheduleError:
        if walked is spec:
            raise
        return None  # the holds left out did bind after all
    keep = best.schedule
    sched = Schedule(n, cut.slots, name="tessel", warmup=keep.warmup, repetend=keep.repetend, cooldown=keep.cooldown)
    u = clock.unit
    said = note("copies-cut", period=period * u, one_copy_period=best.info.period * u, n=n,
                makespan=cut.makespan(spec) * u, before=before * u)
    return replace(best, schedule=sched, info=replace(best.info, proven=False, notes=(said, *best.info.notes)))
