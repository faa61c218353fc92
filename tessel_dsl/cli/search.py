"""`tessel search`: find a Tessel schedule for a spec and write the plan file."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from tessel_dsl.cli.app import app, console, err_console, parse_sets, show_warnings
from tessel_dsl.search.notes import render as render_notes
from tessel_dsl.serialize import to_json


def in_time(s: dict, units: int) -> str:
    """`units` of the spec's time in its own terms (from a `summary`): ``12`` for plain units,
    ``12 (120 ms)`` when the spec declares a time resolution."""
    from tessel_dsl.units import show_time

    if s["time_unit_seconds"] is None:
        return str(units)
    return f"{units} ({show_time(units, s['time_unit_seconds'], s['time_unit'])})"


def in_memory(s: dict, units: int) -> str:
    """`units` of the spec's memory in its own terms: ``6 (60 GB)`` with a memory resolution."""
    from tessel_dsl.units import show_memory

    if s.get("memory_unit_bytes") is None:
        return str(units)
    return f"{units} ({show_memory(units, s['memory_unit_bytes'], s['memory_unit'])})"


def summary(spec, plan) -> dict:
    """The numbers `tessel search` reports, as plain data (the `--json` output)."""
    from tessel_dsl.search.baselines.compare import running_period

    info, sched = plan.search, plan.schedule
    per_mb = info.period / info.repetend_copies
    bound = max(info.lower_bound, info.memory_bound)  # no schedule runs below either (docs/search.md)
    gap = (per_mb - bound) / bound if bound and info.period else 0.0
    return {
        "spec": spec.name,
        "mode": spec.mode.value,
        "microbatches": sched.microbatches,
        "period": info.period,
        "repetend_copies": info.repetend_copies,
        "period_per_microbatch": per_mb,
        # What runs at this N, per micro-batch, which may not be the repetend kept for other N
        # (a baseline's order that beat the extension, or N below N_R); None: no steady state.
        "running_period": running_period(spec, sched, info),
        "lower_bound": info.lower_bound,
        "memory_bound": info.memory_bound,
        "gap": round(gap, 6),
        "nr": info.nr,
        "makespan": sched.makespan(spec),
        "makespan_bound": info.makespan_bound,
        "makespan_gap": sched.makespan(spec) - info.makespan_bound if info.makespan_bound else None,
        "time_unit": spec.units.time_label,
        "time_unit_seconds": spec.units.time_seconds if spec.units.time_label != "unit" else None,
        "memory_unit": spec.units.memory_label,
        "memory_unit_bytes": spec.units.memory_bytes if spec.units.memory_label != "unit" else None,
        "bubble": round(sched.bubble_rate(spec), 6),
        "peak_memory": list(plan.peak_memory),
        "memory": spec.memory,
        "capacities": list(spec.capacities),
        "reserved_per_device": [spec.reserved_on(d) for d in range(spec.devices)],
        "search_seconds": round(info.seconds, 3),
        "solver": info.solver,
        "method": info.method,
        "proven": info.proven,
        "period_proven": info.period_proven,
        "copies": info.copies,
        "candidates_tried": info.candidates_tried,
        "candidates_pruned": info.candidates_pruned,
        # what reading the spec said without refusing it: quantities rounded, sources undeclared
        "spec_warnings": [str(w) for w in spec.warnings],
        "note": render_notes(info.notes),
        "notes": [to_json(x) for x in info.notes],
    }


def _num(x: float) -> int | float:
    """A bound or a period as a person reads it: whole, or to two decimals (a memory bound is a
    fraction such as 2560/3)."""
    return int(x) if x == int(x) else round(x, 2)


def _period(s: dict) -> str:
    if not s["period"]:
        if s["method"] == "baseline":  # a baseline with no fixed-period steady state (the note names it)
            return "- (no repetend: the plan runs a baseline's order)"
        return "- (no repetend; solved directly)"
    verdict = "[green]optimal[/]" if s["gap"] == 0 else f"[yellow]{s['gap'] * 100:.1f}% above[/]"
    period = in_time(s, s["period"])
    if s["repetend_copies"] > 1:
        period += f" for {s['repetend_copies']} micro-batches ({s['period_per_microbatch']:g} each)"
    bound = in_time(s, s["lower_bound"])
    if s.get("memory_bound", 0) > s["lower_bound"]:
        bound = f"{in_time(s, _num(s['memory_bound']))} from memory, {bound} from work"
    return f"{period}  (lower bound {bound}: {verdict})"


