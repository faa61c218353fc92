"""The shared Typer app and consoles: stdout for reports, stderr for diagnostics."""
from __future__ import annotations

import typer

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


class LazyConsole:
    """A rich `Console` made on first use; every attribute is the console's.

    Importing rich costs about 0.03 s of CPU, which `tessel search --json` (and any command that
    prints through typer alone) need not pay: rich is loaded only when something is printed
    through it.
    """

    def __init__(self, **options):
        self._options = options
        self._console = None

    def get(self):
        """The `rich.console.Console` itself (for rich APIs that take one)."""
        if self._console is None:
            from rich.console import Console

            self._console = Console(**self._options)
        return self._console

    def __getattr__(self, name: str):
        return getattr(self.get(), name)

    def print(self, *objects, **options) -> None:
        """`Console.print`; on stderr that is not a terminal (a log, a pipe, CI) lines are never
        wrapped, so a `file:line:col: error[...]` stays one line however long its path."""
        console = self.get()
        if self._options.get("stderr") and "soft_wrap" not in options and not console.is_terminal:
            options["soft_wrap"] = True
        console.print(*objects, **options)


console = LazyConsole()
err_console = LazyConsole(stderr=True)


def parse_sets(values: list[str] | None) -> dict[str, str]:
    """`--set K=V` options as a dict; a malformed one is a usage error (exit 2)."""
    out: dict[str, str] = {}
    for v in values or []:
        key, sep, val = v.partition("=")
        if not sep or not key.strip():
            raise typer.BadParameter(f"expected K=V, got {v!r}", param_hint="--set")
        out[key.strip()] = val.strip()
    return out


SHOWN_PER_CODE = 20  # of one kind of warning or note, this many lines, then a count of the rest


def show_warnings(spec) -> None:
    """A parsed spec's warnings and notes (`Spec.warnings`: a source not declared independent, a
    quantity rounded to its resolution), one per line on stderr, so that `--json` output on
    stdout stays the JSON alone."""
    if not getattr(spec, "warnings", ()):
        return  # nothing to say: rich is not loaded (`tessel search --json` stays light)
    from rich.markup import escape

    shown: dict[str, int] = {}
    for w in getattr(spec, "warnings", ()):
        shown[w.code] = shown.get(w.code, 0) + 1
        if shown[w.code] <= SHOWN_PER_CODE:
            err_console.print(f"[yellow]{escape(str(w))}[/]", highlight=False, soft_wrap=True)
    for code, n in shown.items():
        if n > SHOWN_PER_CODE:
            err_console.print(f"[yellow]... and {n - SHOWN_PER_CODE} more {code} lines[/]", highlight=False)
