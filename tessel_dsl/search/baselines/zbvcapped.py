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
  which frees memory. Three variations are played beside it (`RULES`): the oldest ready weight
  gradient first whenever the next micro-batch waits only for room on the device; the same with
  forwards before input gradients; and the same with the shallower stage's forward first.

Where memory holds ZB-V's design this is ZB-V. Below it, for each rule the limit is lowered from
``k`` until the play finishes within memory, and the shortest of those and ZB-V's own order (where
that fits) is kept (the first on ties), so it is never longer than `zb-v`. Deterministic: no clock, ties by stage index.
"""
from __future__ import annotations

from tessel_dsl.errors import InfeasibleError
from tessel_dsl.ir import Spec
from tessel_dsl.search.baselines.listsched import Key
from tessel_dsl.search.baselines.zerobubble import F, I, Unit, W, _capacity, _held, _Play, play, v_stages, zb_v_orders
from tessel_dsl.units import capacity_in

WHO = "memory-capped ZB-V"


# The rules played (module text): (weight gradient first while a micro-batch waits for room,
# forwards before input gradients, the deeper stage's forward first).
RULES = ((False, False, True), (True, False, True), (True, True, True), (True, False, False))


def _admitting(of_group: dict[tuple[int, ...], list[int]], limit: dict[tuple[int, ...], int],
               room_first: bool = False, forward_first: bool = False, deep_forward: bool = True):
    """The play's rule (module text) with at most ``limit[g]`` micro-batches on device group g."""

    def rule(state: _Play, group: tuple[int, ...]) -> Unit | None:
        ks = of_group[group]
        first = ks[0]
        # Weight gradients of a stage start in micro-batch order, so this many have left the device.
        on_device = state.next[(first, F)] - min(state.next[(k, W)] for k in ks)
        weights = [(state.next[(k, W)], -k, k) for k in ks if state.ready(k, W)]
        if room_first and weights and on_device >= limit[group] and state.ready(first, F):
            *_, k = min(weights)  # the next micro-batch waits only for room: free some
            return (k, W, state.next[(k, W)])
        inputs = [k for k in ks if state.ready(k, I)]
        forwards = [k for k in ks if state.ready(k, F) and (k != first or on_device < limit[group])]
        for phase in ((F, I) if forward_first else (I, F)):
            if phase == I and inputs:
                k = max(inputs)
                return (k, I, state.next[(k, I)])
            if phase == F and forwards:
                k = max(forwards) if deep_forward else min(forwards)
                return (k, F, state.next[(k, F)])
        if weights:
            *_, k = min(weights)
            return (k, W, state.next[(k, W)])
        return None

    return rule


def zb_v_capped_orders(spec: Spec, n: int) -> list[list[Key]]:
    """Memory-capped ZB-V (module text): ZB-V itself where memory holds its design, else the
    shortest of ZB-V's own order (shortened warmups) and each rule's first admission play that fits."""
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
    try:
        own: list[list[Key]] | None = zb_v_orders(spec, n)
    except InfeasibleError:
        own = None
    if own is not None and all(k >= min(n, design) for k in most.values()):
        return own  # memory holds ZB-V's design: this is ZB-V

    def span(orders: list[list[Key]]) -> int | None:
        schedule = Schedule(n, compact(spec, orders=orders))
        return schedule.makespan(spec) if schedule.fits_memory(spec) else None

    best = (span(own), own) if own is not None else (None, None)
    for rule in RULES:
        # Lower limits only admit less at once: the first limit whose play fits memory is kept.
        for cut in range(max(most.values())):
            limit = {g: max(1, k - cut) for g, k in most.items()}
            try:
                orders = play(spec, stages, n, _admitting(of_group, limit, *rule), WHO)
            except InfeasibleError:
                orders = None
            got = span(orders) if orders is not None else None
            if got is not None:
                if best[0] is None or got < best[0]:
                    best = (got, orders)
                break
            if all(v == 1 for v in limit.values()):
                break
    if best[0] is None:
        raise InfeasibleError(f"{WHO}: no schedule of this kind fits memory {capacity_in(spec)}")
    return best[1]
