"""A candidate placement written as a `.tsl` spec (`tessel plan`'s generated specs).

The writer reads the groups of `candidates.Group` (name, devices, units, per-block seconds,
activation and state bytes) without importing it: candidates build the groups and call it.
"""
from __future__ import annotations

import itertools
import math

from tessel_dsl.interop.profiled_spec import nice_floor
from tessel_dsl.lang.derive import backward_name
from tessel_dsl.units import round_units

# Largest action of a candidate in time units: fine enough to rank candidates within a few per
# cent, coarse enough to keep the search quick.
TIME_STEPS = 50
MEMORY_STEPS = 100

_TIME = (("s", 10**9), ("ms", 10**6), ("us", 10**3), ("ns", 1))
_MEM = (("TB", 10**12), ("GB", 10**9), ("MB", 10**6), ("KB", 10**3), ("B", 1))


def _text(amount: int, table) -> str:
    """An integer amount of the base unit (ns, bytes) in the largest unit it is a whole number of."""
    for label, scale in table:
        if amount % scale == 0 and amount >= scale:
            return f"{amount // scale}{label}"
    return f"{amount}{table[-1][0]}"


class SpecWriter:
    """A candidate's `.tsl` text: resolutions sized to its largest block and activation, the
    reserve of what each device holds, the stage-boundary link, its blocks and edges."""

    def __init__(self, name: str, groups: list, devices: int, capacity: int, microbatches: int,
                 split: bool, per_param: int, header: str, shared: list[tuple[str, str, int]] = (),
                 measured: dict[str, float] | None = None, spread_overhead: float = 0.0, hop: float = 0.0):
        self.groups, self.split = groups, split
        # block -> seconds a run measured (`from_run`): they replace the profile's costs; a spread
        # block's measured time holds its compute and collectives, not what it costs beyond them
        self.measured, self.spread_overhead = measured or {}, spread_overhead
        longest = max(max(g.forward, g.input_grad + g.weight_grad, g.backward) for g in groups)
        self.t_res = max(1, round(nice_floor(max(longest, 1e-9) / TIME_STEPS) * 1e9))  # ns
        biggest = max(g.activation_bytes for g in groups)
        self.m_res = max(1, int(nice_floor(max(biggest, 1.0) / MEMORY_STEPS)))
        self.reserve = [0.0] * devices
        for g in groups:
            for d in g.devices:
                self.reserve[d] += g.state_bytes(per_param)
        for a, b, nbytes in shared:  # a tied weight is one tensor on a device that runs both its units
            for d in range(devices):
                self.reserve[d] -= nbytes * min(self._held(a, d), self._held(b, d))
        self.lines = [f"# {h}" for h in header.splitlines()] + [
            f"placement {name.replace('-', '_')}", f"resolution time {_text(self.t_res, _TIME)}",
            f"resolution memory {_text(self.m_res, _MEM)}", f"devices {devices}"]
        lag = round(hop * 1e9 / self.t_res)
        if lag and devices > 1:  # the search keeps it between a block and its consumer elsewhere
            self.lines.append(f"link latency {_text(lag * self.t_res, _TIME)}")
        cap_units = capacity // self.m_res
        self.lines.append(f"memory {self.mem(cap_units)}")
        for d in range(devices):
            r = min(math.ceil(self.reserve[d] / self.m_res), cap_units)
            if r:
                self.lines.append(f"memory {self.mem(cap_units)} reserve {self.mem(r)} on {d}")
        self.lines += [f"microbatches {microbatches}", "mode train", ""]

    def _held(self, unit: str, device: int) -> float:
        """The share of `unit` that `device` holds."""
        return sum(1 / len(g.devices) for g in self.groups
                   if device in g.devices and any(u.name == unit for u in g.units))

    def time(self, seconds: float) -> str:
        return _text(max(1, round_units(seconds * 1e9 / self.t_res, positive=True)) * self.t_res, _TIME)

    def mem(self, units: int) -> str:
        return _text(units * self.m_res, _MEM) if units else "0"

    def act(self, g) -> int:
        """The group's activations a micro-batch in memory units: at least one unit where the
        profile measured any (a block that holds memory must not be written as holding none), none
        where it measured none."""
        if g.activation_bytes <= 0:
            return 0
        return max(1, round_units(g.activation_bytes / self.m_res, positive=True))

    def cost(self, g, block: str, profiled: float) -> str:
        """`block`'s time: measured by a run where given (a spread block's plus the overhead a
        spread block costs beyond what the run timed), else the profile's."""
        if block not in self.measured:
            return self.time(profiled)
        return self.time(self.measured[block] + (self.spread_overhead if len(g.devices) > 1 else 0.0))

    def text(self, devices: int) -> str:
        def on(g) -> str:
            return "all" if len(g.devices) == devices > 1 else ",".join(map(str, g.devices))

        for g in self.groups:
            a = self.act(g)
            if self.split:
                i, w = split_names(g.name)
                self.lines += [f"forward {g.name} on {on(g)} time {self.cost(g, g.name, g.forward)} "
                               f"memory {self.mem(a)}",
                               f"input_grad {i} of {g.name} time {self.cost(g, i, g.input_grad)}",
                               (f"weight_grad {w} of {g.name} time {self.cost(g, w, g.weight_grad)}"
                                + (f" memory -{self.mem(a)}" if a else "")),
                               f"{i} -> {w}"]
            else:
                self.lines.append(f"forward {g.name} on {on(g)} time {self.cost(g, g.name, g.forward)} "
                                  f"memory {self.mem(a)} grad time {self.cost(g, backward_name(g.name), g.backward)}")
        names = [g.name for g in self.groups]
        self.lines.append("")
        self.lines += [f"{a} -> {b}" for a, b in itertools.pairwise(names)]
        if self.split:
            self.lines.append(f"{names[-1]} -> {split_names(names[-1])[0]}")
            self.lines += [f"{split_names(b)[0]} -> {split_names(a)[0]}" for a, b in itertools.pairwise(names)]
        else:
            self.lines.append("derive backward")
        return "\n".join(self.lines) + "\n"


def split_names(forward: str) -> tuple[str, str]:
    """The input- and weight-gradient blocks of a split forward block: F3 -> I3, W3."""
    return f"I{forward[1:]}", f"W{forward[1:]}"


def block_names(groups: list, split: bool) -> set[str]:
    """Every block a candidate's spec has."""
    out = set()
    for g in groups:
        out |= {g.name, *split_names(g.name)} if split else {g.name, backward_name(g.name)}
    return out
