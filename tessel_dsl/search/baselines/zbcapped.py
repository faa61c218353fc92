"""Memory-capped ZB-H1: zero-bubble's split backward on a chain whose memory holds fewer
micro-batches in flight than ZB-H1 keeps.

ZB-H1 (`zerobubble.py`) keeps up to S micro-batches resident on every stage of S, and a
micro-batch stays resident from its forward F until its weight gradient W. When a device holds
fewer, its fixed 1F1B sequence gives neighbouring stages the same shortened warmup and deferred
W passes hold memory that the next forward needs, so it falls far behind even GPipe in waves.

This baseline plays stage units (all of a stage's F, I or W blocks for one micro-batch) out on
a clock, as a runtime would, and keeps the shortest of a few fixed rules after compaction
(the first on ties):

1. ZB-H1's own rule with each stage's in-flight limit set by its memory: with memory for ZB-H1's
   design this *is* ZB-H1.
2. A free stage runs its oldest ready input gradient I (the critical path); else its next
   forward if fewer than ``min(S - s, k_s)`` forwards await their I and fewer than ``k_s``
   micro-batches are resident (``k_s``: what the stage's memory holds, at most S); else its
   oldest W. W thus fills bubbles while there is room and runs as soon as I has freed it when
   the next forward would not fit.
3. The same with W right after its I (W before I before F): 1F1B's memory profile, each
   micro-batch resident for the shortest time.
4. Memory-capped 1F1B's order (`capped.py`) with each backward run as I then W: never longer
   than that baseline on the same stages with the backward merged, and it always fits when
   one micro-batch per stage does (it lowers its limits until it fits).

Memory is counted as the spec says (a block's delta from its start), per device, in start
order, so what fits in the play fits after compaction (same order per device). Deterministic:
no wall clock, ties broken by stage index and rule order.
"""
from __future__ import annotations

import heapq

from tessel_dsl.errors import InfeasibleError, ScheduleError, TesselError
from tessel_dsl.ir import Spec
from tessel_dsl.search.baselines.chain import NotApplicable
from tessel_dsl.search.baselines.listsched import Key
from tessel_dsl.search.baselines.zerobubble import F, I, SplitStage, W, _one_f_one_b_sequence, find_split_stages
from tessel_dsl.units import capacity_in

WHO = "memory-capped ZB-H1"
_NEVER = 1 << 62
_PHASES = (F, I, W)


class _Stages:
    """The chain's per-stage constants for playing units: times, memory, limits, dependencies."""

    def __init__(self, spec: Spec, stages: tuple[SplitStage, ...]):
        self.spec, self.stages, self.count = spec, stages, len(stages)
        self.time = [{ph: sum(spec.block(b).time for b in st.blocks(ph)) for ph in _PHASES} for st in stages]
        self.delta = [{ph: sum(spec.block(b).memory for b in st.blocks(ph)) for ph in _PHASES} for st in stages]
        self.peak = []  # the highest a unit takes its device above where it starts (0 at least)
        for st in stages:
            row = {}
            for ph in _PHASES:
                run = top = 0
                for b in st.blocks(ph):
                    run += spec.block(b).memory
                    top = max(top, run)
                row[ph] = top
            self.peak.append(row)
        self.room = [min(spec.capacity(d) for d in st.devices) for st in stages]
        # Micro-batches a stage's memory holds resident (forward to weight gradient), at most S.
        self.hold = []
        for k, st in enumerate(stages):
            held = sum(spec.block(b).memory for b in st.forward if spec.block(b).memory > 0)
            fit = self.room[k] // held if held > 0 else self.count
            if fit < 1:
                raise InfeasibleError(f"{WHO}: stage {k} cannot hold one micro-batch under {capacity_in(spec)}")
            self.hold.append(min(self.count, fit))
        where = {b: (k, ph) for k, st in enumerate(stages) for ph in _PHASES for b in st.blocks(ph)}
        self.deps: list[dict[str, tuple[tuple[int, str], ...]]] = []
        users: list[set[int]] = [set() for _ in stages]  # stages to wake when stage k ends a unit
        for k, st in enumerate(stages):
            row = {}
            for ph in _PHASES:
                inside = set(st.blocks(ph))
                got = sorted({where[p] for b in st.blocks(ph) for p in spec.preds[b] if p not in inside})
                row[ph] = tuple(got)
                for k2, _ in got:
                    users[k2].add(k)
            self.deps.append(row)
        self.users = [tuple(sorted(u | {k})) for k, u in enumerate(users)]


