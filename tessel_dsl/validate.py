"""The independent schedule validator: nothing is reported or written unless it passes.

It re-derives everything from the spec and the start times alone (no trust in how the schedule was
built): every (block, micro-batch) runs exactly once, dependencies finish before their consumers
start, a device runs one block at a time (a multi-device block occupies all its devices), and the
running memory sum on each device never exceeds that device's capacity (`Spec.capacity`: its
memory less what is reserved there).
"""
from __future__ import annotations

from collections import Counter

from tessel_dsl.errors import ScheduleError
from tessel_dsl.ir import Spec
from tessel_dsl.schedule import Schedule, Slot
from tessel_dsl.units import memory_in, time_in

__all__ = ["validate"]


def validate(spec: Spec, schedule: Schedule, *, check_memory: bool = True) -> None:
    """Raise ScheduleError naming device, time step and block for the first broken rule."""
    _check_coverage(spec, schedule)
    start = {(s.block, s.mb): s for s in schedule.slots}
    for e in spec.edges:
        t_src = spec.block(e.src).time
        for mb in range(schedule.microbatches):
            a, b = start[(e.src, mb)], start[(e.dst, mb)]
            if b.start < a.start + t_src:
                dev = spec.block(e.dst).devices[0]
                _fail(spec, schedule, dev, b.start,
                      f"dependency broken: {e.dst}:{mb} starts at t={_t(spec, b.start)} on device {dev} but "
                      f"{e.src}:{mb} only ends at t={_t(spec, a.start + t_src)}")
    rows = schedule.per_device(spec)
    for dev, row in enumerate(rows):
        for prev, cur in zip(row, row[1:]):
            if cur.start < prev.end(spec):
                _fail(spec, schedule, dev, cur.start,
                      f"device {dev} runs two blocks at once at t={_t(spec, cur.start)}: {prev.block}:{prev.mb} "
                      f"(t={_t(spec, prev.start)}..{_t(spec, prev.end(spec))}) and {cur.block}:{cur.mb}")
        if check_memory:
            _check_memory(spec, schedule, dev, row)


def _check_coverage(spec: Spec, schedule: Schedule) -> None:
    unknown = sorted({s.block for s in schedule.slots} - set(spec.by_name))
    if unknown:
        raise ScheduleError(f"schedule '{schedule.name}' names blocks the spec does not have: {', '.join(unknown)}")
    counts = Counter((s.block, s.mb) for s in schedule.slots)
    dup = [k for k, c in counts.items() if c > 1]
    if dup:
        b, mb = sorted(dup)[0]
        raise ScheduleError(f"schedule '{schedule.name}': {b}:{mb} is scheduled {counts[(b, mb)]} times")
    missing = [(b.name, mb) for mb in range(schedule.microbatches) for b in spec.blocks if (b.name, mb) not in counts]
    if missing:
        b, mb = missing[0]
        raise ScheduleError(
            f"schedule '{schedule.name}': {b}:{mb} is never scheduled ({len(missing)} block(s) missing)")
    extra = [k for k in counts if not 0 <= k[1] < schedule.microbatches]
    if extra:
        b, mb = sorted(extra)[0]
        raise ScheduleError(
            f"schedule '{schedule.name}': {b}:{mb} is outside micro-batches 0..{schedule.microbatches - 1}")
    negative = [s for s in schedule.slots if s.start < 0]
    if negative:
        s = min(negative)
        raise ScheduleError(f"schedule '{schedule.name}': {s.block}:{s.mb} starts at negative time {s.start}")


def _check_memory(spec: Spec, schedule: Schedule, dev: int, row: tuple[Slot, ...]) -> None:
    used, cap = 0, spec.capacity(dev)
    for s in row:
        used += spec.block(s.block).memory
        if used > cap:
            reserved = spec.reserved_on(dev)
            limit = (f"M={memory_in(spec.units, cap)}" if spec.uniform_memory and not reserved else
                     f"its capacity {memory_in(spec.units, cap)}"
                     + (f" ({memory_in(spec.units, spec.total_capacity(dev))} less "
                        f"{memory_in(spec.units, reserved)} reserved)" if reserved else ""))
            _fail(spec, schedule, dev, s.start,
                  f"memory overflow on device {dev} at t={_t(spec, s.start)}: {s.block}:{s.mb} "
                  f"brings it to {memory_in(spec.units, used)} > {limit}")


def _t(spec: Spec, t: int) -> str:
    """A time in the spec's declared unit (``t=12 ms``); bare units without `resolution time`."""
    return time_in(spec.units, t)


def _fail(spec: Spec, schedule: Schedule, dev: int, t: int, message: str) -> None:
    grid = schedule.grid(spec, mark=(dev, t), window=(t - 24, t + 24))
    raise ScheduleError(f"invalid schedule '{schedule.name}': {message}\n{grid}")
