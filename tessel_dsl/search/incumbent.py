"""The best plan in hand before any solve: a baseline that already reaches the makespan bound.

`search` (method ``auto``) builds the applicable baselines for N first (they cost well under a
second even at 32 devices). When the shortest of them within memory M reaches the makespan lower
bound (`bounds.makespan_bound`, time and memory), no schedule is shorter and the search stops
there, with that bound as the proof. The typical case is a memory-capped 1F1B on a chain whose
memory allows only a few micro-batches in flight: the memory bound (`membound.py`) is what
1F1B then reaches.

A plan keeps a repetend when it can: when the baseline's middle micro-batches repeat with a
fixed period (1F1B's steady state), that steady state is cut out as a one-copy repetend
(`construct.flat_repetend`) and stored beside the baseline's slots, so the plan re-extends to
other N like any searched one. Its period is proven minimal only when it meets `period_floor`.
"""
from __future__ import annotations

from typing import Callable

from tessel_dsl.errors import TesselError
from tessel_dsl.ir import Spec
from tessel_dsl.plan import SearchInfo
from tessel_dsl.schedule import Schedule
from tessel_dsl.search.bounds import makespan_bound
from tessel_dsl.search.clock import Clock
from tessel_dsl.search.notes import note
from tessel_dsl.search.result import Progress, SearchResult


def steady_parts(spec: Spec, sched: Schedule):
    """(`extend.Parts`) of a one-copy repetend cut from `sched`'s steady state: micro-batch
    ``m = N // 2`` laid out flat, each of its blocks repeating one period later in micro-batch
    ``m + 1`` (and ``m - 1`` one earlier); None when the middle does not repeat that way."""
    from tessel_dsl.search.construct import flat_repetend
    from tessel_dsl.search.extend import Parts

    n = sched.microbatches
    if n < 3:
        return None
    start = {(s.block, s.mb): s.start for s in sched.slots}
    m = n // 2
    first = spec.blocks[0].name
    period = start[(first, m + 1)] - start[(first, m)]
    if period <= 0 or any(start[(b.name, m + 1)] - start[(b.name, m)] != period
                          or start[(b.name, m)] - start[(b.name, m - 1)] != period for b in spec.blocks):
        return None
    sigma = {b.name: start[(b.name, m)] for b in spec.blocks}
    try:
        built = flat_repetend(spec, sigma, period)
    except (TesselError, ValueError):
        return None
    if built is None:
        return None
    rep, warm, cool = built
    return Parts(warm, rep, cool)


SKIPPED_PARTS = "the steady state of the baseline built for more micro-batches (a repetend for other N)"


def repetend_parts(spec: Spec, n: int, got: tuple[Schedule, str], clock: Clock | None = None):
    """The one-copy repetend a baseline plan keeps for other N (`extend.Parts`), or None. Once
    the user's wall-clock limit has run out (`clock`) only the plan's own steady state is looked
    at: building the baseline again for more micro-batches takes seconds at 16 devices and more."""
    parts = steady_parts(spec, got[0])
    if parts is not None or (clock is not None and clock.skip(SKIPPED_PARTS)):
        return parts
    return _larger_steady_parts(spec, got[1], n)


def _larger_steady_parts(spec: Spec, name: str, n: int):
    """`steady_parts` of the same baseline built for more micro-batches, when at `n` it has no
    steady state (its warmup and cooldown meet), so the plan still re-extends to other N; else
    a repetend built without a solver at the period bound."""
    from tessel_dsl.search.baselines import build

    try:
        parts = steady_parts(spec, build(spec, name, max(2 * n, n + 2 * spec.devices + 2)))
    except TesselError:
        parts = None
    if parts is not None:
        return parts
    # A baseline whose micro-batches do not repeat one by one (interleaved 1F1B goes in groups of
    # D): the repetend list scheduling builds at the period bound, when one is valid here.
    from tessel_dsl.analysis import lower_bound
    from tessel_dsl.search.construct import modulo_list_repetend
    from tessel_dsl.search.extend import Parts

    built = modulo_list_repetend(spec, lower_bound(spec))
    return None if built is None else Parts(built[1], built[0], built[2])


