"""SimPy model of a plan's per-device programs: devices, links, memory, deadlock detection.

    from tessel_dsl.simulator import simulate
    report = simulate(plan)                         # links as the spec says (free by default)
    report = simulate(plan, link=Link(latency=0.1), blocking=True)
    report = simulate((spec, programs))             # programs from anywhere, e.g. hand-edited

The simulator executes exactly the programs it is given (the lowering is done once, in
`tessel_dsl.lower`); it never consults the schedule except to compare start times with it.
"""
from __future__ import annotations

import gc
import time as _time

from tessel_dsl.analysis import lower_bound
from tessel_dsl.errors import SimulationError
from tessel_dsl.ir import Link, Spec
from tessel_dsl.limits import MAX_SIMULATED_INSTANCES
from tessel_dsl.lower import declared_bytes
from tessel_dsl.plan import Plan
from tessel_dsl.plan_check import validate_plan
from tessel_dsl.program import Op, Program
from tessel_dsl.schedule import Schedule
from tessel_dsl.simulator.deadlock import Blocked, Deadlock, explain
from tessel_dsl.simulator.engine import Engine
from tessel_dsl.simulator.memory import Overflow
from tessel_dsl.simulator.metrics import bubbles, comm_split, drift, makespan, steady_period
from tessel_dsl.simulator.report import Report, summary_table

__all__ = ["simulate", "check_size", "Report", "Deadlock", "Blocked", "Overflow", "summary_table"]


