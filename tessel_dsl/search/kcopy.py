"""The search over repetends that hold every block k times (k = 2 .. MAX_COPIES).

`copies.py` turns a k-copy repetend into a one-copy search on an unrolled spec and folds the
schedule back; this module decides when that is worth trying, runs it for each k, and keeps the
schedule with the shortest makespan. The one-copy search is passed in (`search_one`), so this
module needs nothing from the driver that calls it.
"""
from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Callable

from tessel_dsl.ir import Spec
from tessel_dsl.search.bounds import makespan_bound
from tessel_dsl.search.clock import Clock
from tessel_dsl.validate import validate

if TYPE_CHECKING:
    from tessel_dsl.search.driver import Progress, SearchResult

MAX_COPIES = 2           # repetends holding each block up to this many times are tried ...
COPIES_MAX_BLOCKS = 24   # ... while the unrolled spec has at most this many blocks (effort grows fast)


def with_copies(spec: Spec, n: int, result: SearchResult, *, search_one: Callable[..., SearchResult],
                solver: str, method: str, clock: Clock,
                progress: Callable[[Progress], None] | None) -> SearchResult:
    """Try repetends holding each block k = 2 .. MAX_COPIES times (`copies.py`) when the one-copy
    period is above the lower bound (at the bound no k can do better per micro-batch); keep the
    schedule with the shortest makespan for this N (ties keep the one-copy schedule, which the
    plan can re-extend to other N). `search_one` is the one-copy search (`driver._search`)."""
    from tessel_dsl.search.copies import fold, unroll

    info = result.info
    if info.method == "direct" or method != "modulo" or info.period <= info.lower_bound:
        return result
    best, span = result, result.schedule.makespan(spec)
    proven_all, tried, per_mb = info.period_proven, 1, float(info.period)
    for k in range(2, MAX_COPIES + 1):
        left = clock.left()
        if len(spec.blocks) * k > COPIES_MAX_BLOCKS or (left is not None and left <= 0):
            break
        r = search_one(unroll(spec, k), -(-n // k), solver=solver, method=method, clock=clock, progress=progress)
        if r.info.method == "direct":
            break
        tried, proven_all = k, proven_all and r.info.period_proven
        sched = fold(spec, r.schedule, k, n)
        validate(spec, sched)
        if sched.makespan(spec) < span and r.info.period / k < per_mb:
            u = clock.unit
            note = (f"a repetend holding each block {k} times (period {r.info.period * u} for {k} micro-batches, "
                    f"{r.info.period * u / k:g} each) beats the one-copy repetend (period {info.period * u}): "
                    f"makespan {sched.makespan(spec) * u} against {span * u}; such a plan does not re-extend "
                    "to another N (search again)")
            best = replace(r, schedule=sched, info=replace(r.info, lower_bound=info.lower_bound, nr=r.info.nr * k,
                                                             repetend_copies=k,
                                                             note="; ".join(x for x in (note, r.info.note) if x)))
            span, per_mb = sched.makespan(spec), r.info.period / k
    out = best.info
    period_proven = proven_all
    return replace(best, info=replace(
        out, copies=tried, period_proven=period_proven, proven=period_proven and out.proven,
        makespan_bound=makespan_bound(spec, n)))
