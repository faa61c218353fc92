"""Values in a `.tsl` file: expressions, whole numbers, times, memory sizes and name templates.

A mixin of the evaluator: every method records a diagnostic and raises `Skip` when a value
cannot be computed, so the statement that needed it is abandoned and evaluation goes on.

Arithmetic is exact: a literal with a decimal point is the `Fraction` its digits say
(``2.000000001`` is 2000000001/10^9, not the nearest float) and unit scales are exact too, so a
quantity that is not a whole number of its resolution is always reported, however close it is.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from decimal import Decimal, localcontext
from fractions import Fraction

from tessel_dsl import units as U
from tessel_dsl.errors import Diagnostic, Location
from tessel_dsl.lang import syntax as A
from tessel_dsl.limits import MAX_BLOCKS, MAX_DENOMINATOR, MAX_DEVICES, MAX_NUMBER  # noqa: F401  (re-exported)

_IDENT = re.compile(r"[A-Za-z_][A-Za-z_0-9]*\Z")


class Skip(Exception):
    """Abandon the current statement; its diagnostic has already been recorded."""


UNSET = object()  # a parameter with no value: its uses are skipped without a second message
DEFINING = object()  # a parameter whose own value is being computed: a use of it is an error


Number = int | Fraction  # what an expression evaluates to


def exact(x: Number | float) -> Number:
    """`x` as an int when it is whole, else as a Fraction (a float by the decimal it prints as)."""
    if isinstance(x, float):
        x = Fraction(repr(x))
    elif not isinstance(x, Fraction):
        return int(x)
    return x.numerator if x.denominator == 1 else x


_SCALES = {unit: Fraction(repr(size)) for table in (U.TIME_UNITS, U.MEMORY_UNITS) for unit, size in table.items()}


def scale(table: dict, unit: str) -> Fraction:
    """A unit's size from `units` tables, exactly (``1e-09`` s for ``ns`` is 1/10^9)."""
    return _SCALES[unit] if unit in _SCALES else Fraction(repr(table[unit]))


def show_number(x) -> str:
    """A number as a user would write it: ``2``, ``2.000000001``; one without a short decimal
    form (``1/3``) to 12 significant digits."""
    if isinstance(x, Fraction):
        if x.denominator == 1:
            return str(x.numerator)
        d = x.denominator
        for p in (2, 5):
            while d % p == 0:
                d //= p
        if d == 1 and x.denominator <= 10 ** 30:
            with localcontext() as ctx:
                ctx.prec = 80
                return format((Decimal(x.numerator) / Decimal(x.denominator)).normalize(), "f")
        return f"{float(x):.12g}"
    return U.format_number(x)


@dataclass
class ForwardOptions:
    """What a forward block says about its derived backward and its inference footprint."""

    grad_name: str | None = None
    grad_time: tuple[str, Number] | None = None  # ("x", ratio) or ("abs", units)
    infer_memory: int = 0


