"""The one error tree every user-facing failure belongs to.

The CLI catches `TesselError`, prints `str(err)` in red on stderr and exits 1. Anything else that
escapes is a bug in Tessel DSL, not in the user's input.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Location:
    """Where something came from in a spec file (1-based line and column)."""

    file: str
    line: int
    column: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.column}"


class TesselError(Exception):
    """Base class of every error Tessel DSL reports to a user."""


class SyntaxError_(TesselError):
    """The spec text does not follow the grammar.

    Named with a trailing underscore so it never shadows Python's own `SyntaxError`; it is
    exported as `TslSyntaxError`.
    """

    def __init__(self, message: str, location: Location, source_line: str = "", expected: tuple[str, ...] = ()):
        self.location = location
        self.source_line = source_line
        self.expected = expected
        caret = ""
        if source_line:
            caret = f"\n    {source_line.rstrip()}\n    {' ' * (location.column - 1)}^"
        hint = f"\nexpected one of: {', '.join(expected)}" if expected else ""
        super().__init__(f"{location}: syntax error: {message}{caret}{hint}")


TslSyntaxError = SyntaxError_


@dataclass(frozen=True)
class Diagnostic:
    """One semantic problem: a stable code (e.g. ``unknown-name``), a message and where."""

    code: str
    message: str
    location: Location | None = None

    def __str__(self) -> str:
        where = f"{self.location}: " if self.location else ""
        return f"{where}error[{self.code}]: {self.message}"


class SpecError(TesselError):
    """All semantic problems found in one spec, reported together."""

    def __init__(self, diagnostics: list[Diagnostic] | tuple[Diagnostic, ...]):
        self.diagnostics = tuple(diagnostics)
        super().__init__("\n".join(str(d) for d in self.diagnostics))


class InfeasibleError(TesselError):
    """A requirement can never be met, e.g. memory M below what one micro-batch needs."""


class ScheduleError(TesselError):
    """A schedule breaks a rule: names the device, the step and the block, with the grid."""


class SimulationError(TesselError):
    """The simulated programs deadlocked or overflowed memory."""


class ExecutionError(TesselError):
    """A rank failed or stalled while executing its program: names rank, step and action."""


class PlanError(TesselError):
    """A plan or IR JSON file is malformed or has the wrong schema version."""