def check_size(spec: Spec, microbatches: int) -> None:
    """Refuse, before any work, to simulate more block instances than `MAX_SIMULATED_INSTANCES`
    (re-extending, checking and simulating that many takes about a minute of CPU)."""
    instances = microbatches * len(spec.blocks)
    if instances > MAX_SIMULATED_INSTANCES:
        most = max(1, MAX_SIMULATED_INSTANCES // max(1, len(spec.blocks)))
        raise SimulationError(
            f"simulating {microbatches:,} micro-batches of {len(spec.blocks)} blocks is {instances:,} block "
            f"instances, more than the simulator's limit of {MAX_SIMULATED_INSTANCES:,} (about a minute of "
            f"CPU, and the cost grows faster than linearly); simulate at most {most:,} micro-batches: the "
            "steady state repeats with the repetend, so a few hundred micro-batches already show it")


def simulate(source, *, link: Link | None = None, blocking: bool | None = None,
             schedule: Schedule | None = None, strict: bool = False) -> Report:
    """Simulate a Plan, or a ``(spec, programs)`` / ``(spec, programs, schedule)`` tuple.

    `link` overrides the spec's link cost. `blocking` given and different from the programs' mode
    re-lowers the schedule in that mode (this needs a schedule). With `strict`, a deadlock or a
    memory overflow raises SimulationError instead of only being reported.
    """
    _check_source_size(source, schedule)
    spec, programs, schedule = _unpack(source, schedule)
    if blocking is not None and programs and programs[0].blocking != blocking:
        if schedule is None:
            raise SimulationError("switching blocking mode needs the schedule to lower again")
        from tessel_dsl.lower import lower

        programs = lower(spec, schedule, blocking=blocking)
    link = spec.link if link is None else link
    if link.latency < 0 or link.bandwidth < 0:
        raise SimulationError("link latency and bandwidth must not be negative")

    # The run allocates many small, short-lived objects and no cycles: collector passes over them
    # cost more than the simulation itself on large plans.
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _simulate(spec, programs, schedule, link, strict)
    finally:
        if was_enabled:
            gc.enable()


def _simulate(spec: Spec, programs: tuple[Program, ...], schedule: Schedule | None, link: Link,
              strict: bool) -> Report:
    t0 = _time.perf_counter()
    engine = Engine(spec, programs, link).run()
    wall = _time.perf_counter() - t0

    n = _microbatches(engine, schedule)
    span = makespan(engine)
    busy = [s.busy for s in engine.states]
    total, per = bubbles(busy, span)
    comm_total, exposed, hidden = comm_split(engine)
    dr = drift(engine.starts, schedule)
    rep = schedule.repetend if schedule is not None else None
    report = Report(
        spec=spec.name,
        schedule=schedule.name if schedule is not None else "programs",
        devices=spec.devices,
        microbatches=n,
        blocking=bool(programs and programs[0].blocking),
        link=link,
        makespan=span,
        busy=tuple(busy),
        bubble=total,
        bubble_per_device=per,
        period=steady_period(engine.starts, n, _repetend_windows(schedule, n)),
        # Only a schedule laid out from its repetend plans that period: one that runs another order
        # for this N (a baseline's that beat the extension) keeps the repetend for other N only.
        planned_period=rep.period if rep is not None and schedule.repetend_start is not None else None,
        lower_bound=lower_bound(spec),
        peak_memory=tuple(engine.memory.peak),
        memory_capacity=spec.memory,
        memory_capacities=spec.capacities,
        memory_reserved=tuple(spec.reserved_on(d) for d in range(spec.devices)),
        overflows=tuple(engine.memory.overflows),
        overflow_count=engine.memory.overflow_count,
        comm_total=comm_total,
        comm_exposed=exposed,
        comm_hidden=hidden,
        transfers=len(engine.net.transfers),
        bytes_moved=sum(x.nbytes for x in engine.net.transfers),
        # (each producer and destination once: a long run repeats them for every micro-batch)
        bytes_from_memory=any(not declared_bytes(spec, block, dst)
                              for block, dst in {(x.block, x.dst) for x in engine.net.transfers}),
        wait_per_device=tuple(s.wait for s in engine.states),
        peer_wait_per_device=tuple(s.peer_wait for s in engine.states),
        drift_max=dr[0] if dr else None,
        drift_mean=dr[1] if dr else None,
        drift_blocks=dr[2] if dr else None,
        deadlock=explain(engine),
        actions=engine.actions,
        wall_seconds=wall,
        time_label=spec.units.time_label,
        memory_label=spec.units.memory_label,
        time_seconds=spec.units.time_seconds,
        memory_bytes=spec.units.memory_bytes,
        repetend_start=schedule.repetend_start if schedule is not None else None,
        timeline=tuple(tuple(s.records) for s in engine.states),
        comm=tuple((x.start, x.end, x.block, x.mb, x.src, x.dst) for x in engine.net.transfers),
    )
    if strict and not report.ok:
        detail = str(report.deadlock) if report.deadlock else "\n".join(str(o) for o in report.overflows)
        raise SimulationError(detail)
    return report


def _repetend_windows(schedule: Schedule | None, n: int) -> dict[str, tuple[int, int]] | None:
    """Each block's micro-batches run by the repetend's instances (the steady part of a plan
    extended from a repetend): instance k runs block b on micro-batch r_b + k, k = 0 .. N - N_R.
    Instance 0 is left out: compaction starts some of its blocks early, inside the warmup."""
    rep = schedule.repetend if schedule is not None else None
    if rep is None or schedule.repetend_start is None or n <= rep.nr + 1:
        return None  # (a schedule that runs another order for this N keeps the repetend for other N)
    return {s.block: (s.mb + 1, s.mb + n - rep.nr) for s in rep.slots}


def _check_source_size(source, schedule: Schedule | None) -> None:
    spec = source[0] if isinstance(source, tuple) and source else getattr(source, "spec", None)
    if not isinstance(spec, Spec):
        return  # `_unpack` says what is wrong
    sched = schedule or (source[2] if isinstance(source, tuple) and len(source) == 3
                         else getattr(source, "schedule", None))
    if isinstance(sched, Schedule):
        check_size(spec, sched.microbatches)
        return
    programs = source[1] if isinstance(source, tuple) and len(source) > 1 else getattr(source, "programs", ())
    computes = sum(1 for p in programs if isinstance(p, Program) for a in p.actions if a.op is Op.COMPUTE)
    if computes > MAX_SIMULATED_INSTANCES:
        check_size(spec, -(-computes // max(1, len(spec.blocks))))


def _unpack(source, schedule: Schedule | None) -> tuple[Spec, tuple[Program, ...], Schedule | None]:
    if isinstance(source, tuple):
        if len(source) == 3:
            spec, programs, sched = source
            return spec, tuple(programs), schedule or sched
        if len(source) == 2:
            spec, programs = source
            return spec, tuple(programs), schedule
        raise TypeError("simulate() takes a Plan or a (spec, programs[, schedule]) tuple")
    spec = getattr(source, "spec", None)
    programs = getattr(source, "programs", None)
    if spec is None or programs is None:
        raise TypeError("simulate() takes a Plan or a (spec, programs[, schedule]) tuple")
    sched = schedule or getattr(source, "schedule", None)
    if isinstance(source, Plan) and schedule is None:
        # A Plan built or edited in Python gets the checks a loaded plan file gets.
        validate_plan(source)
    if not programs:
        if sched is None:
            raise SimulationError("the plan has no programs and no schedule to lower")
        from tessel_dsl.lower import lower

        programs = lower(spec, sched)
    return spec, tuple(programs), sched


def _microbatches(engine: Engine, schedule: Schedule | None) -> int:
    if schedule is not None:
        return schedule.microbatches
    return 1 + max((mb for _b, mb in engine.starts), default=-1)
