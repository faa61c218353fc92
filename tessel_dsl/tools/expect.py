"""Checking a spec's expectations (``expect bubble <= 5% at N=128``) against a simulated plan.

For every micro-batch count the expectations mention, the spec is searched once, lowered and
simulated; each expectation then compares one measured number with its target. Symbols resolve
against the spec: ``M`` is the memory capacity, ``lower_bound`` the busiest device's work.

Measured values:

* ``bubble``        idle share of all device-time in the simulated run (a ratio; 5% = 0.05)
* ``peak_memory``   the largest per-device memory peak
* ``period``        the steady-state period measured in the run (the plan's, for tiny N)
* ``makespan``      the simulated makespan
* ``deadlock_free`` the lowered programs complete (no comparison)
"""
from __future__ import annotations

import operator
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from tessel_dsl.errors import TesselError
from tessel_dsl.ir import Expectation, Spec

_OPS: dict[str, Callable[[float, float], bool]] = {
    "<=": operator.le, "<": operator.lt, ">=": operator.ge, ">": operator.gt,
}
_EPS = 1e-9


@dataclass(frozen=True)
class Outcome:
    """One expectation's verdict: what was measured, what it was compared with, and why it failed."""

    expectation: Expectation
    microbatches: int
    measured: float | bool | None
    target: float | None
    passed: bool
    detail: str = ""

    @property
    def text(self) -> str:
        """The expectation as written, e.g. ``bubble <= 5% at N=128``."""
        return describe(self.expectation, self.microbatches)


def describe(e: Expectation, microbatches: int | None = None, units=None) -> str:
    """Source-like text of an expectation."""
    at = f" at N={microbatches if microbatches is not None else e.microbatches}" \
        if (microbatches or e.microbatches) else ""
    if e.metric == "deadlock_free":
        return f"deadlock_free{at}"
    return f"{e.metric} {e.op} {format_value(e.metric, e.value, units)}{at}"


