"""Measured timelines: merging, the replay that predicts them, and the Chrome trace writer.

The *replay* runs the plan's programs on paper with each block's measured duration and free
transfers, following the same rules as the devices: a multi-device block starts when all its
devices reach it, a ``WAIT`` until the matching send has been posted, and in blocking mode a send
and its receives complete together. Its iteration time and per-device wait are the "simulated"
numbers a measured run is compared with: the difference is what the runtime itself costs.
"""
from __future__ import annotations

import json
import os
import statistics
from collections import defaultdict

from tessel_dsl.errors import ExecutionError
from tessel_dsl.plan import Plan, write_json_atomic
from tessel_dsl.program import Action, Op

Event = tuple[int, str, float, float]  # device, action text, start s, end s


def _computes(events: list[Event]) -> list[Event]:
    return [ev for ev in events if Action.parse(ev[1]).op is Op.COMPUTE]


def _own_durations(computes: list[Event]) -> dict[str, float]:
    """Each compute action's own duration: for a multi-device block, the shortest of its devices'.

    A device that reaches a multi-device block early spends the difference blocked inside the
    block's collective, waiting for the others; the device that arrives last waits least, so its
    span is the closest to what the block itself costs.
    """
    own: dict[str, float] = {}
    for _dev, text, s, e in computes:
        own[text] = min(own.get(text, e - s), e - s)
    return own


def action_durations(events: list[Event]) -> dict[str, float]:
    """Each compute action's own measured duration, keyed by its text (see `_own_durations`)."""
    return _own_durations(_computes(events))


def block_durations(events: list[Event], plan: Plan) -> dict[str, float]:
    """Median measured duration of each block name over its micro-batches (see `_own_durations`)."""
    by_block: dict[str, list[float]] = defaultdict(list)
    for text, d in _own_durations(_computes(events)).items():
        by_block[Action.parse(text).block].append(d)
    return {b: statistics.median(v) for b, v in by_block.items()}


def replay(plan: Plan, durations: dict[str, float], own: dict[str, float] | None = None) -> list[Event]:
    """Run the programs with the given block durations and zero-cost transfers; an action found in
    `own` (keyed by its text, e.g. ``F3:7``) takes that duration instead of its block's."""
    own = own or {}
    progs = [p.actions for p in plan.programs]
    blocking = [p.blocking for p in plan.programs]
    n = len(progs)
    pc, now = [0] * n, [0.0] * n
    posted: dict[tuple[str, int, int], float] = {}  # (block, mb, dst) -> send time
    out: list[Event] = []

    def at(d: int) -> Action | None:
        return progs[d][pc[d]] if pc[d] < len(progs[d]) else None

    while any(pc[d] < len(progs[d]) for d in range(n)):
        moved = False
        for d in range(n):
            a = at(d)
            if a is None:
                continue
            if a.op is Op.COMPUTE:
                devs = plan.spec.block(a.block).devices
                if any(at(o) != a for o in devs):
                    continue
                start = max(now[o] for o in devs)
                end = start + own.get(str(a), durations.get(a.block, 0.0))
                for o in devs:
                    out.append((o, str(a), start, end))
                    now[o], pc[o] = end, pc[o] + 1
            elif a.op is Op.SEND:
                if blocking[d]:
                    peers = [at(p) for p in a.peers]
                    if any(x is None or x.op is not Op.RECV or (x.block, x.mb) != (a.block, a.mb) for x in peers):
                        continue
                    t = max([now[d]] + [now[p] for p in a.peers])
                    for p in a.peers:
                        now[p], pc[p] = t, pc[p] + 1
                    now[d] = t
                for p in a.peers:
                    posted[(a.block, a.mb, p)] = now[d]
                pc[d] += 1
            elif a.op is Op.RECV:
                if blocking[d]:
                    continue  # completed by the matching blocking SEND
                pc[d] += 1
            else:  # WAIT
                t = posted.get((a.block, a.mb, d))
                if t is None:
                    continue
                now[d], pc[d] = max(now[d], t), pc[d] + 1
            moved = True
        if not moved:
            stuck = ", ".join(f"dev{d}: {at(d)}" for d in range(n) if at(d) is not None)
            raise ExecutionError(f"the plan's programs cannot make progress (deadlock): {stuck}")
    return out


def summarize(events: list[Event], devices: int) -> dict:
    """Iteration time and per-device busy and wait time of one timeline (seconds).

    Busy time counts each compute action's own duration (`_own_durations`): time a device spends
    inside a multi-device block waiting for its peers is wait, as it is in the replay.
    """
    computes = _computes(events)
    if not computes:
        return {"iteration": 0.0, "busy": [0.0] * devices, "wait": [0.0] * devices}
    t0 = min(s for _, _, s, _ in computes)
    span = max(e for _, _, _, e in computes) - t0
    own = _own_durations(computes)
    busy = [0.0] * devices
    for d, text, _s, _e in computes:
        busy[d] += own[text]
    return {"iteration": span, "busy": busy, "wait": [max(0.0, span - b) for b in busy]}


def chrome_trace(events: list[Event], name: str = "measured") -> dict:
    """Chrome/Perfetto trace: one thread per device, one complete event per action (microseconds)."""
    out = [{"name": "process_name", "ph": "M", "pid": 0, "args": {"name": name}}]
    for d in sorted({e[0] for e in events}):
        out.append({"name": "thread_name", "ph": "M", "pid": 0, "tid": d, "args": {"name": f"dev{d}"}})
    for d, text, s, e in events:
        a = Action.parse(text)
        cat = "compute" if a.op is Op.COMPUTE else "comm"
        out.append({"name": text, "cat": cat, "ph": "X", "pid": 0, "tid": d,
                    "ts": round(s * 1e6, 3), "dur": round(max(0.0, e - s) * 1e6, 3),
                    "args": {"block": a.block, "mb": a.mb}})
    return {"traceEvents": out, "displayTimeUnit": "ms"}


def write_trace(path: str | os.PathLike, events: list[Event], name: str = "measured") -> None:
    """Write the Chrome trace atomically (the shared writer when the project provides one)."""
    try:
        from tessel_dsl.views import trace as shared  # written alongside the simulator; optional here
        writer = getattr(shared, "write_events", None)
    except ImportError:
        writer = None
    if writer is not None:
        writer(path, events, name)
        return
    write_json_atomic(path, chrome_trace(events, name))


def dumps(events: list[Event]) -> str:
    return json.dumps(events)
