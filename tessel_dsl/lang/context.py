"""What the statement helpers in `blocks` and `memory` need from the evaluator that calls them.

A structural type: `evaluate.Evaluator` has all of this, and the helpers name this list instead
of the evaluator, so the evaluator can import them without a cycle.
"""
from __future__ import annotations

from typing import Any, Protocol

from tessel_dsl import ir
from tessel_dsl.errors import Location
from tessel_dsl.lang import syntax as A
from tessel_dsl.lang.values import ForwardOptions, Skip


class EvalContext(Protocol):
    out: Any  # the evaluator's `Program`: header values, `devices`, per-device memory
    params: dict[str, object]
    blocks: list[ir.Block]
    edges: list[ir.Edge]
    forward_opts: dict[str, ForwardOptions]
    pending_of: list[tuple[int, A.BlockDecl]]

    def error(self, code: str, message: str, loc: Location | None) -> Skip: ...
    def stop(self, code: str, message: str, loc: Location | None) -> None: ...
    def spend(self, n: int, what: str, loc: Location | None) -> None: ...
    def integer(self, e: A.Expr, env) -> int: ...
    def render(self, name: A.Name, env) -> str: ...
    def time_units(self, q: A.Quantity, env, exact: bool = True) -> float: ...
    def memory_units(self, q: A.Quantity, env) -> int: ...
    def grad_time(self, q: A.Quantity, env) -> tuple[str, float]: ...
    def _capacity(self, size: A.MemSize, what: str = ...) -> int: ...
