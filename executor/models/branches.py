"""Two-branch text/vision model with a tensor-parallel cross encoder, for the K-shape (Flava-like).

Blocks, recognised by their place in the spec: one-device forward blocks form two chains, each
starting at a block with no forward input -- the first declared chain is the text encoder (token
embedding + layers), the second the vision encoder (patch projection + layers). The all-device
block joining them (J) concatenates both sequences and runs the cross encoder with its MLPs split
Megatron-style over J's devices, then pools and classifies: the loss in training, the logits in
inference.

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
from tessel_dsl.ir import Mode, Spec

from ..model_api import ParamShard, StageContext, TensorMeta, forward_preds, forward_succs
from .common import (BlockStage, Fn, ModelConfig, ResidualMLP, TransformerLayer, batch_cache, copy_to_group,
                     forward_blocks, full_shards, mb_generator, reduce_from_group, scale_init, seeded, shard_range,
                     stage_layers)


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


class ShardedCross(nn.Module):
    """Hidden units [lo, hi) of a cross-encoder layer (a gelu `ResidualMLP`): column-parallel fc1,
    row-parallel fc2."""

    def __init__(self, full: ResidualMLP, lo: int, hi: int, group):
        super().__init__()
        self.norm, self.group = full.norm, group
        self.w1 = nn.Parameter(full.fc1.weight[lo:hi].detach().clone())
        self.b1 = nn.Parameter(full.fc1.bias[lo:hi].detach().clone())
        self.w2 = nn.Parameter(full.fc2.weight[:, lo:hi].detach().clone())
        self.b2 = full.fc2.bias

    def forward(self, x):
        h = copy_to_group(self.norm(x), self.group)
        y = F.linear(F.gelu(F.linear(h, self.w1, self.b1)), self.w2)
        return x + reduce_from_group(y, self.group) + self.b2


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
    """(text chain, vision chain, join block)."""
    fwd = forward_blocks(spec)
    joins = [n for n in fwd if spec.block(n).is_multi_device]
    starts = [b.name for b in spec.blocks if b.name in fwd and not b.is_multi_device and not forward_preds(spec, b.name)]
    if len(joins) != 1 or len(starts) != 2:
        raise ExecutionError("the two-branch model expects two chains of one-device stages joined by one all-device block")
    chains = []
    for s in starts:
        chain = [s]
        while (nxt := [x for x in forward_succs(spec, chain[-1]) if x != joins[0]]):
            chain.append(nxt[0])
        chains.append(chain)
    if sorted(forward_preds(spec, joins[0])) != sorted(c[-1] for c in chains):
        raise ExecutionError(f"the two-branch model expects {joins[0]} to take the outputs of both chains")
    return chains[0], chains[1], joins[0]


def reference(spec: Spec, **kw) -> Branches:
    return seeded(Branches, Config.of(kw))


def factory(ctx: StageContext, **kw) -> BlockStage:
    cfg = Config.of(kw)
    spec, rank = ctx.spec, ctx.rank
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
                shards += full_shards(entry, "embed" if side == "text" else "patch")
            modules[name] = Fn(_branch(i == 0), **extra)
    if rank in spec.block(join).devices:
        lo, hi = shard_range(4 * cfg.hidden, spec.block(join).devices, rank)
        group = ctx.group(join)
        cross = nn.ModuleList(ShardedCross(c, lo, hi, group) for c in full.cross)
        for j, c in enumerate(cross):
            shards += [ParamShard(f"cross.{j}.fc1.weight", c.w1, 0, lo), ParamShard(f"cross.{j}.fc1.bias", c.b1, 0, lo),
                       ParamShard(f"cross.{j}.fc2.weight", c.w2, 1, lo), ParamShard(f"cross.{j}.fc2.bias", c.b2),
                       *full_shards(c.norm, f"cross.{j}.norm")]
        shards += full_shards(full.cls, "cls")
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
