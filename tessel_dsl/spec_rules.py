"""The rules a spec's numbers obey beyond its structure, shared by `tessel check`
(`lang.spec_check`, for text and for specs built in Python) and plan loading (`plan_check`, for the
spec inside a plan), so a plan file holds no spec that a `.tsl` file could not:

- the limits of `tessel_dsl.limits`, the one table a spec is checked against when it is parsed
  and a plan when it is loaded (``too-large``);
- one micro-batch's memory on a device: never below zero, freed by the end in training, within
  the device's capacity (``negative-memory``, ``memory-not-freed``, ``memory-infeasible``);
- an inference spec runs forward blocks only (``bad-mode``).

They assume a structurally sound spec (known names, no cycle): both callers check that first.
"""
from __future__ import annotations

import math

from tessel_dsl.analysis import microbatch_memory
from tessel_dsl.errors import Diagnostic, Location
from tessel_dsl.ir import Kind, Mode, Spec
from tessel_dsl.limits import (
    MAX_BLOCKS,
    MAX_DEVICES,
    MAX_INSTANCES,
    MAX_MICROBATCHES,
    MAX_NAME,
    MAX_QUANTITY,
    MAX_TENSOR_BYTES,
    MAX_TENSOR_DIMS,
)
from tessel_dsl.units import memory_in, time_in


def mode_problems(spec: Spec) -> list[Diagnostic]:
    """An inference spec holds no backward-like block (the first one is named)."""
    if spec.mode is not Mode.INFER:
        return []
    return [Diagnostic("bad-mode", f"an inference spec holds {b.kind.value} block {b.name} (inference "
                       "runs forward blocks only)", b.span) for b in spec.blocks if b.kind.is_backward][:1]


def _finite_link(spec: Spec) -> bool:
    return all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0
               for v in (spec.link.latency, spec.link.bandwidth))


def limit_problems(spec: Spec, where: dict[str, Location] | None = None) -> list[Diagnostic]:
    """Every quantity within `tessel_dsl.limits`, the table plan loaders hold a plan to: what passes
    here can be searched, written and loaded again. One message per kind of excess."""
    where = where or {}
    out: list[Diagnostic] = []
    units = spec.units

    def over(what: str, value: int, limit: int, loc, hint: str) -> None:
        out.append(Diagnostic("too-large", f"{what} is {value} units, above the limit of {limit}{hint}", loc))

    coarser = " (declare a coarser `resolution memory`)"
    if units.memory_bytes > MAX_QUANTITY:
        out.append(Diagnostic("too-large", f"a memory unit of {units.memory_bytes} bytes is above the limit of "
                              f"{MAX_QUANTITY} bytes", where.get("resolution memory")))
    caps = [("memory capacity", spec.memory)] + [(f"device {d}'s memory", c) for d, c in enumerate(spec.device_memory)] \
        + [(f"device {d}'s reserve", r) for d, r in enumerate(spec.reserved)]
    big = next(((w, c) for w, c in caps if c > MAX_QUANTITY), None)
    if big:
        over(f"{big[0]} ({memory_in(units, big[1])})", big[1], MAX_QUANTITY, where.get("memory"), coarser)
    if len(spec.blocks) > MAX_BLOCKS:
        out.append(Diagnostic("too-large", f"{len(spec.blocks)} blocks, more than {MAX_BLOCKS}", where.get("placement")))
    if spec.devices > MAX_DEVICES:
        out.append(Diagnostic("too-large", f"{spec.devices} devices, more than {MAX_DEVICES}", where.get("devices")))
    for b in spec.blocks:
        if b.time > MAX_QUANTITY:
            over(f"the time of {b.name} ({time_in(units, b.time)})", b.time, MAX_QUANTITY, b.span,
                 " (declare a coarser `resolution time`)")
            break
    for b in spec.blocks:
        if abs(b.memory) > MAX_QUANTITY:
            over(f"the memory of {b.name} ({memory_in(units, b.memory)})", abs(b.memory), MAX_QUANTITY, b.span, coarser)
            break
    name = next((b for b in spec.blocks if len(b.name) > MAX_NAME), None)
    if name:
        out.append(Diagnostic("too-large", f"block name {name.name[:20]}... has {len(name.name)} characters, "
                              f"more than {MAX_NAME}", name.span))
    for e in spec.edges:
        t = e.tensor
        if t is None:
            continue
        if len(t.shape) > MAX_TENSOR_DIMS or t.nbytes > MAX_TENSOR_BYTES or max(t.shape, default=1) > MAX_QUANTITY:
            out.append(Diagnostic("too-large", f"the tensor of {e.src} -> {e.dst} ({len(t.shape)} dimensions, "
                                  f"{t.nbytes} bytes) is beyond the limits of {MAX_TENSOR_DIMS} dimensions of at "
                                  f"most {MAX_QUANTITY} and {MAX_TENSOR_BYTES} bytes", e.span))
            break
    n = max([spec.microbatches] + [x.microbatches for x in spec.expectations if isinstance(x.microbatches, int)])
    if n > MAX_MICROBATCHES or n * len(spec.blocks) > MAX_INSTANCES:
        out.append(Diagnostic("too-large", f"{n} micro-batches x {len(spec.blocks)} blocks: at most {MAX_MICROBATCHES} "
                              f"micro-batches and {MAX_INSTANCES} block instances", where.get("microbatches")))
    elif not out and spec.blocks and _finite_link(spec):
        # Every block and every transfer of every micro-batch one after another: no schedule's
        # start times go beyond this, and a plan's must stay within MAX_QUANTITY.
        link = spec.link
        work = sum(b.time for b in spec.blocks) + sum(
            link.transfer_time(e.tensor.nbytes if e.tensor else 0) for e in spec.edges
            if not (link.latency == 0 and (e.tensor is None or link.bandwidth == 0)))
        if work * n > MAX_QUANTITY:
            out.append(Diagnostic("too-large", f"{n} micro-batches of {time_in(units, round(work))} of work and transfers "
                                  f"each come to {round(work * n)} time units, above the limit of {MAX_QUANTITY} "
                                  "(declare a coarser `resolution time`)", where.get("microbatches") or where.get("link")))
    return out


