"""Recognising the placements the classic schedules were written for.

1F1B assumes a *chain*: every device holds one forward stage (and, when training, one backward
stage), the forward stages run one after another and the backward stages retrace them in
reverse. Chimera assumes two such chains running in opposite device directions. The functions
here find that structure in a spec, or explain why it is not there.
"""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

from tessel_dsl.analysis import reachable
from tessel_dsl.errors import TesselError
from tessel_dsl.ir import Block, Kind, Spec
from tessel_dsl.search.baselines import branches


class NotApplicable(TesselError):
    """The baseline has no straightforward adaptation to this placement (the paper's '×')."""


@dataclass(frozen=True)
class Stage:
    """One pipeline stage: a single-device forward block and its backward block (None in infer)."""

    device: int
    forward: str
    backward: str | None


@dataclass(frozen=True)
class Chain:
    """Stages in pipeline order, plus the multi-device blocks that sit between them."""

    stages: tuple[Stage, ...]
    shared: tuple[str, ...] = ()

    @property
    def devices(self) -> tuple[int, ...]:
        return tuple(s.device for s in self.stages)


def components(spec: Spec) -> list[tuple[str, ...]]:
    """Weakly connected groups of blocks (independent sub-pipelines), in declaration order."""
    parent = {b.name: b.name for b in spec.blocks}

    def find(x: str) -> str:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for e in spec.edges:
        parent[find(e.src)] = find(e.dst)
    groups: dict[str, list[str]] = {}
    for b in spec.blocks:
        groups.setdefault(find(b.name), []).append(b.name)
    return [tuple(g) for g in groups.values()]


def _ordered(names: list[str], reach: dict[str, frozenset[str]]) -> bool:
    return all(b in reach[a] for a, b in zip(names, names[1:]))


def find_chain(spec: Spec, names: tuple[str, ...] | None = None, *, who: str = "1F1B",
               allow_shared: bool = False) -> Chain:
    """The chain formed by `names` (default: all blocks), or NotApplicable saying what is wrong."""
    blocks: list[Block] = [spec.block(n) for n in (names or spec.topo_order)]
    pos = {n: i for i, n in enumerate(spec.topo_order)}
    blocks.sort(key=lambda b: pos[b.name])
    need = f"{who} needs a chain placement (one forward and one backward block per device, run in sequence)"
    multi = [b for b in blocks if b.is_multi_device]
    if multi and not allow_shared:
        devs = ",".join(map(str, multi[0].devices))
        raise NotApplicable(f"{need}; block {multi[0].name} runs on devices {devs} (1f1b+ handles such blocks)")
    fwd = [b for b in blocks if not b.is_multi_device and not b.kind.is_backward]
    bwd = [b for b in blocks if not b.is_multi_device and b.kind.is_backward]
    if not fwd:
        raise NotApplicable(f"{need}; there is no single-device forward block")
    reach = reachable(spec)
    for group, label in ((fwd, "forward"), (bwd, "backward")):
        seen: dict[int, str] = {}
        for b in group:
            d = b.devices[0]
            if d in seen:
                raise NotApplicable(f"{need}; device {d} holds two {label} blocks ({seen[d]} and {b.name})")
            seen[d] = b.name
    if not _ordered([b.name for b in fwd], reach):
        raise NotApplicable(f"{need}; the forward blocks {', '.join(b.name for b in fwd)} do not form one "
                            "sequence (they branch)")
    stages = []
    if bwd:
        by_dev = {b.devices[0]: b.name for b in bwd}
        if set(by_dev) != {b.devices[0] for b in fwd}:
            raise NotApplicable(f"{need}; forward and backward blocks are not on the same devices")
        stages = [Stage(f.devices[0], f.name, by_dev[f.devices[0]]) for f in fwd]
        back = [s.backward for s in reversed(stages)]
        if not _ordered(back, reach) or back[0] not in reach[stages[-1].forward]:
            raise NotApplicable(f"{need}; the backward blocks do not retrace the forward ones in reverse")
    else:
        stages = [Stage(f.devices[0], f.name, None) for f in fwd]
    return Chain(tuple(stages), tuple(b.name for b in multi))


