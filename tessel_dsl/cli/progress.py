"""Live search progress on stderr: N_R, candidates tried and pruned, best period, lower bound."""
from __future__ import annotations

import sys

from tessel_dsl.search.result import Progress


def parts(p: Progress) -> list[tuple[str, str | None]]:
    """One status line for a progress snapshot, as (text, rich style) pieces."""
    best = "-" if p.best is None else str(p.best)
    return [("searching ", "bold"), (f"{p.phase}  ", "cyan"),
            (f"P={p.period} N_R<={p.nr}  best t_R={best}  lower bound={p.lower_bound}  "
             f"tried={p.tried} pruned={p.pruned}  {p.elapsed:.1f}s", None)]


def render(p: Progress):
    """The status line as rich `Text` (for the live display on a terminal)."""
    from rich.text import Text

    line = Text()
    for text, style in parts(p):
        line.append(text, style=style)
    return line


class LiveProgress:
    """A context manager whose instances are `progress` callbacks for `search()`.

    On a terminal it redraws one line in place (rich); otherwise (CI logs, a captured stderr) it
    prints each phase change as a plain line, without loading rich for it.
    """

    def __init__(self, console):
        self.console = console  # a rich Console or `app.LazyConsole`, used on a terminal only
        self.live = None
        self.phase = ""

    def __enter__(self) -> "LiveProgress":
        if sys.stderr.isatty() and self.console.is_terminal:
            from rich.live import Live
            from rich.text import Text

            from tessel_dsl.cli.app import LazyConsole

            real = self.console.get() if isinstance(self.console, LazyConsole) else self.console
            self.live = Live(Text(""), console=real, refresh_per_second=8, transient=True)
            self.live.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        if self.live is not None:
            self.live.__exit__(*exc)

    def __call__(self, p: Progress) -> None:
        if self.live is not None:
            self.live.update(render(p))
        elif p.phase != self.phase:
            print("".join(text for text, _ in parts(p)), file=sys.stderr, flush=True)
        self.phase = p.phase
