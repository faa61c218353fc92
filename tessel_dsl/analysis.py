"""Quantities read straight off a spec, before any search: the paper's Algorithm 1, lines 1-6."""
from __future__ import annotations

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

    A device holding `h` units per in-flight micro-batch fits `M // h` of them; the tightest device
    decides. With no resident memory anywhere (inference) the limit is the number of blocks, since
    a repetend never needs more micro-batches than it has blocks.
    """
    held = resident_memory(spec)
    limits = [spec.memory // h for h in held if h > 0]
    if not limits:
        return max(1, len(spec.blocks))
    return max(0, min(limits))
