"""Side-by-side numbers for Tessel, the baselines and TO on one spec (what `tessel compare` prints).

Two kinds of number are reported for each schedule:

* at the requested N: makespan, bubble rate (idle device-time over all device-time within the
  makespan) and peak memory per device;
* in the steady state, "considering numerous micro-batches" as the paper's Table 3 does: the
  period (time per micro-batch once the pipeline is full) and the bubble within one period,
  ``1 - work per micro-batch summed over devices / (D * period)``. For a repeating Tessel schedule
  the period is the repetend's; for a baseline it is measured between micro-batches N/4 and 3N/4
  as the makespan's growth per micro-batch between `STEADY_N`/2 and `STEADY_N` micro-batches,
  where warmup and cooldown are the same and cancel out.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field, replace

from tessel_dsl.analysis import busy_time, lower_bound
from tessel_dsl.errors import TesselError
from tessel_dsl.ir import Spec
from tessel_dsl.plan import SearchInfo
from tessel_dsl.schedule import Schedule
from tessel_dsl.search.baselines import BASELINES, IGNORES_MEMORY, NotApplicable, build
from tessel_dsl.search.optimal import TO_EFFORT
from tessel_dsl.serialize import to_json

STEADY_N = 64  # a multiple of every Chimera unit up to D=16, long enough to leave warmup behind
SCHEDULES = ("tessel", *BASELINES)


@dataclass(frozen=True)
class Row:
    """One schedule's numbers on one spec; `status` is ok, n/a, timeout or error (see `reason`)."""

    spec: str
    schedule: str
    status: str = "ok"
    reason: str = ""
    microbatches: int = 0
    makespan: int | None = None
    bubble: float | None = None
    period: float | None = None
    steady_bubble: float | None = None
    lower_bound: int = 0
    peak_memory: tuple[int, ...] = ()
    memory_limit: int = 0  # the capacity of `memory_device`
    over_memory: bool = False
    proven: bool | None = None
    seconds: float | None = None
    gap_to_optimal: float | None = None
    extra: dict = field(default_factory=dict)
    # Each device's capacity (less its reserve) and the device closest to (or furthest over) it.
    memory_limits: tuple[int, ...] = ()
    memory_device: int = 0


def steady_bubble(spec: Spec, period: float | None) -> float | None:
    """Idle fraction of device-time within one steady-state period."""
    if not period:
        return None
    return 1.0 - sum(busy_time(spec)) / (spec.devices * period)


def measured_period(spec: Spec, short: Schedule, long: Schedule) -> float | None:
    """Time each extra micro-batch adds once the pipeline is full: the makespan's slope between a
    schedule of N1 and one of N2 > N1 micro-batches (warmup and cooldown cancel out)."""
    extra = long.microbatches - short.microbatches
    if extra <= 0:
        return None
    return (long.makespan(spec) - short.makespan(spec)) / extra


def _row(spec: Spec, schedule: Schedule, period: float | None, **kw) -> Row:
    peak = schedule.peak_memory(spec)
    caps = spec.capacities
    dev = max(range(spec.devices), key=lambda d: (peak[d] - caps[d], peak[d]), default=0)
    return Row(spec=spec.name, schedule=schedule.name, microbatches=schedule.microbatches,
               makespan=schedule.makespan(spec), bubble=schedule.bubble_rate(spec), period=period,
               steady_bubble=steady_bubble(spec, period), lower_bound=lower_bound(spec), peak_memory=peak,
               memory_limit=spec.capacity(dev), over_memory=not schedule.fits_memory(spec),
               memory_limits=caps, memory_device=dev, **kw)


def _failed(spec: Spec, name: str, status: str, reason: str, n: int) -> Row:
    return Row(spec=spec.name, schedule=name, status=status, reason=reason, microbatches=n,
               lower_bound=lower_bound(spec), memory_limit=spec.memory, memory_limits=spec.capacities)


