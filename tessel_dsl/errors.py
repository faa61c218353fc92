"""The one error tree every user-facing failure belongs to.

The CLI catches `TesselError`, prints `str(err)` in red on stderr and exits 1. Anything else that
escapes is a bug in Tessel DSL, not in the user's input.
"""
from __future__ import annotations

from dataclasses import dataclass

__all__ = ["CODES", "Diagnostic", "ExecutionError", "InfeasibleError", "Location", "PlanError",
           "ScheduleError", "SimulationError", "SpecError", "TesselError", "TslSyntaxError"]


@dataclass(frozen=True)
class Location:
    """Where something came from in a spec file (1-based line and column; line 0: the file as a
    whole, for a problem no line of it can show, such as a file that cannot be read)."""

    file: str
    line: int
    column: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.column}" if self.line > 0 else self.file


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
            shown, at = _window(source_line.rstrip(), location.column - 1)
            caret = f"\n    {shown}\n    {' ' * at}^"
        hint = f"\nexpected one of: {', '.join(expected)}" if expected else ""
        super().__init__(f"{location}: syntax error: {message}{caret}{hint}")


TslSyntaxError = SyntaxError_

# A syntax error echoes a line of up to 100 characters whole; of a longer one, about this much
# either side of the column.
_WINDOW = 40


def _window(line: str, index: int) -> tuple[str, int]:
    """The part of `line` around `index` (with ``...`` where it was cut) and the caret's offset."""
    if len(line) <= 2 * _WINDOW + 20:
        return line, index
    start = max(0, index - _WINDOW)
    end = max(index, start + 2 * _WINDOW)
    head = "..." if start else ""
    return head + line[start:end] + ("..." if end < len(line) else ""), len(head) + index - start


# Every `Diagnostic.code`, with what it means: the one list. The README's error table is this
# list (tests/unit/test_error_codes.py checks both, and that every code raised anywhere is here).
CODES: dict[str, str] = {
    "unknown-name": "a dependency, expression or `use` names something undefined",
    "duplicate-name": "two blocks (or shapes, or params) share a name",
    "device-range": "a device outside 0..D-1 (in a block or a `memory ... on` line; or a device range far too large)",
    "empty-devices": "a block placed on no device",
    "duplicate-device": "a block that lists a device twice",
    "non-positive-time": "a block with time ≤ 0",
    "cycle": "blocks that wait for each other (the cycle is printed)",
    "missing-forward": "a backward-like block whose forward block does not exist",
    "memory-infeasible": "one micro-batch alone needs more memory than a device has (device and excess named)",
    "backward-before-forward": "a backward-like block with no path from its forward block",
    "negative-memory": "a block that frees more memory than one micro-batch holds on a device before it",
    "memory-not-freed": "a training spec whose forwards keep memory that no backward frees (put memory that stays on an `other` block)",
    "grad-without-derive": "`grad` options on a forward without a `derive backward` line",
    "inexact-quantity": "a quantity that is not a whole number of its `resolution`, or a derived "
                        "backward time (`1.5x` of 3 units) that is not a whole number of units",
    "unset-param": "a parameter with no value",
    "unknown-set": "a `--set` for a parameter the spec does not declare",
    "bad-set-value": "a `--set` value that is not a number",
    "unknown-unit": "a unit that is not a time or memory unit where one is needed",
    "missing-resolution": "a physical unit without the matching `resolution`",
    "rounded": "(a note) a quantity rounded to its resolution, under `resolution time 1ms round` (or `memory`)",
    "several-sources": "(a warning) several forward blocks with no input, not declared `independent`: "
                       "a micro-batch enters at each (a head not connected after the last layer?)",
    "not-a-source": "`independent` names a block that has an input (only a forward block without one starts a path)",
    "missing-unit": "a size without a unit beside one with a unit on the same `memory` line (`memory 80GB reserve 35`)",
    "not-integer": "a fraction where a whole number is needed",
    "unknown-dtype": "a tensor dtype that is not known",
    "unknown-metric": "an expectation of a metric that is not known",
    "bad-expect": "an expectation of the wrong form (comparison or symbol)",
    "bad-link": "a `link` bandwidth of 0 or one that rounds to 0 in the spec's time unit; a negative or non-finite link cost",
    "shape-args": "a `use` with wrong arguments",
    "shape-recursion": "a shape that uses itself",
    "include-error": "an include that cannot be read",
    "include-cycle": "a file that includes itself",
    "missing-declaration": "no `devices` or `memory` (or `on all` before `devices`)",
    "duplicate-declaration": "a header statement given twice, or a device named by two `memory ... on` lines",
    "missing-devices": "a block without `on DEVICES`",
    "missing-time": "a block without `time T`",
    "duplicate-option": "a block option given twice",
    "bad-option": "a block option that does not apply to this kind of block",
    "misplaced-statement": "a header statement inside a loop, shape or included file",
    "bad-name": "a name template that gives something that is not a name",
    "empty-group": "an empty comprehension (`{F{i} for i in 3..1}`)",
    "bad-value": "a bad number (e.g. division by zero, a negative count or latency)",
    "too-large": "a loop, range or nesting far too large; a quantity beyond the limits a plan is held to (`tessel_dsl/limits.py`)",
    "bad-devices": "a spec (built in Python) with fewer than one device",
    "bad-memory": "a negative memory capacity or reserve (or, in a spec built in Python, per-device "
                  "memory that does not list every device)",
    "reserve-too-large": "a device whose `reserve` is larger than its memory capacity",
    "bad-microbatches": "a spec (built in Python) with fewer than one micro-batch",
    "no-blocks": "a placement that declares no blocks",
    "bad-mode": "a mode that is neither train nor infer; an inference spec (built in Python, or in a plan) holding backward blocks",
    "bad-input": "spec text that is not a string (Python API)",
    "cannot-read": "the spec file itself cannot be read",
}


def codes_table() -> str:
    """`CODES` as the README's Markdown table."""
    rows = [f"| `{code}` | {meaning} |" for code, meaning in CODES.items()]
    return "\n".join(["| code | meaning |", "|---|---|", *rows])


@dataclass(frozen=True)
class Diagnostic:
    """One semantic problem: a stable code (e.g. ``unknown-name``), a message and where. A
    ``warning`` does not stop the spec from being read (`Spec.warnings`); an ``error`` does."""

    code: str
    message: str
    location: Location | None = None
    severity: str = "error"

    def __str__(self) -> str:
        where = f"{self.location}: " if self.location else ""
        return f"{where}{self.severity}[{self.code}]: {self.message}"


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
