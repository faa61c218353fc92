"""Transfer lags: how long after a block ends its output can start a block on another device.

A spec that declares a `link` says what a transfer costs (``latency + bytes / bandwidth``, the
bytes from the edge's tensor or the producer's activation, as the simulator and the lowering
count them). The search then keeps that gap between a block and a consumer that runs on a device
the producer does not: a plan searched without it packs each consumer right after its producer,
and every transfer lands on the critical path when the plan runs.

Lags are whole time units of the spec, rounded to the nearest (a transfer much shorter than the
spec's resolution costs nothing, as the block times themselves are rounded); a consumer whose
devices all ran the producer has its input in place and no lag. A spec without a link has none,
and the search is exactly what it was.
"""
from __future__ import annotations

from tessel_dsl.ir import Spec
from tessel_dsl.lower import tensor_bytes

_CACHE: dict[int, tuple[Spec, dict[tuple[str, str], int]]] = {}


def edge_lags(spec: Spec) -> dict[tuple[str, str], int]:
    """(src, dst) -> the lag of every edge that has one (no entry: none)."""
    link = spec.link
    if not (link.latency or link.bandwidth):
        return {}
    hit = _CACHE.get(id(spec))
    if hit is not None and hit[0] is spec:
        return hit[1]
    out: dict[tuple[str, str], int] = {}
    for e in spec.edges:
        src = set(spec.block(e.src).devices)
        far = [d for d in spec.block(e.dst).devices if d not in src]
        if far:
            lag = round(max(link.transfer_time(tensor_bytes(spec, e.src, d)) for d in far))
            if lag > 0:
                out[(e.src, e.dst)] = lag
    if len(_CACHE) > 64:
        _CACHE.clear()
    _CACHE[id(spec)] = (spec, out)  # the spec is kept, so its id is not reused while cached
    return out


def lag(spec: Spec, src: str, dst: str) -> int:
    """The lag of edge src -> dst (0 when it has none)."""
    return edge_lags(spec).get((src, dst), 0)
