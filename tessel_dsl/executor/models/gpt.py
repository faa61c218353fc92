"""GPT-style decoder with a large vocabulary, for the M-shape (and, without all-device blocks, V).

Blocks are recognised by their place in the spec, not by name:

* a multi-device forward block with no forward input is the vocab-parallel token embedding (E);
* one-device forward blocks, in dependency order, are the pipeline stages; the transformer layers
  are split evenly over them;
* a multi-device forward block after the stages is the vocab-parallel LM head with the
  vocab-parallel cross entropy (H, DTensor's ``loss_parallel``); without one, the last stage
  carries the full head and loss; without an E block, the first stage carries the full embedding.

E and H are sharded over a DeviceMesh of exactly their own devices: all of them (the paper's
M-shape) or any subset, such as E on {0, 1} and H on {2, 3} of four.

Sizes are model arguments (``vocab``, ``hidden``, ``heads``, ``layers``, ``seq``, ``batch`` --
the micro-batch size -- ``seed``, ``dtype``), so the same code runs tiny on a CPU and large on GPUs.
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
    forward_blocks,
    lm_loss,
    local,
    mb_generator,
    scale_init,
    seeded,
    shards_of,
    split_evenly,
    stage_layers,
    vocab_parallel_embedding,
    vocab_parallel_head,
)
from tessel_dsl.ir import Spec


@dataclass(frozen=True)
class Config(ModelConfig):
    vocab: int = 512
    hidden: int = 32
    heads: int = 4
    layers: int = 4
    seq: int = 8
    batch: int = 2


class GPT(nn.Module):
    """The whole model in one process: the reference the pipelined run must match."""

    def __init__(self, cfg: Config):
        super().__init__()
        kw = {"dtype": cfg.torch_dtype}
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

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """Logits of a ``[batch, seq]`` token batch (what `Pipeline` binds blocks of by name)."""
        x = self.embed(tokens) + self.pos(torch.arange(tokens.shape[1], device=tokens.device))
        for layer in self.layers:
            x = layer(x)
        return self.head(self.norm(x))

    def loss(self, mb: int) -> torch.Tensor:
        tokens, labels = self.batch(mb, self.embed.weight.device)
        x = self.embed(tokens) + self.pos.weight
        for layer in self.layers:
            x = layer(x)
        return lm_loss(self.head(self.norm(x)).float(), labels)


def blocks_by_name(spec: Spec, layers: int) -> dict[str, list[str]]:
    """The submodules of `GPT` each forward block of an [E] -> stages -> [H] placement holds, for
    `Pipeline`: the layers split evenly over the stages, embedding and head where `factory` puts them."""
    emb, stages, head = roles(spec)
    out: dict[str, list[str]] = {s: [f"layers.{j}" for j in part] for s, part in zip(stages, split_evenly(layers, len(stages)))}
    first, last = emb or stages[0], head or stages[-1]
    out[first] = ["embed", "pos"] + (out[first] if first != emb else [])
    out[last] = (out[last] if last != head else []) + ["norm", "head"]
    return out


def roles(spec: Spec) -> tuple[str | None, list[str], str | None]:
    """(embedding block, stage blocks in order, head block) of a GPT placement."""
    fwd = forward_blocks(spec)
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
    return seeded(GPT, Config.of(kw))


def factory(ctx: StageContext, **kw) -> BlockStage:
    cfg = Config.of(kw)
    spec, rank = ctx.spec, ctx.rank
    emb, stages, head = roles(spec)
    full = seeded(GPT, cfg, ctx.device)
    batch = batch_cache(full, ctx.device)
    act = TensorMeta((cfg.batch, cfg.seq, cfg.hidden), cfg.torch_dtype)
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
            full.embed = vocab_parallel_embedding(full.embed, ctx.mesh(emb))
            modules[emb] = Fn(lambda m, tok: m.embed(tok) + m.pos.weight, embed=full.embed, pos=full.pos)
            shards += shards_of(full.embed, "embed") + shards_of(full.pos, "pos")
    if head:
        metas[head] = (loss,)
        data[head] = "labels"
        if rank in spec.block(head).devices:
            vocab_parallel_head(full.head, ctx.mesh(head))
            modules[head] = Fn(lambda m, x, labels: local(lm_loss(m.head(m.norm(x)).float(), labels)),
                               norm=full.norm, head=full.head)
            shards += shards_of(full.head, "head") + shards_of(full.norm, "norm")
    first_of, last_of = (None if emb else stages[0]), (None if head else stages[-1])
    if first_of:
        data[first_of] = "tokens"
    if last_of:
        data[last_of] = "both" if last_of == first_of else "labels"
    for _, name, layers, layer_shards in stage_layers(ctx, stages, full.layers, "layers"):
        first, last = name == first_of, name == last_of
        shards += layer_shards
        extra: dict[str, nn.Module] = {"layers": layers}
        if first:
            extra.update(embed=full.embed, pos=full.pos)
            shards += shards_of(full.embed, "embed") + shards_of(full.pos, "pos")
        if last:
            extra.update(norm=full.norm, head=full.head)
            shards += shards_of(full.norm, "norm") + shards_of(full.head, "head")
        modules[name] = Fn(_stage_fn(first, last), **extra)

    def data_fn(block: str, mb: int):
        what = data.get(block)
        tokens, labels = batch(mb)
        return {"tokens": (tokens,), "labels": (labels,), "both": (tokens, labels)}.get(what, ())

    return BlockStage(modules, metas, data_fn, shards)


def _stage_fn(first: bool, last: bool):
    def run(m, *args):
        args = list(args)
        x = m.embed(args.pop(0)) + m.pos.weight if first else args.pop(0)
        for layer in m.layers:
            x = layer(x)
        if not last:
            return x
        return lm_loss(m.head(m.norm(x)).float(), args.pop(0))
    return run
