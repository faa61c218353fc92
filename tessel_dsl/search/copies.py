"""Repetends that hold every block k times (k micro-batches per period).

A repetend holding each block once repeats one micro-batch per period. On memory-bound placements
that can be slower than necessary: with uneven stages and little memory, the time-optimal steady
state alternates between two (or more) different patterns, which no one-copy repetend can
express. The search therefore also tries k copies: it *unrolls* the spec, so that block ``b``
becomes ``b@0 .. b@(k-1)`` (copy ``j`` is micro-batch ``k m + j`` of "super micro-batch" ``m``),
runs the usual one-copy search on that spec, and maps the schedule back. Every repetend of the
unrolled spec is a k-copy repetend of the original, so the unrolled search's proven period is the
minimum over k-copy repetends; its period covers k micro-batches.
"""
from __future__ import annotations

from dataclasses import replace

from tessel_dsl.ir import Spec
from tessel_dsl.schedule import Schedule, Slot
from tessel_dsl.search.compact import compact

SEP = "@"


def unroll(spec: Spec, k: int) -> Spec:
    """`spec` with every block and edge copied `k` times (see the module text)."""
    if k == 1:
        return spec

    def name(n: str | None, j: int) -> str | None:
        return None if n is None else f"{n}{SEP}{j}"

    blocks = tuple(replace(b, name=name(b.name, j), forward=name(b.forward, j) if b.forward in spec.by_name else b.forward)
                   for j in range(k) for b in spec.blocks)
    edges = tuple(replace(e, src=name(e.src, j), dst=name(e.dst, j)) for j in range(k) for e in spec.edges)
    return replace(spec, blocks=blocks, edges=edges, microbatches=-(-spec.microbatches // k))


def fold(spec: Spec, unrolled: Schedule, k: int, microbatches: int) -> Schedule:
    """The unrolled spec's schedule as one of `spec` for `microbatches`: block ``b@j`` of super
    micro-batch ``m`` becomes ``b`` of micro-batch ``k m + j``; micro-batches past the requested
    ones are dropped and the rest compacted in the same per-device order (removing whole
    micro-batches never adds memory or breaks a dependency)."""
    slots = []
    for s in unrolled.slots:
        base, _, j = s.block.rpartition(SEP)
        mb = k * s.mb + int(j)
        if mb < microbatches:
            slots.append(Slot(s.start, base, mb))
    return Schedule(microbatches, compact(spec, slots), name=unrolled.name)
