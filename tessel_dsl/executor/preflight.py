"""What `Pipeline` can check before any process starts: the plan, the block mapping against the
model, the tensor-parallel plans, tied parameters, the world size, and a batch -- split into the
plan's micro-batches and run once through the model and `loss_fn` on fake tensors (no memory, no
compute, a model on the meta device will do). `check_pipeline` runs all of it in the launching
process, so a wrong name or batch is reported in about a second rather than after every rank has
started and joined the process group; `Pipeline` runs the same checks before it joins one (the
batch ones when given ``batch=``). Also here: how a batch is split, and its fingerprint.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch
from torch import nn
from torch.utils import _pytree as pytree

from tessel_dsl.errors import ExecutionError
from tessel_dsl.executor.block_map import check_blocks, check_tp, forward_graph, read_blocks
from tessel_dsl.executor.ties import Tie, find_ties
from tessel_dsl.ir import Mode
from tessel_dsl.plan import Plan


@dataclass
class Setup:
    """A plan and a block mapping checked against a model."""

    plan: Plan
    train: bool
    graph: dict[str, tuple[str, ...]]
    order: list[str]
    blocks: dict[str, list[str]]
    tp: dict[str, dict[str, Any]]
    ties: list[Tie]
    loss_fn: Callable | None


def _blocks_beside(plan) -> Path:
    """The binding `tessel plan` writes beside its plan (``plan.json`` -> ``plan.blocks.json``),
    for a Pipeline given no `blocks`."""
    if not isinstance(plan, (str, os.PathLike)):
        raise ExecutionError("blocks= is needed: the plan was passed as an object, so there is no file "
                             "beside it to read the block -> submodule binding from")
    path = Path(plan)
    beside = path.with_name(path.name.removesuffix(".json") + ".blocks.json")
    if not beside.is_file():
        raise ExecutionError(f"blocks= is needed: no binding {beside} beside the plan (tessel plan writes one; "
                             "for a hand-written spec pass blocks={block: [submodule, ...]} or a JSON file)")
    return beside


def check_setup(plan, model: nn.Module, loss_fn, blocks, tp) -> Setup:
    """Load and validate the plan; check the mapping, the DTensor plans and tied parameters."""
    from tessel_dsl.executor.launch import check_plan, load

    if blocks is None:
        blocks = _blocks_beside(plan)
    plan = load(plan)
    check_plan(plan)
    spec = plan.spec
    train = spec.mode is Mode.TRAIN
    if train and loss_fn is None:
        raise ExecutionError("a training plan needs loss_fn(output, *target)")
    graph = forward_graph(spec)
    order = list(graph)
    if isinstance(blocks, (str, os.PathLike)):
        blocks = read_blocks(blocks)
    blocks = {b: list(f) for b, f in blocks.items()}
    check_blocks(spec, model, order, blocks)
    tp = {b: dict(p) for b, p in (tp or {}).items()}
    check_tp(spec, blocks, tp)
    ties = find_ties(spec, model, order, blocks)
    _check_tp_ties(tp, ties)
    return Setup(plan, train, graph, order, blocks, tp, ties, loss_fn if train else None)


def check_world(devices: int, world: int, replicas: int | None) -> int:
    """The number of replicas of a `devices`-device plan in a world of `world` ranks."""
    if replicas is None:
        if world % devices:
            raise ExecutionError(f"the plan places blocks on {devices} devices, which does not divide the "
                                 f"world of {world} ranks into replicas")
        replicas = world // devices
    if replicas * devices != world:
        raise ExecutionError(f"{devices} devices x {replicas} replicas = {devices * replicas} ranks, "
                             f"but the world has {world}")
    return replicas


def check_pipeline(plan: Plan | str | os.PathLike, model: nn.Module, loss_fn: Callable | None = None, *,
                   blocks: dict[str, list[str]] | str | os.PathLike | None = None, batch=None,
                   world: int | None = None,
                   replicas: int | None = None, tp: dict[str, dict[str, Any]] | None = None,
                   loss_weight: Callable[..., Any] | None = None) -> None:
    """Everything `Pipeline(plan, model, loss_fn, blocks=..., tp=...)` on `world` ranks would
    refuse before its first step, checked in this process without starting any: call it before
    `torchrun`-ing or `run_ranks`. `batch` is one replica's batch, ``(inputs, target)`` for a
    training plan (inputs alone for inference); `model` may be on the meta device. Raises
    ExecutionError; `model` is left as it was."""
    setup = check_setup(plan, model, loss_fn, blocks, tp)
    if world is not None:
        check_world(setup.plan.spec.devices, world, replicas)
    if batch is not None:
        check_batch(setup, model, batch, loss_weight)


def as_pair(inputs, target=None) -> tuple[Any, tuple]:
    """`step`'s arguments as (inputs, target tuple): an ``(inputs, target)`` pair is taken apart."""
    if target is None and isinstance(inputs, (tuple, list)) and len(inputs) == 2:
        inputs, target = inputs
    if target is None:
        return inputs, ()
    return inputs, tuple(target) if isinstance(target, (tuple, list)) else (target,)


