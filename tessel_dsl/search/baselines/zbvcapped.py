"""Memory-capped ZB-V: the V placement with a split backward, on memory that holds fewer
micro-batches than ZB-V's design keeps on a device.

ZB-V (`zerobubble.zb_v_orders`) keeps 1F1B's activation memory: p micro-batches' worth of both
chunks on a device of p. With less, its fixed sequences can only start fewer forwards at once
(shorter warmups, all stages together), and its devices then wait for one another most of the
time: on `specs/zerobubble.tsl --set C=2` with memory for 3 micro-batches instead of 4 its
makespan doubles (134 -> 267).

Here the same stage units are played out in time with a device-level admission limit instead:

* a micro-batch enters a device with the forward of the first of that device's two stages, and
  only while fewer than ``k`` micro-batches are on the device (entered, and not both of their
  weight gradients there started: each frees its chunk's memory), ``k`` the device's
  memory over what a micro-batch keeps there with both chunks resident, and at most ZB-V's own
  p (with more room it is ZB-V's memory, never more). Each admitted
  micro-batch thus has room for its second chunk's forward whenever it arrives, and no device
  waits for memory that an unfinished micro-batch needs to move on;
* a free device runs a ready input gradient (the critical path; the deeper stage first), else a
  ready forward the limit admits (the deeper stage first), else its oldest ready weight gradient,
  which frees memory.

The limit is lowered from ``k`` until the play finishes, and the shortest compacted schedule over
the limits tried is kept, beside ZB-V's own order where that fits (so with memory for ZB-V's
design this is never longer than `zb-v`). Deterministic: no clock, ties by stage index.
"""
from __future__ import annotations

from tessel_dsl.errors import InfeasibleError
from tessel_dsl.ir import Spec
from tessel_dsl.search.baselines.listsched import Key
from tessel_dsl.search.baselines.zerobubble import F, I, Unit, W, _capacity, _held, _Play, play, v_stages, zb_v_orders
from tessel_dsl.units import capacity_in

WHO = "memory-capped ZB-V"


def _admitting(of_group: dict[tuple[int, ...], list[int]], limit: dict[tuple[int, ...], int]):
    """The play's rule (module text) with at most ``limit[g]`` micro-batches on device group g."""

    def rule(state: _Play, group: tuple[int, ...]) -> Unit | None:
        ks = of_group[group]
        inputs = [k for k in ks if state.ready(k, I)]
        if inputs:
            k = max(inputs)
            return (k, I, state.next[(k, I)])
        first = ks[0]
        # Weight gradients of a stage start in micro-batch order, so this many have left the device.
        on_device = state.next[(first, F)] - min(state.next[(k, W)] for k in ks)
        forwards = [k for k in ks if state.ready(k, F) and (k != first or on_device < limit[group])]
        if forwards:
            k = max(forwards)
            return (k, F, state.next[(k, F)])
        weights = [(state.next[(k, W)], -k, k) for k in ks if state.ready(k, W)]
        if weights:
            *_, k = min(weights)
            return (k, W, state.next[(k, W)])
        return None

    return rule


def zb_v_capped_orders(spec: Spec, n: int) -> list[list[Key]]:
    """Memory-capped ZB-V (module text): the shortest of ZB-V's own order and the admission plays."""
    from tessel_dsl.schedule import Schedule
    from tessel_dsl.search.compact import compact

    stages, of_group = v_stages(spec, WHO)
    design = len(of_group)  # ZB-V keeps p micro-batches of both chunks on each of its p devices
    most: dict[tuple[int, ...], int] = {}
    for g, ks in of_group.items():
        held = _held(spec, stages, ks)
        room = min(_capacity(spec, d) for d in g)
        most[g] = min(n, design, room // held) if held > 0 else min(n, design)
        if most[g] < 1:
            raise InfeasibleError(f"{WHO}: device {g[0]} cannot hold one micro-batch with both chunks under "
                                  f"{capacity_in(spec)}")
    tries: list[list[list[Key]]] = []
    try:
        tries.append(zb_v_orders(spec, n))
    except InfeasibleError:
        pass
    for cut in range(max(most.values())):
        limit = {g: max(1, k - cut) for g, k in most.items()}
        try:
            tries.append(play(spec, stages, n, _admitting(of_group, limit), WHO))
        except InfeasibleError:
            pass
        if all(v == 1 for v in limit.values()):
            break
    best: tuple[int, list[list[Key]]] | None = None
    for orders in tries:
        schedule = Schedule(n, compact(spec, orders=orders))
        if schedule.fits_memory(spec):
            span = schedule.makespan(spec)
            if best is None or span < best[0]:
                best = (span, orders)
    if best is None:
        raise InfeasibleError(f"{WHO}: no schedule of this kind fits memory {capacity_in(spec)}")
    return best[1]
