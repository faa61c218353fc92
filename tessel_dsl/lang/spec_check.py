"""Semantic checks of an instantiated `Spec`, all problems collected into one `SpecError`.

Works on any Spec, whether parsed from text or built in Python, and never relies on the spec
being well-formed: unknown names and cycles are found here before anything walks the graph.

Codes: ``bad-devices``, ``bad-memory``, ``bad-microbatches``, ``duplicate-name``, ``empty-devices``,
``device-range``, ``duplicate-device``, ``non-positive-time``, ``missing-forward``,
``unknown-name``, ``cycle``, ``memory-infeasible``, ``unknown-metric``, ``bad-expect``,
``backward-before-forward``, ``negative-memory``, ``memory-not-freed``, ``bad-link``, ``too-large``
(a quantity beyond `tessel_dsl.limits`, the table plan loading applies too), ``bad-mode`` (an
inference spec holding backward blocks).

The same checks run on the spec inside every plan that is loaded (`plan_check.validate_plan`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from tessel_dsl.analysis import forwards_not_ancestors, microbatch_memory
from tessel_dsl.errors import Diagnostic, Location, SpecError
from tessel_dsl.ir import Kind, Mode, Spec
from tessel_dsl.lang.options import BLOCK_FIELDS
from tessel_dsl.limits import (MAX_BLOCKS, MAX_DEVICES, MAX_INSTANCES, MAX_MICROBATCHES, MAX_NAME, MAX_QUANTITY,
                               MAX_TENSOR_BYTES, MAX_TENSOR_DIMS)
from tessel_dsl.units import memory_in, time_in

__all__ = ["check", "diagnose"]

METRICS = ("bubble", "peak_memory", "period", "makespan", "deadlock_free")
OPS = ("<", "<=", "==", "!=", ">=", ">")
# Of one kind of mistake repeated (a chain over thousands of undefined names), this many are
# reported one by one, then one line says how many more there are.
MAX_REPEATED = 20


def check(spec: Spec) -> Spec:
    """Return `spec` unchanged if it is sound, else raise one SpecError listing every problem."""
    found = diagnose(spec)
    if found:
        raise SpecError(found)
    return spec


def diagnose(spec: Spec, where: dict[str, Location] | None = None) -> list[Diagnostic]:
    """Every semantic problem of `spec`, in a stable order (empty when the spec is sound).
    `where` places problems of the header: the line of each statement (``memory``, ...)."""
    where = where or {}
    out: list[Diagnostic] = []
    if spec.devices < 1:
        out.append(Diagnostic("bad-devices", f"a placement needs at least one device, got {spec.devices}"))
    if spec.memory < 0:
        out.append(Diagnostic("bad-memory", f"memory capacity must not be negative, got {memory_in(spec.units, spec.memory)}"))
    out += _device_memory(spec)
    if spec.microbatches < 1:
        out.append(Diagnostic("bad-microbatches", f"micro-batch count must be at least 1, got {spec.microbatches}"))
    if not spec.blocks:
        out.append(Diagnostic("no-blocks", "the placement declares no blocks", where.get("placement")))
    out += _link(spec)
    out += _blocks(spec)
    out += _limits(spec, where)
    if spec.mode is Mode.INFER:
        out += [Diagnostic("bad-mode", f"an inference spec holds {b.kind.value} block {b.name} (inference "
                           "runs forward blocks only)", b.span) for b in spec.blocks if b.kind.is_backward][:1]
    names = {b.name for b in spec.blocks}
    unknown = [(e, end) for e in spec.edges for end in (e.src, e.dst) if end not in names]
    # Suggestions cost a comparison with every block: offered while that stays cheap.
    known = sorted(names) if unknown and len(names) <= 10_000 else []
    for e, end in unknown[:MAX_REPEATED]:
        out.append(Diagnostic("unknown-name", f"dependency {e.src} -> {e.dst} names "
                              f"{end}, which is not a block{_suggest(end, known)}", e.span))
    if len(unknown) > MAX_REPEATED:
        # A chain over a typo'd range names thousands of missing blocks: say so once.
        more = unknown[MAX_REPEATED:]
        out.append(_More.of("unknown-name", more[0][0].span, len(more)))
    structural = bool(out)
    cycle = _find_cycle(spec) if not any(d.code == "unknown-name" for d in out) else None
    if cycle:
        first = next((e for e in spec.edges if e.src == cycle[0] and e.dst == cycle[1]), None)
        out.append(Diagnostic("cycle", "dependency cycle: " + " -> ".join(cycle),
                              first.span if first else None))
    out += _expectations(spec)
    if not structural and not cycle:
        out += _backward_order(spec)
        out += _memory(spec)
    return cap_repeated(out)


@dataclass(frozen=True)
class _More(Diagnostic):
    """One line standing for `count` more diagnostics of its code (`cap_repeated`)."""

    count: int = 0

    @staticmethod
    def of(code: str, location, count: int) -> "_More":
        return _More(code, f"and {count} more like the ones above", location, count)


def cap_repeated(found: list[Diagnostic]) -> list[Diagnostic]:
    """At most MAX_REPEATED diagnostics of each code (the first ones, in the order given), then
    one line saying how many more of that code there are: a loop or a chain over thousands of
    names repeats one mistake thousands of times."""
    shown: dict[str, int] = {}
    more: dict[str, _More] = {}
    out: list[Diagnostic] = []
    for d in found:
        if isinstance(d, _More) or shown.get(d.code, 0) >= MAX_REPEATED:
            n = d.count if isinstance(d, _More) else 1
            first = more.get(d.code)
            more[d.code] = _More.of(d.code, first.location if first else d.location, (first.count if first else 0) + n)
        else:
            shown[d.code] = shown.get(d.code, 0) + 1
            out.append(d)
    return out + list(more.values())


def _limits(spec: Spec, where: dict[str, Location]) -> list[Diagnostic]:
    """Every quantity within `tessel_dsl.limits`, the table plan loaders hold a plan to: what passes
    here can be searched, written and loaded again. One message per kind of excess."""
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
    elif not out and spec.blocks and not _link(spec):
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


def _backward_order(spec: Spec) -> list[Diagnostic]:
    """A backward-like block consumes its forward's activations: it must come after it."""
    return [Diagnostic("backward-before-forward", f"{b.kind.value} block {b.name} does not depend on its "
                       f"forward {b.forward}, so a schedule could run it first; add the edge "
                       f"`{b.forward} -> ... -> {b.name}` that connects them", b.span)
            for b in forwards_not_ancestors(spec)]


