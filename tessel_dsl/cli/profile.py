"""`tessel profile`: measure a model's blocks and write the spec with measured costs."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from tessel_dsl.cli.app import app, console, err_console, parse_sets


def _bytes(text: str) -> int:
    import re

    from tessel_dsl.units import MEMORY_UNITS

    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)\s*", text)
    if not m or (m.group(2) or "B") not in MEMORY_UNITS:
        raise typer.BadParameter(f"expected a size such as 80GB, got {text!r}", param_hint="--memory")
    return int(float(m.group(1)) * MEMORY_UNITS[m.group(2) or "B"])


def _seconds(text: str) -> float:
    import re

    from tessel_dsl.units import TIME_UNITS

    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?(?:e-?[0-9]+)?)\s*([A-Za-z]+)\s*", text)
    if not m or m.group(2) not in TIME_UNITS or float(m.group(1)) <= 0:
        raise typer.BadParameter(f"expected a time such as 100us, got {text!r}", param_hint="--resolution")
    return float(m.group(1)) * TIME_UNITS[m.group(2)]


def _fmt_s(x: float | None) -> str:
    return "-" if x is None else f"{x * 1e3:.3f}"


@app.command()
def profile(
    spec: Path = typer.Argument(..., help="The spec (.tsl) whose blocks the model implements."),
    model: Optional[str] = typer.Option(None, "--model", "-m",
                                        help="Model factory as MODULE:FACTORY (see tessel_dsl.executor.model_api)."),
    from_run: Optional[Path] = typer.Option(
        None, "--from-run", help="Take block times from a run's JSON summary (`tessel run --json`, key "
                                 "block_seconds) instead of measuring: times multi-device blocks too."),
    run_key: Optional[str] = typer.Option(None, "--run-key", help="With --from-run: the entry of a JSON "
                                                                  "file holding several runs' summaries."),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="Write the profiled spec (.tsl) here."),
    repeats: int = typer.Option(10, "--repeats", min=1, help="Timed runs per block; the median is kept."),
    warmup: int = typer.Option(3, "--warmup", min=0, help="Untimed runs before timing."),
    device: Optional[str] = typer.Option(None, "--device", help="cpu, cuda or cuda:N (default: cuda if available)."),
    resolution: Optional[str] = typer.Option(None, "--resolution", help="Time unit, e.g. 100us (default: chosen)."),
    memory: Optional[str] = typer.Option(None, "--memory", help="Device memory capacity, e.g. 80GB."),
    sets: Optional[list[str]] = typer.Option(None, "--set", help="Override a spec parameter: --set K=V."),
    model_args: Optional[list[str]] = typer.Option(None, "--model-arg", help="Keyword for the factory: K=V."),
) -> None:
    """Time each block's forward and backward and measure its activations on this device, or take
    the block times of a pipelined run (--from-run)."""
    from tessel_dsl.fileio import write_text_atomic
    from tessel_dsl.interop.profiled_spec import apply_measurements, spec_to_tsl
    from tessel_dsl.lang.parser import parse_file

    if (model is None) == (from_run is None):
        raise typer.BadParameter("give either --model (measure here) or --from-run (times of a run)",
                                 param_hint="--model / --from-run")
    res_s = _seconds(resolution) if resolution else None
    cap = _bytes(memory) if memory else None
    kwargs = {k: _literal(v) for k, v in parse_sets(model_args).items()}
    the_spec = parse_file(spec, sets=parse_sets(sets) or None)
    if from_run is not None:
        if cap is not None:
            raise typer.BadParameter("a run measures no activations, so there is no memory to size "
                                     "against a capacity", param_hint="--memory")
        found = _from_run(the_spec, from_run, run_key)
        new = apply_measurements(the_spec, found, time_resolution=res_s)
        _table(the_spec, new, found)
        if output is not None:
            write_text_atomic(output, spec_to_tsl(new, f"{the_spec.name}, with block times from the run "
                                                       f"{from_run.name}{f' ({run_key})' if run_key else ''}"))
            err_console.print(f"wrote {output}", highlight=False)
        return
    try:
        from tessel_dsl.executor.measure import measure
    except ImportError as e:
        from tessel_dsl.errors import TesselError

        raise TesselError(f"tessel profile needs torch ({e}); install it with: pip install 'tessel-dsl[torch]'") from None

    with err_console.status("profiling ...") as status:
        found = measure(the_spec, model, device=device, repeats=repeats, warmup=warmup, model_args=kwargs,
                        progress=lambda name: status.update(f"profiling {name} ..."))
    new = apply_measurements(the_spec, found, time_resolution=res_s, capacity_bytes=cap)
    _table(the_spec, new, found)
    if output is not None:
        write_text_atomic(output, spec_to_tsl(new, f"{the_spec.name}, with costs measured by `tessel profile "
                                                   f"--model {model}` on {found[0].device or 'this device'}"))
        err_console.print(f"wrote {output}", highlight=False)


def _from_run(spec, path: Path, key: str | None):
    """Measurements from the ``block_seconds`` of a run summary (or of entry `key` in a file of them)."""
    import json

    from tessel_dsl.errors import TesselError
    from tessel_dsl.interop.profiled_spec import measurements_from_run

    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise TesselError(f"{path}:{e.lineno}:{e.colno}: not a JSON run summary ({e.msg})") from None
    except (OSError, ValueError) as e:
        raise TesselError(f"{path}: cannot read a run summary ({e})") from None
    if key is not None:
        if not isinstance(data, dict) or key not in data:
            raise TesselError(f"{path}: no entry {key!r}")
        data = data[key]
    if not isinstance(data, dict) or not isinstance(data.get("block_seconds"), dict):
        hint = "" if key else " (a file of several runs needs --run-key)"
        raise TesselError(f"{path}{f' [{key}]' if key else ''}: no block_seconds in it{hint}")
    return measurements_from_run(spec, data["block_seconds"], str(data.get("device", "")))


def _literal(text: str):
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


def _table(old, new, found) -> None:
    from rich.table import Table

    by = {m.block: m for m in found}
    t = Table(title=f"{old.name}: measured on {next((m.device for m in found if m.device), '?')}, "
                    f"1 unit = {new.units.time_label}, memory unit = {new.units.memory_label}")
    for col in ("block", "device", "fwd ms", "bwd ms (B or I+W)", "activations", "units: time", "memory", "note"):
        t.add_column(col, justify="left" if col in ("block", "note") else "right")
    for b in new.blocks:
        m = by.get(b.name if b.kind.value == "forward" else (b.forward or ""))
        fwd = b.kind.value == "forward"
        if m is None:
            cells = ["-", "-", "-", "kept"]
        elif fwd:
            act = "-" if m.activation_bytes is None else f"{m.activation_bytes / 2**20:.2f} MiB"
            cells = [_fmt_s(m.forward), "", act, m.note]
        else:
            sec = {"backward": m.backward, "input_grad": m.input_grad, "weight_grad": m.weight_grad}.get(b.kind.value)
            cells = ["", _fmt_s(sec), "", m.note]
        devs = ",".join(map(str, b.devices)) if len(b.devices) < new.devices or new.devices == 1 else "all"
        t.add_row(b.name, devs, cells[0], cells[1], cells[2], str(b.time), str(b.memory), cells[3])
    console.print(t)
    from tessel_dsl.units import capacity_in

    console.print(f"memory capacity {capacity_in(new)}" + (" units" if new.units.memory_label == "unit" else ""),
                  highlight=False)
