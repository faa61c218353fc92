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


def _cycle_mean(gaps: list[float]) -> float:
    """Mean gap over the whole cycles of the repeating tail of `gaps`, when one covers at least
    half of them (a warmup gap left in a short run's window then does not count); else the mean
    of all of them."""
    n = len(gaps)

    def same(a: float, b: float) -> bool:
        return abs(a - b) <= 1e-9 * max(1.0, abs(a), abs(b))

    for c in range(1, n // 2 + 1):
        j = n - c
        while j > 0 and same(gaps[j - 1], gaps[j - 1 + c]):
            j -= 1
        if n - j >= max(2 * c, (n + 1) // 2):
            whole = (n - j) // c * c
            return sum(gaps[n - whole:]) / whole
    return sum(gaps) / n


def steady_period(starts: dict[tuple[str, int], float], microbatches: int,
                  windows: dict[str, tuple[int, int]] | None = None) -> float | None:
    """The time each micro-batch adds in the steady state: per block, the mean gap between
    consecutive micro-batches' starts over whole cycles of the gap pattern that repeats at the end
    of its steady window (one cycle of a bursty schedule: gaps of 329 five times, then 2969, give
    769); the median over blocks. `windows` gives each block's steady micro-batches (first, last),
    e.g. those a plan's repetend instances run; without it (or when it holds no gap) the middle
    half of the run is taken.

    Not the median gap: it would report a burst's short gap, far below the time per micro-batch.
    """
    if microbatches < 3:
        return None
    blocks = sorted({b for b, _ in starts})

    def mean(window) -> float | None:
        per_block = []
        for b in blocks:
            lo, hi = window(b)
            gaps = []
            for mb in range(lo, min(hi, microbatches - 1)):
                s0, s1 = starts.get((b, mb)), starts.get((b, mb + 1))
                if s0 is not None and s1 is not None:
                    gaps.append(s1 - s0)
            if gaps:
                per_block.append(_cycle_mean(gaps))
        if not per_block:
            return None
        # The median over blocks: in a short run one block's window can still hold a warmup gap
        # (1F1B's first device at N=4), which a mean over blocks would carry into the period.
        per_block.sort()
        mid = len(per_block) // 2
        return per_block[mid] if len(per_block) % 2 else (per_block[mid - 1] + per_block[mid]) / 2

    if windows:
        got = mean(lambda b: windows.get(b, (0, 0)))
        if got is not None:
            return got
    lo, hi = microbatches // 4, max(microbatches // 4 + 1, (3 * microbatches) // 4)
    return mean(lambda b: (lo, hi))


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
