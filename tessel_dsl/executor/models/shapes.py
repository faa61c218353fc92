"""The paper's placements as IR specs for any even device count, matching `specs/*.tsl`' block
names and DESIGN.md's costs (forward 1/+1, backward 3/-1, all-device blocks 1/0).

The executor reads plans, never these; they exist so that tests and benchmarks can build plans
for 2 or 4 devices without the spec language, and so that the models' block layouts are pinned
down in one place. `head=True` adds the all-device LM head pair (H, HB) to the M-shape.
"""
from __future__ import annotations

from dataclasses import replace

from tessel_dsl.ir import Block, Edge, Kind, Mode, Spec

ALL = None  # marker for "every device"


def _spec(name: str, devices: int, memory: int, fwd: list[tuple[str, tuple[int, ...] | None]],
          fedges: list[tuple[str, str]], mode: Mode, microbatches: int) -> Spec:
    """Forward blocks and edges; in training each gets a backward block ``<F>B`` or ``B<i>``
    with the reversed edges, and the loss block's forward feeds its own backward."""
    every = tuple(range(devices))
    blocks, edges = [], [Edge(a, b) for a, b in fedges]
    bname = {}
    for name_, devs in fwd:
        d = every if devs is ALL else devs
        multi = len(d) > 1
        blocks.append(Block(name_, Kind.FORWARD, d, 1, 0 if multi else (1 if mode is Mode.TRAIN else 0)))
        bname[name_] = f"B{name_[1:]}" if name_.startswith("F") and name_[1:].isdigit() else f"{name_}B"
    if mode is Mode.TRAIN:
        for name_, devs in reversed(fwd):
            d = every if devs is ALL else devs
            multi = len(d) > 1
            blocks.append(Block(bname[name_], Kind.BACKWARD, d, 1 if multi else 3, 0 if multi else -1, forward=name_))
        succs = {a for a, _ in fedges}
        for name_, _ in fwd:
            if name_ not in succs:  # loss block: its backward follows it
                edges.append(Edge(name_, bname[name_]))
        edges += [Edge(bname[b], bname[a]) for a, b in fedges]
    return Spec(name, devices, memory, tuple(blocks), tuple(edges), microbatches, mode)


def vshape(devices: int = 4, mode: Mode = Mode.TRAIN, microbatches: int = 4, memory: int | None = None) -> Spec:
    """F0 -> ... -> F{D-1} (-> backward chain), one stage per device."""
    fwd = [(f"F{i}", (i,)) for i in range(devices)]
    fedges = [(f"F{i}", f"F{i + 1}") for i in range(devices - 1)]
    return _spec("vshape", devices, memory or devices, fwd, fedges, mode, microbatches)


def mshape(devices: int = 4, mode: Mode = Mode.TRAIN, microbatches: int = 6, head: bool = False,
           memory: int | None = None, embed_on: tuple[int, ...] | None = ALL,
           head_on: tuple[int, ...] | None = ALL) -> Spec:
    """E(all) -> F0 -> ... -> F{D-1} [-> H(all)]: vocab-parallel embedding (and LM head); `embed_on`
    and `head_on` put E and H on a subset of the devices instead (a tensor-parallel group)."""
    fwd = [("E", embed_on)] + [(f"F{i}", (i,)) for i in range(devices)] + ([("H", head_on)] if head else [])
    names = [n for n, _ in fwd]
    return _spec("mshape", devices, memory or (6 if mode is Mode.TRAIN else 4), fwd,
                 list(zip(names, names[1:])), mode, microbatches)


def nnshape(devices: int = 4, mode: Mode = Mode.TRAIN, microbatches: int = 6, memory: int | None = None) -> Spec:
    """E1(all) -> encoder stages -> E2(all) -> decoder stages: a shared embedding used twice."""
    half = devices // 2
    fwd = [("E1", ALL)] + [(f"F{i}", (i,)) for i in range(half)] + [("E2", ALL)] + \
          [(f"F{i}", (i,)) for i in range(half, devices)]
    names = [n for n, _ in fwd]
    return _spec("nnshape", devices, memory or (6 if mode is Mode.TRAIN else 4), fwd,
                 list(zip(names, names[1:])), mode, microbatches)


def kshape(devices: int = 4, mode: Mode = Mode.TRAIN, microbatches: int = 4, memory: int | None = None) -> Spec:
    """Two branches F0.. and F{D/2}.. joined by J(all): text and vision encoders, cross encoder."""
    half = devices // 2
    a = [f"F{i}" for i in range(half)]
    b = [f"F{i}" for i in range(half, devices)]
    fwd = [(n, (i,)) for i, n in enumerate(a + b)] + [("J", ALL)]
    fedges = list(zip(a, a[1:])) + list(zip(b, b[1:])) + [(a[-1], "J"), (b[-1], "J")]
    spec = _spec("kshape", devices, memory or (6 if mode is Mode.TRAIN else 4), fwd, fedges, mode, microbatches)
    if mode is Mode.TRAIN:  # the join keeps one unit between J and JB (DESIGN.md)
        blocks = tuple(replace(x, memory={"J": 1, "JB": -1}.get(x.name, x.memory)) for x in spec.blocks)
        spec = replace(spec, blocks=blocks)
    return spec