def _running(s: dict) -> str | None:
    """The period per micro-batch at this N, where it is not the repetend's."""
    run = s["running_period"]
    if s["period"] and run is not None and abs(run - s["period_per_microbatch"]) < 1e-9:
        return None  # the repetend row says it
    if run is None:
        if not s["period"]:
            return None
        return "- (no steady state at this N: the row below is the repetend kept for larger N)"
    bound = max(s["lower_bound"], s.get("memory_bound", 0))
    verdict = "at the bound" if bound and run <= bound + 1e-9 else (
        f"{(run - bound) / bound * 100:.1f}% above the bound {in_time(s, _num(bound))}" if bound else "")
    return f"{in_time(s, _num(run))} per micro-batch  ({verdict}; the row below is the repetend kept for other N)"


def _makespan(s: dict) -> str:
    if not s["makespan_bound"]:
        return in_time(s, s["makespan"])
    gap = "reached" if s["makespan_gap"] == 0 else f"{in_time(s, s['makespan_gap'])} above"
    return f"{in_time(s, s['makespan'])}  (lower bound {in_time(s, s['makespan_bound'])}: {gap})"


def _proven(s: dict) -> str:
    text = "yes" if s["proven"] else "[yellow]no[/]"
    if s["period_proven"]:
        copies = "once" if s["copies"] == 1 else f"{s['copies']} times or fewer"
        return text + f"  (period minimal among repetends that hold each block {copies})"
    return text + ("  (period not proven minimal)" if s["period"] else "")


# The rows of the summary table: (label, text from the summary dict, or None to leave the row out).
ROWS = (
    ("period at this N", _running),
    ("repetend period t_R", _period),
    ("micro-batches in repetend N_R", lambda s: str(s["nr"]) if s["nr"] else "-"),
    ("makespan", _makespan),
    ("bubble rate", lambda s: f"{s['bubble'] * 100:.2f}%"),
    ("peak memory per device", lambda s: " ".join(in_memory(s, m) for m in s["peak_memory"])
     + (f"  (M={in_memory(s, s['capacities'][0])})" if len(set(s["capacities"])) == 1
        else f"  (capacities {' '.join(in_memory(s, m) for m in s['capacities'])})")),
    ("search", lambda s: f"{s['search_seconds']:.2f}s of CPU, {s['solver']}/{s['method']}, "
                         f"{s['candidates_tried']} tried, {s['candidates_pruned']} pruned"),
    ("proven", _proven),
    ("note", lambda s: s["note"] or None),
    ("spec rounded", lambda s: _rounded(s["spec_warnings"])),
)


def _rounded(warnings: list[str]) -> str | None:
    n = sum("note[rounded]" in w for w in warnings)
    return f"{n} quantit{'y' if n == 1 else 'ies'} rounded to the resolution (each listed above)" if n else None


def render(s: dict, out: Path) -> None:
    """The rich summary table."""
    from rich.table import Table

    table = Table(title=f"tessel search: {s['spec']} ({s['mode']}, N={s['microbatches']})", show_header=False,
                  title_justify="left")
    table.add_column(style="bold")
    table.add_column()
    for label, text in ROWS:
        value = text(s)
        if value is not None:
            table.add_row(label, value)
    console.print(table)
    console.print(f"plan written to [bold]{out}[/]", highlight=False)


