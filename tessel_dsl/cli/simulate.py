"""`tessel simulate`: run a plan's programs in the SimPy model, print the report, gate CI."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from tessel_dsl.cli.app import app, console, err_console, parse_sets
from tessel_dsl.units import memory_in


def parse_ratio(text: str, option: str) -> float:
    """``5%`` or ``0.05`` as a ratio; anything else is a usage error."""
    raw = text.strip()
    try:
        value = float(raw[:-1]) / 100.0 if raw.endswith("%") else float(raw)
    except ValueError:
        raise typer.BadParameter(f"expected a ratio like 0.05 or 5%, got {text!r}", param_hint=option) from None
    if not 0.0 <= value <= 1.0:
        raise typer.BadParameter(f"must be between 0 and 1 (0% and 100%), got {text!r}", param_hint=option)
    return value


def load_source(path: Path, *, microbatches: int | None, sets: dict[str, str], mode: str | None,
                blocking: bool | None, time_limit: float | None = None):
    """A Plan from a plan file (re-extended to `microbatches` if asked) or from a spec (searched)."""
    from tessel_dsl.plan import load_plan, make_plan

    if path.suffix == ".json":
        if sets or mode:
            raise typer.BadParameter("--set and --mode apply to a .tsl spec, not to a plan file",
                                     param_hint="--set/--mode")
        plan = load_plan(path)
        if microbatches is not None and microbatches != plan.schedule.microbatches:
            from tessel_dsl.plan_check import check_microbatch_count
            from tessel_dsl.search.finish import replan
            from tessel_dsl.simulator import check_size

            # Both before the re-extension, whose cost grows with N: what a plan may hold at all,
            # then what the simulator takes.
            check_microbatch_count(plan.spec, microbatches)
            check_size(plan.spec, microbatches)
            plan = replan(plan, microbatches, blocking=blocking)  # also handles N below N_R
        return plan
    from tessel_dsl.lang.parser import parse_file
    from tessel_dsl.search.driver import search

    spec = parse_file(path, sets=sets or None, mode=mode)
    from tessel_dsl.simulator import check_size

    check_size(spec, spec.microbatches if microbatches is None else microbatches)
    with err_console.status(f"searching a schedule for {spec.name}...") as status:
        def progress(p) -> None:
            status.update(f"searching {spec.name}: {p.phase}, period {p.period or '-'} "
                          f"(lower bound {p.lower_bound}), {p.tried} candidates, {p.elapsed:.0f}s")

        result = search(spec, microbatches=microbatches, progress=progress, time_limit=time_limit)
    return make_plan(spec, result.schedule, result.info, blocking=bool(blocking))


@app.command()
def simulate(
    source: Path = typer.Argument(..., help="A plan file (plan.json) or a spec (.tsl, searched first)."),
    microbatches: Optional[int] = typer.Option(None, "--microbatches", "-n", min=1, metavar="N",
                                               help="Micro-batches; a plan is re-extended from its repetend, a "
                                                    "spec is searched for N."),
    blocking: Optional[bool] = typer.Option(None, "--blocking/--non-blocking",
                                            help="Send/recv mode (default: the mode the plan was lowered in)."),
    latency: Optional[float] = typer.Option(None, "--link-latency", min=0.0, metavar="X",
                                            help="Link latency in time units (default: the spec's `link`, else 0)."),
    bandwidth: Optional[float] = typer.Option(None, "--link-bandwidth", min=0.0, metavar="Y",
                                              help="Link bandwidth in bytes per time unit (0 = unlimited; default: "
                                                   "the spec's, else unlimited)."),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON instead of tables (adds "
                                                       "`failures`: the gate messages)."),
    trace: Optional[Path] = typer.Option(None, "--trace", metavar="FILE",
                                         help="Write a Chrome/Perfetto trace here: one process per device, "
                                              "compute and comm threads."),
    svg: Optional[Path] = typer.Option(None, "--svg", metavar="FILE", help="Write the timeline as an SVG picture here."),
    max_bubble: Optional[str] = typer.Option(None, "--max-bubble", metavar="R",
                                             help="Fail (exit 1) if the bubble rate is above R (`0.05` or `5%`)."),
    max_memory: Optional[float] = typer.Option(None, "--max-memory", min=0.0, metavar="X",
                                               help="Fail (exit 1) if any device's peak memory is above X (memory "
                                                    "units)."),
    width: Optional[int] = typer.Option(None, "--width", min=40, metavar="W", help="Report width in columns."),
    no_timeline: bool = typer.Option(False, "--no-timeline", help="Leave the timeline out of the report."),
    sets: Optional[list[str]] = typer.Option(None, "--set", metavar="K=V",
                                             help="Override a spec parameter (spec input only; repeatable)."),
    mode: Optional[str] = typer.Option(None, "--mode", metavar="train|infer", help="The spec's mode (spec input only)."),
    time_limit: Optional[float] = typer.Option(None, "--time-limit", min=0.0, metavar="S",
                                               help="Seconds for the search (spec input only; the best schedule "
                                                    "found so far)."),
) -> None:
    """Simulate a plan (or search a spec first) and report bubbles, memory, comm and deadlocks."""
    from rich.console import Console
    from rich.markup import escape

    from tessel_dsl.ir import Link
    from tessel_dsl.simulator import simulate as run_simulation
    from tessel_dsl.simulator import summary_table
    from tessel_dsl.views.timeline import from_rows, render, write_svg
    from tessel_dsl.views.trace import compute_spans, transfer_spans, write_trace

    bubble_limit = parse_ratio(max_bubble, "--max-bubble") if max_bubble is not None else None
    if mode is not None and mode not in ("train", "infer"):
        raise typer.BadParameter(f"expected train or infer, got {mode!r}", param_hint="--mode")
    plan = load_source(source, microbatches=microbatches, sets=parse_sets(sets), mode=mode, blocking=blocking,
                       time_limit=time_limit)
    spec = plan.spec
    link = None
    if latency is not None or bandwidth is not None:
        link = Link(latency if latency is not None else spec.link.latency,
                    bandwidth if bandwidth is not None else spec.link.bandwidth)
    report = run_simulation(plan, link=link, blocking=blocking)

    if trace is not None:
        spans = compute_spans(report.timeline, {b.name: b.kind.value for b in spec.blocks})
        spans += transfer_spans(report.comm)
        write_trace(trace, spans, time_scale=spec.units.time_seconds, devices=spec.devices,
                    title=f"{spec.name} / {report.schedule} (simulated)",
                    metadata={"makespan": report.makespan, "bubble": report.bubble})
    tl = from_rows(spec, report.timeline, plan.schedule,
                   title=f"simulated timeline ({report.schedule}, N={report.microbatches})")
    if svg is not None:
        write_svg(tl, svg)

    failures = report.problems()
    if bubble_limit is not None and report.bubble > bubble_limit + 1e-12:
        failures.append(f"bubble rate {report.bubble:.2%} is above --max-bubble {bubble_limit:.2%}")
    peak = max(report.peak_memory, default=0)
    if max_memory is not None and peak > max_memory:
        shown = "" if spec.units.memory_label == "unit" else f" ({memory_in(spec.units, peak)})"
        failures.append(f"peak memory {peak}{shown} on device {report.peak_memory.index(peak)} is above "
                        f"--max-memory {max_memory:g}")

    if as_json:
        data = report.to_json()
        data["failures"] = failures
        print(json.dumps(data, indent=1))
    else:
        out = Console(width=width) if width else console
        for table in summary_table(report):
            out.print(table)
        if report.deadlock is not None:
            out.print(f"[bold red]{escape(str(report.deadlock))}[/]", highlight=False)
        for o in report.overflows[:5]:
            out.print(f"[red]{escape(str(o))}[/]", highlight=False)
        if not no_timeline:
            out.print(render(tl, width=out.width))
    for path in (trace, svg):
        if path is not None:
            err_console.print(f"wrote {path}", highlight=False)
    if failures:
        err_console.print(f"[bold red]FAIL:[/] {escape(failures[0])}", highlight=False)
        raise typer.Exit(1)
