"""The syntax tree of a `.tsl` file: plain dataclasses built from lark's parse tree.

Nothing here is evaluated yet: expressions still mention parameters and loop variables, names may
be templates such as ``F{i}``. `lang_tree` builds this tree from lark's; `lang_eval` turns it into
the IR. Every node carries the
`Location` it came from, so later diagnostics can point at the source.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from typing import Union

from tessel_dsl.errors import Location

# ---- expressions ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Num:
    value: int | Fraction  # a literal with a decimal point is exact
    loc: Location


@dataclass(frozen=True)
class Var:
    name: str
    loc: Location


@dataclass(frozen=True)
class BinOp:
    op: str
    left: "Expr"
    right: "Expr"
    loc: Location


@dataclass(frozen=True)
class Neg:
    operand: "Expr"
    loc: Location


Expr = Union[Num, Var, BinOp, Neg]


@dataclass(frozen=True)
class Name:
    """A block name, possibly templated: ``F{i+1}`` is parts ("F", <i+1>)."""

    text: str
    parts: tuple[str | Expr, ...]
    loc: Location


@dataclass(frozen=True)
class Quantity:
    """A number with an optional unit (``3``, ``2.5ms``, ``80 GB``, ``3x``)."""

    expr: Expr
    unit: str | None
    loc: Location


@dataclass(frozen=True)
class Percent:
    value: float
    loc: Location


@dataclass(frozen=True)
class Rate:
    """A bandwidth: a number, optionally with ``UNIT/UNIT`` such as ``GB/s``."""

    expr: Expr
    unit: str | None
    per: str | None
    loc: Location


@dataclass(frozen=True)
class Range:
    """``lo..hi``, both ends included."""

    lo: Expr
    hi: Expr
    loc: Location


# ---- statements -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Stmt:
    loc: Location


@dataclass(frozen=True)
class Placement(Stmt):
    name: str


@dataclass(frozen=True)
class Param(Stmt):
    name: str
    value: Expr | None


@dataclass(frozen=True)
class Devices(Stmt):
    count: Expr


@dataclass(frozen=True)
class MemSize:
    """A memory size, possibly a sum of sizes: ``80GB - 6GB`` is terms ((+1, 80GB), (-1, 6GB))."""

    terms: tuple[tuple[int, Quantity], ...]
    loc: Location


@dataclass(frozen=True)
class Memory(Stmt):
    train: MemSize
    infer: MemSize | None
    reserve: MemSize | None = None
    # `on ...`: the devices this line is for; None for the default line (every device).
    on: tuple["DevSet", ...] | None = None


@dataclass(frozen=True)
class Microbatches(Stmt):
    count: Expr


@dataclass(frozen=True)
class ModeStmt(Stmt):
    mode: str


@dataclass(frozen=True)
class Resolution(Stmt):
    what: str  # "time" or "memory"
    unit: Quantity
    round: bool = False  # `resolution time 1ms round`: inexact quantities are rounded, and reported


@dataclass(frozen=True)
class LinkStmt(Stmt):
    latency: Quantity | None
    bandwidth: Rate | None


@dataclass(frozen=True)
class Include(Stmt):
    path: str


@dataclass(frozen=True)
class DevAll:
    loc: Location


@dataclass(frozen=True)
class DevRange:
    lo: Expr
    hi: Expr | None  # None: a single device
    loc: Location


@dataclass(frozen=True)
class DevList:
    items: tuple[Expr, ...]
    loc: Location


DevSet = Union[DevAll, DevRange, DevList]


@dataclass(frozen=True)
class BlockDecl(Stmt):
    kind: str
    name: Name
    of: Name | None
    devices: DevSet | None
    # option name -> value, in source order; duplicates are kept so they can be reported.
    options: tuple[tuple[str, object, Location], ...] = ()


@dataclass(frozen=True)
class NodeName:
    name: Name


@dataclass(frozen=True)
class NodeGroup:
    names: tuple[Name, ...]
    loc: Location


@dataclass(frozen=True)
class NodeFor:
    """``{F{i} for i in a..b}`` (a group) or ``chain(F{i} for i in a..b)`` (a sequence)."""

    name: Name
    var: str
    range: Range
    sequence: bool
    loc: Location


Node = Union[NodeName, NodeGroup, NodeFor]


@dataclass(frozen=True)
class TensorAnn:
    dims: tuple[Expr, ...]
    dtype: str
    loc: Location


@dataclass(frozen=True)
class Edges(Stmt):
    nodes: tuple[Node, ...]
    tensor: TensorAnn | None


@dataclass(frozen=True)
class Independent(Stmt):
    """``independent V0, T0``: source blocks meant to start paths of their own."""

    names: tuple[Name, ...]


@dataclass(frozen=True)
class Derive(Stmt):
    time: Quantity | None


@dataclass(frozen=True)
class For(Stmt):
    var: str
    range: Range
    body: tuple[Stmt, ...]


@dataclass(frozen=True)
class ShapeDef(Stmt):
    name: str
    params: tuple[tuple[str, Expr | None], ...]
    body: tuple[Stmt, ...]


@dataclass(frozen=True)
class Use(Stmt):
    name: str
    args: tuple[tuple[str | None, Expr, Location], ...]


@dataclass(frozen=True)
class Expect(Stmt):
    metric: str
    op: str | None
    value: Quantity | Percent | None
    at: tuple[str, Expr] | None


@dataclass
class Module:
    """One parsed file."""

    file: str
    stmts: list[Stmt] = field(default_factory=list)
