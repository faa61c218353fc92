"""A makespan bound from a device that fills its memory before it may free any (`fill_bound`).

Take a device ``d`` whose blocks, over one micro-batch, give back all they take (their memory sums
to zero) and whose micro-batches together need more than its capacity ``C``. Let ``X`` be the
earliest a block of ``d`` that frees memory can start (the shortest of their heads, the longest
dependency chains before them, lags included), and ``s_L`` the start of the last block instance of
``d`` that takes memory, over all micro-batches. Split the instances of ``d``'s blocks by start:

* **before X** nothing has been given back, so the memory taken by the blocks started by then is
  at most ``C`` (the validator checks the running sum at each start); in fact at most the most
  that sums of the micro-batches' holdings make within ``C`` (`membound.room`). Their time is at most a
  fractional knapsack: up to ``N`` copies of each taking block whose head is below ``X``, time
  as value and memory as weight, within ``C``; plus the blocks that neither take nor free;
* **from X to s_L** they run one at a time between ``X`` and the end of the last taking block,
  which ends by the makespan less the shortest tail of a taking block: at most ``T - Q - X``;
* **after s_L** only freeing and neutral blocks start, and together they give back what was held
  just after ``s_L``, at most ``C``: the same knapsack over the freeing blocks.

Every micro-batch's taking blocks cannot all start before ``X`` (they would need more than
``C``), so ``s_L >= X`` and the three parts cover ``N * W_d`` (``W_d`` the device's work for one
micro-batch). Hence

    makespan >= X + Q + N * W_d - fill(taking) - fill(freeing) - N * W_neutral.

It counts what the per-device bounds do not: a device with little memory runs out of forwards
to do long before the first backward reaches it, and at the end it has only so many backwards
left once it takes no more. On the zoo's 405B model interleaved over 32 devices (two chunks of 2
layers each, 52 GB) it lifts the makespan bound of 64 micro-batches from 16065 to 17967 ms, where
the best plan known takes 19209 ms; on the chains of one stage per device the other memory bounds
are sharper. Small specs against the time-optimal solve: tests/unit/test_memfill.py.
"""
from __future__ import annotations

from fractions import Fraction

from tessel_dsl.analysis import chains, reachable
from tessel_dsl.ir import Spec
from tessel_dsl.search.lags import edge_lags
from tessel_dsl.search.membound import room as device_room


def fill_bound(spec: Spec, microbatches: int) -> int:
    """The largest bound of the module text over the devices it applies to; 0 if none."""
    if any(b.time <= 0 for b in spec.blocks):
        return 0  # a block of no time would carry memory for free in the knapsacks
    time = {b.name: b.time for b in spec.blocks}
    head, tail = chains(spec, time, edge_lags(spec))
    reach = reachable(spec)
    best = 0
    for d in range(spec.devices):
        on = spec.blocks_on(d)
        take = [b for b in on if b.memory > 0]
        give = [b for b in on if b.memory < 0]
        room = device_room(spec, d, reach)  # the capacity less what no micro-batches' sum can fill
        if not take or sum(b.memory for b in on) != 0 or microbatches * sum(b.memory for b in take) <= room:
            continue
        first_free = min(head[b.name] for b in give)
        early = [(b.time, b.memory) for b in take if head[b.name] < first_free]
        late = [(b.time, -b.memory) for b in give]
        neutral = sum(b.time for b in on if b.memory == 0)
        last_take = min(tail[b.name] for b in take)
        bound = (first_free + last_take + microbatches * (sum(b.time for b in on) - neutral)
                 - _fill(early, room, microbatches) - _fill(late, room, microbatches))
        best = max(best, -(-bound.numerator // bound.denominator))
    return best


def _fill(items: list[tuple[int, int]], room: int, copies: int) -> Fraction:
    """The most time `copies` instances of each (time, memory) item can take within `room`
    memory, items divisible (so never below the true most)."""
    total, left = Fraction(0), Fraction(room)
    for t, m in sorted(items, key=lambda x: Fraction(x[0], x[1]), reverse=True):
        take = min(Fraction(copies), left / m)
        total, left = total + take * t, left - take * m
        if left <= 0:
            break
    return total
