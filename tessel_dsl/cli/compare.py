"""`tessel compare`: Tessel next to the baselines of `search.baselines.RECORDS` (and TO) on the same spec."""
from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Optional

import typer

from tessel_dsl.cli.app import app, console, err_console, parse_sets, show_warnings
from tessel_dsl.search.baselines import RECORDS
from tessel_dsl.search.baselines.compare import label
from tessel_dsl.search.notes import Note
from tessel_dsl.search.notes import render as render_notes
from tessel_dsl.search.optimal import TO_EFFORT

_SCHEDULE_NAMES = ", ".join(("tessel", *(b.name for b in RECORDS)))
_BASELINE_HELP = "\n\n".join(f"{b.name}: {b.help}." for b in RECORDS)


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.1%}"


def _num(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x:g}" if float(x).is_integer() else f"{x:.2f}"


def _time(units, x) -> str:
    """A time cell: in the spec's declared unit (``12 ms``), or the bare number without one."""
    from tessel_dsl.units import time_in

    return _num(x) if units is None or units.time_label == "unit" or x is None else time_in(units, x)


def _limit(spec, prefix: str = "") -> str:
    """The memory limit: one M, or with per-device capacities the common one and the exceptions."""
    from tessel_dsl.units import capacity_in

    if spec.uniform_memory:
        return prefix + _mem(spec.units, spec.capacity(0) if spec.devices else spec.memory)
    return capacity_in(spec)[len("M="):] if not prefix else capacity_in(spec)


def _mem(units, x) -> str:
    """A memory cell: in the spec's declared unit (``12 GB``), or the bare number without one."""
    from tessel_dsl.units import memory_in

    return str(x) if units is None or units.memory_label == "unit" else memory_in(units, x)


def render_rows(title: str, rows, units=None) -> list:
    """One spec's comparison: a rich table, then why each n/a or failed schedule has no numbers.
    `units`: the spec's, so times and memory read in its declared units (bare without them)."""
    from rich import box
    from rich.markup import escape
    from rich.table import Table
    from rich.text import Text

    table = Table(title=title, title_justify="left", header_style="bold", box=box.SIMPLE_HEAD, pad_edge=False,
                  collapse_padding=True)
    for col, just in (("schedule", "left"), ("N", "right"), ("makespan", "right"), ("bubble", "right"),
                      ("period(LB)", "right"), ("steady", "right"), ("peak/M", "right"),
                      ("vs TO", "right"), ("CPU s", "right")):
        table.add_column(col, justify=just, overflow="fold")  # a narrow terminal folds a cell, never hides digits
    why = []
    unproven = False
    to_cut = ""  # why TO is not proven optimal, when a budget or limit cut it
    for r in rows:
        if r.status != "ok":
            shown = "n/a" if r.status == "n/a" else r.status
            table.add_row(r.schedule, str(r.microbatches), f"[dim]{shown}[/]" if shown == "n/a" else f"[red]{shown}[/]",
                          *([""] * 6))
            why.append(Text.from_markup(f"  [dim]{escape(r.schedule)} {shown}: {escape(r.reason)}[/]"))
            continue
        if len(set(r.memory_limits)) > 1:  # devices differ: the one nearest (or over) its own capacity
            d = r.memory_device
            mem = f"{_mem(units, r.peak_memory[d])}/{_mem(units, r.memory_limit)} on {d}"
        else:
            mem = f"{_mem(units, max(r.peak_memory, default=0))}/{_mem(units, r.memory_limit)}"
        if r.over_memory:
            mem = f"[bold red]{mem} >M[/]"
        period = "-" if r.period is None else f"{_time(units, r.period)} ({_time(units, r.lower_bound)})"
        name = escape(label(r))
        for key in ("placement", "memory"):
            if r.extra and r.extra.get(key):
                why.append(Text.from_markup(f"  [dim]{escape(r.schedule)} {escape(r.extra[key])}[/]"))
        if r.schedule in ("to", "tessel") and r.proven is False:
            name += "[yellow]*[/]"
            if r.schedule == "to":
                to_cut = (render_notes(Note(x["kind"], x["values"]) for x in r.extra.get("notes", ()))
                          or "not proven optimal: a budget or time limit cut the solve")
            else:
                unproven = True
        gap = "-" if r.gap_to_optimal is None else f"{r.gap_to_optimal:+.1%}"
        seconds = "" if r.seconds is None else f"{r.seconds:.1f}s"
        table.add_row(name, str(r.microbatches), _time(units, r.makespan), _pct(r.bubble), period,
                      _pct(r.steady_bubble), mem, gap, seconds)
    if unproven:
        why.append(Text.from_markup("  [yellow]*[/] not proven: a time limit or solver budget cut part of the solve "
                                    "(best found shown; `tessel search` says what)"))
    if to_cut:
        why.append(Text.from_markup(f"  [yellow]to*[/] {escape(to_cut)}; `vs TO` compares with this schedule, "
                                    "so the gaps to the true optimum may be larger"))
    from tessel_dsl.search.baselines.compare import versus_best

    tessel, best, ratio = versus_best(rows)
    if best is None:
        why.append(Text("  no baseline applies to this placement within memory M"))
    elif tessel is not None:
        why.append(Text(f"  tessel vs the best applicable baseline ({label(best)}, makespan "
                        f"{_time(units, best.makespan)}): {_time(units, tessel.makespan)} ({ratio:+.1%})"))
    return [table, *why]