@dataclass(frozen=True)
class GroupStage:
    """A pipeline stage in the general sense: consecutive forward blocks on one device or one
    tensor-parallel group (`devices`), and the backward blocks that retrace them there."""

    devices: tuple[int, ...]
    forward: tuple[str, ...]
    backward: tuple[str, ...] = ()


def _runs(spec: Spec, names: list[str]) -> list[tuple[tuple[int, ...], list[str]]]:
    """`names` (in dependency order) cut into maximal runs of blocks on the same device set."""
    runs: list[tuple[tuple[int, ...], list[str]]] = []
    for n in names:
        devs = tuple(sorted(spec.block(n).devices))
        if runs and runs[-1][0] == devs:
            runs[-1][1].append(n)
        else:
            runs.append((devs, [n]))
    return runs


# While set False (`unfolded`), `find_stages` takes the placement as written: `compare` uses it to
# tell a baseline that needed side blocks folded into a stage, or each weight gradient run right
# after its input gradient, from one that did not.
_FOLD: ContextVar[bool] = ContextVar("fold_side_blocks", default=True)


@contextmanager
def unfolded() -> Iterator[None]:
    """`find_stages` without folding side blocks or joining weight gradients to their input
    gradients, inside the `with` block."""
    token = _FOLD.set(False)
    try:
        yield
    finally:
        _FOLD.reset(token)


def adapting() -> bool:
    """Whether placements are fitted as an engineer would run them (False inside `unfolded`)."""
    return _FOLD.get()


def side_blocks(spec: Spec, names: frozenset[str] | None = None) -> dict[str, str]:
    """Side blocks: a forward block with no input whose every consumer runs on its own devices,
    beside a chain that starts elsewhere (a text embedding on the first language-model GPU
    while a vision tower feeds it from other GPUs). Maps each to the consumer whose stage it can
    join, the first in dependency order; a spec with a single source has none."""
    order = [n for n in spec.topo_order if names is None or n in names]
    inside = set(order)
    sources = [n for n in order if not spec.block(n).kind.is_backward and not spec.preds[n]]
    if len(sources) < 2:
        return {}
    out = {}
    for n in sources:
        devs = set(spec.block(n).devices)
        users = [x for x in order if x in spec.succs[n]]
        if users and all(x in inside and not spec.block(x).kind.is_backward and set(spec.block(x).devices) == devs
                         for x in users):
            out[n] = users[0]
    if len(out) == len(sources):  # every source is "beside" another: no chain to fold them into
        return {}
    return out


def _fold(spec: Spec, stages: tuple[GroupStage, ...], sides: dict[str, str]) -> tuple[GroupStage, ...]:
    """`stages` with each side block run right before its consumer, and its backward (if any)
    right after the consumer's backward, in the consumer's stage."""
    back_of = {b.forward: b.name for b in spec.blocks if b.kind.is_backward and b.forward}
    out = []
    for st in stages:
        fwd, bwd = list(st.forward), list(st.backward)
        for side, user in sides.items():
            if user in fwd:
                fwd.insert(fwd.index(user), side)
                if side in back_of:
                    at = bwd.index(back_of[user]) + 1 if back_of.get(user) in bwd else len(bwd)
                    bwd.insert(at, back_of[side])
        out.append(GroupStage(st.devices, tuple(fwd), tuple(bwd)))
    return tuple(out)


