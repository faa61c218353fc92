"""Memory-aware interleaved 1F1B with the size of its micro-batch sets chosen by search.

Interleaved 1F1B takes forwards in sets of micro-batches, every chunk in turn for each set
(Megatron uses sets of as many micro-batches as there are device groups). Where memory binds,
`baselines/classic.interleaved_orders` plays the order out under each device's memory with sets
of D, D/2, ... 1 (`_played_interleaved`). The set size decides how long a chunk's activations wait
for the chunk after it on the same device, so the powers of two are not the only good sizes: on
the zoo's Llama-3-405B interleaved over 32 devices (N = 64, 52 GB for activations) sets of 22
micro-batches give 19209 ms against 20263 for the baseline's best (sets of 16); the makespan bound
is 17967 (`memfill.py`).

Every size from 1 to the number of groups is played out; the shortest schedule that fits memory
is kept when it is strictly shorter than the baseline's. Cost: one play and one compaction per
size (about 0.2 s of CPU each at 32 devices and N = 64), fixed by the spec, so the answer does
not depend on the machine; a user's wall-clock limit (`clock`) stops it early.
"""
from __future__ import annotations

from tessel_dsl.errors import TesselError
from tessel_dsl.ir import Spec
from tessel_dsl.schedule import Schedule
from tessel_dsl.search.clock import Clock

NAME = "interleaved-1f1b-capped (set size searched)"


def searched_interleaved(spec: Spec, n: int, than: int, clock: Clock | None = None) -> Schedule | None:
    """The shortest memory-aware interleaved 1F1B over every set size, when strictly shorter
    than `than` (the interleaved baseline's makespan); else None. Valid: compacted from the
    groups' orders and within every device's memory."""
    from tessel_dsl.search.baselines.chain import find_rounds
    from tessel_dsl.search.baselines.classic import _played_interleaved, spread_rounds
    from tessel_dsl.search.compact import compact

    try:
        stages, groups = find_rounds(spec)
    except TesselError:
        return None
    if groups < 2 or not all(st.backward for st in stages):
        return None  # one group is 1F1B; inference holds nothing in flight
    chunks = len(stages) // groups
    best, span = None, than
    for width in range(1, groups + 1):
        if clock is not None and clock.skip("the set-size scan of interleaved 1F1B"):
            break
        played = _played_interleaved(spec, stages, groups, chunks, n, width)
        if played is None:
            continue
        try:
            sched = Schedule(n, compact(spec, orders=spread_rounds(spec, stages, groups, played)), name=NAME)
        except TesselError:
            continue
        if sched.fits_memory(spec) and sched.makespan(spec) < span:
            best, span = sched, sched.makespan(spec)
    return best