def format_value(metric: str, value, units=None) -> str:
    """A metric's value as people write it: bubble in percent; with the spec's `units`, times and
    memory in its declared units (``80 ms``, ``24 GB``; bare numbers without resolutions)."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, str):
        return value
    if metric == "bubble":
        return f"{100 * value:.4g}%"
    if units is not None and metric in ("period", "makespan"):
        from tessel_dsl.units import time_in

        return time_in(units, value)
    if units is not None and metric == "peak_memory":
        from tessel_dsl.units import memory_in

        return memory_in(units, value)
    return f"{value:g}"


def resolve(spec: Spec, value) -> float | None:
    """A target number: symbols ``M`` and ``lower_bound`` resolve against the spec."""
    if value is None or isinstance(value, (int, float)):
        return None if value is None else float(value)
    if value == "M":  # the tightest device's room; `judge` compares each device with its own
        return float(min(spec.capacities, default=spec.memory))
    if value == "lower_bound":
        from tessel_dsl.analysis import lower_bound

        return float(lower_bound(spec))
    raise TesselError(f"expectation value {value!r} is neither a number nor M / lower_bound")


def compare(measured: float, op: str, target: float) -> bool:
    """`measured op target` with a small tolerance, so 0.05 <= 5% holds despite rounding."""
    if op == "==":
        return abs(measured - target) <= _EPS * max(1.0, abs(target))
    if op == "!=":
        return abs(measured - target) > _EPS * max(1.0, abs(target))
    fn = _OPS.get(op)
    if fn is None:
        raise TesselError(f"unknown comparison {op!r} in an expectation")
    if op in ("<=", ">="):
        return fn(measured, target) or abs(measured - target) <= _EPS * max(1.0, abs(target))
    return fn(measured, target)


def measure(metric: str, report, plan=None) -> float | bool | None:
    """The number `metric` stands for in a simulation report."""
    if metric == "deadlock_free":
        return report.deadlock is None
    if metric == "bubble":
        return report.bubble
    if metric == "peak_memory":
        return float(max(report.peak_memory, default=0))
    if metric == "makespan":
        return float(report.makespan)
    if metric == "period":
        if report.period is not None:
            return float(report.period)
        return None if report.planned_period is None else float(report.planned_period)
    raise TesselError(f"unknown metric {metric!r} in an expectation")


def judge(spec: Spec, e: Expectation, n: int, report, plan=None) -> Outcome:
    """One expectation against one simulation report."""
    got = measure(e.metric, report, plan)
    if e.metric == "deadlock_free":
        detail = "" if got else (report.deadlock.summary() if report.deadlock else "deadlock")
        return Outcome(e, n, got, None, bool(got), detail)
    target = resolve(spec, e.value)
    if e.metric == "peak_memory" and e.value == "M" and report.peak_memory:
        # M is per device when devices differ: judge the device nearest (or furthest over) its own.
        d = max(range(len(report.peak_memory)),
                key=lambda i: (report.peak_memory[i] - spec.capacity(i), report.peak_memory[i]))
        got, target = float(report.peak_memory[d]), float(spec.capacity(d))
    if got is None or target is None:
        return Outcome(e, n, got, target, False, f"cannot measure {e.metric} at N={n}")
    ok = compare(float(got), e.op, target)
    detail = "" if ok else (f"measured {format_value(e.metric, got, spec.units)}, expected {e.op} "
                            f"{format_value(e.metric, target, spec.units)}")
    if not ok and report.deadlock is not None:
        detail += f" ({report.deadlock.summary()})"
    return Outcome(e, n, got, target, ok, detail)


def plan_for(spec: Spec, microbatches: int, *, blocking: bool = False, time_limit: float | None = None):
    """Search a schedule for `microbatches` micro-batches and lower it into a Plan."""
    from tessel_dsl.plan import make_plan
    from tessel_dsl.search.driver import search

    result = search(spec, microbatches=microbatches, time_limit=time_limit)
    return make_plan(spec, result.schedule, result.info, blocking=blocking)


def check_expectations(spec: Spec, *, blocking: bool = False, link=None,
                       planner: Callable | None = None, time_limit: float | None = None) -> list[Outcome]:
    """Every expectation of `spec`, each measured on a simulated plan for its micro-batch count.

    A search or lowering failure for one N fails that N's expectations with the error's message
    instead of stopping the whole check. `planner(spec, n, blocking=...)` replaces the search
    (tests use it to plug in a hand-made schedule).
    """
    from tessel_dsl.simulator import simulate

    if planner is None:
        def planner(s: Spec, n: int, blocking: bool = False):
            return plan_for(s, n, blocking=blocking, time_limit=time_limit)
    by_n: dict[int, list[Expectation]] = {}
    for e in spec.expectations:
        by_n.setdefault(e.microbatches or spec.microbatches, []).append(e)
    out: list[Outcome] = []
    for n, exps in by_n.items():
        try:
            plan = planner(spec, n, blocking=blocking)
            report = simulate(plan, link=link)
        except TesselError as err:
            first = str(err).splitlines()[0] if str(err) else type(err).__name__
            out += [Outcome(e, n, None, None, False, f"{type(err).__name__}: {first}") for e in exps]
            continue
        out += [judge(spec, e, n, report, plan) for e in exps]
    return out


_EXPECT_LINE = re.compile(r"^\s*expect\b", re.MULTILINE)


def has_expectations(text: str) -> bool:
    """Whether spec text declares at least one ``expect`` line (cheap, no parsing)."""
    return bool(_EXPECT_LINE.search(text))


def spec_files(paths, *, skip_dirs: tuple[str, ...] = ("invalid",)) -> list[Path]:
    """The .tsl files to check: named files always; in directories (recursively), only files that
    carry expectations and are not under a directory named like `skip_dirs` (negative examples)."""
    out: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            for f in sorted(p.rglob("*.tsl")):
                rel = f.relative_to(p).parts[:-1]
                if any(part in skip_dirs for part in rel):
                    continue
                try:
                    if has_expectations(f.read_text()):
                        out.append(f)
                except OSError:
                    continue
        elif p.exists():
            out.append(p)
        else:
            raise TesselError(f"{p}: no such file or directory")
    return out
