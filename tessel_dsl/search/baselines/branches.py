"""Parallel branches run as one chain of stages, as an engineer would run them.

A model with two towers that join (a vision tower beside a text tower, both feeding a joint block
or the language model: the K-shape) is no chain, so none of 1F1B's family applies as written,
and the only baseline left would be GPipe. An engineer who pipelines it with a chain scheduler
(PyTorch's, Megatron's) lays the towers out one after the other as one sequence of stages:
each tower's stages in order, then the blocks after the join. That sequence is a dependency order
of the spec, so a schedule built on it keeps every real dependency; the ones it adds (the second
tower's first stage "after" the first tower's last) only order the scheduler's rules, and the
compaction before validation lets a block start as soon as its real inputs are ready.

`sequence` gives that order when each device still runs one stage; `compare` labels a baseline
built on it ("branches in sequence") and names the order.
"""
from __future__ import annotations

from tessel_dsl.ir import Spec


def sequence(spec: Spec, names: frozenset[str] | None = None) -> list[str] | None:
    """The forward blocks (of `names`, default all) tower by tower: the blocks reached from one
    source only, source by source in dependency order, then the blocks reached from several;
    None when the forward blocks have a single source (a chain, or a branch that no order of
    towers makes one: the caller's own checks decide)."""
    got = _towers(spec, names)
    return None if got is None else _laid_out(*got)


def _laid_out(order: list[str], tower: dict[str, int]) -> list[str]:
    """`order` (dependency order) tower by tower, each tower's blocks keeping their order."""
    pos = {n: i for i, n in enumerate(order)}
    return sorted(order, key=lambda n: (tower[n], pos[n]))


def _towers(spec: Spec, names: frozenset[str] | None) -> tuple[list[str], dict[str, int]] | None:
    """(forward blocks in dependency order, block -> its tower: the rank of the one source that
    reaches it, or one past the last when several do), None with fewer than two sources."""
    order = [n for n in spec.topo_order if (names is None or n in names) and not spec.block(n).kind.is_backward]
    inside = set(order)
    sources = [n for n in order if not any(p in inside for p in spec.preds[n])]
    if len(sources) < 2:
        return None
    rank = {x: i for i, x in enumerate(sources)}
    origin: dict[str, frozenset[str]] = {}
    for n in order:
        ins = [origin[p] for p in spec.preds[n] if p in inside]
        origin[n] = frozenset().union(*ins) if ins else frozenset({n})
    return order, {n: rank[next(iter(o))] if len(o) == 1 else len(rank) for n, o in origin.items()}


def describe(spec: Spec, names: frozenset[str] | None = None) -> str:
    """The order `sequence` lays out, as a reader takes it: "F0..F3, then F4..F7, then J"."""
    got = _towers(spec, names)
    if got is None:
        return ""
    tower = got[1]
    parts: list[list[str]] = []
    for n in _laid_out(*got):
        if parts and tower[parts[-1][-1]] == tower[n]:
            parts[-1].append(n)
        else:
            parts.append([n])
    return ", then ".join(p[0] if len(p) == 1 else f"{p[0]}..{p[-1]}" for p in parts)


def backward_sequence(spec: Spec, names: list[str], forward: list[str]) -> list[str]:
    """Backward blocks `names` (in dependency order) retracing `forward` in reverse: by the place
    of the forward block each differentiates (or, where a block does not name it, of the last
    forward block on its devices), last first."""
    at = {n: i for i, n in enumerate(forward)}
    on = {tuple(sorted(spec.block(n).devices)): i for i, n in enumerate(forward)}
    pos = {n: i for i, n in enumerate(names)}

    def place(n: str) -> int:
        b = spec.block(n)
        return at[b.forward] if b.forward in at else on.get(tuple(sorted(b.devices)), -1)

    return sorted(names, key=lambda n: (-place(n), pos[n]))
