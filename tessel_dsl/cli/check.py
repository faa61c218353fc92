"""`tessel check`: parse and check a spec, print what it says before any search.

Imports only the parser and `analysis` (never z3, ortools, simpy or torch), so it is fast enough
to run on every save.
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Optional

import typer

from tessel_dsl.cli.app import app, console, parse_sets, show_warnings
from tessel_dsl.units import memory_in, time_in


def summarize(spec) -> dict:
    """The numbers `tessel check` reports, as plain data (the `--json` output): the spec in the IR's
    own JSON form (as a plan file stores it, so a new IR field shows up here unasked), then what
    the analysis derives from it."""
    from tessel_dsl.analysis import busy_time, lower_bound, max_inflight, microbatch_memory, resident_memory
    from tessel_dsl.serialize import to_json

    return {
        **to_json(spec),
        "blocks_per_device": [[b.name for b in spec.blocks_on(d)] for d in range(spec.devices)],
        "busy_time": list(busy_time(spec)),
        "lower_bound": lower_bound(spec),
        "microbatch_memory": list(microbatch_memory(spec)),
        "resident_memory": list(resident_memory(spec)),
        "max_inflight": max_inflight(spec),
        # Per device: how many micro-batches its capacity holds at once (None: it keeps nothing
        # between forward and backward, so memory sets no limit there); the minimum is max_inflight.
        "max_inflight_per_device": [spec.capacity(d) // h if h > 0 else None
                                    for d, h in enumerate(resident_memory(spec))],
        # What bounds the schedule on each device: its memory less what is reserved there.
        "capacities": list(spec.capacities),
        "reserved_per_device": [spec.reserved_on(d) for d in range(spec.devices)],
        # The period per micro-batch memory alone allows (how long a micro-batch holds memory
        # against how many a device holds): above `lower_bound`, memory sets the pace, not work.
        "memory_period_bound": _memory_period(spec),
        "warnings": [str(w) for w in spec.warnings],
    }


CHECK_BOUND_MAX_BLOCKS = 2000  # above this many blocks `check` skips the memory bound (it walks
# each block's dependency closure; `check` stays fast on the 100,000-block specs it is timed on)


def _memory_period(spec) -> float | None:
    """`search.membound.memory_period_bound` (pure Python, no solver), rounded down to 0.1 of a
    time unit so that it stays a lower bound; None above `CHECK_BOUND_MAX_BLOCKS` blocks."""
    if len(spec.blocks) > CHECK_BOUND_MAX_BLOCKS:
        return None
    from tessel_dsl.search.membound import memory_period_bound

    return math.floor(memory_period_bound(spec) * 10) / 10


# The per-device table of `tessel check`: (title, justify, cell of device d in a summary).
DEVICE_COLUMNS = (
    ("device", "right", lambda s, d: str(d)),
    ("blocks", "left", lambda s, d: " ".join(s["blocks_per_device"][d])),
    ("busy", "right", lambda s, d: time_in(s["units"], s["busy_time"][d])),
    ("capacity", "right", lambda s, d: _capacity(s, d)),
    ("memory / mb", "right", lambda s, d: memory_in(s["units"], s["microbatch_memory"][d])),
    ("in flight", "right", lambda s, d: "-" if s["max_inflight_per_device"][d] is None
     else str(s["max_inflight_per_device"][d])),
)


def _capacity(s: dict, d: int) -> str:
    """Device d's capacity left for the schedule, and its whole memory and reserve when it has one."""
    cap, res = s["capacities"][d], s["reserved_per_device"][d]
    text = memory_in(s["units"], cap)
    return text + (f" ({memory_in(s['units'], cap + res)} - {memory_in(s['units'], res)} reserved)" if res else "")


def _memory_header(s: dict) -> str:
    caps = s["capacities"]
    if len(set(caps)) <= 1 and not any(s["reserved_per_device"]):
        return f"memory {memory_in(s['units'], s['memory'])} per device"
    return "memory per device below"


def render(summary: dict) -> None:
    """The rich report: a header line, one row per device, then the bound and the expectations."""
    from rich.table import Table

    s = summary
    unit = "" if s["units"]["time_label"] == "unit" else f" (1 unit = {s['units']['time_label']})"
    console.print(f"[bold]{s['name']}[/] — {s['mode']}, {s['devices']} devices, {_memory_header(s)}, "
                  f"{s['microbatches']} micro-batches, {len(s['blocks'])} blocks{unit}")
    if s["params"]:
        console.print("params: " + ", ".join(f"{k}={v}" for k, v in s["params"]), highlight=False)
    table = Table(show_edge=False, header_style="bold")
    for title, justify, _cell in DEVICE_COLUMNS:
        table.add_column(title, justify=justify)
    for d in range(s["devices"]):
        table.add_row(*(cell(s, d) for _title, _justify, cell in DEVICE_COLUMNS))
    console.print(table)
    console.print(f"lower bound of the repetend period: [bold]{time_in(s['units'], s['lower_bound'])}[/] "
                  "(busiest device's work per micro-batch)")
    mem = s.get("memory_period_bound")
    if mem is not None and mem > s["lower_bound"]:
        console.print(f"memory allows no period shorter than [bold]{time_in(s['units'], mem)}[/] per micro-batch, "
                      f"above the {time_in(s['units'], s['lower_bound'])} of work: memory, not compute, sets the pace")
    caps = s["capacities"]
    under = (f"memory {memory_in(s['units'], caps[0])}" if len(set(caps)) == 1
             else "each device's capacity")
    console.print(f"max in-flight micro-batches under {under}: [bold]{s['max_inflight']}[/] "
                  "(the fewest of any device; per device in the table)")
    from tessel_dsl.tools.expect import format_value

    for x in s["expectations"]:
        value = x["value"]
        value = "" if value is None else f" {format_value(x['metric'], value, s['units'])}"
        at = f" at N={x['microbatches']}" if x["microbatches"] else ""
        op = "" if x["metric"] == "deadlock_free" else f" {x['op']}"
        console.print(f"expect {x['metric']}{op}{value}{at}", highlight=False)
    console.print("[green]ok[/]")


@app.command()
def check(
    spec: Path = typer.Argument(..., help="The placement spec (.tsl) to check."),
    set_: Optional[list[str]] = typer.Option(None, "--set", metavar="K=V",
                                             help="Override a `param` (repeatable), e.g. --set D=8."),
    mode: Optional[str] = typer.Option(None, "--mode", help="train or infer (overrides the file's `mode`)."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON (nothing else on stdout)."),
) -> None:
    """Parse and check a spec; print blocks per device, busy time, lower bound and memory."""
    from tessel_dsl.lang.parser import parse_file

    if mode is not None and mode not in ("train", "infer"):
        raise typer.BadParameter(f"expected train or infer, got {mode!r}", param_hint="--mode")
    parsed = parse_file(spec, sets=parse_sets(set_) or None, mode=mode)
    show_warnings(parsed)
    summary = summarize(parsed)
    if as_json:
        typer.echo(json.dumps(summary, indent=1))
    else:
        render(summary)