def find_stages(spec: Spec, *, who: str = "1F1B", names: frozenset[str] | None = None) -> tuple[GroupStage, ...]:
    """The spec (or only the blocks in `names`) as a chain of stages (each device in exactly
    one), or NotApplicable saying why. A placement that is such a chain once its side blocks
    (`side_blocks`) run in the stage of the block they feed, or once each weight gradient runs
    right after its input gradient (`_weights_after_inputs`), is that chain, as an engineer would
    run it (`compare` labels such a baseline as adapted).
    """
    try:
        return _find_stages(spec, who=who, names=names)
    except NotApplicable as first:
        sides = side_blocks(spec, names) if _FOLD.get() else {}
        towers = branches.sequence(spec, names) if _FOLD.get() and not sides else None
        if towers is not None:
            try:
                return _find_stages(spec, who=who, names=names, forward=towers)
            except NotApplicable:
                raise first from None  # the placement as written says why
        if not sides:
            raise
        folded = set(sides) | {b.name for b in spec.blocks if b.kind.is_backward and b.forward in sides}
        rest = frozenset(n for n in spec.topo_order if (names is None or n in names) and n not in folded)
        try:
            stages = _find_stages(spec, who=who, names=rest)
        except NotApplicable:
            raise  # the first reason (the placement as written) is the one reported
        return _fold(spec, stages, sides)


def _stage(names: list[str]) -> str:
    """A stage as a user reads it: its one block, or its first and last (an embedding with the
    first layer is "E..C0", where "E" alone would read as a stage of its own)."""
    return names[0] if len(names) == 1 else f"{names[0]}..{names[-1]}"


def _find_stages(spec: Spec, *, who: str = "1F1B", names: frozenset[str] | None = None,
                 forward: list[str] | None = None) -> tuple[GroupStage, ...]:
    """`find_stages` on the placement as written.

    Forward blocks, in dependency order, are cut into runs on one device set; each run is a
    stage, each stage's first block depends on the previous stage's last one, and no device
    belongs to two stages. Backward blocks form the same stages in reverse order (none when
    there is no backward pass). `forward`: the forward blocks in the order of parallel
    branches laid out one after the other (`branches.sequence`), where the stages need not
    depend on each other in turn.
    """
    need = (f"{who} needs a chain of stages (consecutive blocks on one device or one tensor-parallel "
            "group, each device in one stage, run in sequence)")
    order = [n for n in spec.topo_order if names is None or n in names]
    fwd = _runs(spec, forward if forward is not None else [n for n in order if not spec.block(n).kind.is_backward])
    back_names = [n for n in order if spec.block(n).kind.is_backward]
    if forward is not None:
        back_names = branches.backward_sequence(spec, back_names, forward)
    bwd = _runs(spec, _weights_after_inputs(spec, back_names) if _FOLD.get() else back_names)
    if not fwd:
        raise NotApplicable(f"{need}; there is no forward block")
    reach = reachable(spec)
    owner: dict[int, str] = {}  # device -> the first block of its stage
    stage: dict[int, str] = {}  # ... and the stage as `_stage` names it
    for devs, names in fwd:
        for d in devs:
            if d in owner:
                # Name the block that spans stages (the one on the most devices), not a
                # tensor-parallel stage block that merely shares a device with it.
                spanning = sorted((n for n in names + [owner[d]] if spec.block(n).is_multi_device),
                                  key=lambda n: -len(spec.block(n).devices))
                multi = spanning[0] if spanning else None
                if multi is not None:
                    shown = ",".join(map(str, sorted(spec.block(multi).devices)))
                    raise NotApplicable(f"{need}; block {multi} runs on devices {shown} (1f1b+ handles such "
                                        f"blocks): device {d} also runs {owner[d] if multi != owner[d] else names[0]}")
                raise NotApplicable(f"{need}; device {d} holds two stages ({stage[d]} and {_stage(names)})")
            owner[d], stage[d] = names[0], _stage(names)
    flat = [n for _, names in fwd for n in names]
    if forward is None and not _ordered(flat, reach):
        raise NotApplicable(f"{need}; the forward blocks {', '.join(flat)} do not form one sequence (they branch)")
    if not bwd:
        return tuple(GroupStage(devs, tuple(names)) for devs, names in fwd)
    # Weight gradients trail their stage's input gradient; only the rest must form one sequence.
    back = [n for _, names in bwd for n in names if spec.block(n).kind is not Kind.WEIGHT_GRAD]
    if [devs for devs, _ in bwd] != [devs for devs, _ in reversed(fwd)]:
        raise NotApplicable(f"{need}; the backward blocks do not retrace the forward stages in reverse")
    if not back or (forward is None and (not _ordered(back, reach) or back[0] not in reach[flat[-1]])):
        raise NotApplicable(f"{need}; the backward blocks do not retrace the forward ones in reverse")
    return tuple(GroupStage(devs, tuple(names), tuple(bnames))
                 for (devs, names), (_, bnames) in zip(fwd, reversed(bwd)))


