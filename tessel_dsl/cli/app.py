"""The shared Typer app and consoles: stdout for reports, stderr for diagnostics."""
from __future__ import annotations

import typer
from rich.console import Console

app = typer.Typer(
    name="tessel",
    help="Describe pipeline-parallel placements (.tsl), search Tessel schedules, simulate and run them.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


@app.callback()
def _group() -> None:
    # A callback keeps `tessel` a group of verbs even when only one verb module is loaded (the
    # entry point loads just the verb it runs; Typer turns a one-command app into that command).
    pass


console = Console()
err_console = Console(stderr=True)


def parse_sets(values: list[str] | None) -> dict[str, str]:
    """`--set K=V` options as a dict; a malformed one is a usage error (exit 2)."""
    out: dict[str, str] = {}
    for v in values or []:
        key, sep, val = v.partition("=")
        if not sep or not key.strip():
            raise typer.BadParameter(f"expected K=V, got {v!r}", param_hint="--set")
        out[key.strip()] = val.strip()
    return out
