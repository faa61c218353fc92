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
from tessel_dsl.search.membound import memory_period_bound
from tessel_dsl.search.notes import Note, note
from tessel_dsl.search.onecopy import one_copy_chain_bound
from tessel_dsl.search.repetend import Counters, nr_limit

PROBE_EFFORT = 1.0    # first pass: the deterministic solver budget (about seconds of one core) of each period
RETRY_EFFORT = 20.0   # second pass: at most this for the period just below the best
WALK_EFFORT_BLOCKS = 108.0  # the whole walk's budget (both passes, polish included) is this over the
WALK_EFFORT_RANGE = (1.0, 24.0)  # number of blocks, within these limits (module `walk_budget`)
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


def walk_budget(spec: Spec) -> float:
    """The deterministic solver budget of one period walk. A unit of CP-SAT's deterministic time
    costs more CPU the larger the cyclic model (measured on the zoo under load: about 3 s of CPU
    at 18 blocks, 8 to 18 s at 128), and the larger models rarely settle a period anyway, so the
    budget shrinks with the number of blocks: about 6 units at 18 blocks (an 8-stage chain with
    side blocks), 1 at 108 or more, and up to 24 for small specs, which settle long before."""
    low, high = WALK_EFFORT_RANGE
    return min(high, max(low, WALK_EFFORT_BLOCKS / max(1, len(spec.blocks))))


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

    Budgets are deterministic (CP-SAT's deterministic time, charged as used), so the answer is the
    same on every run and under any load; a wall-clock limit applies only when the user gave
    ``--time-limit``. The whole walk gets `walk_budget`. In the first pass each period gets
    `PROBE_EFFORT`: a period near the boundary that this cannot settle is left open (such solves
    spend their whole budget, periods clearly on either side settle in a fraction of it). The
    second pass spends what is left where it can still change the answer: the period just below
    the best, which, found infeasible, proves the best optimal, and found feasible, improves it
    (then the next one below). With `cap`, no period at or above it is tried (`find_repetend`).
    """
    from tessel_dsl.search.modulo import solve_period

    hi, best = fallback.period if cap is None else min(fallback.period, cap), fallback
    lo = min(hi, period_floor(spec))
    best_cuts: list[str] = []  # what a budget cut in finding `best` (its latency polish)
    max_nr = cyclic_nr_limit(spec)
    spent = [0.0]  # deterministic time used by the walk's solves
    total = walk_budget(spec)

    def attempt(period: int, effort: float) -> str:
        nonlocal lo, hi, best, best_cuts
        counters.period, counters.nr = period, max_nr
        report("repetend (modulo)")
        counters.tried += 1
        cuts: list[str] = []
        status, rep = solve_period(spec, period, max_nr, solver, budget(), min(effort, total - spent[0]), cuts,
                                   spent)
        if status == "infeasible":
            counters.pruned += 1
            lo = max(lo, period + 1)  # and, by monotonicity, every period below it
            return status
        if rep is not None:
            ok = accept(rep)
            if ok is None:  # the budget could not tell whether it can be completed: left open
                return "unknown"
            if not ok:
                return "rejected"
            best, hi, best_cuts = rep, period, cuts
            return "feasible"
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

    def spent_out() -> bool:
        return out_of_time() or spent[0] >= total - 0.05

    def rejected(period: int) -> tuple[Repetend, bool, Note | None, bool]:
        return best, False, note("walk-rejected", period=period * clock.unit), True

    # Gallop: the optimum is usually at or just above the lower bound.
    step, below = 1, lo - 1  # `below`: the highest period tried and not feasible
    period = lo
    while period < hi and not spent_out():
        status = attempt(period, PROBE_EFFORT)
        if status == "rejected":
            return rejected(period)
        if status == "feasible":
            break
        below = period
        period = max(lo, below + 1) + step - 1
        step *= 2
    # Bisect between the last period that was not feasible and the best one.
    while max(lo, below + 1) < hi and not spent_out():
        period = (max(lo, below + 1) + hi) // 2
        status = attempt(period, PROBE_EFFORT)
        if status == "rejected":
            return rejected(period)
        if status != "feasible":
            below = period
    # Second pass: the rest of the budget on the period just below the best, while that settles.
    while lo < hi and not spent_out():
        status = attempt(hi - 1, RETRY_EFFORT)
        if status == "rejected":
            return rejected(hi - 1)
        if status not in ("feasible", "infeasible"):
            break
    proven = lo >= hi  # every period below the best is proven infeasible
    said = None
    if not proven:
        u = clock.unit
        said = note("walk-unsettled", cause="time limit" if out_of_time() else "budget", low=lo * u,
                    high=max(lo, hi - 1) * u)
    counters.cuts += [c.replace(f"P={hi}", f"P={hi * clock.unit}") for c in best_cuts]
    return best, proven, said, False
