"""Memory-capped ZB-H1 with each stage's forward depth chosen by search (a best plan in hand on
split-backward chains where memory binds).

Memory-capped ZB-H1 (`baselines/zbcapped.py`) plays stage units on a clock; under its "defer"
rule a stage runs its next forward while fewer than ``min(S - s, k_s)`` forwards await their input
gradient. As for memory-capped 1F1B (`inflight.py`), letting a late stage run that far ahead is
not always best: its forwards fill memory that the weight gradients behind them must free before
the next micro-batch can enter. On bench/specs/real/llama70b_zb16_mem.tsl (16 stages, 7
micro-batches fit, 4 on the last stage; N = 32) depths ``7 7 7 7 7 7 5 4 7 7 6 5 4 2 2 1`` give
18159 ms against the baseline's 18360 (the makespan bound is 16201).

The search is a coordinate descent like `inflight.py`'s: stage after stage, each lower depth is
played out (`zbcapped._play` with the "defer" rule, compacted, memory checked) and kept when the
makespan is strictly shorter; sweeps repeat until one changes nothing. Its budget is a count of
block instances laid out (`PLAY_WORK`), so the answer does not depend on the machine or its load;
only a wall-clock limit the user gave (`clock`) ends it sooner, with the best depths found by then.
"""
from __future__ import annotations

from tessel_dsl.errors import TesselError
from tessel_dsl.ir import Spec
from tessel_dsl.schedule import Schedule
from tessel_dsl.search.clock import Clock, PlayBudget
from tessel_dsl.search.inflight import lower_each

PLAY_WORK = 300_000  # block instances laid out over all trials (about 3 s of CPU at 16 stages, N=32)
NAME = "zb-h1-capped (depths searched)"


def searched_depths(spec: Spec, n: int, than: int, work: int = PLAY_WORK, clock: Clock | None = None
                    ) -> Schedule | None:
    """The shortest memory-capped ZB-H1 found by the module's descent over forward depths when
    it is strictly shorter than `than`; else None. Valid: compacted from the stages' orders (so
    dependencies and one block at a time hold) and within every device's memory."""
    from tessel_dsl.search.baselines.zbcapped import WHO, _orders, _play, _Stages
    from tessel_dsl.search.baselines.zerobubble import find_split_stages
    from tessel_dsl.search.compact import compact

    try:
        stages = find_split_stages(spec, who=WHO)
        units = _Stages(spec, stages)
    except TesselError:
        return None
    count, hold = units.count, units.hold
    cost = n * len(spec.blocks)
    budget = PlayBudget(work, clock, "the zero-bubble depth descent")
    done = budget.done

    def play(depth: list[int]) -> Schedule | None:
        budget.spend(cost)
        try:
            rows, _ = _play(units, n, "defer", depth, hold)
            sched = Schedule(n, compact(spec, orders=_orders(spec, stages, rows)), name=NAME)
        except TesselError:
            return None
        return sched if sched.fits_memory(spec) else None

    depth = [min(count - k, hold[k]) for k in range(count)]  # the baseline's own
    return lower_each(spec, depth, play, than, done)
