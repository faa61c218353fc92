"""Live search progress on stderr: N_R, candidates tried and pruned, best period, lower bound."""
from __future__ import annotations

from rich.console import Console
from rich.live import Live
from rich.text import Text

from tessel_dsl.search.driver import Progress


def render(p: Progress) -> Text:
    """One status line for a progress snapshot."""
    best = "-" if p.best is None else str(p.best)
    line = Text()
    line.append("searching ", style="bold")
    line.append(f"{p.phase}  ", style="cyan")
    line.append(f"P={p.period} N_R<={p.nr}  best t_R={best}  lower bound={p.lower_bound}  "
                f"tried={p.tried} pruned={p.pruned}  {p.elapsed:.1f}s")
    return line


class LiveProgress:
    """A context manager whose instances are `progress` callbacks for `search()`.

    On a terminal it redraws one line in place; otherwise (CI logs) it prints only phase changes.
    """

    def __init__(self, console: Console):
        self.console = console
        self.live: Live | None = None
        self.phase = ""

    def __enter__(self) -> "LiveProgress":
        if self.console.is_terminal:
            self.live = Live(Text(""), console=self.console, refresh_per_second=8, transient=True)
            self.live.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        if self.live is not None:
            self.live.__exit__(*exc)

    def __call__(self, p: Progress) -> None:
        if self.live is not None:
            self.live.update(render(p))
        elif p.phase != self.phase:
            self.console.print(render(p), highlight=False)
        self.phase = p.phase
