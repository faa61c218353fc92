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
from tessel_dsl.executor.model_api import ParamShard, StageContext, TensorMeta, forward_preds
from tessel_dsl.executor.models.common import (
    BlockStage,
    Fn,
    ModelConfig,
    ResidualMLP,
    batch_cache,
    forward_blocks,
    mb_generator,
    seeded,
    stage_layers,
)
from tessel_dsl.ir import Mode, Spec


@dataclass(frozen=True)
class Config(ModelConfig):
    hidden: int = 16
    layers: int = 4
    batch: int = 4


class Chain(nn.Module):
    """The reference: all layers in one process."""

    def __init__(self, cfg: Config):
        super().__init__()
        self.cfg = cfg
        self.layers = nn.ModuleList(ResidualMLP(cfg.hidden, torch.tanh, dtype=cfg.torch_dtype) for _ in range(cfg.layers))

    def batch(self, mb: int, device) -> tuple[torch.Tensor, torch.Tensor]:
        g = mb_generator(self.cfg.seed, mb)
        x = torch.randn(2, self.cfg.batch, self.cfg.hidden, generator=g).to(device, self.cfg.torch_dtype)
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
    fwd = forward_blocks(spec)
    for prev, cur in zip(fwd, fwd[1:]):
        if forward_preds(spec, cur) != (prev,) or spec.block(cur).is_multi_device:
            raise ExecutionError("the chain model expects one-device forward blocks F0 -> F1 -> ... -> Fk")
    return fwd


def reference(spec: Spec, **kw) -> Chain:
    return seeded(Chain, Config.of(kw))


def factory(ctx: StageContext, **kw) -> BlockStage:
    cfg = Config.of(kw)
    names = stages(ctx.spec)
    train = ctx.spec.mode is Mode.TRAIN
    full = seeded(Chain, cfg, ctx.device)
    act = TensorMeta((cfg.batch, cfg.hidden), cfg.torch_dtype)
    metas = {n: (act,) for n in names}
    if train:
        metas[names[-1]] = (TensorMeta((), torch.float32),)
    modules: dict[str, nn.Module] = {}
    shards: list[ParamShard] = []
    for i, name, layers, layer_shards in stage_layers(ctx, names, full.layers, "layers"):
        shards += layer_shards
        modules[name] = Fn(_stage_fn(train and i == len(names) - 1), layers=layers)

    # Drawn once per micro-batch and only where read: on the CPU, a large micro-batch takes longer
    # to draw than a stage takes to run, and the time would count as the block's.
    batch = batch_cache(full, ctx.device)

    def data(block: str, mb: int):
        if block == names[0]:
            x, target = batch(mb)
            return (x, target) if train and len(names) == 1 else (x,)
        return (batch(mb)[1],) if train and block == names[-1] else ()

    return BlockStage(modules, metas, data, shards)


def _stage_fn(loss: bool):
    def run(m, x, *target):
        for layer in m.layers:
            x = layer(x)
        return F.mse_loss(x.float(), target[0].float()) if loss else x
    return run
