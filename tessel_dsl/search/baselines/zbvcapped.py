"""Memory-capped ZB-V: the V placement with a split backward, on memory that holds fewer
micro-batches than ZB-V's design keeps on a device.

ZB-V (`zerobubble.zb_v_orders`) keeps 1F1B's activation memory: p micro-batches' worth of both
chunks on a device of p. With less, its fixed sequences can only start fewer forwards at once
(shorter warmups, all stages together), and its devices then wait for one another most of the
time: on `specs/zerobubble.tsl --set C=2` with memory for 3 micro-batches instead of 4 its
makespan doubles (134 -> 267).

Here the same stage units are played out in time, each device admitting micro-batches (the
forward of the first of its two stages lets one in) in one of two ways:

* by count: only while fewer than ``k`` micro-batches are on the device (entered, and not both of
  their weight gradients there started: each frees its chunk's memory), ``k`` the device's memory
  over what a micro-batch keeps there with both chunks resident, at most ZB-V's own p. Each
  admitted micro-batch always has room for its second chunk;
* by memory: while the device has room for the new micro-batch's first chunk and, beside it, for
  one second-chunk forward. A device then holds more first chunks than the count allows while
  second chunks (short-lived on the devices near the V's tip) come and go, and one admitted
  micro-batch can always move on. On `specs/zerobubble.tsl --set C=2` with memory 3 (one
  micro-batch of both chunks by count) this gives 280 where counting gives 385
  (`bench/results/baselines.md`).

A free device runs a ready input gradient (the critical path; the deeper stage first), else a
ready forward its admission allows (the deeper stage first), else its oldest ready weight
gradient, which frees memory. Three variations are played beside that rule (`RULES`): the oldest
ready weight gradient first whenever the next micro-batch waits only for room on the device; the
same with forwards before input gradients; and the same with the shallower stage's forward first.

Where memory holds ZB-V's design this is ZB-V. Below it, every rule is played both ways (by count
from ``k`` down until the play finishes within memory), and the shortest of those and of ZB-V's own
order (where that fits) is kept, the first on ties, so it is never longer than `zb-v`. A play
that stalls is dropped. Deterministic: no clock, ties by stage index.
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


def _admitting(of_group: dict[tuple[int, ...], list[int]], limit: dict[tuple[int, ...], int] | None,
               room_first: bool = False, forward_first: bool = False, deep_forward: bool = True):
    """The play's rule (module text) with at most ``limit[g]`` micro-batches on device group g;
    with no `limit`, by memory instead (`_by_memory`)."""

    def admits(state: _Play, group: tuple[int, ...], k: int) -> bool:
        ks = of_group[group]
        if limit is None:
            # Room for this forward, and a first-chunk forward also leaves room for one
            # second-chunk forward, so some admitted micro-batch can always move on.
            later = state.unit_mem[(ks[-1], F)] if k == ks[0] and len(ks) > 1 else 0
            return state.fits(k, later)
        if k != ks[0]:
            return True
        # Weight gradients of a stage start in micro-batch order, so this many have left the device.
        return state.next[(k, F)] - min(state.next[(j, W)] for j in ks) < limit[group]

    def rule(state: _Play, group: tuple[int, ...]) -> Unit | None:
        ks = of_group[group]
        first = ks[0]
        weights = [(state.next[(k, W)], -k, k) for k in ks if state.ready(k, W)]
        if room_first and weights and state.ready(first, F) and not admits(state, group, first):
            *_, k = min(weights)  # the next micro-batch waits only for room: free some
            return (k, W, state.next[(k, W)])
        inputs = [k for k in ks if state.ready(k, I)]
        forwards = [k for k in ks if state.ready(k, F) and admits(state, group, k)]
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

    def span(orders: list[list[Key]] | None) -> int | None:
        if orders is None:
            return None
        schedule = Schedule(n, compact(spec, orders=orders))
        return schedule.makespan(spec) if schedule.fits_memory(spec) else None

    def played(limit, rule) -> list[list[Key]] | None:
        try:
            return play(spec, stages, n, _admitting(of_group, limit, *rule), WHO)
        except InfeasibleError:
            return None  # the play stalled

    best: list = [span(own), own]  # the shortest makespan that fits memory, and its orders

    def keep(orders: list[list[Key]] | None) -> bool:
        """Whether `orders` fit memory; kept when the shortest so far."""
        got = span(orders)
        if got is not None and (best[0] is None or got < best[0]):
            best[:] = [got, orders]
        return got is not None

    for rule in RULES:
        # By count, from k down: lower limits only admit less at once, so the first that fits is kept.
        for cut in range(max(most.values())):
            limit = {g: max(1, k - cut) for g, k in most.items()}
            if keep(played(limit, rule)) or all(v == 1 for v in limit.values()):
                break
        keep(played(None, rule))  # by memory
    if best[0] is None:
        raise InfeasibleError(f"{WHO}: no schedule of this kind fits memory {capacity_in(spec)}")
    return best[1]