def memory_problems(spec: Spec, capacity: bool = True) -> list[Diagnostic]:
    """One micro-batch's memory on each device: never below zero, freed by the end in training
    and (`capacity`) within the device's capacity less its reserve."""
    out = _memory_balance(spec)
    if not capacity:
        return out
    need = microbatch_memory(spec)
    for d, n in enumerate(need):
        cap = spec.capacity(d)
        if n > cap:
            has = (f"but each device has {memory_in(spec.units, cap)}" if spec.uniform_memory
                   else f"but device {d} has {memory_in(spec.units, cap)}") + _reserve_note(spec, d)
            out.append(Diagnostic("memory-infeasible", f"one micro-batch needs {memory_in(spec.units, n)} memory on device {d}, "
                                  f"{has} (over by {memory_in(spec.units, n - cap)}); no "
                                  "schedule can fit it", _first_span_on(spec, d)))
    return out


def _reserve_note(spec: Spec, d: int) -> str:
    r = spec.reserved_on(d)
    return f" ({memory_in(spec.units, spec.total_capacity(d))} less {memory_in(spec.units, r)} reserved)" if r else ""


def _memory_balance(spec: Spec) -> list[Diagnostic]:
    """One micro-batch's memory on a device never goes below zero (taken in dependency order), and
    in training what its forwards allocate is freed by its backwards by the end: otherwise every
    micro-batch would leave memory behind. Memory meant to stay belongs to an `other` block."""
    out: list[Diagnostic] = []
    running = [0] * spec.devices
    reported: set[int] = set()
    for name in spec.topo_order:
        b = spec.block(name)
        for d in b.devices:
            running[d] += b.memory
            if running[d] < 0 and d not in reported:
                reported.add(d)
                out.append(Diagnostic("negative-memory", f"{b.name} frees more memory on device {d} than "
                                      f"one micro-batch holds there before it (the running total reaches "
                                      f"{memory_in(spec.units, running[d])} in dependency order)", b.span))
    if spec.mode.value == "train" and any(b.kind.is_backward for b in spec.blocks):
        kept = [0] * spec.devices
        for b in spec.blocks:
            if b.kind is not Kind.OTHER:
                for d in b.devices:
                    kept[d] += b.memory
        for d, k in enumerate(kept):
            if k > 0:
                fwd = [b.name for b in spec.blocks if b.kind is Kind.FORWARD and d in b.devices and b.memory > 0]
                out.append(Diagnostic("memory-not-freed", f"on device {d} the forwards ({', '.join(fwd[:4])}"
                                      f"{', ...' if len(fwd) > 4 else ''}) allocate {memory_in(spec.units, k)} more than the backwards "
                                      "free, so each micro-batch leaves it behind; free it in a backward, or "
                                      "declare memory that stays on an `other` block",
                                      _first_span_on(spec, d)))
    return out


def _first_span_on(spec: Spec, device: int):
    return next((b.span for b in spec.blocks if device in b.devices and b.span), None)
