"""A lower bound on the makespan of N micro-batches, stated in every plan next to the makespan.

Memory is left out, so the bound holds for any M. Device ``d`` runs ``N * W_d`` of work (``W_d``
its share of one micro-batch, multi-device blocks included); before its first block can start,
at least the shortest dependency chain leading to one of its blocks has run (the *head*), and
after its last block ends at least the shortest chain leaving one of its blocks must still run
(the *tail*). So no schedule is shorter than ``head_d + N * W_d + tail_d`` for any device, nor
than the longest dependency chain of one micro-batch.
"""
from __future__ import annotations

from tessel_dsl.ir import Spec


def makespan_bound(spec: Spec, microbatches: int) -> int:
    """The largest of the per-device bounds and the critical path (see the module text)."""
    time = {b.name: b.time for b in spec.blocks}
    head: dict[str, int] = {}
    for name in spec.topo_order:
        head[name] = max((head[p] + time[p] for p in spec.preds[name]), default=0)
    tail: dict[str, int] = {}
    for name in reversed(spec.topo_order):
        tail[name] = max((time[s] + tail[s] for s in spec.succs[name]), default=0)
    bound = max((head[n] + time[n] + tail[n] for n in time), default=0)
    for d in range(spec.devices):
        on = [b.name for b in spec.blocks_on(d)]
        if on:
            work = sum(time[n] for n in on)
            bound = max(bound, min(head[n] for n in on) + microbatches * work + min(tail[n] for n in on))
    return bound
