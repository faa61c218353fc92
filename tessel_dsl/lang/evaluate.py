"""Evaluate a `.tsl` syntax tree into the IR: parameters, loops, shapes, units, expectations.

The evaluator never stops at the first problem: each statement that cannot be evaluated records a
`Diagnostic` and is skipped, so one run reports everything it can. Statements are taken in three
passes over the top level, so the order of a file's sections does not matter:

1. ``include`` and ``shape`` (definitions are hoisted),
2. ``param`` and ``resolution`` in source order, then the rest of the header,
3. blocks, dependencies, loops and shape uses, in source order.
"""
from __future__ import annotations

from collections import ChainMap
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Callable

from tessel_dsl.errors import Diagnostic, Location
from tessel_dsl.ir import Block, Edge, Expectation, Link, Units
from tessel_dsl.lang import syntax as A
from tessel_dsl.lang.blocks import build_block
from tessel_dsl.lang.header import HeaderStatements
from tessel_dsl.lang.values import (
    MAX_BLOCKS,
    ForwardOptions,
    Number,
    Skip,
    Values,
)
from tessel_dsl.limits import MAX_EXPANSION, MAX_INCLUDES

_HEADER = (A.Placement, A.Devices, A.Memory, A.Microbatches, A.ModeStmt, A.LinkStmt, A.Expect, A.Derive)
_BODY = (A.BlockDecl, A.Edges, A.For, A.Use, A.Independent)


class _Stop(Exception):
    """Evaluation cannot usefully go on (a budget is spent, the device count is unusable); the
    diagnostic saying why has been recorded."""




@dataclass
class Program:
    """Everything the evaluator gathered; `lang_build` turns it into a `Spec`."""

    name: str | None = None
    devices: int | None = None
    memory: int | None = None
    infer_memory: int | None = None
    microbatches: int = 1
    mode: str | None = None
    derive_time: tuple[str, Number] | None = None
    derive_loc: Location | None = None
    link: Link = Link()
    units: Units = Units()
    reserve: int = 0  # the default line's `reserve`
    # `memory ... on DEVICES` lines, resolved per device: capacity (train, infer) and reserve.
    device_memory: dict[int, tuple[int, int | None]] = field(default_factory=dict)
    device_reserve: dict[int, int] = field(default_factory=dict)


