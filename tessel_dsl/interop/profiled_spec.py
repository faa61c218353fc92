"""Profiled costs: turn measured block times and activation sizes into a spec with integer costs.

The measuring itself happens in `tessel_dsl.executor.measure` (it needs torch); this module only does the
arithmetic and writes the result as a flat `.tsl` file, so `tessel search` reads it unchanged:

* time: one resolution for the whole spec, a round 1/2/5 x 10^k seconds chosen so the quickest
  measured action is 2 to 5 units (`resolution time 20us`); actions quicker than 1/200 of the
  slowest are left out of that choice, so the slowest stays below about 1000 units; every
  positive time stays >= 1;
* memory: a forward block costs its measured activation bytes; its backward blocks release them
  in the proportions the original spec gave (so a split I/W keeps its modelling). A spec with a
  physical memory resolution keeps it and its capacity M. A spec in abstract units gets a new
  resolution and a capacity that fits as many micro-batches in flight as the original did, unless
  a capacity is given;
* blocks that could not be measured (and blocks of kind `other`) keep their costs, rescaled to the
  new time resolution when the original one was physical;
* times can also come from a pipelined run (`measurements_from_run`): every block, multi-device
  ones included, with no activation sizes, so memory keeps the spec's costs, units and capacity.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

from tessel_dsl.analysis import max_inflight, microbatch_memory, resident_memory
from tessel_dsl.errors import TesselError
from tessel_dsl.ir import Block, Kind, Mode, Spec, Units
from tessel_dsl.lang.options import BLOCK_FIELDS
from tessel_dsl.units import MEMORY_UNITS, TIME_UNITS, format_number, round_units

# Memory resolutions are round decimal numbers of bytes, so they are labelled in decimal units.
_DECIMAL = {u: v for u, v in MEMORY_UNITS.items() if "i" not in u}


@dataclass(frozen=True)
class Measurement:
    """What was measured for one forward block (seconds and bytes; None when not measured)."""

    block: str
    forward: float | None = None
    backward: float | None = None
    input_grad: float | None = None
    weight_grad: float | None = None
    activation_bytes: int | None = None
    device: str = ""
    note: str = ""

    @property
    def measured(self) -> bool:
        return self.forward is not None


def nice_floor(x: float) -> float:
    """The largest 1, 2 or 5 times a power of ten that is <= x (x > 0)."""
    exp = math.floor(math.log10(x))
    for m in (5, 2, 1):
        v = m * 10.0 ** exp
        if v <= x * (1 + 1e-9):
            return float(f"{v:.3g}")
    return float(f"{10.0 ** exp:.3g}")


def _label(value: float, table: dict[str, float]) -> str:
    """`2e-05` seconds -> ``20us``: the largest unit that keeps the number >= 1."""
    for unit, scale in sorted(table.items(), key=lambda kv: -kv[1]):
        if value >= scale * (1 - 1e-9) and unit != "min":
            return f"{format_number(float(f'{value / scale:.6g}'))}{unit}"
    unit, scale = min(table.items(), key=lambda kv: kv[1])
    return f"{format_number(float(f'{value / scale:.6g}'))}{unit}"


def _physical_time(units: Units) -> bool:
    return units.time_label != "unit"


def apply_measurements(spec: Spec, measurements: list[Measurement], *, time_resolution: float | None = None,
                       capacity_bytes: int | None = None) -> Spec:
    """A copy of `spec` with measured integer costs and the units they are counted in."""
    by_fwd = {m.block: m for m in measurements if m.measured}
    if not by_fwd:
        raise TesselError("no block could be measured, so there are no costs to write")
    seconds = [v for m in by_fwd.values() for v in (m.forward, m.backward, m.input_grad, m.weight_grad)
               if v is not None and v > 0]
    # Actions below 1/200 of the slowest (e.g. the first stage's input gradient, which has no
    # input to differentiate) would force a uselessly fine unit; they round up to 1 unit instead.
    meaningful = [v for v in seconds if v >= max(seconds) / 200]
    res = time_resolution or nice_floor(min(meaningful) / 2)
    old_res = spec.units.time_seconds if _physical_time(spec.units) else None

    def t_units(sec: float | None, old: Block) -> int:
        if sec is None:  # not measured: keep, rescaled when the old unit meant something
            return old.time if old_res is None else round_units(old.time * old_res / res, positive=True)
        return round_units(sec / res, positive=True)

    mem_res, acts = _memory_resolution(spec, by_fwd)
    keep_memory = not acts  # nothing to rescale memory by: keep its units and capacity
    blocks: list[Block] = []
    for b in spec.blocks:
        fwd = b.name if b.kind is Kind.FORWARD else b.forward
        m = by_fwd.get(fwd or "")
        if m is None:
            blocks.append(replace(b, time=t_units(None, b)))
            continue
        sec = {Kind.FORWARD: m.forward, Kind.BACKWARD: m.backward, Kind.INPUT_GRAD: m.input_grad,
               Kind.WEIGHT_GRAD: m.weight_grad}.get(b.kind)
        blocks.append(replace(b, time=t_units(sec, b), memory=_memory(spec, b, fwd, acts)))
    units = Units(res, _label(res, TIME_UNITS), mem_res, _label(mem_res, _DECIMAL) if mem_res > 1 else "B")
    if keep_memory:
        units = replace(units, memory_bytes=spec.units.memory_bytes, memory_label=spec.units.memory_label)
    link = spec.link
    if old_res is not None:
        link = replace(link, latency=link.latency * old_res / res, bandwidth=link.bandwidth * res / old_res)
    out = replace(spec, blocks=tuple(blocks), units=units, link=link, name=f"{spec.name}_profiled",
                  expectations=tuple(e for e in spec.expectations if e.metric in ("bubble", "deadlock_free")
                                     or isinstance(e.value, str)))
    if keep_memory and capacity_bytes is None:
        return out
    out = replace(out, memory=_capacity(spec, out, capacity_bytes))
    return replace(out, **_device_capacity(spec, out, capacity_bytes))


def _device_capacity(old: Spec, new: Spec, capacity_bytes: int | None) -> dict:
    """Per-device capacity and reserve in the profiled spec's memory unit: converted through bytes
    when the original had a memory resolution; with abstract units, each device keeps the number
    of micro-batches it let be in flight (a reserve has no size to carry over then). A capacity
    given for the profile is every device's (the reserves, converted, stay)."""
    if not old.device_memory and not old.reserved:
        return {}
    res, was = new.units.memory_bytes, old.units.memory_bytes
    physical = was > 1
    reserved = tuple(r * was // res for r in old.reserved) if physical else ()
    if capacity_bytes is not None:
        return {"device_memory": (), "reserved": reserved}
    if physical:
        caps = tuple(old.total_capacity(d) * was // res for d in range(old.devices))
        return {"device_memory": caps if set(caps) != {new.memory} else (), "reserved": reserved}
    held_old, held_new, need = resident_memory(old), resident_memory(new), microbatch_memory(new)
    caps = []
    for d in range(old.devices):
        inflight = max(1, old.capacity(d) // held_old[d]) if held_old[d] > 0 else 1
        caps.append(max(inflight * held_new[d], need[d], 1) if held_old[d] > 0 else max(need[d], new.memory))
    caps_t = tuple(caps)
    return {"device_memory": caps_t if set(caps_t) != {new.memory} else (), "reserved": ()}


def measurements_from_run(spec: Spec, block_seconds: dict[str, float], device: str = "") -> list[Measurement]:
    """Measurements from a pipelined run's per-block times (`tessel_dsl.executor` summaries' ``block_seconds``).

    Unlike profiling each block alone, a run times multi-device blocks too, with their collectives
    as the run does them. It measures no activations, so memory costs stay as the spec has them.
    """
    field_of = {Kind.BACKWARD: "backward", Kind.INPUT_GRAD: "input_grad", Kind.WEIGHT_GRAD: "weight_grad"}
    unknown = sorted(set(block_seconds) - {b.name for b in spec.blocks})
    if unknown:
        raise TesselError(f"the run timed blocks the spec does not have: {', '.join(unknown)} "
                          "(was it run with a plan for another spec?)")
    times: dict[str, dict[str, float]] = {}
    for b in spec.blocks:
        sec = block_seconds.get(b.name)
        if sec is None:
            continue
        if b.kind is Kind.FORWARD:
            times.setdefault(b.name, {})["forward"] = sec
        elif b.kind in field_of and b.forward:
            times.setdefault(b.forward, {})[field_of[b.kind]] = sec
    return [Measurement(name, device=device, **t) for name, t in times.items()]


def _memory_resolution(spec: Spec, by_fwd: dict[str, Measurement]) -> tuple[int, dict[str, int]]:
    """Memory resolution in bytes and each measured forward block's activation in those units."""
    sizes = {k: m.activation_bytes or 0 for k, m in by_fwd.items() if m.activation_bytes is not None}
    if spec.units.memory_bytes > 1:
        res = spec.units.memory_bytes
    else:
        positive = [v for v in sizes.values() if v > 0]
        res = max(1, int(nice_floor(min(positive) / 2))) if positive else 1
    return res, {k: round_units(v / res, positive=True) for k, v in sizes.items()}


def _memory(spec: Spec, b: Block, fwd: str, acts: dict[str, int]) -> int:
    if spec.mode is Mode.INFER:
        return 0
    if fwd not in acts:  # activations not measured (times from a run): the spec's costs stand
        return b.memory
    act = acts[fwd]
    if b.kind is Kind.FORWARD:
        return act
    old_fwd = spec.block(fwd).memory
    if old_fwd == 0:
        siblings = [x for x in spec.blocks if x.forward == fwd]
        return -act if len(siblings) == 1 else (-act if b.kind is Kind.WEIGHT_GRAD else 0)
    # Release in the proportions the spec modelled (e.g. I frees part, W the rest).
    share = b.memory / old_fwd
    released = [x for x in spec.blocks if x.forward == fwd]
    if b is released[-1]:  # the last one takes the rounding remainder so the sum stays exact
        before = sum(round(act * x.memory / old_fwd) for x in released[:-1])
        return round(act * sum(x.memory for x in released) / old_fwd) - before
    return round(act * share)


def _capacity(old: Spec, new: Spec, capacity_bytes: int | None) -> int:
    res = new.units.memory_bytes
    if capacity_bytes is not None:
        return capacity_bytes // res
    if old.units.memory_bytes > 1:
        return old.memory
    if new.mode is Mode.INFER:
        return old.memory  # inference blocks hold nothing between blocks: memory stays 0
    # Abstract units: keep the number of micro-batches the original let be in flight.
    inflight = max(1, max_inflight(old))
    return max(inflight * max(resident_memory(new), default=0), max(microbatch_memory(new), default=0), 1)


def _devices(b: Block, spec: Spec) -> str:
    if b.devices == tuple(range(spec.devices)) and spec.devices > 1:  # `all` reads back in this order
        return "all"
    if len(b.devices) == 1:
        return str(b.devices[0])
    return "[" + ", ".join(map(str, b.devices)) + "]"


def _device_memory_lines(spec: Spec) -> list[str]:
    """`memory C reserve R on d, ...` for the devices whose capacity or reserve is not the default
    (devices with the same pair share a line)."""
    groups: dict[tuple[int, int], list[int]] = {}
    for d in range(spec.devices):
        pair = (spec.total_capacity(d), spec.reserved_on(d))
        if pair != (spec.memory, 0):
            groups.setdefault(pair, []).append(d)
    return [f"memory {cap}" + (f" reserve {res}" if res else "") + " on " + ", ".join(map(str, devs))
            for (cap, res), devs in groups.items()]


def spec_to_tsl(spec: Spec, header: str = "") -> str:
    """A flat `.tsl` text for an instantiated spec (parses back to an equal Spec)."""
    lines = [f"# {line}".rstrip() for line in header.splitlines()]
    lines += [f"placement {spec.name}", f"param N = {spec.microbatches}", "",
              f"devices {spec.devices}", f"memory {spec.memory}", "microbatches N", f"mode {spec.mode.value}"]
    lines += _device_memory_lines(spec)
    if _physical_time(spec.units):
        lines.append(f"resolution time {spec.units.time_label}")
    if spec.units.memory_bytes > 1:
        lines.append(f"resolution memory {_label(spec.units.memory_bytes, _DECIMAL)}")
    if spec.link.latency or spec.link.bandwidth:
        parts = []
        if spec.link.latency:
            parts.append(f"latency {_plain(spec.link.latency)}")
        if spec.link.bandwidth:
            parts.append(f"bandwidth {_plain(spec.link.bandwidth)}")
        lines.append("link " + " ".join(parts))
    lines.append("")
    for b in spec.blocks:
        of = f" of {b.forward}" if b.forward else ""
        # The options come from the block option table, so a new IR option is written unasked.
        options = "".join(f" {o.words} {_value_text(getattr(b, o.field))}" for o in BLOCK_FIELDS
                          if o.required or o.always_written or getattr(b, o.field) != o.default)
        lines.append(f"{b.kind.value} {b.name}{of} on {_devices(b, spec)}{options}")
    lines.append("")
    for e in spec.edges:
        tensor = f" : [{', '.join(map(str, e.tensor.shape))}] {e.tensor.dtype}" if e.tensor else ""
        lines.append(f"{e.src} -> {e.dst}{tensor}")
    if spec.expectations:
        lines.append("")
    for x in spec.expectations:
        lines.append("expect " + _expect_text(x))
    return "\n".join(lines) + "\n"


def _value_text(value) -> str:
    return _plain(value) if isinstance(value, float) else str(value)


def _plain(x: float) -> str:
    """A float as plain decimal digits (the grammar has no exponent), reading back exactly."""
    from decimal import Decimal

    text = format(Decimal(repr(float(x))), "f")
    return text[:-2] if text.endswith(".0") else text


def _expect_text(x) -> str:
    text = x.metric
    if x.metric != "deadlock_free":
        value = x.value
        if isinstance(value, (int, float)) and x.metric == "bubble":
            value = f"{format_number(round(value * 100, 6))}%"
        elif isinstance(value, float):
            value = format_number(value)
        text += f" {x.op} {value}"
    if x.microbatches is not None:
        text += f" at N={x.microbatches}"
    return text
