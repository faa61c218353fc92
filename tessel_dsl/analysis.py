"""Quantities read straight off a spec, before any search: the paper's Algorithm 1, lines 1-6."""
from __future__ import annotations

from collections.abc import Mapping

from tessel_dsl.ir import Spec


def busy_time(spec: Spec) -> tuple[int, ...]:
    """Per-device compute time of one micro-batch (a multi-device block counts on each device)."""
    busy = [0] * spec.devices
    for b in spec.blocks:
        for d in b.devices:
            busy[d] += b.time
    return tuple(busy)


def lower_bound(spec: Spec) -> int:
    """No repetend that holds every block once can be shorter than the busiest device's work."""
    return max(busy_time(spec), default=0)


def reachable(spec: Spec) -> dict[str, frozenset[str]]:
    """For every block, the blocks that (transitively) depend on it within one micro-batch."""
    out: dict[str, frozenset[str]] = {}
    for name in reversed(spec.topo_order):
        acc: set[str] = set()
        for s in spec.succs[name]:
            acc.add(s)
            acc |= out[s]
        out[name] = frozenset(acc)
    return out


def chains(spec: Spec, weight: dict[str, int], lags: Mapping[tuple[str, str], int] | None = None
           ) -> tuple[dict[str, int], dict[str, int]]:
    """(head, tail): for every block, the longest dependency chain before it and after it, blocks
    weighted by `weight` (a block's own weight counts in neither) and each edge ``(src, dst)`` by
    its entry in `lags` (a gap the consumer must leave after its producer ends; none: 0)."""
    lags = lags or {}
    head: dict[str, int] = {}
    for name in spec.topo_order:
        head[name] = max((head[p] + weight[p] + lags.get((p, name), 0) for p in spec.preds[name]), default=0)
    tail: dict[str, int] = {}
    for name in reversed(spec.topo_order):
        tail[name] = max((lags.get((name, s), 0) + weight[s] + tail[s] for s in spec.succs[name]), default=0)
    return head, tail


def microbatch_memory(spec: Spec) -> tuple[int, ...]:
    """Peak memory one micro-batch needs on each device when run alone.

    Walks the blocks in dependency order and keeps the running sum per device; the peak of that
    sum is what a single micro-batch must be able to hold (never below 0).
    """
    running = [0] * spec.devices
    peak = [0] * spec.devices
    for name in spec.topo_order:
        b = spec.block(name)
        for d in b.devices:
            running[d] += b.memory
            peak[d] = max(peak[d], running[d])
    return tuple(peak)


def resident_memory(spec: Spec) -> tuple[int, ...]:
    """Memory a micro-batch keeps on each device between its forward and its backward pass.

    This is the sum of the positive deltas of forward-like blocks: what stays allocated while the
    micro-batch is in flight.
    """
    held = [0] * spec.devices
    for b in spec.blocks:
        if not b.kind.is_backward and b.memory > 0:
            for d in b.devices:
                held[d] += b.memory
    return tuple(held)


def max_inflight(spec: Spec) -> int:
    """How many micro-batches can be in flight at once under M (at least 1 when one fits).

    A device holding `h` units per in-flight micro-batch fits `capacity(d) // h` of them (its
    memory less what is reserved there); the tightest device
    decides. With no resident memory anywhere (inference) the limit is the number of blocks, since
    a repetend never needs more micro-batches than it has blocks.
    """
    held = resident_memory(spec)
    limits = [spec.capacity(d) // h for d, h in enumerate(held) if h > 0]
    if not limits:
        return max(1, len(spec.blocks))
    return max(0, min(limits))


def forwards_not_ancestors(spec: Spec) -> list:
    """Backward-like blocks whose own forward is not among their ancestors (dependency order).

    A backward consumes its forward's activations, so a schedule that runs it first is wrong
    however good it looks. Each block carries the set of forwards above it as an integer bitmask;
    a mask is dropped once its last successor has read it, so a long chain keeps only a few alive
    and the pass stays near-linear in the size of the graph.
    """
    backs = [b for b in spec.blocks if b.kind.is_backward and b.forward in spec.by_name]
    if not backs:
        return []
    bit = {b.name: 1 << i for i, b in enumerate(b for b in spec.blocks if b.kind.value == "forward")}
    left = {b.name: len(spec.succs[b.name]) for b in spec.blocks}
    wanted = {b.name: bit.get(b.forward, 0) for b in backs}
    masks: dict[str, int] = {}
    bad: set[str] = set()
    for name in spec.topo_order:
        m = 0
        for p in spec.preds[name]:
            m |= masks[p] | bit.get(p, 0)
            left[p] -= 1
            if left[p] == 0:
                del masks[p]
        if name in wanted and not (wanted[name] and m & wanted[name]):
            bad.add(name)
        if left[name]:
            masks[name] = m
    return [b for b in backs if b.name in bad]
