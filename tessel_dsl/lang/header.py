"""The header statements of a `.tsl` file, as the evaluator reads them: `param`, `resolution`,
`placement`, `devices`, `memory` (the default line and `on DEVICES` lines), `microbatches`,
`mode`, `link`, `derive backward` and `expect`.

`HeaderStatements` is a part of `evaluate.Evaluator` (a mixin): its methods record what they read
on the evaluator's `Program` (`self.out`) and raise the evaluator's diagnostics.
"""
from __future__ import annotations

from fractions import Fraction

from tessel_dsl import units as U
from tessel_dsl.ir import Expectation, Link
from tessel_dsl.lang import syntax as A
from tessel_dsl.lang.memory import resolve_device_memory
from tessel_dsl.lang.values import (
    DEFINING,
    MAX_DEVICES,
    MAX_NUMBER,
    UNSET,
    Number,
    Skip,
    exact,
    scale,
    show_number,
)

METRICS = ("bubble", "peak_memory", "period", "makespan", "deadlock_free")
SYMBOLS = ("M", "lower_bound")  # expectation values resolved later, against the searched plan
_BANDWIDTH_DIGITS = 6  # bandwidths are stored rounded, so a plan file reads back equal


class HeaderStatements:
    """The evaluator's methods for the header statements (see the module docstring)."""

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