class Values:
    """Expression evaluation and unit conversion; needs `diags` and the two resolutions."""

    diags: list[Diagnostic]
    _time_res: tuple[Fraction, str] | None  # seconds per unit, exactly; the label
    _mem_res: tuple[int, str] | None
    rounding: set[str]  # "time" and/or "memory": the resolutions declared with `round`
    rounded: list[Diagnostic]  # what rounding changed, one note per quantity and place

    def error(self, code: str, message: str, loc: Location | None) -> Skip:
        d = Diagnostic(code, message, loc)
        seen = self.__dict__.setdefault("_diag_set", set())
        if d not in seen:  # a loop body repeats the same mistake once per iteration
            seen.add(d)
            self.diags.append(d)
        return Skip()

    def num(self, e: A.Expr, env) -> Number:
        if isinstance(e, A.Num):
            if abs(e.value) > MAX_NUMBER:
                raise self.error("bad-value", f"number out of range (at most {MAX_NUMBER:.0e})", e.loc)
            return self._fine(exact(e.value), e.loc)
        if isinstance(e, A.Var):
            v = env.get(e.name, None) if "{" not in e.name else None
            if v is UNSET:
                raise Skip()
            if v is DEFINING:
                raise self.error("unknown-name", f"parameter `{e.name}` is used in its own definition "
                                 "(a parameter may use only those declared before it)", e.loc)
            if v is None:
                raise self.error("unknown-name", f"`{e.name}` is not a parameter or loop variable", e.loc)
            return v
        if isinstance(e, A.Neg):
            return -self.num(e.operand, env)
        a, b = self.num(e.left, env), self.num(e.right, env)
        if e.op == "+":
            r = a + b
        elif e.op == "-":
            r = a - b
        elif e.op == "*":
            r = a * b
        elif e.op == "%":
            # (the remainder takes the divisor's sign, as in Python: `-1 % 8` is 7)
            if b == 0:
                raise self.error("bad-value", "modulo by zero", e.loc)
            r = a % b
        else:
            if b == 0:
                raise self.error("bad-value", "division by zero", e.loc)
            r = Fraction(a) / b
        if abs(r) > MAX_NUMBER:
            raise self.error("bad-value", "number out of range", e.loc)
        return self._fine(exact(r), e.loc)

    def _fine(self, r: Number, loc) -> Number:
        """Exact values stay small: a fraction finer than 1/MAX_DENOMINATOR (dozens of decimal
        places, or a long chain of divisions) is refused rather than carried or rounded."""
        if isinstance(r, Fraction) and r.denominator > MAX_DENOMINATOR:
            raise self.error("bad-value", f"number too fine: {show_number(r)} needs a denominator above "
                             f"{MAX_DENOMINATOR:.0e} to be exact", loc)
        return r

    def integer(self, e: A.Expr, env) -> int:
        v = self.num(e, env)
        if not isinstance(v, int):
            raise self.error("not-integer", f"expected a whole number here, got {show_number(v)}",
                             getattr(e, "loc", None))
        return v

    def plain(self, q: A.Quantity, env) -> Number:
        if q.unit is not None:
            raise self.error("unknown-unit", f"no unit expected here, got `{q.unit}`", q.loc)
        return self.num(q.expr, env)

    def _need_time_res(self, loc: Location) -> Fraction:
        if self._time_res is None:
            raise self.error("missing-resolution", "a time with a unit needs `resolution time ...` "
                             "(e.g. `resolution time 1ms`)", loc)
        return self._time_res[0]

    def time_units(self, q: A.Quantity, env, whole: bool = True) -> Number:
        """A time in units of the resolution: an int (`whole`: anything else is an error) or exact."""
        value = self.num(q.expr, env)
        if q.unit is not None:
            if q.unit not in U.TIME_UNITS:
                raise self.error("unknown-unit", f"`{q.unit}` is not a time unit (use one of "
                                 f"{U.describe(U.TIME_UNITS)})", q.loc)
            factors = self.__dict__.setdefault("_time_factors", {})  # unit -> its size in resolutions
            factor = factors.get(q.unit)
            if factor is None:
                factor = factors[q.unit] = exact(scale(U.TIME_UNITS, q.unit) / self._need_time_res(q.loc))
            units = exact(value * factor)
            return self._whole(units, value, q, "time") if whole else units
        if whole and not isinstance(value, int):
            raise self.error("not-integer", f"time {show_number(value)} is not a whole number of "
                             "units (declare `resolution time ...` and write a unit)", q.loc)
        return value

    def memory_units(self, q: A.Quantity, env) -> int:
        value = self.num(q.expr, env)
        if q.unit is not None:
            if q.unit not in U.MEMORY_UNITS:
                raise self.error("unknown-unit", f"`{q.unit}` is not a memory unit (use one of "
                                 f"{U.describe(U.MEMORY_UNITS)})", q.loc)
            if self._mem_res is None:
                raise self.error("missing-resolution", "a memory size with a unit needs "
                                 "`resolution memory ...` (e.g. `resolution memory 1GB`)", q.loc)
            size = value * U.MEMORY_UNITS[q.unit]
            if isinstance(size, int) and size % self._mem_res[0] == 0:
                return size // self._mem_res[0]  # the common case, without fractions
            return self._whole(exact(Fraction(size, self._mem_res[0])), value, q, "memory")
        if not isinstance(value, int):
            raise self.error("not-integer", f"memory {show_number(value)} is not a whole number "
                             "of units", q.loc)
        return value

    def memory_size(self, size: A.MemSize, env) -> int:
        """A memory size that may add and subtract sizes (``80GB - 6GB``), in integer units."""
        units = {q.unit is not None for _, q in size.terms}
        if len(units) > 1:
            raise self.error("unknown-unit", "a memory sum needs a unit on every size (`80GB - 6GB`) "
                             "or on none", size.loc)
        if len(size.terms) == 1:
            sign, q = size.terms[0]
            return sign * self.memory_units(q, env)
        if units == {False}:
            total = sum(sign * self.num(q.expr, env) for sign, q in size.terms)
            q = size.terms[0][1]
            return self.memory_units(A.Quantity(A.Num(total, q.loc), None, q.loc), env)
        # Exact as a whole: `8GB + 1GB - 500MB + 500MB` is 9 units of 1GB though 500MB alone is not.
        total_bytes: Number = 0
        for sign, q in size.terms:
            self.memory_units(A.Quantity(A.Num(0, q.loc), q.unit, q.loc), env)  # unit and resolution
            total_bytes += sign * self.num(q.expr, env) * U.MEMORY_UNITS[q.unit]
        if abs(total_bytes) > MAX_NUMBER * self._mem_res[0]:
            raise self.error("bad-value", "number out of range", size.loc)
        unit = self._mem_res[1].lstrip("0123456789.")  # the resolution's unit names the sum in errors
        value = exact(Fraction(total_bytes) / U.MEMORY_UNITS[unit])
        return self._whole(exact(Fraction(total_bytes) / self._mem_res[0]), value,
                           A.Quantity(A.Num(value, size.loc), unit, size.loc), "memory")

    def _whole(self, units: Number, value: Number, q: A.Quantity, what: str) -> int:
        """`units` as an integer, or an error: a quantity is never rounded silently. Under
        `resolution ... round` it is rounded to the nearest unit (half up; a positive time to at
        least one unit) and a ``rounded`` note says so (`Spec.warnings`)."""
        if not isinstance(units, int):
            res = self._time_res if what == "time" else self._mem_res
            if what in self.rounding:
                whole = math.floor(units + Fraction(1, 2))
                if what == "time" and units > 0:
                    whole = max(1, whole)
                unit = res[1].lstrip("0123456789.")
                step = exact(Fraction(res[1][:len(res[1]) - len(unit)]))
                note = Diagnostic("rounded", f"{what} {show_number(value)}{q.unit} is {show_number(units)} units of "
                                  f"`resolution {what} {res[1]}`: rounded to {show_number(whole * step)}{unit}",
                                  q.loc, severity="note")
                if note not in self.rounded:  # a loop repeats the same quantity once per iteration
                    self.rounded.append(note)
                return whole
            raise self.error("inexact-quantity", f"{what} {show_number(value)}{q.unit} is {show_number(units)} "
                             f"units of `resolution {what} {res[1]}`, not a whole number; write a multiple "
                             f"of the resolution, declare a finer one, or let it be rounded: "
                             f"`resolution {what} {res[1]} round`", q.loc)
        return units

    def grad_time(self, q: A.Quantity, env) -> tuple[str, Number]:
        """A backward time: a ratio of the forward's (``3x``) or an absolute time."""
        if q.unit == U.RATIO_UNIT:
            r = self.num(q.expr, env)
            if r <= 0:
                raise self.error("non-positive-time", "a backward time ratio must be positive", q.loc)
            return ("x", r)
        return ("abs", self.time_units(q, env))

    def render(self, name: A.Name, env) -> str:
        """A concrete block name from a template such as ``F{i+1}``."""
        out = []
        for p in name.parts:
            out.append(p if isinstance(p, str) else str(self.integer(p, env)))
        text = "".join(out)
        if not _IDENT.match(text):
            raise self.error("bad-name", f"`{name.text}` gives `{text}`, which is not a name "
                             "(letters, digits, _; not starting with a digit)", name.loc)
        return text
