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

from tessel_dsl import units as U
from tessel_dsl.errors import Diagnostic, Location
from tessel_dsl.ir import Block, Edge, Expectation, Link, Units
from tessel_dsl.lang import syntax as A
from tessel_dsl.lang.blocks import build_block
from tessel_dsl.lang.memory import resolve_device_memory
from tessel_dsl.lang.values import (
    DEFINING,
    MAX_BLOCKS,
    MAX_DEVICES,
    MAX_NUMBER,
    UNSET,
    ForwardOptions,
    Number,
    Skip,
    Values,
    exact,
    scale,
    show_number,
)
from tessel_dsl.limits import MAX_EXPANSION, MAX_INCLUDES

METRICS = ("bubble", "peak_memory", "period", "makespan", "deadlock_free")
SYMBOLS = ("M", "lower_bound")  # expectation values resolved later, against the searched plan
_BANDWIDTH_DIGITS = 6  # bandwidths are stored rounded, so a plan file reads back equal
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


class Evaluator(Values):
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

    def _first_header(self, s: A.Stmt) -> None:
        if isinstance(s, A.Param):
            self._param(s)
        elif isinstance(s, A.Resolution):
            self._once(f"resolution {s.what}", s.loc)
            q = s.unit
            value = self.num(q.expr, self.params)
            if value <= 0:
                raise self.error("bad-value", f"the {s.what} resolution must be positive", q.loc)
            table = U.TIME_UNITS if s.what == "time" else U.MEMORY_UNITS
            if q.unit not in table:
                raise self.error("unknown-unit", f"`{q.unit or ''}` is not a {s.what} unit "
                                 f"(use one of {U.describe(table)})", q.loc)
            label = f"{show_number(value)}{q.unit}"
            if s.round:
                self.rounding.add(s.what)
            size = exact(value * scale(table, q.unit))
            if s.what == "time":
                self._time_res = (Fraction(size), label)
            elif not isinstance(size, int):
                self._mem_res = (1, label)  # declared, though refused: its uses are not reported again
                raise self.error("inexact-quantity", f"the memory resolution {label} is {show_number(size)} bytes, "
                                 "not a whole number of bytes", q.loc)
            else:
                self._mem_res = (size, label)

    def _param(self, s: A.Param) -> None:
        if s.name in self.params:
            raise self.error("duplicate-name", f"parameter `{s.name}` is declared twice", s.loc)
        if s.name in self.sets:
            text = self.sets[s.name]
            try:
                # Exact, like a literal; the length bound keeps `1e99999` from being expanded.
                if len(text) > 40 or "_" in text:
                    raise ValueError(text)
                value: Number = exact(Fraction(text.strip()))
            except (ValueError, ZeroDivisionError):
                self.params[s.name] = UNSET
                raise self.error("bad-set-value", f"--set {s.name}={text}: not a number", s.loc) from None
            if abs(value) > MAX_NUMBER:
                self.params[s.name] = UNSET
                raise self.error("bad-set-value", f"--set {s.name}={text}: out of range (at most "
                                 f"{MAX_NUMBER:.0e})", s.loc)
            try:
                value = self._fine(value, s.loc)
            except Skip:
                self.params[s.name] = UNSET
                raise
        elif s.value is None:
            self.params[s.name] = UNSET
            raise self.error("unset-param", f"parameter `{s.name}` has no value: give it one "
                             f"(`param {s.name} = 4`) or pass --set {s.name}=...", s.loc)
        else:
            # Visible while its own value is computed, so that a use of it there is reported;
            # after any failure it is unset, and later uses are skipped without a second message.
            self.params[s.name] = DEFINING
            try:
                value = self.num(s.value, self.params)
            except Skip:
                self.params[s.name] = UNSET
                raise
        self.params[s.name] = value
        self.param_text.append((s.name, show_number(value)))

    def _header(self, s: A.Stmt) -> None:
        o = self.out
        if isinstance(s, A.Placement):
            self._once("placement", s.loc)
            o.name = s.name
        elif isinstance(s, A.Devices):
            self._once("devices", s.loc)
            n = self.integer(s.count, self.params)
            if not 1 <= n <= MAX_DEVICES:
                raise self.error("bad-value", f"devices must be between 1 and {MAX_DEVICES}, got {n}", s.loc)
            o.devices = n
        elif isinstance(s, A.Memory):
            if s.on is not None:
                self._same_units(s)
                self._memory_lines.append(s)  # resolved once `devices` is known
                return
            self._once("memory", s.loc)
            self._same_units(s)
            o.memory = self._capacity(s.train)
            if s.infer is not None:
                o.infer_memory = self._capacity(s.infer)
            if s.reserve is not None:
                o.reserve = self._capacity(s.reserve, "reserved memory")
        elif isinstance(s, A.Microbatches):
            self._once("microbatches", s.loc)
            n = self.integer(s.count, self.params)
            if n < 1:
                raise self.error("bad-value", f"microbatches must be at least 1, got {n}", s.loc)
            o.microbatches = n
        elif isinstance(s, A.ModeStmt):
            self._once("mode", s.loc)
            o.mode = s.mode
        elif isinstance(s, A.LinkStmt):
            self._once("link", s.loc)
            o.link = self._link(s)
        elif isinstance(s, A.Derive):
            self._once("derive backward", s.loc)
            o.derive_loc = s.loc
            o.derive_time = self.grad_time(s.time, self.params) if s.time else ("x", 2)
        elif isinstance(s, A.Expect):
            self._expect(s)

    def _same_units(self, s: A.Memory) -> None:
        """`memory 80GB reserve 35` would read 35 as units of the memory resolution: a size without
        a unit beside one with a unit on the same line is refused, at the bare number."""
        given = [(what, size) for what, size in (("memory", s.train), ("infer", s.infer), ("reserve", s.reserve))
                 if size is not None]
        if any(len({q.unit is None for _, q in size.terms}) > 1 for _, size in given):
            return  # a sum that mixes is refused by `memory_size`, at the sum
        sizes = [(what, size.terms[0][1]) for what, size in given]
        with_unit = next((q for _, q in sizes if q.unit is not None), None)
        bare = next(((what, q) for what, q in sizes if q.unit is None), None)
        if with_unit is None or bare is None:
            return
        what, q = bare
        raise self.error("missing-unit", f"`{what}` has no unit beside `{with_unit.unit}` on this memory line, so it "
                         f"would count units of the memory resolution: write the unit (e.g. "
                         f"`{show_number(self.num(q.expr, self.params))}{with_unit.unit}`)", q.loc)

    def _capacity(self, size: A.MemSize, what: str = "memory capacity") -> int:
        n = self.memory_size(size, self.params)
        if n < 0:
            raise self.error("bad-memory", f"{what} must not be negative, got "
                             f"{U.show_memory(n, *self._mem_show())}", size.loc)
        return n

    def _mem_show(self) -> tuple[int, str]:
        return self._mem_res if self._mem_res else (1, "unit")

    def _device_memory(self) -> None:
        self._memory_locs = resolve_device_memory(self, self._memory_lines)
        o = self.out
        if o.memory is None and o.devices and all(d in o.device_memory for d in range(o.devices)):
            # A `memory ... on d` line for every device says all there is: no default is needed.
            o.memory = max(cap for cap, _ in o.device_memory.values())

    def _link(self, s: A.LinkStmt) -> Link:
        latency = bandwidth = 0.0
        if s.latency is not None:
            latency = self.time_units(s.latency, self.params, whole=False)
        if s.bandwidth is not None:
            r = s.bandwidth
            value = float(self.num(r.expr, self.params))  # stored as a float, rounded (see below)
            if r.unit is not None:
                if r.unit not in U.MEMORY_UNITS or r.per not in U.TIME_UNITS:
                    raise self.error("unknown-unit", f"bandwidth unit `{r.unit}/{r.per or '?'}` is not "
                                     "memory per time (e.g. GB/s)", r.loc)
                res = self._need_time_res(r.loc)
                value = value * U.MEMORY_UNITS[r.unit] / U.TIME_UNITS[r.per] * res
            if value < 0:
                raise self.error("bad-value", "bandwidth must not be negative", r.loc)
            # In the IR a bandwidth of 0 means "no link cost", so a written 0 (or a rate too small
            # for the time unit) would silently turn the slowest link into an infinitely fast one.
            if value == 0:
                raise self.error("bad-link", "bandwidth must be positive (leave `bandwidth` out for "
                                 "transfers that cost no time)", r.loc)
            if round(value, _BANDWIDTH_DIGITS) == 0:
                raise self.error("bad-link", f"bandwidth is {value:.3g} bytes per time unit, which rounds "
                                 "to 0 (give a larger bandwidth or a coarser `resolution time`)", r.loc)
            bandwidth = float(value)
        if latency < 0:
            raise self.error("bad-value", "latency must not be negative", s.loc)
        return Link(latency=round(float(latency), 12), bandwidth=round(bandwidth, _BANDWIDTH_DIGITS))

    def _expect(self, s: A.Expect) -> None:
        if s.metric not in METRICS:
            raise self.error("unknown-metric", f"cannot expect `{s.metric}`: metrics are "
                             f"{', '.join(METRICS)}", s.loc)
        if (s.metric == "deadlock_free") != (s.op is None):
            msg = ("`deadlock_free` takes no comparison" if s.op else
                   f"`expect {s.metric}` needs a comparison, e.g. `expect {s.metric} <= ...`")
            raise self.error("bad-expect", msg, s.loc)
        value: float | str | None = None
        if isinstance(s.value, A.Percent):
            value = s.value.value
        elif isinstance(s.value, A.Quantity):
            q = s.value
            if isinstance(q.expr, A.Var) and q.unit is None and q.expr.name not in self.params \
                    and q.expr.name in SYMBOLS:
                value = q.expr.name
            elif s.metric in ("period", "makespan"):
                value = float(self.time_units(q, self.params, whole=False))
            elif s.metric == "peak_memory":
                value = float(self.memory_units(q, self.params))
            else:
                value = float(self.plain(q, self.params))
        mbs = None
        if s.at is not None:
            key, expr = s.at
            if key not in ("N", "microbatches"):
                raise self.error("bad-expect", f"`at {key}=...`: write `at N=<micro-batches>`", s.loc)
            mbs = self.integer(expr, self.params)
            if mbs < 1:
                raise self.error("bad-value", "`at N=...` needs at least one micro-batch", s.loc)
        self.expectations.append(Expectation(s.metric, s.op or "==", value, mbs, s.loc))

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
