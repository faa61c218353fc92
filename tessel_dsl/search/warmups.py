"""1F1B+ with each stage's warmup chosen by search, not fixed at the stage's depth (a best plan in
hand on chains with multi-device blocks pinned, `baselines/pinned.py`).

1F1B+ lets stage ``s`` of ``S`` run ``S - s`` forwards before its first backward; GPipe+ runs all
``N``. On placements with all-device blocks (the NN-shape's embedding before the encoder and again
before the decoder) neither is best: every all-device block stops the whole pipeline, so the
stages near the end of the chain gain from running ahead more than 1F1B's warmup and the early
stages from running all their forwards first, as GPipe does, while the backwards still start
before every forward is done. On bench/specs/real/nnshape16.tsl (16 stages, N = 32) warmups
``32 32 32 32 32 30 28 ... 12 10`` give 2005 ms where GPipe+ gives 2091 and 1F1B+ 2307 (the
makespan bound is 1955).

The search first plays the family ``w_s = a + m (S - 1 - s)`` (``a`` from 1 to N, ``m`` 0, 1 or
2; 1F1B+ is ``a = 1, m = 1``, GPipe+ without waves ``a = N``), then descends stage by stage
(each warmup moved by 1, 2 or 4 either way, kept when the makespan is strictly shorter) until a
sweep changes nothing. A stage's warmup is never deeper than the micro-batches its memory holds;
every play is compacted and checked against memory, and a warmup order that deadlocks or
overflows is dropped. Its budget is a count of block instances laid out
(`PLAY_WORK`), so the answer does not depend on the machine or its load; only a wall-clock limit
the user gave (`clock`) ends it sooner, with the best warmups found by then.
"""
from __future__ import annotations

from tessel_dsl.analysis import resident_memory
from tessel_dsl.errors import TesselError
from tessel_dsl.ir import Spec
from tessel_dsl.schedule import Schedule
from tessel_dsl.search.clock import Clock, PlayBudget

PLAY_WORK = 300_000  # block instances laid out over all trials (about 4 s of CPU at 16 stages, N=32)
NAME = "1f1b+ (warmups searched)"
STEPS = (-4, -2, -1, 1, 2, 4)


def searched_warmups(spec: Spec, n: int, than: int, work: int = PLAY_WORK, clock: Clock | None = None
                     ) -> Schedule | None:
    """The shortest pinned 1F1B found by the module's search over stage warmups when it is
    strictly shorter than `than`; else None. Valid: compacted from the stages' orders (so
    dependencies and one block at a time hold) and within every device's memory."""
    from tessel_dsl.search.baselines.pinned import pinned_orders
    from tessel_dsl.search.compact import compact

    if not any(b.kind.is_backward for b in spec.blocks):
        return None  # inference: every stage runs its forwards in order, as GPipe+ does
    cost = n * len(spec.blocks)
    budget = PlayBudget(work, clock, "the 1F1B+ warmup search")
    done = budget.done
    count: list[int] = []  # the chain's stage count, learnt from the first play

    held = resident_memory(spec)

    def room(devices) -> int:
        """How many micro-batches the stage's devices hold at once (its warmup's ceiling)."""
        return min(spec.capacity(d) // held[d] if held[d] > 0 else n for d in devices)

    def phases(warm: list[int]):
        def queues(stages) -> list[list[tuple[str, int]]]:
            count[:] = [len(stages)]
            return [_queue(max(1, min(warm[s] if s < len(warm) else 1, n, room(st.devices))), n, bool(st.backward))
                    for s, st in enumerate(stages)]
        return queues

    def play(warm: list[int]) -> Schedule | None:
        budget.spend(cost)
        try:
            orders = pinned_orders(spec, "1F1B+", phases(warm))
        except TesselError:
            return None
        sched = Schedule(n, compact(spec, orders=orders), name=NAME)
        return sched if sched.fits_memory(spec) else None

    if play([1]) is None and not count:
        return None  # no chain to pin the blocks into: 1F1B+ does not apply
    stages = count[0]
    best, span, warm = None, than, None
    for a in range(1, n + 1):
        for m in (0, 1, 2):
            if done():
                break
            trial = [min(n, a + m * (stages - 1 - s)) for s in range(stages)]
            got = play(trial)
            if got is not None and got.makespan(spec) < span:
                best, span, warm = got, got.makespan(spec), trial
    changed = warm is not None
    while changed and not done():
        changed = False
        for s in range(stages):
            for step in STEPS:
                if done():
                    break
                trial = warm[:s] + [min(n, max(1, warm[s] + step))] + warm[s + 1:]
                if trial == warm:
                    continue
                got = play(trial)
                if got is not None and got.makespan(spec) < span:
                    best, span, warm, changed = got, got.makespan(spec), trial, True
    return best


def _queue(warm: int, n: int, backward: bool) -> list[tuple[str, int]]:
    """One stage's queue: `warm` forwards, then a backward and a forward in turn, then the rest
    of the backwards (forwards only in inference)."""
    if not backward:
        return [("F", mb) for mb in range(n)]
    queue = [("F", mb) for mb in range(warm)]
    for mb in range(n):
        queue.append(("B", mb))
        if warm + mb < n:
            queue.append(("F", warm + mb))
    return queue
