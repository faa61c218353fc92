"""Search every candidate, set each against the baselines that apply to its placement, and keep
the shortest schedule that fits memory.

Every row is one schedule on one candidate: Tessel's search, and each baseline of
`tessel_dsl.search.baselines` the placement admits, all at the plan's N micro-batches. Times are
the makespan of one iteration (N micro-batches) in ms; memory is each device's peak: activations
at the schedule's worst moment plus the weights, gradients and optimizer state it holds.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

from tessel_dsl.errors import TesselError
from tessel_dsl.placement.candidates import Candidate
from tessel_dsl.schedule import Schedule


@dataclass(frozen=True)
class Choice:
    """One row: a schedule on a candidate placement (or why there is none)."""

    candidate: str
    schedule: str
    ms: float | None = None
    gb: tuple[float, ...] = ()     # per device, activations at peak + reserve
    fits: bool = False
    reason: str = ""               # why there is no schedule, or why it does not fit
    seconds: float = 0.0           # search time

    @property
    def peak_gb(self) -> float:
        return max(self.gb, default=0.0)


@dataclass
class Outcome:
    rows: list[Choice]
    best: Choice | None
    spec: object = None             # the winner's Spec
    schedule: Schedule | None = None
    info: object = None             # its SearchInfo (a baseline's is empty)
    candidate: Candidate | None = None
    why: str = ""
    # (candidate, schedule) of every row with a schedule -> (its Spec, the Schedule): what a
    # caller needs to simulate the alternatives the winner beat
    schedules: dict = None


def _row(cand: Candidate, spec, sched: Schedule, label: str, seconds: float = 0.0) -> Choice:
    res_ms = spec.units.time_seconds * 1e3
    peak = sched.peak_memory(spec)
    gb = tuple(round((peak[d] + spec.reserved_on(d)) * spec.units.memory_bytes / 1e9, 6)
               for d in range(spec.devices))
    fits = sched.fits_memory(spec) and cand.weights_fit
    reason = "" if fits else ("weights and optimizer state alone exceed a device" if not cand.weights_fit
                              else "activations exceed the room left on a device")
    return Choice(cand.name, label, round(sched.makespan(spec) * res_ms, 6), gb, fits, reason, seconds)


def choose(cands: list[Candidate], microbatches: int, *, budget: float | None = None,
           baselines: bool = True, progress=None, effort: float = 0.0) -> Outcome:
    """Search every candidate. `budget` is a wall-clock limit, seconds for all the searches
    together, shared evenly (`plan_model`'s `time_limit`); without one each search runs to its
    end under its solves' deterministic budgets, and the result depends on the candidates alone.
    `effort` is each search's `tessel search --effort` (its whole schedule re-solved)."""
    from tessel_dsl.lang.parser import parse
    from tessel_dsl.search.baselines import BASELINES
    from tessel_dsl.search.baselines.compare import baseline_row
    from tessel_dsl.search.driver import search

    rows: list[Choice] = []
    found: dict[tuple[str, str], tuple] = {}
    per = budget / len(cands) if budget else None
    for cand in cands:
        if progress:
            progress(f"searching {cand.name}")
        if cand.refused:
            rows.append(Choice(cand.name, "-", reason=cand.refused))
            continue
        if not cand.weights_fit:
            need = max(cand.reserve_bytes) / 1e9
            rows.append(Choice(cand.name, "-", None, tuple(r / 1e9 for r in cand.reserve_bytes), False,
                               f"weights and optimizer state alone need {need:.3g} GB on a device"))
            continue
        try:
            spec = parse(cand.text, f"<{cand.name}>")
        except TesselError as e:  # e.g. the weights fill a device, leaving no room for one micro-batch
            rows.append(Choice(cand.name, "-", None, tuple(r / 1e9 for r in cand.reserve_bytes), False,
                               _message(e)))
            continue
        t0 = time.perf_counter()
        try:
            result = search(spec, microbatches=microbatches, time_limit=per, effort=effort)
        except TesselError as e:
            rows.append(Choice(cand.name, "tessel", reason=str(e).splitlines()[0]))
        else:
            row = _row(cand, spec, result.schedule, "tessel", time.perf_counter() - t0)
            rows.append(row)
            found[(cand.name, "tessel")] = (spec, result.schedule, result.info, cand)
        if not baselines:
            continue
        for name in BASELINES:
            _brow, sched = baseline_row(spec, name, microbatches, steady_n=2)
            if sched is None:
                continue  # the placement does not admit it
            rows.append(_row(cand, spec, sched, name))
            found[(cand.name, name)] = (spec, sched, None, cand)
    fitting = [r for r in rows if r.fits and r.ms is not None]
    # shortest first; among equals Tessel's own schedule, then the candidate listed first
    order = {c.name: i for i, c in enumerate(cands)}
    best = min(fitting, key=lambda r: (r.ms, r.schedule != "tessel", order[r.candidate]), default=None)
    out = Outcome(rows, best, schedules={k: (v[0], v[1]) for k, v in found.items()})
    if best is not None:
        out.spec, out.schedule, out.info, out.candidate = found[(best.candidate, best.schedule)]
        out.why = _why(rows, best)
    return out


def _message(e: TesselError) -> str:
    """The diagnostic's text, without the generated spec's file:line:col (it names no file)."""
    import re

    return re.sub(r"^<[^>]*>:\d+:\d+: (error\[[^\]]*\]: )?", "", str(e).splitlines()[0])


def _why(rows: list[Choice], best: Choice) -> str:
    others = [r for r in rows if r.ms is not None and r is not best]
    faster_unfit = [r for r in others if r.ms < best.ms and not r.fits]
    beaten = [r for r in others if r.fits]
    parts = [(f"{best.schedule} on {best.candidate}: {best.ms:.4g} ms per iteration, at most "
             f"{best.peak_gb:.3g} GB per device")]
    if beaten:
        runner = min(beaten, key=lambda r: r.ms)
        gain = runner.ms / best.ms - 1 if best.ms else 0.0
        parts.append(f"the next that fits is {runner.schedule} on {runner.candidate} at {runner.ms:.4g} ms "
                     f"({gain * 100:.1f}% longer)")
    if faster_unfit:
        quick = min(faster_unfit, key=lambda r: r.ms)
        parts.append(f"{quick.schedule} on {quick.candidate} would take {quick.ms:.4g} ms but needs "
                     f"{quick.peak_gb:.3g} GB on a device")
    return "; ".join(parts)
