"""Pieces the shipped models share: the size-argument base `ModelConfig`, the DTensor plans of
their multi-device blocks, transformer and residual-MLP layers, a generic `BlockStage` with helpers
to build one (seeded full model, per-stage layer shares, batch cache), the split of a model's layer
sections over a plain chain of stages (the V-shape), the single-process reference step, and
model-argument parsing.

A multi-device block is sharded with `torch.distributed.tensor`: a DeviceMesh over exactly the
block's devices (``ctx.mesh(block)``) and `parallelize_module` plans -- a vocabulary-sharded
embedding, a vocabulary-sharded head with ``loss_parallel``, a column- then row-parallel MLP.
Each plan takes plain tensors in and gives the full activation (or the loss) back out, so the
tensors between blocks stay plain and identical on every rank of the block.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence, TypeVar

import torch
import torch.nn.functional as F
from torch import nn

from tessel_dsl.errors import ExecutionError
from tessel_dsl.executor.model_api import ParamShard, StageContext, TensorMeta, forward_preds
from tessel_dsl.ir import Spec

DTYPES = {"f32": torch.float32, "fp32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}


@dataclass(frozen=True)
class ModelConfig:
    """Base of each model's sizes: every model has a ``seed`` and a ``dtype``; subclasses add their
    own fields (all with defaults) and are built from ``--model`` arguments with `of`."""

    seed: int = 0
    dtype: str = "f32"

    @classmethod
    def of(cls, kw: dict):
        """The config with the fields in `kw` set; an unknown name is an `ExecutionError`."""
        unknown = set(kw) - set(cls.__dataclass_fields__)
        if unknown:
            raise ExecutionError(f"unknown model argument(s) {sorted(unknown)}; known: {sorted(cls.__dataclass_fields__)}")
        return cls(**kw)

    @property
    def torch_dtype(self) -> torch.dtype:
        return DTYPES[self.dtype]


def shard(module: nn.Module, mesh, plan) -> nn.Module:
    """`module` (or the submodules a dict plan names) sharded in place over `mesh` with
    `parallelize_module`. Every rank of the mesh built the same seeded full model, so each keeps
    its own slice of the full weights (``src_data_rank=None``): nothing is sent at build time."""
    from torch.distributed.tensor.parallel import parallelize_module

    return parallelize_module(module, mesh, plan, src_data_rank=None)


class VocabShardedEmbedding(nn.Module):
    """An embedding table sharded by vocabulary rows over a mesh (a DTensor parameter, ``Shard(0)``).

    Each rank looks up only the tokens in its rows; the partial lookups become the full one through
    DTensor's ``Partial -> Replicate`` redistribution (one all-reduce), whose backward hands every
    rank the whole output gradient. The table's gradient is then built by the local lookup's own
    backward, at the size of the local rows. `RowwiseParallel` on an `nn.Embedding` gives the same
    values, but in torch 2.13 DTensor has no row-sharded rule for the embedding's backward: it
    builds the full table's gradient on every rank and slices it (4 GB and about 4 ms a micro-batch
    for a 512k x 4096 bf16 table on an H100, measured by bench/gpu8.py), which is why this one
    piece is written here."""

    def __init__(self, embed: nn.Embedding, mesh):
        super().__init__()
        from torch.distributed.tensor import Shard, distribute_tensor
        from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

        # Every rank built the same seeded full table: keep the local rows, send nothing.
        weight = distribute_tensor(embed.weight.detach(), mesh, [Shard(0)], src_data_rank=None)
        self.weight = nn.Parameter(weight)
        self.mesh = mesh
        rows, offset = compute_local_shape_and_global_offset(weight.shape, mesh, weight.placements)
        self.lo, self.hi = offset[0], offset[0] + rows[0]

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        from torch.distributed.tensor import DTensor, Partial, Replicate

        inside = (tokens >= self.lo) & (tokens < self.hi)
        rows = torch.where(inside, tokens - self.lo, torch.zeros_like(tokens))
        part = F.embedding(rows, self.weight.to_local()) * inside.unsqueeze(-1).to(self.weight.dtype)
        whole = DTensor.from_local(part, self.mesh, [Partial()], run_check=False)
        return whole.redistribute(self.mesh, [Replicate()]).to_local()


def vocab_parallel_embedding(embed: nn.Embedding, mesh) -> VocabShardedEmbedding:
    """`embed` sharded by vocabulary rows over `mesh`: each rank keeps its rows, and every rank of
    the mesh gets the full lookup (a plain tensor) out."""
    return VocabShardedEmbedding(embed, mesh)


def vocab_parallel_head(head: nn.Linear, mesh) -> nn.Linear:
    """An output projection sharded by vocabulary columns. It returns the logits as a DTensor
    sharded on the last dim, for a cross entropy that never gathers them: that needs
    ``loss_parallel`` around the block's forward and backward, which the executor provides
    (`loss_context`)."""
    from torch.distributed.tensor import Shard
    from torch.distributed.tensor.parallel import ColwiseParallel

    return shard(head, mesh, ColwiseParallel(output_layouts=Shard(-1), use_local_output=False))


def parallel_mlp(mlp: nn.Module, mesh) -> nn.Module:
    """Megatron's MLP split of a `ResidualMLP`: ``fc1`` column-parallel, ``fc2`` row-parallel (its
    output summed over the mesh), so only the hidden units are sharded and the output is whole."""
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    return shard(mlp, mesh, {"fc1": ColwiseParallel(), "fc2": RowwiseParallel()})


def local(t: torch.Tensor) -> torch.Tensor:
    """A replicated DTensor (a sharded block's loss) as a plain tensor; plain tensors unchanged."""
    return t.to_local() if hasattr(t, "to_local") else t


class Attention(nn.Module):
    def __init__(self, d: int, heads: int, causal: bool, cross: bool = False, **kw):
        super().__init__()
        self.heads, self.causal, self.cross = heads, causal, cross
        self.q = nn.Linear(d, d, **kw)
        self.kv = nn.Linear(d, 2 * d, **kw)
        self.out = nn.Linear(d, d, **kw)

    def forward(self, x: torch.Tensor, mem: torch.Tensor | None = None) -> torch.Tensor:
        b, s, d = x.shape
        src = x if mem is None else mem
        q = self.q(x).view(b, s, self.heads, d // self.heads).transpose(1, 2)
        k, v = self.kv(src).view(b, src.shape[1], 2, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal and mem is None)
        return self.out(y.transpose(1, 2).reshape(b, s, d))


class TransformerLayer(nn.Module):
    """Pre-norm transformer layer; with `cross` it also attends to an encoder output."""

    def __init__(self, d: int, heads: int, causal: bool = True, cross: bool = False, **kw):
        super().__init__()
        self.n1 = nn.LayerNorm(d, **kw)
        self.attn = Attention(d, heads, causal, **kw)
        self.cross = cross
        if cross:
            self.n2 = nn.LayerNorm(d, **kw)
            self.xattn = Attention(d, heads, False, cross=True, **kw)
        self.n3 = nn.LayerNorm(d, **kw)
        self.fc1 = nn.Linear(d, 4 * d, **kw)
        self.fc2 = nn.Linear(4 * d, d, **kw)

    def forward(self, x: torch.Tensor, mem: torch.Tensor | None = None) -> torch.Tensor:
        x = x + self.attn(self.n1(x))
        if self.cross:
            x = x + self.xattn(self.n2(x), mem)
        return x + self.fc2(F.gelu(self.fc1(self.n3(x))))


class ResidualMLP(nn.Module):
    """Pre-norm residual MLP ``x + fc2(act(fc1(norm(x))))`` with a 4x hidden width."""

    def __init__(self, d: int, act: Callable[[torch.Tensor], torch.Tensor] = F.gelu, **kw):
        super().__init__()
        self.act = act
        self.norm = nn.LayerNorm(d, **kw)
        self.fc1 = nn.Linear(d, 4 * d, **kw)
        self.fc2 = nn.Linear(4 * d, d, **kw)

    def forward(self, x):
        return x + self.fc2(self.act(self.fc1(self.norm(x))))


def split_evenly(n: int, parts: int) -> list[range]:
    """`n` items in `parts` consecutive ranges, earlier ranges one longer when uneven."""
    base, extra = divmod(n, parts)
    out, lo = [], 0
    for i in range(parts):
        hi = lo + base + (1 if i < extra else 0)
        out.append(range(lo, hi))
        lo = hi
    return out


def chain_split(sections: Sequence[tuple[str, int]], stages: int) -> list[dict[str, range]]:
    """Lays sections of layers, ``(name, count)`` in model order (say the encoder's, then the
    decoder's), end to end and splits that one sequence over `stages` stages as `split_evenly`
    does: for each stage, the range of each section's layers it holds (empty where none), so a
    stage may hold the end of one section and the start of the next."""
    out: list[dict[str, range]] = []
    for part in split_evenly(sum(n for _, n in sections), stages):
        held, offset = {}, 0
        for name, n in sections:
            lo, hi = (min(max(x - offset, 0), n) for x in (part.start, part.stop))
            held[name] = range(lo, hi)
            offset += n
        out.append(held)
    return out


def section_starts(sections: Sequence[tuple[str, int]], stages: int) -> dict[str, int]:
    """The stage on which each section of `chain_split` begins, where its entry work (an
    embedding, a concat) belongs: the stage holding its first layer; for an empty section, the
    stage holding the next layer, or the last stage when no layer follows."""
    parts = split_evenly(sum(n for _, n in sections), stages)
    out, offset = {}, 0
    for name, n in sections:
        out[name] = next((i for i, p in enumerate(parts) if offset in p), stages - 1)
        offset += n
    return out


class Fn(nn.Module):
    """A block module made of a function over registered sub-modules."""

    def __init__(self, fn: Callable[..., Any], **parts: nn.Module):
        super().__init__()
        self.fn = fn
        for k, v in parts.items():
            setattr(self, k, v)

    def forward(self, *args):
        return self.fn(self, *args)


@dataclass
class BlockStage:
    """A ready-made `StageModel`: modules, output metas, a data function and parameter shards."""

    modules: dict[str, nn.Module]
    metas: dict[str, tuple[TensorMeta, ...]]
    data_fn: Callable[[str, int], tuple[torch.Tensor, ...]]
    shards: list[ParamShard]

    def meta(self, block: str) -> tuple[TensorMeta, ...]:
        return self.metas[block]

    def data(self, block: str, mb: int) -> tuple[torch.Tensor, ...]:
        return self.data_fn(block, mb)

    def param_shards(self) -> list[ParamShard]:
        return self.shards


def shards_of(module: nn.Module, prefix: str) -> list[ParamShard]:
    """`module`'s parameters under their reference names ``prefix.<name>``: a plain parameter or a
    replicated DTensor as a full copy, a DTensor sharded on one dim as the slice this rank holds
    (its offset taken from DTensor's own layout)."""
    out = []
    for n, p in module.named_parameters():
        name = f"{prefix}.{n}" if prefix else n
        dims = [pl.dim for pl in getattr(p, "placements", ()) if pl.is_shard()]
        if not dims:
            out.append(ParamShard(name, p))
            continue
        from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

        _, offset = compute_local_shape_and_global_offset(p.shape, p.device_mesh, p.placements)
        out.append(ParamShard(name, p, dims[0], offset[dims[0]]))
    return out


def forward_blocks(spec: Spec) -> list[str]:
    """The spec's forward blocks in dependency order: what the models recognise roles from."""
    return [n for n in spec.topo_order if not spec.block(n).kind.is_backward]


def plain_chain(spec: Spec) -> list[str] | None:
    """The forward blocks if they are one-device stages F0 -> F1 -> ... -> Fk, each taking exactly
    the previous one's output (the V-shape, with no multi-device block); else None."""
    fwd = forward_blocks(spec)
    if any(spec.block(n).is_multi_device for n in fwd):
        return None
    if any(forward_preds(spec, cur) != (prev,) for prev, cur in zip(fwd, fwd[1:])):
        return None
    return fwd


M = TypeVar("M", bound=nn.Module)


def seeded(model: Callable[[Any], M], cfg: ModelConfig, device: torch.device = torch.device("cpu")) -> M:
    """``model(cfg)`` built on `device` from ``cfg.seed``: every rank builds the same full model and
    keeps its part, and the single-process reference gets the very same weights."""
    init_seed(cfg.seed, device)
    with torch.device(device):
        return model(cfg)


def stage_layers(ctx: StageContext, stages: Sequence[str], layers: Sequence[nn.Module],
                 prefix: str) -> Iterator[tuple[int, str, nn.ModuleList, list[ParamShard]]]:
    """Splits `layers` evenly over the one-device `stages` in order and yields, for each stage that
    runs on ``ctx.rank``, (its index, its block, its layers, their shards named ``prefix.j...``)."""
    for i, name, held, shards in chain_layers(ctx, stages, [(prefix, layers)]):
        yield i, name, held[prefix], shards


def chain_layers(ctx: StageContext, stages: Sequence[str], sections: Sequence[tuple[str, Sequence[nn.Module]]]
                 ) -> Iterator[tuple[int, str, dict[str, nn.ModuleList], list[ParamShard]]]:
    """`stage_layers` for several sections of layers, ``(prefix, layers)`` in model order, laid end
    to end by `chain_split`: for each stage on ``ctx.rank``, (its index, its block, its layers of
    every section keyed by prefix -- possibly none -- and their shards named ``prefix.j...``)."""
    split = chain_split([(prefix, len(layers)) for prefix, layers in sections], len(stages))
    for i, name in enumerate(stages):
        if ctx.spec.block(name).devices != (ctx.rank,):
            continue
        held = {prefix: nn.ModuleList(layers[j] for j in split[i][prefix]) for prefix, layers in sections}
        shards = [s for prefix, layers in sections for j in split[i][prefix]
                  for s in shards_of(layers[j], f"{prefix}.{j}")]
        yield i, name, held, shards


def batch_cache(full: nn.Module, device: torch.device) -> Callable[[int], tuple[torch.Tensor, ...]]:
    """``full.batch(mb, device)`` drawn once per micro-batch, since several blocks read parts of it."""
    return functools.cache(functools.partial(full.batch, device=device))


def lm_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean token cross entropy of ``[..., vocab]`` logits against ``[...]`` labels."""
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))


def reference_step(model: nn.Module, microbatches: int) -> tuple[float, dict[str, torch.Tensor]]:
    """One single-process step: mean loss over micro-batches and every parameter's gradient."""
    model.zero_grad(set_to_none=True)
    losses = []
    for mb in range(microbatches):
        loss = model.loss(mb) / microbatches
        loss.backward()
        losses.append(float(loss.detach()) * microbatches)
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
    return sum(losses) / len(losses), grads


def parse_model_args(items: list[str] | None) -> dict[str, Any]:
    """``["layers=8", "dtype=bf16"]`` -> ``{"layers": 8, "dtype": "bf16"}`` (ints and floats parsed)."""
    out: dict[str, Any] = {}
    for item in items or []:
        k, sep, v = item.partition("=")
        if not sep or not k.strip():
            raise ValueError(f"expected K=V, got {item!r}")
        v = v.strip()
        for cast in (int, float):
            try:
                out[k.strip()] = cast(v)
                break
            except ValueError:
                continue
        else:
            out[k.strip()] = v
    return out


def init_seed(seed: int, device: torch.device) -> None:
    torch.manual_seed(seed)
    if device.type == "cuda":
        torch.cuda.manual_seed(seed)


def mb_generator(seed: int, mb: int) -> torch.Generator:
    g = torch.Generator()
    g.manual_seed(seed * 1_000_003 + mb)
    return g


def scale_init(model: nn.Module, layers: int) -> None:
    """Shrink residual-branch outputs so deep tiny models stay well conditioned."""
    for name, p in model.named_parameters():
        if name.endswith(("fc2.weight", "out.weight")):
            with torch.no_grad():
                p.mul_(1.0 / math.sqrt(2 * max(1, layers)))