@app.command()
def search(
    spec: Path = typer.Argument(..., help="The placement spec (.tsl) to schedule."),
    output: Optional[Path] = typer.Option(
        None, "--output", "-o", metavar="PATH",
        help="Plan file to write (default: `<spec stem>.plan.json` in the current directory); written "
             "atomically, never partially."),
    set_: Optional[list[str]] = typer.Option(None, "--set", metavar="K=V",
                                             help="Override a `param` of the spec (repeatable)."),
    mode: Optional[str] = typer.Option(None, "--mode", metavar="train|infer",
                                       help="Override the spec's mode (`infer` keeps the forward blocks only)."),
    microbatches: Optional[int] = typer.Option(None, "--microbatches", "-n", min=1, metavar="N",
                                               help="How many micro-batches to schedule (default: the spec's "
                                                    "`microbatches`)."),
    solver: str = typer.Option("auto", "--solver", metavar="auto|cpsat|z3",
                               help="Constraint solver (auto = `cpsat`)."),
    method: str = typer.Option("auto", "--method", metavar="auto|enumerate|modulo",
                               help="How the repetend is found: auto = a schedule built without a solver when "
                                    "it reaches both lower bounds, else `modulo`."),
    time_limit: Optional[float] = typer.Option(None, "--time-limit", min=0.01, metavar="S",
                                               help="Stop after about S seconds and return the best valid "
                                                    "schedule found; the summary then says `proven: no` and why."),
    effort: float = typer.Option(0.0, "--effort", min=0.0, metavar="E",
                                 help="Spend E more units of deterministic solver budget (about seconds of one "
                                      "core) re-solving the whole schedule for this N, warm-started from the one "
                                      "found, E more on the model with memory as holding cuts, and 1 + E a window where memory binds "
                                      "or a block runs on several devices (a second sweep of windows); kept only when shorter (default 0: the search alone). Any E above 0 "
                                      "also tries repetends of two micro-batches on chains with an embedding or "
                                      "head beside a stage, split backward or blocks on every device (tens of "
                                      "seconds of CPU at 8 devices)."),
    as_json: bool = typer.Option(False, "--json",
                                 help="Print the summary as JSON only (period, the period that runs at this N, lower bound, memory bound, gap "
                                      "to the larger of the two, N_R, makespan, makespan bound and gap, time "
                                      "unit, bubble, peak memory, search time, solver, method, proven, period "
                                      "proven, copies, note (the notes worded), notes (each a `kind` and its "
                                      "`values`, as the plan stores them), output)."),
) -> None:
    """Search a Tessel schedule (repetend + warmup/cooldown) and write the plan."""
    from tessel_dsl.cli.progress import LiveProgress
    from tessel_dsl.errors import PlanError
    from tessel_dsl.lang.parser import parse_file
    from tessel_dsl.plan import make_plan, save_plan
    from tessel_dsl.plan_check import validate_plan
    from tessel_dsl.search.driver import METHODS
    from tessel_dsl.search.driver import search as run_search
    from tessel_dsl.search.solvers import SOLVERS

    if mode is not None and mode not in ("train", "infer"):
        raise typer.BadParameter(f"expected train or infer, got {mode!r}", param_hint="--mode")
    if solver not in ("auto",) + SOLVERS:
        raise typer.BadParameter(f"expected auto, {', '.join(SOLVERS)}; got {solver!r}", param_hint="--solver")
    if method not in ("auto",) + METHODS:
        raise typer.BadParameter(f"expected auto, {', '.join(METHODS)}; got {method!r}", param_hint="--method")
    parsed = parse_file(spec, sets=parse_sets(set_) or None, mode=mode)
    show_warnings(parsed)
    out = output if output is not None else Path(f"{spec.stem}.plan.json")
    with LiveProgress(err_console) as progress:
        result = run_search(parsed, microbatches=microbatches, solver=solver, method=method,
                            time_limit=time_limit, progress=progress, effort=effort)
    plan = make_plan(parsed, result.schedule, result.info)
    try:
        # The checks `load_plan` runs, so that no verb refuses a plan this one wrote.
        validate_plan(plan, origin="the searched plan")
    except PlanError as e:
        raise PlanError(f"{e}; {out} was not written (a search bug: please report it with the spec)") from None
    save_plan(plan, out)
    s = summary(parsed, plan)
    if as_json:
        typer.echo(json.dumps({**s, "output": str(out)}, indent=1))
    else:
        render(s, out)
