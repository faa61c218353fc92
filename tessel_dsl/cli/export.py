"""`tessel export` and `tessel import`: plans to and from PyTorch's pipeline CSV format."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from tessel_dsl.cli.app import app, console, err_console, parse_sets
from tessel_dsl.units import capacity_in, memory_in, time_in


@app.command()
def export(
    plan: Path = typer.Argument(..., help="Plan file written by `tessel search` (plan.json)."),
    comms: bool = typer.Option(False, "--comms",
                               help="Include the plan's SEND/RECV actions (PyTorch's compute_comms form)."),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="Write here instead of stdout."),
) -> None:
    """Export a plan as the CSV schedule torch.distributed.pipelining loads (`_PipelineScheduleRuntime._load_csv`)."""
    from tessel_dsl.interop.torch_csv import export_torch_csv
    from tessel_dsl.plan import load_plan

    loaded = load_plan(plan)
    text = export_torch_csv(loaded, output, comms=comms)
    if output is None:
        print(text, end="")
    else:
        form = "compute_comms" if comms else "compute_only"
        err_console.print(f"wrote {output} ({loaded.spec.devices} ranks, {form} form)", highlight=False)


@app.command("import")
def import_(
    csv: Path = typer.Argument(..., help="PyTorch pipeline CSV: one row of actions (0F1, 1B0, 2I0, ...) per rank."),
    spec: Path = typer.Option(..., "--spec", "-s", help="The spec (.tsl) the schedule runs, or a plan.json to take it from."),
    output: Path = typer.Option(..., "--output", "-o", help="Plan file to write."),
    sets: Optional[list[str]] = typer.Option(None, "--set", help="Override a spec parameter: --set K=V (repeatable)."),
    name: Optional[str] = typer.Option(None, "--name", help="Schedule name in reports (default: the CSV's file name)."),
    blocking: bool = typer.Option(False, "--blocking", help="Lower with blocking send/recv."),
) -> None:
    """Read a PyTorch CSV schedule back as a plan, so `simulate` and `compare` can judge it."""
    from tessel_dsl.interop.torch_csv import schedule_from_csv
    from tessel_dsl.plan import SearchInfo, load_plan, make_plan, save_plan
    from tessel_dsl.search.notes import note

    overrides = parse_sets(sets)
    if spec.suffix == ".json":
        if overrides:
            raise typer.BadParameter("--set needs a .tsl spec, not a plan", param_hint="--set")
        the_spec = load_plan(spec).spec
    else:
        from tessel_dsl.lang.parser import parse_file

        the_spec = parse_file(spec, sets=overrides or None)
    schedule = schedule_from_csv(the_spec, csv, name=name)
    info = SearchInfo(method="import", notes=(note("imported", file=csv.name),))
    plan = make_plan(the_spec, schedule, info, blocking=blocking)
    save_plan(plan, output)
    console.print(
        f"[bold]{schedule.name}[/]: {schedule.microbatches} micro-batches, makespan "
        f"{time_in(the_spec.units, schedule.makespan(the_spec))}, bubble {schedule.bubble_rate(the_spec):.1%}, peak memory "
        f"[{', '.join(memory_in(the_spec.units, x) for x in plan.peak_memory)}] ({capacity_in(the_spec)}) -> {output}",
        highlight=False, soft_wrap=True,
    )