def split_batch(inputs, target: tuple, n: int) -> tuple[list, Any]:
    """The batch's leaves (of ``(args, kwargs, target)``) and tree structure, every tensor checked
    to split into `n` micro-batches on dim 0."""
    if isinstance(inputs, dict):
        args, kwargs = (), dict(inputs)
    elif isinstance(inputs, (tuple, list)):
        args, kwargs = tuple(inputs), {}
    else:
        args, kwargs = (inputs,), {}
    leaves, spec = pytree.tree_flatten((args, kwargs, target))
    for x in leaves:
        if isinstance(x, torch.Tensor):
            rows = x.shape[0] if x.dim() else 0
            if x.dim() == 0 or rows % n or rows == 0:  # 0 rows would train to a NaN loss
                raise ExecutionError(f"a batch of {rows} rows does not split into the plan's {n} "
                                     f"micro-batches of at least one row (every input and target tensor "
                                     f"is split on dim 0)")
    return leaves, spec


def check_batch(setup: Setup, model: nn.Module, batch, loss_weight=None) -> None:
    """Split `batch` and run its first micro-batch through the model and loss on fake tensors,
    as the first step will, with the model's forward restored afterwards."""
    from tessel_dsl.executor.bind import Binding

    n = setup.plan.schedule.microbatches
    inputs, target = as_pair(batch) if setup.train else (batch, ())
    leaves, spec = split_batch(inputs, target, n)
    args, kwargs, target = pytree.tree_unflatten([x.chunk(n)[0] if isinstance(x, torch.Tensor) else x
                                                  for x in leaves], spec)
    binding = Binding(model, setup.blocks, setup.graph)
    try:
        binding.trace(args, kwargs, setup.loss_fn, target, torch.device("cpu"))
    finally:
        binding.unbind()
    if loss_weight is not None and setup.train:
        try:
            w = loss_weight(*target)
            float(w.detach().double().sum()) if isinstance(w, torch.Tensor) else float(w)
        except Exception as e:  # the user's function
            raise ExecutionError(f"loss_weight failed on a micro-batch's target: {type(e).__name__}: {e}") from e


def _check_tp_ties(tp: dict[str, dict[str, Any]], ties) -> None:
    """Sharding a submodule replaces its parameters with DTensors, which would untie them."""
    for b, plan in tp.items():
        for f in plan:
            for t in ties:
                hit = [n for n in t.names if n.startswith(f + ".")]
                if hit:
                    raise ExecutionError(f"tensor-parallel plan for {b!r} shards {f!r}, whose parameter {hit[0]} is "
                                         f"tied to {', '.join(n for n in t.names if n != hit[0])} in blocks "
                                         f"{list(t.blocks)}: tied parameters are not sharded; untie them or leave "
                                         f"{f!r} unsharded")


def batch_hash(leaves: list) -> torch.Tensor:
    """Two int64 numbers identifying a batch exactly: `batch_contents` and `batch_layout`."""
    acc = batch_contents(leaves)
    return torch.stack([acc, torch.tensor(batch_layout(leaves), dtype=torch.int64, device=acc.device)])


def batch_layout(leaves: list) -> int:
    """The batch's shapes and dtypes with the other leaves' text, as one number (CRC-32): host
    data, compared before any block runs since ranks that disagree on it exchange messages of
    other sizes."""
    import zlib

    text = [f"{tuple(x.shape)}{x.dtype}" if isinstance(x, torch.Tensor) else repr(x) for x in leaves]
    return zlib.crc32("|".join(text).encode())


def batch_contents(leaves: list) -> torch.Tensor:
    """Every tensor's bits (viewed as integers) summed with position-dependent odd weights, as
    an int64 computed where the batch lies (no copy to the host). Integer sums wrap and are
    exact, so equal batches give equal numbers on any device and a changed element changes it."""
    acc = torch.zeros((), dtype=torch.int64, device=next((x.device for x in leaves if isinstance(x, torch.Tensor)),
                                                          torch.device("cpu")))
    for k, x in enumerate(leaves):
        if not isinstance(x, torch.Tensor):
            continue
        bits = _as_ints(x.detach().contiguous().reshape(-1))
        weights = torch.arange(bits.numel(), dtype=torch.int64, device=bits.device) * 0x9E3779B97F4A7C1 + 2 * k + 1
        acc = acc + (bits * (weights | 1)).sum()
    return acc


def _as_ints(x: torch.Tensor) -> torch.Tensor:
    if x.dtype == torch.bool:
        return x.long()
    if x.is_floating_point() or x.is_complex():
        x = x.view(torch.uint8) if x.element_size() == 1 else x.view({2: torch.int16, 4: torch.int32,
                                                                         8: torch.int64}[x.element_size()])
    return x.long()