def _unlimited(spec: Spec, n: int) -> Spec:
    """`spec` with room on every device for every activation of `n` micro-batches."""
    room = sum(max(b.memory, 0) for b in spec.blocks) * n + max(spec.capacities, default=0) + 1
    return replace(spec, memory=room, device_memory=(), reserved=())


def _key(schedule: Schedule) -> list[tuple[str, int, int]]:
    return sorted((s.block, s.mb, s.start) for s in schedule.slots)


def memory_adaptation(spec: Spec, name: str, n: int, schedule: Schedule) -> str:
    """Why `schedule` (baseline `name` built under the spec's memory) is not that baseline's own
    design, or "" if it is: the design is what the same baseline builds when memory is no limit.
    A baseline made to fit a smaller M ("capped") is a stand-in, and reports say so."""
    if "capped" in name:
        return ""  # memory-capped by definition: its name says it
    try:
        free = build(_unlimited(spec, n), name, n)
    except TesselError:
        return ""
    if _key(free) == _key(schedule):
        return ""
    peak = free.peak_memory(spec)
    over = [d for d in range(spec.devices) if peak[d] > spec.capacity(d)]
    if not over:
        return "adapted to memory M: its order differs from the one it uses with memory no limit"
    from tessel_dsl.units import memory_in, time_in

    d = max(over, key=lambda d: peak[d] - spec.capacity(d))
    return (f"capped to memory: its own order needs {memory_in(spec.units, peak[d])} on device {d}, which has "
            f"{memory_in(spec.units, spec.capacity(d))}; makespan {time_in(spec.units, free.makespan(spec))} "
            "without the cap")


JOINED = "each weight gradient runs right after its input gradient, as one backward"
TOWERS = "parallel branches run one after the other as one chain of stages: "
WHOLE = "a whole backward runs in its stage's input-gradient step: "


def placement_adaptation(spec: Spec, name: str) -> str:
    """How baseline `name` was fitted to the placement, or "" if it takes it as written: side
    blocks (`chain.side_blocks`) run in the stage of the block they feed; a split backward runs
    as one (`JOINED`), as 1F1B runs a model whose backward is not split; parallel branches run
    one after the other (`branches.py`)."""
    from tessel_dsl.ir import Kind
    from tessel_dsl.search.baselines import branches
    from tessel_dsl.search.baselines.chain import side_blocks, unfolded

    sides = side_blocks(spec)
    split = any(b.kind is Kind.WEIGHT_GRAD for b in spec.blocks)
    whole = [b.name for b in spec.blocks if b.kind is Kind.BACKWARD]
    towers = "" if sides else branches.describe(spec)
    if not sides and not split and not towers:
        return ""
    try:
        with unfolded():
            build(spec, name, 1)
        return ""
    except NotApplicable:
        pass
    except TesselError:
        return ""
    if name.startswith("zb"):  # the zero-bubble family keeps the split; only a whole backward is fitted in
        said = [WHOLE + ", ".join(whole)] if whole else []
    else:
        said = [JOINED] if split else []
    if towers:
        said.append(f"{TOWERS}{towers}")
    if sides:
        said.append("side block(s) run where they feed, " + ", ".join(
            f"{s} (device {','.join(map(str, spec.block(s).devices))}) in the stage of {u}" for s, u in sides.items()))
    return "adapted to the placement: " + "; ".join(said)


def label(row: Row) -> str:
    """A row's schedule name as reports show it: a baseline fitted to the placement or to memory
    says so."""
    extra = row.extra or {}
    fitted = extra.get("placement") or ""
    tags = (["backward not split"] if JOINED in fitted else []) + (["side blocks folded"] if "side block" in fitted else []) \
        + (["whole backward in the I step"] if WHOLE in fitted else []) \
        + (["branches in sequence"] if TOWERS in fitted else [])
    why = extra.get("memory")
    if why:
        tags.append(f"{'capped' if why.startswith('capped') else 'adapted'} to memory")
    return f"{row.schedule} ({'; '.join(tags)})" if tags else row.schedule


