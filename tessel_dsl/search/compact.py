"""Compaction: keep each device's block order, start everything as early as possible.

Given any slots (e.g. warmup + repeated repetends + cooldown glued together, or a baseline's
per-device order), each block starts at the latest end of (a) its dependencies in the same
micro-batch and (b) the block before it on each of its devices. With the per-device order fixed,
memory use on a device depends only on that order, so compaction never breaks the memory limit.
"""
from __future__ import annotations

from collections import deque

from tessel_dsl.errors import ScheduleError
from tessel_dsl.ir import Spec
from tessel_dsl.schedule import Slot
from tessel_dsl.search.lags import edge_lags


def device_orders(spec: Spec, slots: tuple[Slot, ...] | list[Slot]) -> list[list[tuple[str, int]]]:
    """Each device's (block, mb) sequence, taken from the slots' start times (ties: given order)."""
    rows: list[list[tuple[str, int]]] = [[] for _ in range(spec.devices)]
    for s in sorted(slots, key=lambda s: s.start):
        for d in spec.block(s.block).devices:
            rows[d].append((s.block, s.mb))
    return rows


def compact(spec: Spec, slots: tuple[Slot, ...] | list[Slot] | None = None, *,
            orders: list[list[tuple[str, int]]] | None = None) -> tuple[Slot, ...]:
    """ASAP start times for a fixed per-device order (from `slots` start times, or `orders`).

    Raises ScheduleError when the per-device orders contradict the dependencies (the order graph
    has a cycle: such a schedule would deadlock).
    """
    if orders is None:
        if slots is None:
            raise ValueError("compact() needs slots or orders")
        orders = device_orders(spec, slots)
    preds: dict[tuple[str, int], list[tuple[str, int]]] = {}
    for row in orders:
        for i, key in enumerate(row):
            p = preds.setdefault(key, [])
            if i:
                p.append(row[i - 1])
    for key, p in preds.items():
        name, mb = key
        p.extend((src, mb) for src in spec.preds[name])
    succs: dict[tuple[str, int], list[tuple[str, int]]] = {k: [] for k in preds}
    indeg = {k: 0 for k in preds}
    for k, p in preds.items():
        for q in p:
            if q not in succs:
                raise ScheduleError(f"{k[0]}:{k[1]} depends on {q[0]}:{q[1]}, which is not scheduled")
            succs[q].append(k)
            indeg[k] += 1
    start = {k: 0 for k in preds}
    lags = edge_lags(spec)
    ready = deque(k for k, n in indeg.items() if n == 0)
    done = 0
    while ready:
        k = ready.popleft()
        done += 1
        end = start[k] + spec.block(k[0]).time
        for s in succs[k]:
            at = end + lags.get((k[0], s[0]), 0) if lags and s[1] == k[1] else end
            if at > start[s]:
                start[s] = at
            indeg[s] -= 1
            if indeg[s] == 0:
                ready.append(s)
    if done != len(preds):
        stuck = sorted(k for k, n in indeg.items() if n > 0)[:6]
        raise ScheduleError(
            "per-device block orders contradict the dependencies (cycle through "
            + ", ".join(f"{b}:{mb}" for b, mb in stuck) + ")")
    return tuple(sorted(Slot(t, b, mb) for (b, mb), t in start.items()))
