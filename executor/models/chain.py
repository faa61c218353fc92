"""A plain chain of residual MLP layers for the V-shape: stage i runs an equal share of layers,
the last stage also computes the mean-squared-error loss against a random target.

Model arguments: ``hidden``, ``layers``, ``batch`` (micro-batch size), ``seed``, ``dtype``.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from tessel_dsl.errors import ExecutionError
from tessel_dsl.ir import Mode, Spec

from ..model_api import ParamShard, StageContext, TensorMeta, forward_preds
from .common import DTYPES, BlockStage, Fn, full_shards, init_seed, mb_generator, split_evenly


@dataclass(frozen=True)
class Config:
    hidden: int = 16
    layers: int = 4
    batch: int = 4
    seed: int = 0
    dtype: str = "f32"

    @classmethod
    def of(cls, kw: dict) -> "Config":
        unknown = set(kw) - set(cls.__dataclass_fields__)
        if unknown:
            raise ExecutionError(f"unknown model argument(s) {sorted(unknown)}; known: {sorted(cls.__dataclass_fields__)}")
        return cls(**kw)


class Layer(nn.Module):
    def __init__(self, d: int, **kw):
        super().__init__()
        self.norm = nn.LayerNorm(d, **kw)
        self.fc1 = nn.Linear(d, 4 * d, **kw)
        self.fc2 = nn.Linear(4 * d, d, **kw)

    def forward(self, x):
        return x + self.fc2(torch.tanh(self.fc1(self.norm(x))))


class Chain(nn.Module):
    """The reference: all layers in one process."""

    def __init__(self, cfg: Config):
        super().__init__()
        self.cfg = cfg
        self.layers = nn.ModuleList(Layer(cfg.hidden, dtype=DTYPES[cfg.dtype]) for _ in range(cfg.layers))

    def batch(self, mb: int, device) -> tuple[torch.Tensor, torch.Tensor]:
        g = mb_generator(self.cfg.seed, mb)
        x = torch.randn(2, self.cfg.batch, self.cfg.hidden, generator=g).to(device, DTYPES[self.cfg.dtype])
        return x[0], x[1]

    def run(self, mb: int) -> torch.Tensor:
        x, _ = self.batch(mb, self.layers[0].fc1.weight.device)
        for layer in self.layers:
            x = layer(x)
        return x

    def infer(self, mb: int) -> torch.Tensor:
        return self.run(mb)

    def loss(self, mb: int) -> torch.Tensor:
        _, target = self.batch(mb, self.layers[0].fc1.weight.device)
        return F.mse_loss(self.run(mb).float(), target.float())


def stages(spec: Spec) -> list[str]:
    fwd = [n for n in spec.topo_order if not spec.block(n).kind.is_backward]
    for prev, cur in zip(fwd, fwd[1:]):
        if forward_preds(spec, cur) != (prev,) or spec.block(cur).is_multi_device:
            raise ExecutionError("the chain model expects one-device forward blocks F0 -> F1 -> ... -> Fk")
    return fwd


def reference(spec: Spec, **kw) -> Chain:
    cfg = Config.of(kw)
    init_seed(cfg.seed, torch.device("cpu"))
    return Chain(cfg)


def factory(ctx: StageContext, **kw) -> BlockStage:
    cfg = Config.of(kw)
    names = stages(ctx.spec)
    train = ctx.spec.mode is Mode.TRAIN
    init_seed(cfg.seed, ctx.device)
    with torch.device(ctx.device):
        full = Chain(cfg)
    act = TensorMeta((cfg.batch, cfg.hidden), DTYPES[cfg.dtype])
    metas = {n: (act,) for n in names}
    if train:
        metas[names[-1]] = (TensorMeta((), torch.float32),)
    parts = split_evenly(cfg.layers, len(names))
    modules: dict[str, nn.Module] = {}
    shards: list[ParamShard] = []
    for i, name in enumerate(names):
        if ctx.spec.block(name).devices != (ctx.rank,):
            continue
        layers = nn.ModuleList(full.layers[j] for j in parts[i])
        shards += [s for j in parts[i] for s in full_shards(full.layers[j], f"layers.{j}")]
        modules[name] = Fn(_stage_fn(train and i == len(names) - 1), layers=layers)

    def data(block: str, mb: int):
        x, target = full.batch(mb, ctx.device)
        if block == names[0]:
            return (x, target) if train and len(names) == 1 else (x,)
        return (target,) if train and block == names[-1] else ()

    return BlockStage(modules, metas, data, shards)


def _stage_fn(loss: bool):
    def run(m, x, *target):
        for layer in m.layers:
            x = layer(x)
        return F.mse_loss(x.float(), target[0].float()) if loss else x
    return run
