"""Schedules: when each (block, micro-batch) starts, with the repetend structure kept.

A `Schedule` alone is just start times; the spec supplies each block's devices and duration, so
every query that needs them takes the spec as an argument.
"""
from __future__ import annotations

from dataclasses import dataclass

from tessel_dsl.ir import Spec

__all__ = ["Repetend", "Schedule", "Slot"]


@dataclass(frozen=True, order=True)
class Slot:
    """Block `block` of micro-batch `mb` starts at `start` (ordering: by time, then name)."""

    start: int
    block: str
    mb: int

    def end(self, spec: Spec) -> int:
        return self.start + spec.block(self.block).time

    def devices(self, spec: Spec) -> tuple[int, ...]:
        return spec.block(self.block).devices


@dataclass(frozen=True)
class Repetend:
    """The repeating core: `slots` hold micro-batch offsets in [0, nr) and times relative to its
    start; consecutive repetends are `period` apart with every offset shifted by one."""

    nr: int
    period: int
    slots: tuple[Slot, ...]


@dataclass(frozen=True)
class Schedule:
    """A full schedule of `microbatches` micro-batches, plus how it was built.

    `slots` is the whole schedule (sorted). `warmup`, `repetend` and `cooldown` are present for
    searched schedules so the plan can be re-extended to any N without searching again; baselines
    and imported schedules leave them empty.
    """

    microbatches: int
    slots: tuple[Slot, ...]
    name: str = "tessel"
    warmup: tuple[Slot, ...] = ()
    repetend: Repetend | None = None
    cooldown: tuple[Slot, ...] = ()
    # Where the first repetend instance starts in the full schedule (for timeline markers).
    repetend_start: int | None = None

    def makespan(self, spec: Spec) -> int:
        return max((s.end(spec) for s in self.slots), default=0)

    def per_device(self, spec: Spec) -> tuple[tuple[Slot, ...], ...]:
        """Each device's slots in start order (a multi-device slot appears on each of its devices)."""
        rows: list[list[Slot]] = [[] for _ in range(spec.devices)]
        for s in sorted(self.slots):
            for d in s.devices(spec):
                rows[d].append(s)
        return tuple(tuple(r) for r in rows)

    def busy(self, spec: Spec) -> tuple[int, ...]:
        out = [0] * spec.devices
        for s in self.slots:
            t = spec.block(s.block).time
            for d in s.devices(spec):
                out[d] += t
        return tuple(out)

    def bubble_rate(self, spec: Spec) -> float:
        """Idle device-time over total device-time within the makespan."""
        span = self.makespan(spec)
        if span == 0:
            return 0.0
        return 1.0 - sum(self.busy(spec)) / (span * spec.devices)

    def peak_memory(self, spec: Spec) -> tuple[int, ...]:
        """Per-device peak of the running memory sum, blocks taken in start order.

        A block's delta counts from its start (the paper's [0, tau) convention); at equal times
        releases are applied before allocations would be optimistic, so allocations go first.
        """
        events: list[tuple[int, int, int, int]] = []
        for s in self.slots:
            b = spec.block(s.block)
            for d in b.devices:
                events.append((d, s.start, 0 if b.memory > 0 else 1, b.memory))
        peak = [0] * spec.devices
        cur = [0] * spec.devices
        for d, _t, _o, m in sorted(events):
            cur[d] += m
            peak[d] = max(peak[d], cur[d])
        return tuple(peak)

    def fits_memory(self, spec: Spec) -> bool:
        """Every device's peak stays within its own capacity (`Spec.capacity`)."""
        return all(p <= spec.capacity(d) for d, p in enumerate(self.peak_memory(spec)))

    def grid(self, spec: Spec, mark: tuple[int, int] | None = None, window: tuple[int, int] | None = None) -> str:
        """Text grid, one row per device, one column per time unit; `mark=(device, time)` adds an
        ``<-- ERROR HERE`` pointer so validator messages show the whole picture. `window=(t0, t1)`
        limits the columns so long schedules stay readable."""
        span = self.makespan(spec)
        t0, t1 = (max(0, window[0]), min(span, window[1])) if window else (0, span)
        cells = [["." for _ in range(t1 - t0)] for _ in range(spec.devices)]
        for s in self.slots:
            label = f"{s.block}:{s.mb}"
            for d in s.devices(spec):
                for t in range(max(s.start, t0), min(s.end(spec), t1)):
                    cells[d][t - t0] = label if t == s.start else "~"
        width = max((len(c) for row in cells for c in row), default=1)
        lines = [f"t={t0}..{t1}"] if window else []
        for d, row in enumerate(cells):
            line = f"dev{d} | " + " ".join(c.ljust(width) for c in row)
            if mark and mark[0] == d:
                line += f"   <-- ERROR HERE (t={mark[1]})"
            lines.append(line)
        return "\n".join(lines)
