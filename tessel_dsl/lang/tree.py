"""lark's parse tree -> the `lang_ast` dataclasses (no lark object survives this step)."""
from __future__ import annotations

from fractions import Fraction
from typing import Callable

from lark import Token, Transformer, Tree, v_args

from tessel_dsl.errors import Location, SyntaxError_
from tessel_dsl.lang.options import BY_RULE
from tessel_dsl.lang.syntax import (
    BinOp,
    BlockDecl,
    Derive,
    DevAll,
    Devices,
    DevList,
    DevRange,
    Edges,
    Expect,
    Expr,
    For,
    Include,
    Independent,
    LinkStmt,
    Memory,
    MemSize,
    Microbatches,
    ModeStmt,
    Name,
    Neg,
    NodeFor,
    NodeGroup,
    NodeName,
    Num,
    Param,
    Percent,
    Placement,
    Quantity,
    Range,
    Rate,
    Resolution,
    ShapeDef,
    Stmt,
    TensorAnn,
    Use,
    Var,
)
from tessel_dsl.limits import MAX_NUMBER


def _is_token(x: object, *types: str) -> bool:
    return isinstance(x, Token) and (not types or x.type in types)


@v_args(meta=True)
class ToAst(Transformer):
    """Builds the dataclasses above from lark's tree. `parse_expr(text, loc)` parses the inside
    of a name template's braces (it reports syntax errors itself)."""

    def __init__(self, file: str, parse_expr: Callable[[str, Location], Expr]):
        super().__init__()
        self.file = file
        self.parse_expr = parse_expr

    def _loc(self, meta) -> Location:
        return Location(self.file, getattr(meta, "line", 1), getattr(meta, "column", 1))

    def _tloc(self, tok: Token) -> Location:
        return Location(self.file, tok.line or 1, tok.column or 1)

    def _name(self, tok: Token) -> Name:
        text = str(tok)
        loc = self._tloc(tok)
        parts: list[str | Expr] = []
        i = 0
        while i < len(text):
            j = text.find("{", i)
            if j < 0:
                parts.append(text[i:])
                break
            if j > i:
                parts.append(text[i:j])
            k = text.index("}", j)
            inner_loc = Location(self.file, loc.line, loc.column + j + 1)
            parts.append(self.parse_expr(text[j + 1:k], inner_loc))
            i = k + 1
        return Name(text, tuple(parts), loc)

    # expressions
    def number(self, meta, c):
        s = str(c[0])
        whole = s.split(".")[0]
        if len(whole.lstrip("0")) > len(str(MAX_NUMBER)):
            # Checked on the text: int() of thousands of digits is slow or refused outright.
            raise SyntaxError_(f"number {whole[:12]}... has {len(whole)} digits; numbers are at most "
                               f"{MAX_NUMBER:.0e}", self._tloc(c[0]))
        # Exact: the value the digits say, not the nearest float (`lang.values` says why).
        return Num(Fraction(s) if "." in s else int(s), self._tloc(c[0]))

    def var(self, meta, c):
        # A templated name here (``t{i}``) is not a variable; the evaluator reports it as unknown.
        return Var(str(c[0]), self._tloc(c[0]))

    def _bin(op):  # noqa: N805 - helper producing methods
        def f(self, meta, c):
            return BinOp(op, c[0], c[1], self._loc(meta))
        return f

    add, sub, mul, div, mod = _bin("+"), _bin("-"), _bin("*"), _bin("/"), _bin("%")
    del _bin

    def neg(self, meta, c):
        return Neg(c[0], self._loc(meta))

    def pos(self, meta, c):
        return c[0]

    def quantity(self, meta, c):
        return Quantity(c[0], str(c[1]) if len(c) > 1 else None, self._loc(meta))

    def percent(self, meta, c):
        return Percent(float(str(c[0])[:-1]) / 100.0, self._tloc(c[0]))

    def rate(self, meta, c):
        unit = str(c[1]) if len(c) > 1 else None
        per = str(c[2]) if len(c) > 2 else None
        return Rate(c[0], unit, per, self._loc(meta))

    def range(self, meta, c):
        return Range(c[0], c[1], self._loc(meta))

    # header
    def placement(self, meta, c):
        return Placement(self._loc(meta), str(c[0]))

    def param(self, meta, c):
        return Param(self._tloc(c[0]), str(c[0]), c[1] if len(c) > 1 else None)

    def devices(self, meta, c):
        return Devices(self._loc(meta), c[0])

    def memory(self, meta, c):
        parts = {t[0]: t[1] for t in c[1:]}
        return Memory(self._loc(meta), c[0], parts.get("infer"), parts.get("reserve"), parts.get("on"))

    def mem_size(self, meta, c):
        terms, sign = [], 1
        for x in c:
            if isinstance(x, Quantity):
                terms.append((sign, x))
            else:
                sign = -1 if x == "-" else 1
        return MemSize(tuple(terms), self._loc(meta))

    def mem_op(self, meta, c):
        return str(c[0])

    def mem_infer(self, meta, c):
        return ("infer", c[0])

    def mem_reserve(self, meta, c):
        return ("reserve", c[0])

    def mem_on(self, meta, c):
        return ("on", tuple(c))

    def microbatches(self, meta, c):
        return Microbatches(self._loc(meta), c[0])

    def mode(self, meta, c):
        return ModeStmt(self._loc(meta), str(c[0]))

    def resolution_time(self, meta, c):
        return Resolution(self._loc(meta), "time", c[0], len(c) > 1)

    def resolution_memory(self, meta, c):
        return Resolution(self._loc(meta), "memory", c[0], len(c) > 1)

    def latency(self, meta, c):
        return ("latency", c[0])

    def bandwidth(self, meta, c):
        return ("bandwidth", c[0])

    def link(self, meta, c):
        d = dict(c)
        return LinkStmt(self._loc(meta), d.get("latency"), d.get("bandwidth"))

    def include(self, meta, c):
        return Include(self._loc(meta), str(c[0])[1:-1])

    # blocks
    def kind(self, meta, c):
        return str(c[0])

    def dev_all(self, meta, c):
        return DevAll(self._loc(meta))

    def dev_one(self, meta, c):
        return DevRange(c[0], None, self._loc(meta))

    def dev_range(self, meta, c):
        return DevRange(c[0], c[1], self._loc(meta))

    def dev_list(self, meta, c):
        return DevList(tuple(c), self._loc(meta))

    def __default__(self, data, children, meta):
        """Block options (`opt_*` rules): (words, value, location), whatever the option."""
        option = BY_RULE.get(data)
        if option is None:  # pragma: no cover - every other rule has its method
            return Tree(data, children, meta)
        value = self._name(children[0]) if _is_token(children[0], "NAME") else children[0]
        return (option.words, value, self._loc(meta))

    def block(self, meta, c):
        kind, name, rest = c[0], self._name(c[1]), list(c[2:])
        of = None
        if rest and _is_token(rest[0], "NAME"):
            of = self._name(rest.pop(0))
        devs = None
        if rest and isinstance(rest[0], (DevAll, DevRange, DevList)):
            devs = rest.pop(0)
        return BlockDecl(self._tloc(c[1]), kind, name, of, devs, tuple(rest))

    # dependencies
    def node_name(self, meta, c):
        return NodeName(self._name(c[0]))

    def node_group(self, meta, c):
        return NodeGroup(tuple(self._name(t) for t in c), self._loc(meta))

    def node_group_for(self, meta, c):
        return NodeFor(self._name(c[0]), str(c[1]), c[2], False, self._loc(meta))

    def seq(self, meta, c):
        return NodeFor(self._name(c[0]), str(c[1]), c[2], True, self._loc(meta))

    def tensor(self, meta, c):
        return TensorAnn(tuple(c[:-1]), str(c[-1]), self._loc(meta))

    def edges(self, meta, c):
        tensor = c[-1] if isinstance(c[-1], TensorAnn) else None
        nodes = tuple(x for x in c if not isinstance(x, TensorAnn))
        return Edges(self._loc(meta), nodes, tensor)

    def independent(self, meta, c):
        return Independent(self._loc(meta), tuple(self._name(t) for t in c))

    def derive(self, meta, c):
        return Derive(self._loc(meta), c[0] if c else None)

    # loops, shapes
    def for_stmt(self, meta, c):
        return For(self._loc(meta), str(c[0]), c[1], tuple(c[2:]))

    def shape_param(self, meta, c):
        return (str(c[0]), c[1] if len(c) > 1 else None)

    def shape_def(self, meta, c):
        params = tuple(p for p in c[1:] if isinstance(p, tuple))
        body = tuple(s for s in c[1:] if isinstance(s, Stmt))
        return ShapeDef(self._loc(meta), str(c[0]), params, body)

    def arg_pos(self, meta, c):
        return (None, c[0], self._loc(meta))

    def arg_kw(self, meta, c):
        return (str(c[0]), c[1], self._loc(meta))

    def use(self, meta, c):
        return Use(self._tloc(c[0]), str(c[0]), tuple(a for a in c[1:] if a is not None))

    def expect(self, meta, c):
        metric = str(c[0])
        op = value = at = None
        rest = list(c[1:])
        if rest and _is_token(rest[0], "CMP"):
            op, value = str(rest[0]), rest[1]
            rest = rest[2:]
        if rest:
            at = (str(rest[0]), rest[1])
        return Expect(self._tloc(c[0]), metric, op, value, at)

    def start(self, meta, c):
        return [s for s in c if isinstance(s, Stmt)]

