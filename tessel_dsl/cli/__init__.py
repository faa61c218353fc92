"""`tessel` command line: a thin layer over the library; each verb lives in its own module.

Heavy libraries (z3, ortools, simpy, torch) are imported inside the verbs that need them, so
`tessel check` starts fast and never needs them.
"""
from __future__ import annotations

import importlib
import sys

from tessel_dsl.errors import TesselError
from tessel_dsl.cli.app import app, err_console

# Verb modules register their commands on `app` when imported.
_VERBS = ("check", "search", "compare", "simulate", "harness", "run", "export", "profile")


def _load_verbs() -> None:
    for name in _VERBS:
        try:
            importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as e:
            if e.name != f"{__name__}.{name}":
                raise


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point: user errors print in red and exit 1, usage errors exit 2."""
    _load_verbs()
    try:
        app(args=argv, prog_name="tessel")
    except TesselError as e:
        from rich.markup import escape

        err_console.print(f"[bold red]error:[/] {escape(str(e))}", highlight=False)
        sys.exit(1)
    except KeyboardInterrupt:
        err_console.print("[red]interrupted[/]")
        sys.exit(130)