def baseline_row(spec: Spec, name: str, n: int, steady_n: int = STEADY_N) -> tuple[Row, Schedule | None]:
    """The baseline's row (n/a when it does not fit the placement) and its schedule at N; when
    memory M changed it from the baseline's own design, `extra["memory"]` says how, and when it
    needed side blocks folded into a stage, `extra["placement"]`."""
    try:
        schedule = build(spec, name, n)
        period = measured_period(spec, build(spec, name, steady_n // 2), build(spec, name, steady_n))
    except NotApplicable as e:
        return _failed(spec, name, "n/a", str(e), n), None
    except TesselError as e:
        return _failed(spec, name, "error", str(e).splitlines()[0], n), None
    why = memory_adaptation(spec, name, n, schedule)
    fitted = placement_adaptation(spec, name)
    extra = ({"memory": why} if why else {}) | ({"placement": fitted} if fitted else {})
    return _row(spec, schedule, period, extra=extra), schedule


def running_period(spec: Spec, schedule: Schedule, info: SearchInfo | None = None,
                   steady_n: int = STEADY_N) -> float | None:
    """The period per micro-batch of what a searched schedule runs for its N, not of the repetend
    the plan keeps for other N: none below N_R (one solve of the N micro-batches) or when the
    slots are not the extension; a baseline's order that beat the extension runs at that
    baseline's period (measured as in its own row); a repetend holding each block k times, or
    a two-copy periodic schedule cut to N, its period over k. Without `info` (a schedule read from a plan), only the first two."""
    info = info or SearchInfo()
    rep = schedule.repetend
    # The plan runs a baseline's block order: one that beat the extension, one no repetend could
    # beat, or one at the makespan bound.
    beaten = [x.values["baseline"] for x in info.notes
              if x.kind in ("baseline-beats", "baseline-unbeaten", "baseline-at-bound")]
    if beaten and info.repetend_copies == 1:
        try:
            return measured_period(spec, build(spec, beaten[0], steady_n // 2), build(spec, beaten[0], steady_n))
        except TesselError:
            return None
    if info.repetend_copies > 1:
        return info.period / info.repetend_copies if not beaten else None
    # A two-copy periodic schedule cut to N (`kcopy._light_cut`) runs at its own period.
    cut = [x.values["period"] for x in info.notes if x.kind == "copies-cut"]
    if cut:
        return cut[0] / 2
    if rep is None or schedule.repetend_start is None or schedule.microbatches < rep.nr:
        return None
    return float(rep.period)


def tessel_row(spec: Spec, n: int, *, solver: str = "auto", time_limit: float | None = None,
               progress=None) -> tuple[Row, Schedule | None]:
    """Tessel's row, from `tessel_dsl.search.driver.search`."""
    try:
        from tessel_dsl.search.driver import search
    except ImportError as e:  # the search module is optional for comparing baselines
        return _failed(spec, "tessel", "n/a", f"search unavailable ({e})", n), None
    t0 = time.perf_counter()
    try:
        result = search(spec, microbatches=n, solver=solver, time_limit=time_limit, progress=progress)
    except TesselError as e:
        return _failed(spec, "tessel", "error", str(e).splitlines()[0], n), None
    seconds = time.perf_counter() - t0
    schedule = result.schedule
    info = result.info
    period = running_period(spec, schedule, info)
    row = _row(spec, schedule, period, seconds=getattr(info, "seconds", seconds), proven=getattr(info, "proven", None),
               extra={"nr": getattr(info, "nr", 0), "solver": getattr(info, "solver", ""),
                      "method": getattr(info, "method", "")})
    return row, schedule


def schedule_row(spec: Spec, schedule: Schedule, label: str | None = None) -> Row:
    """The row of a given schedule (e.g. one read from a plan file)."""
    period = running_period(spec, schedule)
    row = _row(spec, schedule, period)
    return replace(row, schedule=label) if label else row


def to_row(spec: Spec, n: int, *, hint: Schedule | None = None, solver: str = "auto",
           time_limit: float | None = None, effort: float | None = TO_EFFORT, workers: int | None = None) -> Row:
    """The time-optimal schedule's row (no steady state: TO is a finite schedule), solved with the
    deterministic budget `effort` and, only if given, a wall-clock `time_limit`; `extra["notes"]`
    (notes as data, `search/notes.py`) say whether it is proven optimal or what cut it."""
    from tessel_dsl.search.optimal import OptimalTimeout, optimal

    try:
        result = optimal(spec, n, solver=solver, time_limit=time_limit, effort=effort, hint=hint, workers=workers)
    except OptimalTimeout as e:
        return _failed(spec, "to", "timeout", str(e), n)
    except TesselError as e:
        return _failed(spec, "to", "error", str(e).splitlines()[0], n)
    return _row(spec, result.schedule, None, proven=result.info.proven, seconds=result.info.seconds,
                extra={"solver": result.info.solver, "notes": [to_json(x) for x in result.info.notes]})


def compare(spec: Spec, microbatches: int | None = None, *, schedules: tuple[str, ...] = SCHEDULES,
            to: bool = False, to_time_limit: float | None = None, to_effort: float | None = TO_EFFORT,
            solver: str = "auto",
            time_limit: float | None = None, steady_n: int = STEADY_N, progress=None,
            given: tuple[tuple[str, Schedule], ...] = ()) -> list[Row]:
    """Rows for `given` (label, schedule) pairs, `schedules` (Tessel and/or baselines) and, with
    `to`, the time-optimal one (budget `to_effort`; a wall-clock limit only if `to_time_limit`).

    When TO ran, each other row gets `gap_to_optimal` = makespan / TO makespan - 1.
    """
    n = spec.microbatches if microbatches is None else microbatches
    rows: list[Row] = [schedule_row(spec, sched, label) for label, sched in given]
    found: list[Schedule] = [sched for _, sched in given if sched.microbatches == n]
    for name in schedules:
        if name == "tessel":
            row, sched = tessel_row(spec, n, solver=solver, time_limit=time_limit, progress=progress)
        elif name in BASELINES:
            row, sched = baseline_row(spec, name, n, steady_n)
        else:
            raise TesselError(f"unknown schedule {name!r} (known: {', '.join(SCHEDULES)}, to)")
        rows.append(row)
        if sched is not None and not (name in IGNORES_MEMORY and row.over_memory):
            found.append(sched)
    if to:
        hint = min(found, key=lambda s: s.makespan(spec), default=None)
        best = to_row(spec, n, hint=hint, solver=solver, time_limit=to_time_limit, effort=to_effort)
        rows.append(best)
        if best.status == "ok" and best.makespan:
            rows = [r if r.makespan is None or r is best else
                    _with_gap(r, r.makespan / best.makespan - 1.0) for r in rows]
    return rows


def _with_gap(row: Row, gap: float) -> Row:
    return replace(row, gap_to_optimal=gap)


def best_baseline(rows: list[Row]) -> Row | None:
    """The applicable baseline with the shortest makespan: built for this placement and within
    memory M (a baseline that ignores M and overflows it does not count)."""
    ok = [r for r in rows if r.schedule in BASELINES and r.status == "ok" and not r.over_memory
          and r.makespan is not None]
    return min(ok, key=lambda r: (r.makespan, r.schedule), default=None)


def versus_best(rows: list[Row]) -> tuple[Row | None, Row | None, float | None]:
    """(Tessel's row, the best applicable baseline's row, Tessel makespan / baseline's - 1)."""
    tessel = next((r for r in rows if r.schedule == "tessel" and r.status == "ok"), None)
    best = best_baseline(rows)
    ratio = None
    if tessel is not None and best is not None and best.makespan:
        ratio = tessel.makespan / best.makespan - 1.0
    return tessel, best, ratio