def useful_cap(spec: Spec, n: int, makespan: int) -> int:
    """The period from which a one-copy repetend is of no use against a plan of `makespan` for
    `n` micro-batches.

    A plan from a repetend of period ``P`` spanning ``N_R`` micro-batches runs ``n - N_R + 1``
    copies of it, so each block's steady instances start ``P`` apart over ``n - N_R`` periods,
    the first no earlier than the block's longest chain of predecessors, the last followed by its
    own time and longest chain of successors: the plan spans at least ``(n - N_R) P + chain``.
    That holds when the steady state cannot run faster than ``P``, which is what the period walk
    finds (it tries the shorter periods first; the same per-device orders at a shorter period
    would be a repetend there). The warmup and cooldown can run their micro-batches closer than
    ``P`` apart (compaction, the end re-solve), hence ``N_R`` and not 1: on
    bench/specs/real/mshape8.tsl with ``MEM=24`` a period-209 repetend gives 7440 where
    ``31 * 209 + 1149`` is 7628. ``N_R`` is at most `repetend.nr_limit`, the largest span the walk
    tries, which is what is used here."""
    from tessel_dsl.analysis import chains
    from tessel_dsl.search.repetend import nr_limit

    time = {b.name: b.time for b in spec.blocks}
    head, tail = chains(spec, time)
    chain = max((head[x] + time[x] + tail[x] for x in time), default=0)
    steady = n - nr_limit(spec)
    if steady <= 0:
        return makespan + 1
    return max(1, -(-(makespan - chain) // steady))


def baseline_result(spec: Spec, n: int, got: tuple[Schedule, str], clock: Clock,
                    progress: Callable[[Progress], None] | None, *, at_bound: bool, cap: int = 0,
                    solver: str = "auto", parts=None) -> SearchResult:
    """The baseline `got` as the search's answer (module text): proven when it reaches the
    makespan bound; else the answer because no repetend can beat it (`useful_cap` at or below the
    period floor: `cap`), its ends re-solved. `spec` has its times divided (`timescale.py`)."""
    from tessel_dsl.analysis import lower_bound
    from tessel_dsl.search.extend import extend
    from tessel_dsl.search.period_walk import period_floor

    sched, name = got
    bound = makespan_bound(spec, n, above=sched.makespan(spec))
    lower, period, nr, period_proven = lower_bound(spec), 0, 0, False
    parts = parts if parts is not None else repetend_parts(spec, n, got, clock)  # the driver's, if any
    if parts is not None:
        try:
            ext = extend(spec, parts, max(n, parts.repetend.nr))  # validated
        except TesselError:
            ext = None
        if ext is not None:
            # Stored beside the baseline's own slots (as `finish` does), unless the extension is
            # as short; below N_R (a baseline with no steady state at this N) only for other N.
            sched = ext if n >= parts.repetend.nr and ext.makespan(spec) <= sched.makespan(spec) else Schedule(
                n, sched.slots, name="tessel", warmup=ext.warmup, repetend=ext.repetend, cooldown=ext.cooldown)
            period, nr = parts.repetend.period, parts.repetend.nr
            period_proven = period <= period_floor(spec)
    if sched.name != "tessel":
        sched = Schedule(n, sched.slots, name="tessel")
    proofs: list[str] = []
    if not at_bound:
        # The end re-solve (`refine.py`; for small N the whole schedule, time-optimally) can still
        # shorten what no repetend can: the ends.
        from tessel_dsl.search.refine import refine_ends
        from tessel_dsl.search.solvers import resolve

        sched, _ = refine_ends(spec, sched, solver=resolve(solver), time_limit=clock.left(), proofs=proofs)
    span = sched.makespan(spec)
    u = clock.unit
    if progress is not None:
        progress(Progress("done", lower * u, period * u, nr, span * u, 0, 0, clock.elapsed()))
    if at_bound:
        said = [note("baseline-at-bound", baseline=name, n=n, makespan=span * u, repetend=nr > 0)]
        if nr == 0 and SKIPPED_PARTS in clock.skipped:  # not looked for, rather than none found
            said = [note("baseline-at-bound", baseline=name, n=n, makespan=span * u, repetend=False, cut=True)]
        # Without a repetend there is no period to prove: the makespan, at its bound, is optimal.
        proven = period_proven or nr == 0
    else:
        said = [note("baseline-unbeaten", baseline=name, n=n, makespan=got[0].makespan(spec) * u, cap=cap * u,
                     floor=period_floor(spec) * u, repetend=nr > 0, proof=proofs[0] if proofs else None)]
        if span < got[0].makespan(spec):
            said.append(note("ends-resolved", n=n, before=got[0].makespan(spec) * u, after=span * u))
        # Proven optimal for this N only by a whole re-solve; the period is not proven.
        proven = bool(proofs) and nr == 0
    info = SearchInfo("none", "baseline", proven, clock.elapsed(), lower, period, nr, 0, 0, tuple(said),
                      period_proven=period_proven, copies=1, makespan_bound=bound)
    return SearchResult(sched, info)