class Evaluator(HeaderStatements, Values):
    """Turns one parsed module (plus its includes) into blocks, edges and header values."""

    def __init__(self, module: A.Module, sets: dict[str, str] | None,
                 load: Callable[[str, Location], A.Module | None]):
        self.module = module
        self.load = load
        self.diags: list[Diagnostic] = []
        self.sets = dict(sets or {})
        self.params: dict[str, object] = {}
        self.param_text: list[tuple[str, str]] = []
        self.shapes: dict[str, A.ShapeDef] = {}
        self.blocks: list[Block] = []
        self.forward_opts: dict[str, ForwardOptions] = {}
        self.pending_of: list[tuple[int, A.BlockDecl]] = []  # backward blocks to link to forwards
        self.edges: list[Edge] = []
        self.expectations: list[Expectation] = []
        self.independent: list[tuple[str, Location]] = []  # `independent` names, rendered
        self.rounding: set[str] = set()
        self.rounded: list[Diagnostic] = []
        self.out = Program()
        self.skipped_blocks = 0
        self._seen_header: dict[str, Location] = {}
        self._time_res: tuple[Fraction, str] | None = None
        self._mem_res: tuple[int, str] | None = None
        self._using: list[str] = []
        self._budget = MAX_EXPANSION
        self._includes = 0
        self._loaded: dict[str, A.Module | None] = {}  # path -> parsed include (None: unreadable)
        self.stopped = False  # evaluation ended early: the blocks gathered are incomplete
        self._memory_lines: list[A.Memory] = []
        self._memory_locs: dict[int, Location] = {}

    # ---- driver -----------------------------------------------------------------------------
    def run(self) -> Program:
        top = self._collect_definitions(self.module, [self.module.file])
        for s in top:
            self._guard(self._first_header, s, isinstance(s, (A.Param, A.Resolution)))
        for key in self.sets:
            if key not in self.params:
                declared = ", ".join(self.params) or "none"
                self.error("unknown-set", f"--set {key}=...: this spec declares no `param {key}` "
                           f"(parameters: {declared})", None)
        for s in top:
            self._guard(self._header, s, isinstance(s, _HEADER))
        self._device_memory()
        try:
            if self._devices_ok():
                for s in top:
                    if isinstance(s, _BODY):
                        self._guard(self._body, s, True, self.params)
        except _Stop:
            self.skipped_blocks += 1
            self.stopped = True
        # A declaration that was written but failed has been reported already.
        if self.out.devices is None and "devices" not in self._seen_header:
            self.error("missing-declaration", "the spec never says how many devices it uses "
                       "(add e.g. `devices 4`)", Location(self.module.file, 1, 1))
        if self.out.memory is None and "memory" not in self._seen_header:
            bare = [d for d in range(self.out.devices or 0) if d not in self.out.device_memory]
            if self.out.device_memory and bare:
                self.error("missing-declaration", f"device{'s' if len(bare) > 1 else ''} "
                           f"{', '.join(map(str, bare[:8]))}{' ...' if len(bare) > 8 else ''} "
                           f"{'have' if len(bare) > 1 else 'has'} no memory capacity: add a `memory ...` "
                           "line for the rest, or a `memory ... on` line for each",
                           Location(self.module.file, 1, 1))
            else:
                self.error("missing-declaration", "the spec never gives the per-device memory capacity "
                           "(add e.g. `memory 4`)", Location(self.module.file, 1, 1))
        self.out.units = Units(
            time_seconds=float(self._time_res[0]) if self._time_res else 1.0,
            time_label=self._time_res[1] if self._time_res else "unit",
            memory_bytes=self._mem_res[0] if self._mem_res else 1,
            memory_label=self._mem_res[1] if self._mem_res else "unit",
        )
        return self.out

    def _devices_ok(self) -> bool:
        """Blocks are only worth building for a usable device count: one out of range (say
        ``--set D=100000``) is reported at once, before loops over D run."""
        return self.out.devices is not None or "devices" not in self._seen_header

    def stop(self, code: str, message: str, loc: Location | None) -> None:
        """Record a diagnostic and end the evaluation (a limit that every later statement would hit)."""
        self.error(code, message, loc)
        raise _Stop()

    def spend(self, n: int, what: str, loc: Location | None) -> None:
        """Charge `n` units of expansion (loop iterations, shape uses, edges) to the budget."""
        self._budget -= n
        if self._budget < 0:
            self.error("too-large", f"expansion budget exceeded at {what}: loops, shape uses and "
                       f"edges may expand to at most {MAX_EXPANSION} items in all", loc)
            raise _Stop()

    def _guard(self, fn, stmt, wanted: bool, *args) -> None:
        if not wanted:
            return
        try:
            fn(stmt, *args)
        except Skip:
            if isinstance(stmt, (A.BlockDecl, A.For, A.Use)):
                self.skipped_blocks += 1  # blocks may be missing: unknown names are expected

    def _collect_definitions(self, module: A.Module, stack: list[str]) -> list[A.Stmt]:
        """Hoist shapes (from this file and its includes); return the remaining statements."""
        rest: list[A.Stmt] = []
        for s in module.stmts:
            if isinstance(s, A.ShapeDef):
                if s.name in self.shapes:
                    self.error("duplicate-name", f"shape `{s.name}` is defined twice (first at "
                               f"{self.shapes[s.name].loc})", s.loc)
                else:
                    self.shapes[s.name] = s
            elif isinstance(s, A.Include):
                base = Path(module.file).parent if module.file != "<string>" else Path(".")
                path = str(base / s.path)
                if path in stack:
                    self.error("include-cycle", f"`{s.path}` includes itself: "
                               + " -> ".join(stack + [path]), s.loc)
                    continue
                self._includes += 1
                if self._includes > MAX_INCLUDES:
                    if self._includes == MAX_INCLUDES + 1:
                        self.error("too-large", f"more than {MAX_INCLUDES} `include`s in one spec", s.loc)
                    continue
                if path in self._loaded:
                    continue  # already included: its shapes are known (a file is read once)
                sub = self._loaded[path] = self.load(path, s.loc)
                if sub is None:
                    continue  # the loader reported why
                for inner in self._collect_definitions(sub, stack + [path]):
                    self.error("misplaced-statement", "an included file may only hold `shape` "
                               "definitions and `include`s", inner.loc)
            else:
                rest.append(s)
        return rest

    # ---- header -----------------------------------------------------------------------------
    def _once(self, key: str, loc: Location) -> None:
        if key in self._seen_header:
            raise self.error("duplicate-declaration", f"`{key}` is declared twice (first at "
                             f"{self._seen_header[key]})", loc)
        self._seen_header[key] = loc

    # ---- body -------------------------------------------------------------------------------
    def _body(self, s: A.Stmt, env) -> None:
        if isinstance(s, A.BlockDecl):
            self._block(s, env)
        elif isinstance(s, A.Edges):
            from tessel_dsl.lang.blocks import expand_edges
            expand_edges(self, s, env)
        elif isinstance(s, A.For):
            lo, hi = self.integer(s.range.lo, env), self.integer(s.range.hi, env)
            if hi - lo + 1 > MAX_BLOCKS:
                raise self.error("too-large", f"loop over {hi - lo + 1} values is too large", s.loc)
            self.spend(max(0, hi - lo + 1), "this loop", s.loc)
            for i in range(lo, hi + 1):
                inner = ChainMap({s.var: i}, env)
                for t in s.body:
                    self._nested(t, inner)
        elif isinstance(s, A.Use):
            self._use(s, env)
        elif isinstance(s, A.Independent):
            self.independent += [(self.render(n, env), n.loc) for n in s.names]
        else:
            raise self.error("misplaced-statement", "only blocks, dependencies, `for`, `use` and `independent` may "
                             "appear inside a loop or a shape", s.loc)

    def _nested(self, s: A.Stmt, env) -> None:
        if not isinstance(s, _BODY):
            self.error("misplaced-statement", "only blocks, dependencies, `for`, `use` and `independent` may "
                       "appear inside a loop or a shape", s.loc)
            return
        self._guard(self._body, s, True, env)

    def _use(self, s: A.Use, env) -> None:
        shape = self.shapes.get(s.name)
        if shape is None:
            known = ", ".join(self.shapes) or "none defined"
            raise self.error("unknown-name", f"unknown shape `{s.name}` (shapes: {known})", s.loc)
        if s.name in self._using:
            raise self.error("shape-recursion", f"shape `{s.name}` uses itself", s.loc)
        self.spend(1, f"`use {s.name}`", s.loc)
        names = [p for p, _ in shape.params]
        args: dict[str, object] = {}
        for i, (key, expr, loc) in enumerate(s.args):
            if key is None:
                if i >= len(names):
                    raise self.error("shape-args", f"shape `{s.name}` takes {len(names)} "
                                     f"argument(s), got more", loc)
                key = names[i]
            elif key not in names:
                raise self.error("shape-args", f"shape `{s.name}` has no parameter `{key}` "
                                 f"(parameters: {', '.join(names) or 'none'})", loc)
            if key in args:
                raise self.error("shape-args", f"argument `{key}` given twice", loc)
            args[key] = self.num(expr, env)
        scope = ChainMap(args, self.params)
        for p, default in shape.params:
            if p not in args:
                if default is None:
                    raise self.error("shape-args", f"shape `{s.name}` needs argument `{p}`", s.loc)
                args[p] = self.num(default, scope)
        self._using.append(s.name)
        try:
            for t in shape.body:
                self._nested(t, scope)
        finally:
            self._using.pop()

    def _block(self, s: A.BlockDecl, env) -> None:
        build_block(self, s, env)
