"""Derived backward blocks (training) and the inference projection of a placement.

Naming rule for a derived backward block, in order:

1. the forward block's own ``grad NAME`` option;
2. a forward named ``F<rest>`` (with a non-empty rest) gets ``B<rest>``: F0 -> B0, F12 -> B12;
3. any other forward gets its name plus ``B``: E -> EB, E1 -> E1B, J -> JB, G0 -> G0B.

Its time is the forward's time times the ratio of ``derive backward time 3x`` (default 2x), unless
the forward says ``grad time T`` (absolute) or ``grad time Rx`` (its own ratio). Its memory delta
releases what the forward allocated (minus the forward's delta); it runs on the same devices.

Derived edges mirror the forward graph: every forward edge a -> b gives b' -> a', and every forward
sink (a forward block with no forward successor) gets an edge to its own backward. A forward block
that already has a backward-like block written out (``backward B0 of F0 ...``) is not derived, and
edges between two written-out blocks are left to the user.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import replace

from tessel_dsl.errors import Diagnostic
from tessel_dsl.ir import Block, Edge, Kind
from tessel_dsl.lang.values import Number, exact, show_number


def backward_name(forward: str, explicit: str | None = None) -> str:
    """The predictable name of the derived backward of `forward` (see the module docstring)."""
    if explicit:
        return explicit
    if forward.startswith("F") and len(forward) > 1:
        return "B" + forward[1:]
    return forward + "B"


def _derived_time(f: Block, how: str, amount: Number, own: bool, where, time_label: str,
                  diags: list[Diagnostic]) -> int | None:
    """The backward time of forward `f`, or None after an error: a ratio that does not give a
    whole number of units is refused rather than rounded (1.5x of 3 units is 4.5, never 5)."""
    if how != "x":
        return int(amount)
    time = exact(f.time * amount)  # ratios are exact (`values`): 1.0000000001x is never 1x
    if not isinstance(time, int):
        unit = "units" if time_label == "unit" else f"units of `resolution time {time_label}`"
        line = f"`grad time {show_number(amount)}x` of {f.name}" if own \
            else f"`derive backward time {show_number(amount)}x`"
        diags.append(Diagnostic("inexact-quantity", f"{line} makes the backward of {f.name} "
                                f"{show_number(amount)} x {f.time} = {show_number(time)} {unit}, "
                                f"not a whole number; give {f.name} `grad time T` with a whole time, "
                                "use a ratio that gives one, or declare a finer resolution",
                                f.span if own else (where or f.span)))
        return None
    return time


def derive_backward(blocks: list[Block], edges: list[Edge], ratio: tuple[str, Number],
                    options: dict, diags: list[Diagnostic], where=None,
                    time_label: str = "unit") -> tuple[list[Block], list[Edge]]:
    """Add the mirrored backward blocks and edges; `options` maps forward name -> ForwardOptions.
    `where` is the `derive backward` line, named when its ratio gives a fractional time."""
    names = {b.name for b in blocks}
    written: dict[str, str] = {}  # forward -> its written-out backward (input-grad preferred)
    for b in blocks:
        if b.kind.is_backward and b.forward and b.kind is not Kind.WEIGHT_GRAD:
            written.setdefault(b.forward, b.name)
    derived: dict[str, str] = {}
    new_blocks = list(blocks)
    seen = Counter(b.name for b in blocks)
    for f in reversed(blocks):  # backward runs in reverse, so list it that way too
        if f.kind is not Kind.FORWARD or f.name in written or seen[f.name] > 1:
            continue  # (a name declared twice is reported once, as such, by the spec check)
        opt = options.get(f.name)
        bname = backward_name(f.name, opt.grad_name if opt else None)
        if bname in names:
            diags.append(Diagnostic("duplicate-name", f"the derived backward of {f.name} would be "
                                    f"named {bname}, which already exists (name it with "
                                    f"`grad OTHER` on {f.name})", f.span))
            continue
        own = bool(opt and opt.grad_time)
        how, amount = opt.grad_time if own else ratio
        time = _derived_time(f, how, amount, own, where, time_label, diags)
        if time is None:
            continue
        names.add(bname)
        derived[f.name] = bname
        # Built from the forward so that any other field (devices, span, ...) carries over.
        new_blocks.append(replace(f, name=bname, kind=Kind.BACKWARD, time=time, memory=-f.memory, forward=f.name))
    grad = {**written, **derived}
    forwards = {b.name for b in blocks if b.kind is Kind.FORWARD}
    new_edges = list(edges)
    has_fwd_succ: set[str] = set()
    for e in edges:
        if e.src in forwards and e.dst in forwards:
            has_fwd_succ.add(e.src)
            a, b = grad.get(e.src), grad.get(e.dst)
            if a and b and (e.src in derived or e.dst in derived):
                new_edges.append(replace(e, src=b, dst=a))
    for f in blocks:
        if f.name in derived and f.name not in has_fwd_succ:
            new_edges.append(Edge(f.name, derived[f.name], None, f.span))
    return new_blocks, new_edges


def project_infer(blocks: list[Block], edges: list[Edge], options: dict) -> tuple[list[Block], list[Edge]]:
    """Inference keeps the forward (and `other`) blocks and the edges between them. Activations
    are not kept for a backward pass, so each block's memory becomes its ``infer memory`` option
    (0 unless given)."""
    dropped = {b.name for b in blocks if b.kind.is_backward}
    kept = []
    for b in blocks:
        if b.kind.is_backward:
            continue
        opt = options.get(b.name)
        kept.append(replace(b, memory=opt.infer_memory if opt else 0, forward=None))
    # Edges touching a backward block go; any other edge stays, so a typo is still reported.
    return kept, [e for e in edges if e.src not in dropped and e.dst not in dropped]
