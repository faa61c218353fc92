"""The period walk of the cyclic model: the smallest period whose repetend holds each block once.

`modulo_search` brackets the period between a floor no repetend can beat (`period_floor`) and
the best period found, galloping up and then bisecting, each period on a deterministic budget.
"""
from __future__ import annotations

from typing import Callable

from tessel_dsl.analysis import lower_bound
from tessel_dsl.ir import Spec
from tessel_dsl.schedule import Repetend
from tessel_dsl.search.clock import Clock
from tessel_dsl.search.membound import memory_period_bound, one_copy_chain_bound
from tessel_dsl.search.notes import Note, note
from tessel_dsl.search.repetend import Counters, nr_limit

PERIOD_EFFORT = 5.0   # deterministic solver budget (about seconds of one core) for settling one period
RETRY_EFFORT = 20.0   # for the one period just below the best, when PERIOD_EFFORT could not settle it
SLICE_SHARE = 0.1     # with a time limit, each period also gets at most this share of it ...
SLICE_MIN = 0.5       # ... but at least this many seconds
REPETEND_SHARE = 0.75  # of a time limit, for finding the repetend; the rest is for completion


def cyclic_nr_limit(spec: Spec) -> int:
    """The largest N_R the cyclic model allows: the in-flight limit plus one micro-batch on each
    side for blocks that hold no memory (e.g. an embedding before the first stage and after the
    last one, which may belong to a micro-batch one period apart from their neighbours)."""
    return nr_limit(spec) + 2


def period_floor(spec: Spec) -> int:
    """No repetend holding each block once has a shorter period: the busiest device's work, the
    memory bound (a micro-batch's holding time over how many a device holds) and, on a chain, the
    warmups memory allows (`membound.py`)."""
    mem = memory_period_bound(spec)
    return max(lower_bound(spec), -(-mem.numerator // mem.denominator), one_copy_chain_bound(spec))


def modulo_search(spec: Spec, fallback: Repetend, *, solver: str, clock: Clock, counters: Counters,
                   report: Callable[[str], None], accept: Callable[[Repetend], bool | None],
                   cap: int | None = None) -> tuple[Repetend, bool, Note | None, bool]:
    """Smallest feasible period with the cyclic model: (repetend, proven, note, needs_enumeration).

    Feasibility is monotone in the period, so the search keeps ``lo`` (every period below it is
    infeasible or unsettled) and ``hi`` (the best period found, first the one-micro-batch
    repetend's). It gallops up from the lower bound (``lo``, ``lo + 1``, ``lo + 3``, ``lo + 7``,
    ...) until a period is feasible, then bisects between the last period that was not and the
    best; the number of solves grows with the logarithm of the gap, not with the time resolution.
    The walk starts at `period_floor`, which adds what memory proves to the busiest device's work.
    Each solve has a deterministic budget (`PERIOD_EFFORT`), so the answer is the same on every
    run and under any load; a wall-clock limit applies only when the user gave ``--time-limit``.
    A period the budget could not settle is kept as open (the answer is then not proven); the one
    just below the best gets a second, larger budget. With `cap`, no period at or above it is
    tried (`find_repetend`).
    """
    from tessel_dsl.search.modulo import solve_period

    hi, best = fallback.period if cap is None else min(fallback.period, cap), fallback
    lo = min(hi, period_floor(spec))
    best_cuts: list[str] = []  # what a budget cut in finding `best` (its latency polish)
    max_nr = cyclic_nr_limit(spec)
    open_periods: set[int] = set()  # tried, neither found feasible nor proven infeasible

    def attempt(period: int, effort: float) -> str:
        nonlocal lo, hi, best, best_cuts
        counters.period, counters.nr = period, max_nr
        report("repetend (modulo)")
        counters.tried += 1
        cuts: list[str] = []
        status, rep = solve_period(spec, period, max_nr, solver, budget(), effort, cuts)
        if status == "infeasible":
            counters.pruned += 1
            lo = max(lo, period + 1)  # and, by monotonicity, every period below it
            return status
        if rep is not None:
            ok = accept(rep)
            if ok is None:  # the budget could not tell whether it can be completed: left open
                open_periods.add(period)
                return "unknown"
            if not ok:
                return "rejected"
            best, hi, best_cuts = rep, period, cuts
            return "feasible"
        open_periods.add(period)
        return "unknown"

    def budget() -> float | None:
        left = clock.left()
        if left is None:
            return None
        left -= (1.0 - REPETEND_SHARE) * clock.limit  # keep the rest for completion
        return max(0.01, min(left, max(SLICE_MIN, SLICE_SHARE * clock.limit)))

    def out_of_time() -> bool:
        left = clock.left()
        return left is not None and left <= (1.0 - REPETEND_SHARE) * clock.limit

    def rejected(period: int) -> tuple[Repetend, bool, Note | None, bool]:
        return best, False, note("walk-rejected", period=period * clock.unit), True

    # Gallop: the optimum is usually at or just above the lower bound.
    step, below = 1, lo - 1  # `below`: the highest period tried and not feasible
    period = lo
    while period < hi and not out_of_time():
        status = attempt(period, PERIOD_EFFORT)
        if status == "rejected":
            return rejected(period)
        if status == "feasible":
            break
        below = period
        period = max(lo, below + 1) + step - 1
        step *= 2
    # Bisect between the last period that was not feasible and the best one.
    while max(lo, below + 1) < hi and not out_of_time():
        period = (max(lo, below + 1) + hi) // 2
        status = attempt(period, PERIOD_EFFORT)
        if status == "rejected":
            return rejected(period)
        if status != "feasible":
            below = period
    # One larger budget for the most promising open period, just below the best.
    if hi - 1 in open_periods and hi - 1 >= lo and not out_of_time():
        open_periods.discard(hi - 1)
        status = attempt(hi - 1, RETRY_EFFORT)
        if status == "rejected":
            return rejected(hi - 1)
    proven = lo >= hi  # every period below the best is proven infeasible
    said = None
    if not proven:
        u = clock.unit
        said = note("walk-unsettled", cause="time limit" if out_of_time() else "budget", low=lo * u,
                    high=max(lo, hi - 1) * u)
    counters.cuts += [c.replace(f"P={hi}", f"P={hi * clock.unit}") for c in best_cuts]
    return best, proven, said, False
