"""GPT-style decoder with a large vocabulary, for the M-shape (and, without all-device blocks, V).

Blocks are recognised by their place in the spec, not by name:

* an all-device forward block with no forward input is the vocab-parallel token embedding (E);
* one-device forward blocks, in dependency order, are the pipeline stages; the transformer layers
  are split evenly over them;
* an all-device forward block after the stages is the vocab-parallel LM head with the
  vocab-parallel cross entropy (H); without one, the last stage carries the full head and loss;
  without an E block, the first stage carries the full embedding.

Sizes are model arguments (``vocab``, ``hidden``, ``heads``, ``layers``, ``seq``, ``batch`` --
the micro-batch size -- ``seed``, ``dtype``), so the same code runs tiny on a CPU and large on GPUs.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from tessel_dsl.errors import ExecutionError
from tessel_dsl.ir import Spec

from ..model_api import ParamShard, StageContext, TensorMeta, forward_preds
from .common import (DTYPES, BlockStage, Fn, TransformerLayer, VocabEmbedding, full_shards, init_seed,
                     mb_generator, scale_init, shard_range, split_evenly, vocab_parallel_cross_entropy)


@dataclass(frozen=True)
class Config:
    vocab: int = 512
    hidden: int = 32
    heads: int = 4
    layers: int = 4
    seq: int = 8
    batch: int = 2
    seed: int = 0
    dtype: str = "f32"

    @classmethod
    def of(cls, kw: dict) -> "Config":
        unknown = set(kw) - set(cls.__dataclass_fields__)
        if unknown:
            raise ExecutionError(f"unknown model argument(s) {sorted(unknown)}; known: {sorted(cls.__dataclass_fields__)}")
        return cls(**kw)


class GPT(nn.Module):
    """The whole model in one process: the reference the pipelined run must match."""

    def __init__(self, cfg: Config):
        super().__init__()
        kw = {"dtype": DTYPES[cfg.dtype]}
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab, cfg.hidden, **kw)
        self.pos = nn.Embedding(cfg.seq, cfg.hidden, **kw)
        self.layers = nn.ModuleList(TransformerLayer(cfg.hidden, cfg.heads, causal=True, **kw) for _ in range(cfg.layers))
        self.norm = nn.LayerNorm(cfg.hidden, **kw)
        self.head = nn.Linear(cfg.hidden, cfg.vocab, bias=False, **kw)
        scale_init(self, cfg.layers)

    def batch(self, mb: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        seq = torch.randint(0, self.cfg.vocab, (self.cfg.batch, self.cfg.seq + 1), generator=mb_generator(self.cfg.seed, mb))
        seq = seq.to(device)
        return seq[:, :-1].contiguous(), seq[:, 1:].contiguous()

    def loss(self, mb: int) -> torch.Tensor:
        tokens, labels = self.batch(mb, self.embed.weight.device)
        x = self.embed(tokens) + self.pos.weight
        for layer in self.layers:
            x = layer(x)
        logits = self.head(self.norm(x)).float()
        return F.cross_entropy(logits.reshape(-1, self.cfg.vocab), labels.reshape(-1))


def roles(spec: Spec) -> tuple[str | None, list[str], str | None]:
    """(embedding block, stage blocks in order, head block) of a GPT placement."""
    fwd = [n for n in spec.topo_order if not spec.block(n).kind.is_backward]
    multi_src = [n for n in fwd if spec.block(n).is_multi_device and not forward_preds(spec, n)]
    multi_in = [n for n in fwd if spec.block(n).is_multi_device and forward_preds(spec, n)]
    stages = [n for n in fwd if not spec.block(n).is_multi_device]
    if len(multi_src) > 1 or len(multi_in) > 1 or not stages:
        raise ExecutionError("the GPT model expects [E(all)] -> F0 -> ... -> Fk -> [H(all)] forward blocks")
    chain = multi_src + stages + multi_in
    for prev, cur in zip(chain, chain[1:]):
        if forward_preds(spec, cur) != (prev,):
            raise ExecutionError(f"the GPT model expects {cur} to take exactly {prev}'s output")
    return (multi_src or [None])[0], stages, (multi_in or [None])[0]


def reference(spec: Spec, **kw) -> GPT:
    cfg = Config.of(kw)
    init_seed(cfg.seed, torch.device("cpu"))
    return GPT(cfg)


def factory(ctx: StageContext, **kw) -> BlockStage:
    cfg = Config.of(kw)
    spec, rank = ctx.spec, ctx.rank
    emb, stages, head = roles(spec)
    init_seed(cfg.seed, ctx.device)
    with torch.device(ctx.device):
        full = GPT(cfg)
    cache: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def batch(mb: int):
        if mb not in cache:
            cache[mb] = full.batch(mb, ctx.device)
        return cache[mb]

    act = TensorMeta((cfg.batch, cfg.seq, cfg.hidden), DTYPES[cfg.dtype])
    loss = TensorMeta((), torch.float32)
    metas = {s: (act,) for s in stages}
    metas[stages[-1]] = (act,) if head else (loss,)
    modules: dict[str, nn.Module] = {}
    shards: list[ParamShard] = []
    data: dict[str, str] = {}  # block -> "tokens" | "labels"

    if emb:
        metas[emb] = (act,)
        data[emb] = "tokens"
        if rank in spec.block(emb).devices:
            lo, hi = shard_range(cfg.vocab, spec.block(emb).devices, rank)
            vemb = VocabEmbedding(full.embed.weight[lo:hi], lo, ctx.group(emb))
            modules[emb] = Fn(lambda m, tok: m.vemb(tok) + m.pos.weight, vemb=vemb, pos=full.pos)
            shards += [ParamShard("embed.weight", vemb.weight, 0, lo), *full_shards(full.pos, "pos")]
    if head:
        metas[head] = (loss,)
        data[head] = "labels"
        if rank in spec.block(head).devices:
            lo, hi = shard_range(cfg.vocab, spec.block(head).devices, rank)
            w = nn.Parameter(full.head.weight[lo:hi].detach().clone())
            group = ctx.group(head)

            def head_fn(m, x, labels, lo=lo, group=group):
                from .common import copy_to_group
                h = copy_to_group(m.norm(x), group)
                return vocab_parallel_cross_entropy(F.linear(h, m.w.weight), labels, lo, group)

            holder = nn.Module()
            holder.weight = w
            modules[head] = Fn(head_fn, norm=full.norm, w=holder)
            shards += [ParamShard("head.weight", w, 0, lo), *full_shards(full.norm, "norm")]
    parts = split_evenly(cfg.layers, len(stages))
    for i, name in enumerate(stages):
        first, last = i == 0 and not emb, i == len(stages) - 1 and not head
        if first:
            data[name] = "tokens"
        if last:
            data[name] = "labels" if not first else "both"
        if spec.block(name).devices != (rank,):
            continue
        layers = nn.ModuleList(full.layers[j] for j in parts[i])
        shards += [s for j in parts[i] for s in full_shards(full.layers[j], f"layers.{j}")]
        extra: dict[str, nn.Module] = {"layers": layers}
        if first:
            extra.update(embed=full.embed, pos=full.pos)
            shards += full_shards(full.embed, "embed") + full_shards(full.pos, "pos")
        if last:
            extra.update(norm=full.norm, head=full.head)
            shards += full_shards(full.norm, "norm") + full_shards(full.head, "head")
        modules[name] = Fn(_stage_fn(first, last, cfg.vocab), **extra)

    def data_fn(block: str, mb: int):
        what = data.get(block)
        tokens, labels = batch(mb)
        return {"tokens": (tokens,), "labels": (labels,), "both": (tokens, labels)}.get(what, ())

    return BlockStage(modules, metas, data_fn, shards)


def _stage_fn(first: bool, last: bool, vocab: int):
    def run(m, *args):
        args = list(args)
        x = m.embed(args.pop(0)) + m.pos.weight if first else args.pop(0)
        for layer in m.layers:
            x = layer(x)
        if not last:
            return x
        logits = m.head(m.norm(x)).float()
        return F.cross_entropy(logits.reshape(-1, vocab), args.pop(0).reshape(-1))
    return run
