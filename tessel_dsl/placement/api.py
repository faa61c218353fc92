"""`plan_model`: from an `nn.Module` and one example micro-batch to the plan, its spec and its
block binding, written side by side so that `Pipeline` needs nothing else."""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from tessel_dsl.errors import TesselError
from tessel_dsl.placement.choose import Choice, Outcome
from tessel_dsl.placement.costs import Profile
from tessel_dsl.units import MEMORY_UNITS


def parse_bytes(text: str | int, what: str = "memory") -> int:
    """``80GB`` -> 80e9 (an int is taken as bytes)."""
    if isinstance(text, int):
        return text
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)\s*", str(text))
    if not m or (m.group(2) or "B") not in MEMORY_UNITS:
        raise TesselError(f"{what}: expected a size such as 80GB, got {text!r}")
    return int(float(m.group(1)) * MEMORY_UNITS[m.group(2) or "B"])


@dataclass
class PlanResult:
    """What `plan_model` found: the plan, the candidates' table, the profile and the files."""

    plan: object
    outcome: Outcome
    profile: Profile
    blocks: dict[str, list[str]]
    spec_text: str
    files: dict[str, Path]
    spread_overhead: float = 0.0     # seconds a spread block was costed beyond compute and collectives
    runs: tuple = ()                 # the `from_run.RunCosts` each run report gave, in the order given

    @property
    def run(self):
        """The last run report's costs (None without one)."""
        return self.runs[-1] if self.runs else None

    @property
    def best(self) -> Choice:
        return self.outcome.best


def plan_model(model, example_batch, *, devices: int, memory: str | int = "80GB", reserve: str | int = 0,
               microbatches: int | None = None, budget: float | None = None, output: str | os.PathLike | None = None,
               device=None, repeats: int = 5, warmup: int = 2, units: list[list[str]] | None = None,
               baselines: bool = True, profile: Profile | None = None, progress=None,
               time_limit: float | None = None, link_bandwidth: str | float | None = None,
               link_latency: float | None = None, spread_overhead: float | None = None,
               dense_embedding_grad: bool = False, from_run: dict | list[dict] | None = None,
               effort: float = 0.0) -> PlanResult:
    """Profile `model` on `example_batch` (one micro-batch of what its forward takes), generate the
    candidate placements over `devices` devices with `memory` each (less `reserve`: CUDA context,
    buffers), search each against the baselines and return the shortest plan that fits.

    `microbatches` defaults to 4 x devices. Every solve inside a search has its own deterministic
    budget, so without `time_limit` the plan depends on the profile and these options alone, on a
    busy machine or an idle one. `time_limit` (wall-clock seconds for all the searches together,
    shared evenly) bounds how long planning takes, and then the plan may differ between runs;
    `budget` is its former name, still accepted. With
    `output` (``plan.json``), writes the plan there, its spec beside it (``plan.tsl``) and the
    binding (``plan.blocks.json``, which ``Pipeline("plan.json", model, loss_fn)`` reads from beside
    the plan). A `profile` given is used instead of profiling. `link_bandwidth` (bytes per second
    a device sends at: a number or ``300GB``) and `link_latency` (seconds per message or collective
    step) time the collectives of blocks spread over devices; each defaults to
    `costs.default_links` for the device profiled on. `spread_overhead` (seconds, default 0) is
    added to each spread block's forward and backward per micro-batch: what such a block was
    measured to take beyond its compute and collectives. `dense_embedding_grad=True` costs a
    spread embedding's weight gradient whole on each device (see `candidates.candidates`).

    `from_run` is a run report of a plan `tessel plan` wrote (`tessel run --json`, a `Pipeline`
    run's summary), or a list of them: each candidate that ran is costed with its measured block
    times and searched again on them (a later report of the same candidate replaces an earlier
    one), and, when no `spread_overhead` is given, the largest spread overhead the reports measured
    is used for every candidate (`placement.from_run`). Giving the runs of every candidate tried so
    far keeps the choice from moving to whichever one was costed from the profile alone. `effort` is every
    candidate search's `tessel search --effort` (the whole schedule re-solved from the one found).
    """
    from tessel_dsl.placement.candidates import candidates
    from tessel_dsl.placement.choose import choose
    from tessel_dsl.plan import make_plan

    if devices < 1:
        raise TesselError(f"devices must be at least 1, got {devices}")
    capacity = parse_bytes(memory) - parse_bytes(reserve, "reserve")
    if capacity <= 0:
        raise TesselError(f"no memory left: {memory} less a reserve of {reserve}")
    n = microbatches or 4 * devices
    if profile is None:
        from tessel_dsl.placement.profile import profile_model

        if progress:
            progress("profiling")
        profile = profile_model(model, example_batch, device=device, repeats=repeats, warmup=warmup, units=units)
    links = _links(profile.device, link_bandwidth, link_latency, spread_overhead)
    try:
        cands = candidates(profile, devices, capacity, n, links=links, dense_embedding_grad=dense_embedding_grad)
        runs: tuple = ()
        reports = [from_run] if isinstance(from_run, dict) else list(from_run or ())
        if reports:
            from tessel_dsl.placement.from_run import from_report

            spread_of = {c.name: c.spread for c in cands}
            runs = tuple(from_report(r, spread_of, where=f"run report {i + 1} of {len(reports)}" if len(reports) > 1
                                     else "the run report") for i, r in enumerate(reports))
            over = [r.spread_overhead for r in runs if r.spread_overhead is not None]
            if spread_overhead is None and over:
                links = _links(profile.device, link_bandwidth, link_latency, max(over))
            cands = candidates(profile, devices, capacity, n, links=links, dense_embedding_grad=dense_embedding_grad,
                               measured={r.candidate: r.block_seconds for r in runs})
    except ValueError as e:
        raise TesselError(str(e)) from None
    if budget is not None and time_limit is not None:
        raise TesselError("give time_limit or its former name budget, not both")
    outcome = choose(cands, n, budget=time_limit if time_limit is not None else budget, baselines=baselines,
                     progress=progress, effort=effort)
    if outcome.best is None:
        least = min((r for r in outcome.rows if r.gb), key=lambda r: r.peak_gb, default=None)
        need = f"; the least any needs is {least.peak_gb:.3g} GB ({least.schedule} on {least.candidate})" if least else ""
        raise TesselError(f"no candidate fits in {capacity / 1e9:.3g} GB per device{need}: use more devices "
                          f"or fewer micro-batches")
    plan = make_plan(outcome.spec, outcome.schedule, outcome.info)
    cand = outcome.candidate
    files: dict[str, Path] = {}
    if output is not None:
        files = write(plan, cand.text, cand.blocks, Path(output), profile)
    return PlanResult(plan, outcome, profile, cand.blocks, cand.text, files, links.block_overhead, runs)


