"""Two-branch text/vision model with a tensor-parallel cross encoder, for the K-shape (Flava-like),
or, on a plain chain, the V-shape.

Blocks, recognised by their place in the spec: one-device forward blocks form two chains, each
starting at a block with no forward input -- the first declared chain is the text encoder (token
embedding + layers), the second the vision encoder (patch projection + layers). The all-device
block joining them (J) concatenates both sequences and runs the cross encoder with its MLPs split
Megatron-style over a DeviceMesh of J's devices (DTensor: column-parallel fc1, row-parallel fc2),
then pools and classifies: the loss in training, the logits in inference.

On a plain chain of one-device stages F0 -> ... -> Fk (no all-device block) the model is the
conventional V split, its branches in sequence: the text layers, the vision layers and the (full,
one-device) cross layers, as one sequence, are split evenly over the stages in order. Each
section's entry work runs on the stage holding its first layer -- the token embedding, the patch
projection, the concat of both sequences -- and the last stage classifies. A stage hands on what
is live: the text activations until the vision encoder starts, both until the concat, then the
joint sequence.

Model arguments: ``vocab``, ``hidden``, ``heads``, ``layers`` (per branch), ``cross`` (cross
layers), ``text``/``patches`` (sequence lengths), ``patch_dim``, ``classes``, ``batch``, ``seed``,
``dtype``.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from tessel_dsl.errors import ExecutionError
from tessel_dsl.executor.model_api import ParamShard, StageContext, TensorMeta, forward_preds, forward_succs
from tessel_dsl.executor.models.common import (
    BlockStage,
    Fn,
    ModelConfig,
    ResidualMLP,
    TransformerLayer,
    batch_cache,
    chain_layers,
    forward_blocks,
    mb_generator,
    parallel_mlp,
    plain_chain,
    scale_init,
    section_starts,
    seeded,
    shards_of,
    stage_layers,
)
from tessel_dsl.ir import Mode, Spec


@dataclass(frozen=True)
class Config(ModelConfig):
    vocab: int = 256
    hidden: int = 32
    heads: int = 4
    layers: int = 2
    cross: int = 2
    text: int = 8
    patches: int = 6
    patch_dim: int = 24
    classes: int = 10
    batch: int = 2


class Branches(nn.Module):
    """The reference: both encoders, the cross encoder and the classifier in one process."""

    def __init__(self, cfg: Config):
        super().__init__()
        kw = {"dtype": cfg.torch_dtype}
        d = cfg.hidden
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab, d, **kw)
        self.patch = nn.Linear(cfg.patch_dim, d, **kw)
        self.text = nn.ModuleList(TransformerLayer(d, cfg.heads, causal=False, **kw) for _ in range(cfg.layers))
        self.vision = nn.ModuleList(TransformerLayer(d, cfg.heads, causal=False, **kw) for _ in range(cfg.layers))
        self.cross = nn.ModuleList(ResidualMLP(d, F.gelu, **kw) for _ in range(cfg.cross))
        self.cls = nn.Linear(d, cfg.classes, **kw)
        scale_init(self, cfg.layers + cfg.cross)

    def batch(self, mb: int, device):
        g = mb_generator(self.cfg.seed, mb)
        c = self.cfg
        tokens = torch.randint(0, c.vocab, (c.batch, c.text), generator=g)
        patches = torch.randn(c.batch, c.patches, c.patch_dim, generator=g)
        labels = torch.randint(0, c.classes, (c.batch,), generator=g)
        return tokens.to(device), patches.to(device, c.torch_dtype), labels.to(device)

    def infer(self, mb: int) -> torch.Tensor:
        tokens, patches, _ = self.batch(mb, self.cls.weight.device)
        t = self.embed(tokens)
        for layer in self.text:
            t = layer(t)
        v = self.patch(patches)
        for layer in self.vision:
            v = layer(v)
        x = torch.cat([t, v], dim=1)
        for layer in self.cross:
            x = layer(x)
        return self.cls(x.mean(1)).float()

    def loss(self, mb: int) -> torch.Tensor:
        return F.cross_entropy(self.infer(mb), self.batch(mb, self.cls.weight.device)[2])


def roles(spec: Spec) -> tuple[list[str], list[str], str]:
    """(text chain, vision chain, join block) of a K placement; `factory` recognises the plain chain
    (`plain_chain`) before asking this."""
    fwd = forward_blocks(spec)
    joins = [n for n in fwd if spec.block(n).is_multi_device]
    starts = [b.name for b in spec.blocks if b.name in fwd and not b.is_multi_device and not forward_preds(spec, b.name)]
    if len(joins) != 1 or len(starts) != 2:
        raise ExecutionError("the two-branch model expects two chains of one-device stages joined by one all-device "
                             "block, or one plain chain of one-device stages F0 -> ... -> Fk (branches in sequence)")
    chains = []
    for s in starts:
        chain = [s]
        while (nxt := [x for x in forward_succs(spec, chain[-1]) if x != joins[0]]):
            chain.append(nxt[0])
        chains.append(chain)
    if sorted(forward_preds(spec, joins[0])) != sorted(c[-1] for c in chains):
        raise ExecutionError(f"the two-branch model expects {joins[0]} to take the outputs of both chains, or one "
                             "plain chain of one-device stages F0 -> ... -> Fk (branches in sequence)")
    return chains[0], chains[1], joins[0]


def reference(spec: Spec, **kw) -> Branches:
    return seeded(Branches, Config.of(kw))


def factory(ctx: StageContext, **kw) -> BlockStage:
    cfg = Config.of(kw)
    spec, rank = ctx.spec, ctx.rank
    chain = plain_chain(spec)
    if chain:
        return _chain_factory(ctx, cfg, chain)
    text, vision, join = roles(spec)
    train = spec.mode is Mode.TRAIN
    full = seeded(Branches, cfg, ctx.device)
    dt = cfg.torch_dtype
    metas = {**{n: (TensorMeta((cfg.batch, cfg.text, cfg.hidden), dt),) for n in text},
             **{n: (TensorMeta((cfg.batch, cfg.patches, cfg.hidden), dt),) for n in vision},
             join: (TensorMeta((), torch.float32),) if train else (TensorMeta((cfg.batch, cfg.classes), torch.float32),)}
    modules: dict[str, nn.Module] = {}
    shards: list[ParamShard] = []
    for chain, layers_of, side, entry in ((text, full.text, "text", full.embed), (vision, full.vision, "vision", full.patch)):
        for i, name, layers, layer_shards in stage_layers(ctx, chain, layers_of, side):
            extra = {"layers": layers}
            shards += layer_shards
            if i == 0:
                extra["entry"] = entry
                shards += shards_of(entry, "embed" if side == "text" else "patch")
            modules[name] = Fn(_branch(i == 0), **extra)
    if rank in spec.block(join).devices:
        mesh = ctx.mesh(join)
        for j, c in enumerate(full.cross):
            parallel_mlp(c, mesh)
            shards += shards_of(c, f"cross.{j}")
        cross = full.cross
        shards += shards_of(full.cls, "cls")
        order = [0 if p == text[-1] else 1 for p in forward_preds(spec, join)]
        modules[join] = Fn(_join(order, train), cross=cross, cls=full.cls)
    batch = batch_cache(full, ctx.device)

    def data(block: str, mb: int):
        tokens, patches, labels = batch(mb)
        if block == text[0]:
            return (tokens,)
        if block == vision[0]:
            return (patches,)
        return (labels,) if train and block == join else ()

    return BlockStage(modules, metas, data, shards)


def _chain_factory(ctx: StageContext, cfg: Config, stages: list[str]) -> BlockStage:
    """The V split: text, vision and cross layers spread evenly over the chain `stages`."""
    train = ctx.spec.mode is Mode.TRAIN
    full = seeded(Branches, cfg, ctx.device)
    sections = [("text", full.text), ("vision", full.vision), ("cross", full.cross)]
    starts = section_starts([(side, len(layers)) for side, layers in sections], len(stages))
    if starts["text"] != 0:  # no layer at all: the text entry would land on the last stage
        raise ExecutionError(f"the two-branch model has no layers to split over {len(stages)} stages "
                             "(layers and cross are both 0)")
    end = len(stages) - 1
    dt = cfg.torch_dtype
    t = TensorMeta((cfg.batch, cfg.text, cfg.hidden), dt)
    v = TensorMeta((cfg.batch, cfg.patches, cfg.hidden), dt)
    joint = TensorMeta((cfg.batch, cfg.text + cfg.patches, cfg.hidden), dt)
    # what is live after stage i: the text activations until the vision encoder begins, both until
    # the concat where the cross encoder begins, then the joint sequence
    metas = {n: (joint,) if starts["cross"] <= i else (t, v) if starts["vision"] <= i else (t,)
             for i, n in enumerate(stages)}
    out = TensorMeta((), torch.float32) if train else TensorMeta((cfg.batch, cfg.classes), torch.float32)
    metas[stages[end]] = (out,)
    modules: dict[str, nn.Module] = {}
    shards: list[ParamShard] = []
    for i, name, held, layer_shards in chain_layers(ctx, stages, sections):
        parts: dict[str, nn.Module] = dict(held)
        shards += layer_shards
        for side, entry, ref in (("text", "embed", full.embed), ("vision", "patch", full.patch)):
            if starts[side] == i:
                parts[entry] = ref
                shards += shards_of(ref, entry)
        if i == end:
            parts["cls"] = full.cls
            shards += shards_of(full.cls, "cls")
        modules[name] = Fn(_chain_stage({s for s, at in starts.items() if at == i}, i == end, train), **parts)
    batch = batch_cache(full, ctx.device)

    def data(block: str, mb: int):
        tokens, patches, labels = batch(mb)
        i = stages.index(block)
        return (((tokens,) if starts["text"] == i else ()) + ((patches,) if starts["vision"] == i else ())
                + ((labels,) if train and i == end else ()))

    return BlockStage(modules, metas, data, shards)


def _chain_stage(begins: set[str], end: bool, train: bool):
    def run(m, *args):
        # args: what the previous stage handed on, then the data read here (`data`'s order: tokens
        # where the text begins, patches where the vision begins, labels last), so pop from the end
        args = list(args)
        labels = args.pop() if end and train else None
        patches = args.pop() if "vision" in begins else None
        live = [m.embed(args.pop())] if "text" in begins else args
        for layer in m.text:
            live[0] = layer(live[0])
        if "vision" in begins:
            live.append(m.patch(patches))
        for layer in m.vision:
            live[1] = layer(live[1])
        if "cross" in begins:
            live = [torch.cat(live, dim=1)]
        for layer in m.cross:
            live[0] = layer(live[0])
        if not end:
            return tuple(live)
        logits = m.cls(live[0].mean(1)).float()
        return F.cross_entropy(logits, labels) if train else logits
    return run


def _branch(first: bool):
    def run(m, x):
        if first:
            x = m.entry(x)
        for layer in m.layers:
            x = layer(x)
        return x
    return run


def _join(order: list[int], train: bool):
    def run(m, a, b, *labels):
        parts = [None, None]
        parts[order[0]], parts[order[1]] = a, b
        x = torch.cat(parts, dim=1)
        for layer in m.cross:
            x = layer(x)
        logits = m.cls(x.mean(1)).float()
        return F.cross_entropy(logits, labels[0]) if train else logits
    return run