def render_placements(results) -> object:
    """Several placements of one model in one table: Tessel and the best applicable baseline."""
    from rich import box
    from rich.table import Table

    from tessel_dsl.search.baselines.compare import versus_best

    table = Table(title="placements side by side: Tessel's makespan and the best applicable baseline's",
                  title_justify="left", header_style="bold",
                  box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
    for col, just in (("placement", "left"), ("D", "right"), ("M", "right"), ("N", "right"),
                      ("tessel", "right"), ("bubble", "right"), ("baseline", "left"),
                      ("makespan", "right"), ("vs it", "right")):
        table.add_column(col, justify=just, overflow="fold")  # a narrow terminal folds a cell, never hides digits
    for path, spec, rows in results:
        tessel, best, ratio = versus_best(rows)
        n = str(rows[0].microbatches) if rows else "-"
        table.add_row(Path(path).name, str(spec.devices), _limit(spec), n,
                      "-" if tessel is None else _time(spec.units, tessel.makespan),
                      "-" if tessel is None else _pct(tessel.bubble),
                      "-" if best is None else label(best),
                      "-" if best is None else _time(spec.units, best.makespan),
                      "-" if ratio is None else f"{ratio:+.1%}")
    return table


def _render_table3(rows):
    from rich.table import Table

    from tessel_dsl.views.table3 import COLUMN_TITLES, COLUMNS

    table = Table(title="Table 3: steady-state bubble rate of training schedules (measured / paper)",
                  title_justify="left", header_style="bold")
    table.add_column("model")
    table.add_column("placement")
    for c in COLUMNS:
        table.add_column(COLUMN_TITLES[c], justify="right")
    for row in rows:
        cells = []
        for cell, paper in zip(row.cells, row.paper):
            got = "x" if cell.status == "n/a" else (cell.status if cell.status != "ok" else _pct(cell.steady_bubble))
            if cell.status == "ok" and cell.proven is False:
                got += "*"
            want = "x" if paper is None else f"{paper:g}%"
            cells.append(f"{got} / {want}")
        table.add_row(row.model, row.placement, *cells)
    return table


def _show(part) -> None:
    """Print a table whole: at a terminal's width (its cells fold), and to a file or a CI log,
    where rich would assume 80 columns and crop the numbers, as wide as the table needs."""
    out = console.get()
    if not out.is_terminal:
        from rich.console import Console

        # A table takes only the width it needs (it does not expand), so a generous width is enough.
        out = Console(width=max(out.width, 240), file=out.file)
    out.print(part, soft_wrap=True)


def _load(path: Path, sets: dict[str, str], mode: Optional[str], microbatches: Optional[int] = None):
    """(spec, given schedules) from a .tsl spec or a plan file; a plan is re-extended to
    `microbatches` as `tessel simulate -n` would, so its row is at the N of the others."""
    if path.suffix == ".json":
        from tessel_dsl.plan import load_plan

        plan = load_plan(path)  # (--set and --mode with a plan file are refused before any work)
        if microbatches is not None and microbatches != plan.schedule.microbatches:
            from tessel_dsl.search.finish import replan

            plan = replan(plan, microbatches)
        return plan.spec, ((f"plan:{plan.schedule.name}", plan.schedule),)
    from tessel_dsl.lang.parser import parse_file

    spec = parse_file(path, sets=sets or None, mode=mode)
    show_warnings(spec)
    return spec, ()


@app.command(help="Makespan, bubble, steady-state period and peak memory of each schedule, side by "
             "side.\n\n" + _BASELINE_HELP)
def compare(
    specs: Optional[list[Path]] = typer.Argument(None, help="Specs (.tsl) or plan files (plan.json) to compare on."),
    microbatches: Optional[int] = typer.Option(None, "--microbatches", "-n", min=1, metavar="N",
                                               help="Micro-batches N (default: each spec's N); a plan file is "
                                                    "re-extended to N as `tessel simulate -n` does."),
    sets: Optional[list[str]] = typer.Option(None, "--set", metavar="K=V",
                                             help="Override a spec parameter (repeatable)."),
    mode: Optional[str] = typer.Option(None, "--mode", metavar="train|infer", help="Override the spec's mode."),
    as_json: bool = typer.Option(False, "--json", help="Print the rows as JSON instead of tables."),
    to: bool = typer.Option(False, "--to", help="Also solve the time-optimal schedule (TO; small N only)."),
    to_effort: float = typer.Option(TO_EFFORT, "--to-effort", min=0.001, metavar="E",
                                    help="Deterministic solver budget of the TO solve (CP-SAT deterministic time, "
                                         "about seconds of one core): the same TO on every run."),
    to_limit: Optional[float] = typer.Option(None, "--to-limit", min=0.1, metavar="SECONDS",
                                             help="Also a wall-clock limit on the TO solve, seconds (the result "
                                                  "then depends on the machine and its load)."),
    schedule: Optional[list[str]] = typer.Option(None, "--schedule", "-s", metavar="NAME",
                                                 help=f"Only these (repeatable): {_SCHEDULE_NAMES}."),
    solver: str = typer.Option("auto", "--solver", metavar="auto|cpsat|z3",
                               help="Constraint solver of the Tessel search and TO (auto = `cpsat`)."),
    time_limit: Optional[float] = typer.Option(None, "--time-limit", min=0.1, metavar="SECONDS",
                                               help="Time limit of the Tessel search, seconds."),
    table3: bool = typer.Option(False, "--table3", help="Reproduce the paper's Table 3 from --specs-dir."),
    specs_dir: Path = typer.Option(Path("specs"), "--specs-dir", metavar="DIR",
                                   help="Where --table3 finds the shipped specs."),
) -> None:
    """Makespan, bubble, steady-state period and peak memory of each schedule, side by side."""
    from tessel_dsl.search.baselines.compare import SCHEDULES
    from tessel_dsl.search.baselines.compare import compare as run_compare

    overrides = parse_sets(sets)
    if mode is not None and mode not in ("train", "infer"):
        raise typer.BadParameter(f"expected train or infer, got {mode!r}", param_hint="--mode")
    chosen = tuple(schedule) if schedule else SCHEDULES
    unknown = [s for s in chosen if s not in SCHEDULES]
    if unknown:
        raise typer.BadParameter(f"unknown schedule {unknown[0]!r} (choose from {', '.join(SCHEDULES)})",
                                 param_hint="--schedule")
    if table3:
        from tessel_dsl.views.table3 import table3 as run_table3

        with err_console.status("measuring Table 3 (Tessel searches included)..."):
            rows3 = run_table3(specs_dir, solver=solver, time_limit=time_limit or 120.0)
        if as_json:
            print(json.dumps([asdict(r) for r in rows3], indent=1))
        else:
            console.print(_render_table3(rows3))
            console.print("  Cells: steady-state bubble (idle share of one period), measured / the paper's.\n"
                          "  Chimera-direct is measured with backward = 3 x forward (recompute, as the specs say);\n"
                          "  Chimera's own (D-2)/(2N+D-2) = 20% for D=N=4 assumes backward = forward.\n"
                          "  * the search hit its time limit (not proven).", highlight=False)
        return
    if not specs:
        raise typer.BadParameter("give at least one spec (or --table3)", param_hint="SPECS")
    plans = [p for p in specs if p.suffix == ".json"]
    if plans and (overrides or mode):
        # Refused before any spec is compared, so no table is printed ahead of the error.
        raise typer.BadParameter(
            f"--set and --mode apply to a .tsl spec, not to a plan file ({plans[0]}): a plan holds the spec "
            "it was searched on, with its parameters applied; compare the plan on its own, or the spec with "
            "--set and --mode without the plan", param_hint="--set/--mode")
    everything = []
    results = []
    for path in specs:
        spec, given = _load(path, overrides, mode, microbatches)
        names = tuple(s for s in chosen if not (given and s == "tessel"))
        with err_console.status(f"comparing schedules on {spec.name}..."):
            rows = run_compare(spec, microbatches, schedules=names, to=to, to_time_limit=to_limit, to_effort=to_effort,
                               solver=solver, time_limit=time_limit, given=given)
        results.append((path, spec, rows))
        if as_json:
            from tessel_dsl.search.baselines.compare import versus_best

            _, best, ratio = versus_best(rows)
            everything.append({"spec": spec.name, "file": str(path), "devices": spec.devices,
                               "memory": spec.memory, "capacities": list(spec.capacities),
                               "reserved": [spec.reserved_on(d) for d in range(spec.devices)],
                               "mode": spec.mode.value,
                               "rows": [asdict(r) for r in rows],
                               "best_baseline": None if best is None else best.schedule,
                               "tessel_vs_best": ratio})
            continue
        from tessel_dsl.analysis import lower_bound

        title = (f"{spec.name} ({path}): D={spec.devices}, {_limit(spec, 'M=')}, "
                 f"{spec.mode.value}, lower bound {_time(spec.units, lower_bound(spec))} per micro-batch")
        for part in render_rows(title, rows, spec.units):
            _show(part)
    if as_json:
        print(json.dumps(everything, indent=1))
    elif len(results) > 1:
        _show(render_placements(results))
