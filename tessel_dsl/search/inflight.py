"""Memory-capped 1F1B with each stage's in-flight limit chosen by search, not by its memory alone.

The memory-capped 1F1B baseline (`baselines/capped.py`) lets stage ``s`` hold ``min(k_s, S - s)``
micro-batches, as much as its memory allows. Where memory binds that is not the best choice: a
stage that runs ahead of the one before it fills the pipeline with forwards that later stages
must answer in order, and the round trips of equal-depth neighbours (`onecopy.py`, the one-copy
chain bound) set the pace. Holding fewer on some stages can shorten the makespan: on the zoo's
Mixtral 8x22B chain (16 stages, 6 micro-batches fit on even stages) limits
``6 10 6 10 5 10 4 9 6 7 3 5 4 3 2 1`` instead of ``6 10 6 10 6 10 6 9 6 7 6 5 4 3 2 1`` give
22384 ms for N = 32 against 23034 (the makespan bound is 22119).

The search is a coordinate descent: stage after stage, each lower limit is played out
(`capped._play`, compacted, memory checked) and kept when the makespan is strictly shorter; sweeps
repeat until one changes nothing. Its budget is a count of block instances laid out
(`PLAY_WORK`), so the answer does not depend on the machine or its load; only a wall-clock limit
the user gave (`clock`) ends it sooner, with the best limits found by then.
"""
from __future__ import annotations

from tessel_dsl.errors import TesselError
from tessel_dsl.ir import Spec
from tessel_dsl.schedule import Schedule
from tessel_dsl.search.clock import Clock, PlayBudget

PLAY_WORK = 300_000  # block instances laid out over all trials (about 3 s of CPU at 16 stages, N=32)
NAME = "1f1b-capped (in-flight limits searched)"


def searched_capped(spec: Spec, n: int, work: int = PLAY_WORK, clock: Clock | None = None) -> Schedule | None:
    """The shortest memory-capped 1F1B found by the module's descent over in-flight limits,
    when it is strictly shorter than the baseline's own limits give; else None. Valid: compacted
    from the stages' orders and within every device's memory. `clock` (optional): once the
    user's wall-clock limit has run out no further limits are tried."""
    from tessel_dsl.search.baselines.capped import _caps, _play
    from tessel_dsl.search.baselines.chain import find_stages
    from tessel_dsl.search.compact import compact

    try:
        stages = find_stages(spec, who="memory-capped 1F1B")
        if not all(st.backward for st in stages):
            return None  # inference: nothing stays in flight
        limits = _caps(spec, stages)
    except TesselError:
        return None
    cost = n * len(spec.blocks)
    budget = PlayBudget(work, clock, "the in-flight limit descent")
    done = budget.done

    def play(caps: list[int]) -> Schedule | None:
        budget.spend(cost)
        orders: list[list[tuple[str, int]]] = [[] for _ in range(spec.devices)]
        try:
            rows = _play(spec, stages, n, caps)
        except TesselError:
            return None
        for st, row in zip(stages, rows):
            keys = [(name, mb) for phase, mb in row for name in (st.forward if phase == "F" else st.backward)]
            for d in st.devices:
                orders[d] = list(keys)
        sched = Schedule(n, compact(spec, orders=orders), name=NAME)
        return sched if sched.fits_memory(spec) else None

    first = play(limits)
    if first is None:
        return None  # the baseline had to lower every limit to fit: not this descent's case
    return lower_each(spec, limits, play, first.makespan(spec), done)


def lower_each(spec: Spec, values: list[int], play, span: int, done) -> Schedule | None:
    """The module text's descent: stage after stage, each lower value (down to 1) played out and
    kept when its schedule is strictly shorter than `span`, sweeps until one changes nothing or
    `done()`; the shortest schedule found, or None. `play(values)`: a valid schedule or None.
    (`zbdepth.py` runs the same descent over forward depths.)"""
    best, changed = None, True
    while changed and not done():
        changed = False
        for i in range(len(values)):
            for v in range(values[i] - 1, 0, -1):
                if done():
                    break
                trial = values[:i] + [v] + values[i + 1:]
                got = play(trial)
                if got is not None and got.makespan(spec) < span:
                    best, span, values, changed = got, got.makespan(spec), trial, True
    return best
