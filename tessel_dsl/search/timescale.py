"""The search's time unit: every block time divided by their greatest common divisor.

A spec written in microseconds whose costs are all multiples of 1 ms is the same scheduling
problem as the one written in milliseconds, so the search solves the smaller-numbered one and
multiplies the answer back. The solvers then see the same model whatever unit the user wrote the
costs in, which makes the effort and the result (scaled) independent of that choice.
"""
from __future__ import annotations

from dataclasses import replace
from math import gcd

from tessel_dsl.ir import Link, Spec
from tessel_dsl.schedule import Repetend, Schedule, Slot
from tessel_dsl.search.lags import edge_lags


def time_unit(spec: Spec) -> int:
    """The largest integer every block time and transfer lag is a multiple of (1 when there is
    nothing to gain)."""
    g = 0
    for t in [b.time for b in spec.blocks] + list(edge_lags(spec).values()):
        g = gcd(g, t)
    return max(1, g)


def divide_spec(spec: Spec, unit: int) -> Spec:
    """`spec` with every block time divided by `unit` (which must divide them all), and its link
    slowed down as much, so each transfer lag is divided too."""
    if unit == 1:
        return spec
    link = Link(spec.link.latency / unit, spec.link.bandwidth * unit)
    return replace(spec, blocks=tuple(replace(b, time=b.time // unit) for b in spec.blocks), link=link)


def _slots(slots: tuple[Slot, ...], mul: int, div: int) -> tuple[Slot, ...]:
    return tuple(Slot(s.start * mul // div, s.block, s.mb) for s in slots)


def _rescale(sched: Schedule, mul: int, div: int) -> Schedule:
    rep = sched.repetend
    if rep is not None:
        rep = Repetend(rep.nr, rep.period * mul // div, _slots(rep.slots, mul, div))
    start = None if sched.repetend_start is None else sched.repetend_start * mul // div
    return replace(sched, slots=_slots(sched.slots, mul, div), warmup=_slots(sched.warmup, mul, div),
                   repetend=rep, cooldown=_slots(sched.cooldown, mul, div), repetend_start=start)


def scale_schedule(sched: Schedule, unit: int) -> Schedule:
    """Every time in `sched` multiplied by `unit` (from the divided spec back to the user's)."""
    return sched if unit == 1 else _rescale(sched, unit, 1)


def divisible(sched: Schedule, unit: int) -> bool:
    """Is every time in `sched` a multiple of `unit` (so dividing it loses nothing)?"""
    times = [s.start for s in sched.slots + sched.warmup + sched.cooldown]
    if sched.repetend is not None:
        times += [sched.repetend.period] + [s.start for s in sched.repetend.slots]
    if sched.repetend_start is not None:
        times.append(sched.repetend_start)
    return all(t % unit == 0 for t in times)


def divide_schedule(sched: Schedule, unit: int) -> Schedule:
    """Every time in `sched` divided by `unit` (see `divisible`)."""
    return sched if unit == 1 else _rescale(sched, 1, unit)