def _blocks(spec: Spec) -> list[Diagnostic]:
    out = []
    seen: dict[str, object] = {}
    by_name = {}
    for b in spec.blocks:
        by_name.setdefault(b.name, b)
    for b in spec.blocks:
        if b.name in seen:
            where = f" (first at {seen[b.name]})" if seen[b.name] else ""
            out.append(Diagnostic("duplicate-name", f"block {b.name} is declared twice{where}", b.span))
        seen.setdefault(b.name, b.span)
        if not b.devices:
            out.append(Diagnostic("empty-devices", f"block {b.name} runs on no device", b.span))
        bad = [d for d in b.devices if not 0 <= d < spec.devices]
        if bad:
            out.append(Diagnostic("device-range", f"block {b.name} is placed on device "
                                  f"{', '.join(map(str, bad))}, but devices are 0..{spec.devices - 1}", b.span))
        if len(set(b.devices)) != len(b.devices):
            out.append(Diagnostic("duplicate-device", f"block {b.name} lists a device twice: "
                                  f"{list(b.devices)}", b.span))
        for option in BLOCK_FIELDS:
            problem = option.check(getattr(b, option.field)) if option.check else None
            if problem:
                out.append(Diagnostic(option.check_code, f"block {b.name} {problem}", b.span))
        if b.kind.is_backward:
            f = by_name.get(b.forward) if b.forward else None
            if f is None or f.kind is not Kind.FORWARD:
                what = (f"names {b.forward}, which is not a forward block" if b.forward
                        else "has no forward block")
                out.append(Diagnostic("missing-forward", f"{b.kind.value} block {b.name} {what}", b.span))
    return out


def _link(spec: Spec) -> list[Diagnostic]:
    """The link's costs: finite and not negative (a bandwidth of 0 is the IR's "no cost")."""
    out = []
    link = spec.link
    for what, value in (("latency", link.latency), ("bandwidth", link.bandwidth)):
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            out.append(Diagnostic("bad-link", f"link {what} must be a number, got {value!r}"))
        elif not math.isfinite(value) or value < 0:
            out.append(Diagnostic("bad-link", f"link {what} must be a finite number >= 0, got {value!r}"))
    return out


def _find_cycle(spec: Spec) -> list[str] | None:
    """One dependency cycle as a closed path (first name repeated at the end), or None."""
    succ: dict[str, list[str]] = {b.name: [] for b in spec.blocks}
    for e in spec.edges:
        succ.setdefault(e.src, []).append(e.dst)
    color: dict[str, int] = {}
    for root in succ:
        if color.get(root):
            continue
        stack = [(root, iter(succ[root]))]
        path = [root]
        color[root] = 1
        while stack:
            node, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                color[node] = 2
                stack.pop()
                path.pop()
            elif color.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            elif not color.get(nxt):
                color[nxt] = 1
                stack.append((nxt, iter(succ.get(nxt, []))))
                path.append(nxt)
    return None


def _device_memory(spec: Spec) -> list[Diagnostic]:
    """Per-device memory of a spec built in Python: one entry per device, nothing negative, no
    reserve above its device's capacity (text specs get these errors at the line that says it)."""
    out: list[Diagnostic] = []
    for what, values in (("device_memory", spec.device_memory), ("reserved", spec.reserved)):
        if values and len(values) != spec.devices:
            out.append(Diagnostic("bad-memory", f"{what} lists {len(values)} devices, the spec has {spec.devices}"))
        elif any(v < 0 for v in values):
            out.append(Diagnostic("bad-memory", f"{what} must not be negative, got {list(values)}"))
    if out or spec.devices < 1:
        return out
    for d in range(spec.devices):
        if spec.reserved_on(d) and spec.capacity(d) < 0 <= spec.total_capacity(d):
            out.append(Diagnostic("reserve-too-large", f"device {d} reserves {memory_in(spec.units, spec.reserved_on(d))} "
                                  f"of its {memory_in(spec.units, spec.total_capacity(d))} (capacity left below zero)"))
    return out


def _memory(spec: Spec) -> list[Diagnostic]:
    out = _memory_balance(spec)
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


def _expectations(spec: Spec) -> list[Diagnostic]:
    out = []
    for x in spec.expectations:
        if x.metric not in METRICS:
            out.append(Diagnostic("unknown-metric", f"cannot expect `{x.metric}`: metrics are "
                                  f"{', '.join(METRICS)}", x.span))
        elif x.op not in OPS:
            out.append(Diagnostic("bad-expect", f"unknown comparison {x.op!r}", x.span))
        elif isinstance(x.value, str) and x.value not in ("M", "lower_bound"):
            out.append(Diagnostic("bad-expect", f"unknown symbol {x.value!r} (use a number, M or "
                                  "lower_bound)", x.span))
    return out


def _suggest(name: str, names: list[str]) -> str:
    import difflib

    close = difflib.get_close_matches(name, names, n=1)
    return f" (did you mean {close[0]}?)" if close else ""
