"""1F1B under each device's memory: the warmup depth of a stage is what its memory holds.

Plain 1F1B keeps ``S - s`` micro-batches in flight on stage ``s`` of ``S`` (its ``S - 1 - s``
warmup forwards and the one it alternates with). When a device's capacity holds fewer, a fixed
1F1B order has to give every stage from there on the same shorter warmup, and each pair of
neighbouring stages with equal warmups costs a round trip through both per micro-batch (see
`search/membound.py`): on an 8-GPU chain whose first GPU holds 6 micro-batches, 105 ms per
micro-batch where the busiest stage needs 45.

This baseline keeps 1F1B's rules but plays them out in time, as a runtime would: a stage that is
free runs its oldest ready backward; otherwise it starts its next forward (in micro-batch order)
if fewer than ``min(k_s, S - s)`` micro-batches are in flight there, ``k_s`` being how many its
devices' capacities hold (`analysis.resident_memory`). With memory for 1F1B's warmups this is
1F1B; with less, each stage waits only as long as its own memory requires. It cannot deadlock:
the oldest unfinished micro-batch always finds room, since every stage holds only older
micro-batches than those it has yet to start.
"""
from __future__ import annotations

from tessel_dsl.analysis import resident_memory
from tessel_dsl.errors import InfeasibleError, ScheduleError
from tessel_dsl.ir import Spec
from tessel_dsl.search.baselines.chain import find_stages
from tessel_dsl.search.baselines.listsched import Key
from tessel_dsl.units import capacity_in


def _caps(spec: Spec, stages) -> list[int]:
    """How many micro-batches each stage may hold: 1F1B's depth, or fewer if memory says so."""
    held = resident_memory(spec)
    out = []
    for s, st in enumerate(stages):
        room = [spec.capacity(d) // held[d] for d in st.devices if held[d] > 0]
        cap = min([len(stages) - s] + room)
        if cap < 1:
            raise InfeasibleError(f"memory-capped 1F1B: stage {s} cannot hold one micro-batch under "
                                  f"{capacity_in(spec)}")
        out.append(cap)
    return out


def _play(spec: Spec, stages, n: int, caps: list[int]) -> list[list[tuple[str, int]]]:
    """Each stage's sequence of ("F" | "B", micro-batch), played on a clock (module text)."""
    count = len(stages)
    f_time = [sum(spec.block(x).time for x in st.forward) for st in stages]
    b_time = [sum(spec.block(x).time for x in st.backward) for st in stages]
    f_end: list[dict[int, int]] = [{} for _ in stages]
    b_end: list[dict[int, int]] = [{} for _ in stages]
    next_f, next_b, busy = [0] * count, [0] * count, [0] * count
    seq: list[list[tuple[str, int]]] = [[] for _ in stages]
    t = 0
    while any(next_b[s] < n for s in range(count)):
        for s in range(count):
            if busy[s] > t:
                continue
            mb = next_b[s]  # backwards run in micro-batch order, as 1F1B's do
            if (mb < n and f_end[s].get(mb, t + 1) <= t
                    and (s == count - 1 or b_end[s + 1].get(mb, t + 1) <= t)):
                b_end[s][mb] = busy[s] = t + b_time[s]
                next_b[s] += 1
                seq[s].append(("B", mb))
                continue
            mb = next_f[s]
            if (mb < n and mb - next_b[s] < caps[s]
                    and (s == 0 or f_end[s - 1].get(mb, t + 1) <= t)):
                f_end[s][mb] = busy[s] = t + f_time[s]
                next_f[s] += 1
                seq[s].append(("F", mb))
        later = [x for x in busy if x > t]
        if not later:  # nothing running and nothing could start: the argument above rules it out
            raise ScheduleError("memory-capped 1F1B is stuck")
        t = min(later)
    return seq


def capped_orders(spec: Spec, n: int) -> list[list[Key]]:
    """Memory-capped 1F1B on the spec's chain of stages (module text). The in-flight limits
    count the memory a micro-batch keeps between its forward and backward; if blocks that
    allocate and free within a stage need more at their peak, every limit is lowered together
    until the compacted schedule fits."""
    from tessel_dsl.schedule import Schedule
    from tessel_dsl.search.compact import compact

    stages = find_stages(spec, who="memory-capped 1F1B")
    if not all(st.backward for st in stages):  # inference: nothing stays in flight, forwards in order
        return [[(name, mb) for st in stages if d in st.devices for mb in range(n) for name in st.forward]
                for d in range(spec.devices)]
    caps = _caps(spec, stages)
    for lower in range(max(caps)):
        limits = [max(1, c - lower) for c in caps]
        orders: list[list[Key]] = [[] for _ in range(spec.devices)]
        for st, row in zip(stages, _play(spec, stages, n, limits)):
            keys = [(name, mb) for phase, mb in row for name in (st.forward if phase == "F" else st.backward)]
            for d in st.devices:
                orders[d] = list(keys)
        if Schedule(n, compact(spec, orders=orders)).fits_memory(spec):
            return orders
    raise InfeasibleError(f"memory-capped 1F1B: not even one micro-batch per stage fits {capacity_in(spec)}")