def _links(device: str, bandwidth, latency, overhead=None):
    from tessel_dsl.placement.costs import Links, default_links

    base = default_links(device)
    bw = base.bandwidth if bandwidth is None else (
        float(bandwidth) if isinstance(bandwidth, (int, float)) else parse_bytes(bandwidth, "link bandwidth"))
    lat = base.latency if latency is None else float(latency)
    try:
        return Links(bw, lat, float(overhead or 0.0))
    except ValueError as e:
        raise TesselError(str(e)) from None


def paths(output: Path) -> dict[str, Path]:
    stem = output.name.removesuffix(".json")
    return {"plan": output, "spec": output.with_name(stem + ".tsl"),
            "blocks": output.with_name(stem + ".blocks.json"), "profile": output.with_name(stem + ".profile.json")}


def write(plan, spec_text: str, blocks: dict[str, list[str]], output: Path, profile: Profile) -> dict[str, Path]:
    """The plan (validated as `tessel search` writes it), its spec, its binding and the profile it
    came from (`--profile` reads it back); each file is written atomically, the plan last, so a
    plan on disk always has the others beside it."""
    from tessel_dsl.fileio import write_text_atomic
    from tessel_dsl.plan import plan_from_json, plan_to_json, save_plan

    plan_from_json(plan_to_json(plan), str(output))  # what Pipeline will load: check it first
    where = paths(output)
    write_text_atomic(where["spec"], spec_text)
    write_text_atomic(where["blocks"], json.dumps(blocks, indent=1) + "\n")
    write_text_atomic(where["profile"], json.dumps(profile.to_json(), indent=1) + "\n")
    save_plan(plan, where["plan"])
    return where


def table_lines(outcome: Outcome) -> list[str]:
    """The candidates' table as plain text, the winner marked with *."""
    head = f"  {'candidate':<15} {'schedule':<17} {'ms/iter':>10} {'GB/device':>10}  fits"
    out = [head]
    for r in outcome.rows:
        mark = "*" if r is outcome.best else " "
        ms = f"{r.ms:.4g}" if r.ms is not None else "-"
        gb = f"{r.peak_gb:.3g}" if r.gb else "-"
        fits = "yes" if r.fits else "no" + (f" ({r.reason})" if r.reason else "")
        out.append(f"{mark} {r.candidate:<15} {r.schedule:<17} {ms:>10} {gb:>10}  {fits}")
    return out
