"""Encoder-decoder with one embedding table shared by both sides, for the NN-shape (or, on a plain
chain, the V-shape).

Blocks, recognised by their place in the spec: the first all-device forward block (E1) embeds the
source tokens with the vocab-parallel shared table; the one-device stages before the second
all-device block (E2) are the encoder; E2 embeds the target tokens with the *same* table shard
and passes the encoder output along; the stages after it are the decoder (self- and cross-
attention), whose last stage computes the loss. Each rank's E1 and E2 modules hold the same
parameter, so gradients from both uses add up, as in the single-process model.

On a plain chain of one-device stages F0 -> ... -> Fk (no all-device block) the model is the
conventional V split that 1F1B runs: the encoder layers then the decoder layers, as one sequence,
are split evenly over the stages in order, so a stage may hold both kinds. F0 embeds the source
and the target tokens with the one full table (two uses on one device, gradients adding up); every
stage hands on (target activations, encoder activations) -- the latter are the memory once the
encoder is done -- and the last stage applies the norm, the head and the loss.

Model arguments: ``vocab``, ``hidden``, ``heads``, ``layers`` (per side), ``src``/``tgt``
(sequence lengths), ``batch``, ``seed``, ``dtype``.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from tessel_dsl.errors import ExecutionError
from tessel_dsl.executor.model_api import ParamShard, StageContext, TensorMeta, forward_preds
from tessel_dsl.executor.models.common import (
    BlockStage,
    Fn,
    ModelConfig,
    TransformerLayer,
    batch_cache,
    chain_layers,
    forward_blocks,
    lm_loss,
    mb_generator,
    plain_chain,
    scale_init,
    seeded,
    shards_of,
    stage_layers,
    vocab_parallel_embedding,
)
from tessel_dsl.ir import Mode, Spec


@dataclass(frozen=True)
class Config(ModelConfig):
    vocab: int = 512
    hidden: int = 32
    heads: int = 4
    layers: int = 2
    src: int = 8
    tgt: int = 6
    batch: int = 2


class EncDec(nn.Module):
    """The reference: shared embedding, encoder, decoder with cross-attention, LM head."""

    def __init__(self, cfg: Config):
        super().__init__()
        kw = {"dtype": cfg.torch_dtype}
        d = cfg.hidden
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab, d, **kw)
        self.enc = nn.ModuleList(TransformerLayer(d, cfg.heads, causal=False, **kw) for _ in range(cfg.layers))
        self.dec = nn.ModuleList(TransformerLayer(d, cfg.heads, causal=True, cross=True, **kw) for _ in range(cfg.layers))
        self.norm = nn.LayerNorm(d, **kw)
        self.head = nn.Linear(d, cfg.vocab, bias=False, **kw)
        scale_init(self, 2 * cfg.layers)

    def batch(self, mb: int, device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        g = mb_generator(self.cfg.seed, mb)
        src = torch.randint(0, self.cfg.vocab, (self.cfg.batch, self.cfg.src), generator=g)
        tgt = torch.randint(0, self.cfg.vocab, (self.cfg.batch, self.cfg.tgt + 1), generator=g)
        return src.to(device), tgt[:, :-1].contiguous().to(device), tgt[:, 1:].contiguous().to(device)

    def _decode(self, mb: int) -> torch.Tensor:
        src, tgt, _ = self.batch(mb, self.embed.weight.device)
        mem = self.embed(src)
        for layer in self.enc:
            mem = layer(mem)
        y = self.embed(tgt)
        for layer in self.dec:
            y = layer(y, mem)
        return self.head(self.norm(y)).float()

    def loss(self, mb: int) -> torch.Tensor:
        _, _, labels = self.batch(mb, self.embed.weight.device)
        return lm_loss(self._decode(mb), labels)

    def infer(self, mb: int) -> torch.Tensor:
        return self._decode(mb)


CHAIN = "or a plain chain of one-device stages F0 -> ... -> Fk"


def roles(spec: Spec) -> tuple[str, list[str], str, list[str]]:
    """(E1, encoder stages, E2, decoder stages) of an NN placement; `factory` recognises the plain
    chain (`plain_chain`) before asking this."""
    fwd = forward_blocks(spec)
    multi = [n for n in fwd if spec.block(n).is_multi_device]
    if len(multi) != 2 or fwd[0] != multi[0]:
        raise ExecutionError("the encoder-decoder model expects E1(all) -> encoder stages -> E2(all) -> decoder "
                             f"stages, {CHAIN}")
    cut = fwd.index(multi[1])
    enc, dec = fwd[1:cut], fwd[cut + 1:]
    if not enc or not dec:
        raise ExecutionError(f"the encoder-decoder model needs at least one encoder and one decoder stage, {CHAIN}")
    for prev, cur in zip(fwd, fwd[1:]):
        if forward_preds(spec, cur) != (prev,):
            raise ExecutionError(f"the encoder-decoder model expects {cur} to take exactly {prev}'s output")
    return multi[0], enc, multi[1], dec


def reference(spec: Spec, **kw) -> EncDec:
    return seeded(EncDec, Config.of(kw))


def factory(ctx: StageContext, **kw) -> BlockStage:
    cfg = Config.of(kw)
    spec, rank = ctx.spec, ctx.rank
    chain = plain_chain(spec)
    if chain:
        return _chain_factory(ctx, cfg, chain)
    e1, enc, e2, dec = roles(spec)
    train = spec.mode is Mode.TRAIN
    full = seeded(EncDec, cfg, ctx.device)
    mem, y, last = _metas(cfg, train)
    metas = {e1: (mem,), e2: (y, mem), **{n: (mem,) for n in enc}, **{n: (y, mem) for n in dec}}
    metas[dec[-1]] = last
    modules: dict[str, nn.Module] = {}
    shards: list[ParamShard] = []
    batch = batch_cache(full, ctx.device)

    if rank in spec.block(e1).devices:
        if spec.block(e1).devices != spec.block(e2).devices:
            raise ExecutionError("the encoder-decoder model expects E1 and E2 on the same devices (one shared table)")
        table = vocab_parallel_embedding(full.embed, ctx.mesh(e1))
        modules[e1] = Fn(lambda m, src: m.table(src), table=table)
        modules[e2] = Fn(lambda m, memory, tgt: (m.table(tgt), memory), table=table)
        shards += shards_of(table, "embed")
    for stages, side, layers_of in ((enc, "enc", full.enc), (dec, "dec", full.dec)):
        for _, name, layers, layer_shards in stage_layers(ctx, stages, layers_of, side):
            shards += layer_shards
            if side == "enc":
                modules[name] = Fn(_encode, layers=layers)
            elif name != dec[-1]:
                modules[name] = Fn(_decode, layers=layers)
            else:
                modules[name] = Fn(_decode_last(train), layers=layers, norm=full.norm, head=full.head)
                shards += shards_of(full.norm, "norm") + shards_of(full.head, "head")

    def data(block: str, mb: int):
        src, tgt, labels = batch(mb)
        if block == e1:
            return (src,)
        if block == e2:
            return (tgt,)
        return (labels,) if train and block == dec[-1] else ()

    return BlockStage(modules, metas, data, shards)


def _metas(cfg: Config, train: bool) -> tuple[TensorMeta, TensorMeta, tuple[TensorMeta]]:
    """(encoder activations, decoder activations, what the last stage returns)."""
    dt = cfg.torch_dtype
    mem = TensorMeta((cfg.batch, cfg.src, cfg.hidden), dt)
    y = TensorMeta((cfg.batch, cfg.tgt, cfg.hidden), dt)
    last = (TensorMeta((), torch.float32),) if train else (TensorMeta((cfg.batch, cfg.tgt, cfg.vocab), torch.float32),)
    return mem, y, last


def _chain_factory(ctx: StageContext, cfg: Config, stages: list[str]) -> BlockStage:
    """The V split: encoder then decoder layers spread evenly over the chain `stages`."""
    train = ctx.spec.mode is Mode.TRAIN
    full = seeded(EncDec, cfg, ctx.device)
    mem, y, last = _metas(cfg, train)
    metas = {n: (y, mem) for n in stages}
    metas[stages[-1]] = last
    modules: dict[str, nn.Module] = {}
    shards: list[ParamShard] = []
    for i, name, held, layer_shards in chain_layers(ctx, stages, [("enc", full.enc), ("dec", full.dec)]):
        first, end = i == 0, i == len(stages) - 1
        parts: dict[str, nn.Module] = dict(held)
        shards += layer_shards
        if first:  # one full table for both lookups: its gradient sums both uses, as in the reference
            parts["embed"] = full.embed
            shards += shards_of(full.embed, "embed")
        if end:
            parts.update(norm=full.norm, head=full.head)
            shards += shards_of(full.norm, "norm") + shards_of(full.head, "head")
        modules[name] = Fn(_chain_stage(first, end, train), **parts)
    batch = batch_cache(full, ctx.device)

    def data(block: str, mb: int):
        src, tgt, labels = batch(mb)
        tokens = (src, tgt) if block == stages[0] else ()
        return tokens + ((labels,) if train and block == stages[-1] else ())

    return BlockStage(modules, metas, data, shards)


def _chain_stage(first: bool, end: bool, train: bool):
    def run(m, *args):
        if first:
            src, tgt, *labels = args
            y, x = m.embed(tgt), m.embed(src)
        else:
            y, x, *labels = args
        for layer in m.enc:  # x is the encoder's activations, the memory once its last layer ran
            x = layer(x)
        for layer in m.dec:
            y = layer(y, x)
        return _head(m, y, labels, train) if end else (y, x)
    return run


def _encode(m, x):
    for layer in m.layers:
        x = layer(x)
    return x


def _decode(m, y, memory):
    for layer in m.layers:
        y = layer(y, memory)
    return y, memory


def _decode_last(train: bool):
    def run(m, y, memory, *labels):
        for layer in m.layers:
            y = layer(y, memory)
        return _head(m, y, labels, train)
    return run


def _head(m, y, labels, train: bool):
    """The loss in training, the logits in inference."""
    logits = m.head(m.norm(y)).float()
    return lm_loss(logits, labels[0]) if train else logits