def _weights_after_inputs(spec: Spec, names: list[str]) -> list[str]:
    """`names` (backward blocks in dependency order) with each weight-gradient block moved right
    after the last of its predecessors there that runs on its devices: a split backward (input
    gradient I, weight gradient W) run as one backward, I then W, as 1F1B runs a model whose
    backward is not split (PyTorch's Schedule1F1B on it)."""
    weights = [n for n in names if spec.block(n).kind is Kind.WEIGHT_GRAD]
    out = [n for n in names if n not in weights]
    for w in weights:
        devs = spec.block(w).devices
        after = [i for i, n in enumerate(out) if n in spec.preds[w] and spec.block(n).devices == devs]
        at = max(after) + 1 if after else len(out)
        while at < len(out) and spec.block(out[at]).kind is Kind.WEIGHT_GRAD and spec.block(out[at]).devices == devs:
            at += 1  # after the weight gradients already placed there, in their order
        out.insert(at, w)
    return out


def find_shared_stages(spec: Spec, *, who: str = "1F1B+") -> tuple[tuple[GroupStage, ...], tuple[str, ...]]:
    """(stages, shared blocks): the chain of stages left when the *shared* blocks are set aside,
    those whose devices strictly include another block's (an embedding or head split over every
    device of a chain of tensor-parallel stages); shared blocks in dependency order."""
    sets = {b.name: frozenset(b.devices) for b in spec.blocks}
    shared = tuple(n for n in spec.topo_order if any(other < sets[n] for other in sets.values()))
    rest = frozenset(n for n in spec.topo_order if n not in shared)
    return find_stages(spec, who=who, names=rest), shared


def find_rounds(spec: Spec, *, who: str = "interleaved 1F1B") -> tuple[tuple[GroupStage, ...], int]:
    """(stages, groups) for a chain that visits the same device groups in turn, `v >= 2` times
    (Megatron's interleaved placement: stage ``c * groups + g`` is chunk ``c`` on group ``g``),
    or NotApplicable saying why."""
    need = (f"{who} needs a chain of stages that visits the same devices in turn at least twice "
            "(chunk c of device group g is stage c * groups + g)")
    order = list(spec.topo_order)
    fwd = _runs(spec, [n for n in order if not spec.block(n).kind.is_backward])
    bwd = _runs(spec, [n for n in order if spec.block(n).kind.is_backward])
    sets = []
    for devs, _ in fwd:
        if devs in sets:
            break
        sets.append(devs)
    groups = len(sets)
    if len(fwd) < 2 * groups or len(fwd) % groups:
        raise NotApplicable(f"{need}; the forward stages do not return to the first devices a whole number of times")
    if any(devs != sets[i % groups] for i, (devs, _) in enumerate(fwd)):
        raise NotApplicable(f"{need}; stage devices {', '.join(str(d) for d, _ in fwd)} do not repeat in turn")
    if len({d for s in sets for d in s}) != sum(len(s) for s in sets):
        raise NotApplicable(f"{need}; two device groups share a device")
    reach = reachable(spec)
    flat = [n for _, names in fwd for n in names]
    if not _ordered(flat, reach):
        raise NotApplicable(f"{need}; the forward blocks do not form one sequence (they branch)")
    if not bwd:
        return tuple(GroupStage(devs, tuple(names)) for devs, names in fwd), groups
    back = [n for _, names in bwd for n in names]
    if [devs for devs, _ in bwd] != [devs for devs, _ in reversed(fwd)] or not _ordered(back, reach):
        raise NotApplicable(f"{need}; the backward blocks do not retrace the forward stages in reverse")
    return tuple(GroupStage(devs, tuple(names), tuple(bnames))
                 for (devs, names), (_, bnames) in zip(fwd, reversed(bwd))), groups