def _play(c: _Stages, n: int, rule: str, depth: list[int], hold: list[int],
          warm: list[int] | None = None) -> tuple[list[list[tuple[str, int]]], int]:
    """Each stage's (phase, micro-batch) sequence under `rule` ("zb-h1", "defer" or "eager",
    module text) and when the last unit ends, or InfeasibleError when every stage waits with
    work left. Within memory by construction: a unit starts only if its peak fits."""
    count = c.count
    end = [{ph: [_NEVER] * n for ph in _PHASES} for _ in range(count)]
    nxt = [{F: 0, I: 0, W: 0} for _ in range(count)]
    mem = [0] * count
    seq: list[list[tuple[str, int]]] = [[] for _ in range(count)]
    sequence = [_one_f_one_b_sequence(n, w) for w in warm] if warm is not None else None
    head = [0] * count
    free = [True] * count

    waits = [{ph: [end[k2][ph2] for k2, ph2 in c.deps[k][ph]] for ph in _PHASES} for k in range(count)]

    def ready(k: int, ph: str, t: int) -> bool:
        mb = nxt[k][ph]
        if mb >= n or mem[k] + c.peak[k][ph] > c.room[k]:
            return False
        for row in waits[k][ph]:
            if row[mb] > t:
                return False
        return True

    def forward_ok(k: int, t: int) -> bool:
        return nxt[k][F] - nxt[k][W] < hold[k] and ready(k, F, t)

    def choose(k: int, t: int) -> str | None:
        if rule == "zb-h1":
            if head[k] < len(sequence[k]):
                ph = sequence[k][head[k]][0]
                if ph == I and ready(k, I, t) or ph == F and forward_ok(k, t):
                    head[k] += 1
                    return ph
            return W if ready(k, W, t) else None
        if rule == "eager" and ready(k, W, t):
            return W
        if ready(k, I, t):
            return I
        if nxt[k][F] - nxt[k][I] < depth[k] and forward_ok(k, t):
            return F
        return W if ready(k, W, t) else None

    events: list[tuple[int, int, str, int]] = []
    wake = list(range(count))
    t, left = 0, 3 * count * n
    while True:
        for k in wake:
            if not free[k]:
                continue
            ph = choose(k, t)
            if ph is None:
                continue
            mb = nxt[k][ph]
            nxt[k][ph] += 1
            mem[k] += c.delta[k][ph]
            seq[k].append((ph, mb))
            free[k] = False
            heapq.heappush(events, (t + c.time[k][ph], k, ph, mb))
            left -= 1
        if not events:
            if left:
                raise InfeasibleError(f"{WHO}: every stage waits under {capacity_in(c.spec)}")
            return seq, t
        t = events[0][0]
        woken: set[int] = set()
        while events and events[0][0] == t:
            _, k, ph, mb = heapq.heappop(events)
            end[k][ph][mb] = t
            free[k] = True
            woken.update(c.users[k])
        wake = sorted(woken)


def _orders(spec: Spec, stages: tuple[SplitStage, ...], rows) -> list[list[Key]]:
    orders: list[list[Key]] = [[] for _ in range(spec.devices)]
    for st, row in zip(stages, rows):
        keys = [(b, mb) for ph, mb in row for b in st.blocks(ph)]
        for d in st.devices:
            orders[d] = list(keys)
    return orders


def _capped_1f1b(spec: Spec, stages: tuple[SplitStage, ...], n: int) -> tuple[list[list[Key]], int]:
    """Memory-capped 1F1B's play on these stages with I and W as one backward, its limits
    lowered together until the compacted schedule fits (as `capped.capped_orders` does): the
    orders and their compacted makespan."""
    from tessel_dsl.schedule import Schedule
    from tessel_dsl.search.baselines.capped import _caps
    from tessel_dsl.search.baselines.capped import _play as play_1f1b
    from tessel_dsl.search.compact import compact

    class Merged:  # capped.py reads devices, forward and backward (block names) of a stage
        def __init__(self, st: SplitStage):
            self.devices, self.forward, self.backward = st.devices, st.forward, st.input_grad + st.weight_grad

    merged = [Merged(st) for st in stages]
    caps = _caps(spec, merged)
    for lower in range(max(caps)):
        rows = play_1f1b(spec, merged, n, [max(1, x - lower) for x in caps])
        split = [[(ph, mb) for kind, mb in row for ph in ((F,) if kind == "F" else (I, W))] for row in rows]
        orders = _orders(spec, stages, split)
        sched = Schedule(n, compact(spec, orders=orders))
        if sched.fits_memory(spec):
            return orders, sched.makespan(spec)
    raise InfeasibleError(f"{WHO}: not even one micro-batch per stage fits {capacity_in(spec)}")


def zb_capped_orders(spec: Spec, n: int) -> list[list[Key]]:
    """Memory-capped ZB-H1 (module text): the shortest of its rules' schedules. A play's own
    makespan is never shorter than its compacted one (compaction only moves starts earlier), so
    the rules are compared on it and only the winner is compacted, by `build`."""
    stages = find_split_stages(spec, who=WHO)
    owner: dict[tuple[int, ...], int] = {}
    for k, st in enumerate(stages):
        if st.devices in owner:
            raise NotApplicable(f"{WHO} needs a chain of stages with each device in one stage; "
                                f"device{'s' if len(st.devices) > 1 else ''} "
                                f"{','.join(map(str, st.devices))} {'run' if len(st.devices) > 1 else 'runs'} stages {owner[st.devices]} and {k}")
        owner[st.devices] = k
    c = _Stages(spec, stages)
    count, hold = c.count, c.hold
    depth = [min(count - k, hold[k]) for k in range(count)]
    warm = [min(count - 1 - k, min(hold[:k + 1]) - 1) for k in range(count)]
    best: tuple[int, list[list[Key]]] | None = None
    for rule in ("zb-h1", "defer", "eager"):
        try:
            rows, span = _play(c, n, rule, depth, hold, warm if rule == "zb-h1" else None)
        except InfeasibleError:
            continue
        if best is None or span < best[0]:
            best = (span, _orders(spec, stages, rows))
    try:
        orders, span = _capped_1f1b(spec, stages, n)
    except (TesselError, ScheduleError):
        orders = None
    if orders is not None and (best is None or span < best[0]):
        best = (span, orders)
    if best is None:
        raise InfeasibleError(f"{WHO}: no schedule of this kind fits memory {capacity_in(spec)}")
    return best[1]
