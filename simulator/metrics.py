"""Numbers read off a finished simulation: bubbles, steady-state period, comm overlap, drift.

Plain functions over the engine's records, so each metric is easy to test on its own.
"""
from __future__ import annotations

from tessel_dsl.schedule import Schedule

from tessel_dsl.simulator.engine import Engine


def makespan(engine: Engine) -> float:
    """When the last device finished (its last compute or its last comm wait)."""
    ends = [s.finish if s.done else max((r[1] for r in s.records), default=0.0) for s in engine.states]
    return max(ends, default=0.0)


def bubbles(busy: list[float], span: float) -> tuple[float, tuple[float, ...]]:
    """Overall and per-device idle fraction of `span` (0 when nothing ran)."""
    if span <= 0:
        return 0.0, tuple(0.0 for _ in busy)
    per = tuple(max(0.0, 1.0 - b / span) for b in busy)
    total = max(0.0, 1.0 - sum(busy) / (span * len(busy))) if busy else 0.0
    return total, per


def steady_period(starts: dict[tuple[str, int], float], microbatches: int) -> float | None:
    """Mean gap between consecutive micro-batches' starts of the same block, middle half only:
    the time each micro-batch adds in the steady state; warmup and cooldown are cut off.

    Not the median: a schedule that runs micro-batches in bursts (a memory-capped 1F1B with gaps
    of 329 five times, then 2969) would report its short gap, far below its time per micro-batch.
    """
    if microbatches < 3:
        return None
    lo, hi = microbatches // 4, max(microbatches // 4 + 1, (3 * microbatches) // 4)
    gaps = []
    blocks = {b for b, _ in starts}
    for b in blocks:
        for mb in range(lo, min(hi, microbatches - 1)):
            s0, s1 = starts.get((b, mb)), starts.get((b, mb + 1))
            if s0 is not None and s1 is not None:
                gaps.append(s1 - s0)
    return sum(gaps) / len(gaps) if gaps else None


def comm_split(engine: Engine) -> tuple[float, float, float]:
    """(total, exposed, hidden) transfer time: exposed is what some device sat idle for."""
    total = exposed = 0.0
    for x in engine.net.transfers:
        dur = x.end - x.start
        total += dur
        seen = max(x.exposed, x.mate.exposed if x.mate is not None else 0.0)
        exposed += min(dur, seen)
    return total, exposed, max(0.0, total - exposed)


def drift(starts: dict[tuple[str, int], float], schedule: Schedule | None) -> tuple[float, float, int] | None:
    """(max |simulated - planned| start, mean of it, how many blocks moved); None without a plan."""
    if schedule is None or not schedule.slots:
        return None
    diffs = []
    for s in schedule.slots:
        t = starts.get((s.block, s.mb))
        if t is not None:
            diffs.append(abs(t - s.start))
    if not diffs:
        return None
    return max(diffs), sum(diffs) / len(diffs), sum(1 for d in diffs if d > 1e-9)
