"""Semantic checks of an instantiated `Spec`, all problems collected into one `SpecError`.

Works on any Spec, whether parsed from text or built in Python, and never relies on the spec
being well-formed: unknown names and cycles are found here before anything walks the graph.

Codes: ``bad-devices``, ``bad-memory``, ``bad-microbatches``, ``duplicate-name``, ``empty-devices``,
``device-range``, ``duplicate-device``, ``non-positive-time``, ``missing-forward``,
``unknown-name``, ``cycle``, ``memory-infeasible``, ``unknown-metric``, ``bad-expect``,
``backward-before-forward``, ``bad-link``, and from `tessel_dsl.spec_rules` (which plan loading
applies to the spec inside every plan too): ``negative-memory``, ``memory-not-freed``,
``too-large`` (a quantity beyond `tessel_dsl.limits`), ``bad-mode`` (an inference spec holding
backward blocks).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from tessel_dsl.analysis import forwards_not_ancestors
from tessel_dsl.errors import Diagnostic, Location, SpecError
from tessel_dsl.ir import Kind, Spec
from tessel_dsl.lang.options import BLOCK_FIELDS
from tessel_dsl.spec_rules import limit_problems, memory_problems, mode_problems
from tessel_dsl.units import memory_in

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
    out += limit_problems(spec, where)
    out += mode_problems(spec)
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
        out += memory_problems(spec)
    return cap_repeated(out)


@dataclass(frozen=True)
class _More(Diagnostic):
    """One line standing for `count` more diagnostics of its code (`cap_repeated`)."""

    count: int = 0

    @staticmethod
    def of(code: str, location, count: int) -> "_More":
        return _More(code, f"and {count} more like the ones above", location, count=count)


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
    again: set[str] = set()
    for b in spec.blocks:
        if b.name in seen and seen[b.name] and seen[b.name] == b.span:
            if b.name not in again:  # one line made it more than once: a loop whose name repeats
                out.append(Diagnostic("duplicate-name", f"block {b.name} is declared more than once by this line (in a "
                                      "loop, or a shape used twice, its name must differ each time)", b.span))
            again.add(b.name)
        elif b.name in seen:
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


def source_problems(spec: Spec, declared: list[tuple[str, Location]]) -> list[Diagnostic]:
    """Forward blocks with no input start a micro-batch's path. One is the rule; more than one is
    meant when they are declared (`independent V0, T0`: two towers), but more often a block was
    left unconnected (a head never put after the last layer). Every source but the one that
    reaches the most forward blocks must be declared, or it gets a warning at its block; a
    declared name that is no block is an error (``unknown-name``), and so is one that has an input
    (``not-a-source``)."""
    out: list[Diagnostic] = []
    named = {name for name, _ in declared}
    for name, loc in declared:
        if name not in spec.by_name:
            out.append(Diagnostic("unknown-name", f"`independent` names `{name}`, which is no block", loc))
        elif spec.block(name).kind is not Kind.FORWARD or spec.preds[name]:
            why = (f"it has an input ({spec.preds[name][0]} -> {name})" if spec.preds[name]
                   else f"it is a {spec.block(name).kind.value} block")
            out.append(Diagnostic("not-a-source", f"`independent` names {name}, but {why}: only a forward "
                                  "block with no input starts a path", loc))
    sources = [b.name for b in spec.blocks if b.kind is Kind.FORWARD and not spec.preds[b.name]]
    if len(sources) < 2:
        return out
    reach = {s: _forward_reach(spec, s) for s in sources}
    main = max(sources, key=lambda s: len(reach[s]))  # the first of the longest, in block order
    ends = [b for b in reach[main] if not any(spec.block(x).kind is Kind.FORWARD for x in spec.succs[b])]
    for s in sources:
        if s == main or s in named:
            continue
        joins = next((b for b in reach[s] if b in reach[main]), None)
        if joins is not None:  # e.g. an embedding beside a vision tower, both feeding the first layer
            said = (f"forward block {s} has no input, and neither has {main}, whose path it joins at {joins}: "
                    f"if {s} reads an input of its own, declare it: `independent {s}`")
        else:
            after = f" (e.g. `{ends[-1]} -> {s}`)" if ends else ""
            said = (f"forward block {s} has no input, and neither has {main} ({len(reach[main])} forward blocks "
                    f"from it): a micro-batch enters at both. Connect {s} after the block that feeds it{after}, "
                    f"or declare that it starts a path of its own: `independent {s}`")
        out.append(Diagnostic("several-sources", said, spec.block(s).span, severity="warning"))
    return out


def _forward_reach(spec: Spec, start: str) -> list[str]:
    """The forward blocks reachable from `start` (itself included), in block order."""
    seen, todo = {start}, [start]
    while todo:
        for nxt in spec.succs[todo.pop()]:
            if nxt not in seen and spec.block(nxt).kind is Kind.FORWARD:
                seen.add(nxt)
                todo.append(nxt)
    return [b.name for b in spec.blocks if b.name in seen]
