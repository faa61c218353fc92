"""The contract between the executor and a user's model: a factory builds one `StageModel` per rank.

A model is written once as a set of *block modules*, one per forward block of the spec. The
executor never looks inside them; it only needs to know, for every forward block:

* how to run it on this rank: ``stage.modules[name](*inputs, *stage.data(name, mb))`` where
  ``inputs`` are the output tensors of the block's forward predecessors (in the spec's edge order,
  each predecessor's output tuple flattened), and ``data`` are tensors read from the micro-batch
  itself (token ids, labels); the module returns a tensor or a tuple of tensors;
* what it outputs: ``stage.meta(name)`` gives the shape and dtype of every output tensor, the same
  on every rank, so a receiver can allocate its buffers before the sender has computed anything.

Backward blocks need no module: the executor runs autograd on the saved forward. A forward block
with no forward successor is the *loss block* in training: it returns a scalar loss per micro-batch
and the step's loss is the mean over micro-batches.

Multi-device blocks run SPMD: every rank of the block calls its own module (usually a shard) and
may shard it with DTensor over ``ctx.mesh(name)`` (or use ``ctx.group(name)`` for collectives of
its own); their outputs must be plain tensors, identical on all those ranks. Each rank's forward
and backward run under DTensor's ``loss_parallel``, so a loss over vocabulary-sharded logits
needs no gathering.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

import torch

from tessel_dsl.errors import ExecutionError
from tessel_dsl.ir import Kind, Spec


@dataclass(frozen=True)
class TensorMeta:
    """Shape and dtype of one tensor a block outputs."""

    shape: tuple[int, ...]
    dtype: torch.dtype = torch.float32

    @property
    def is_float(self) -> bool:
        return self.dtype.is_floating_point


@dataclass(frozen=True)
class ParamShard:
    """A parameter held by a rank: the slice ``[start, start + size)`` of reference parameter
    `name` along `dim` (``dim is None`` for a full copy). Used to compare gradients with a
    single-process run."""

    name: str
    param: torch.nn.Parameter
    dim: int | None = None
    start: int = 0


@dataclass
class StageContext:
    """What a factory is told about the rank it builds for."""

    spec: Spec
    rank: int
    world: int
    device: torch.device
    groups: dict[tuple[int, ...], Any] = field(default_factory=dict)
    meshes: dict[tuple[int, ...], Any] = field(default_factory=dict, repr=False)

    def group(self, block: str) -> Any:
        """The process sub-group of exactly `block`'s devices (None for a one-device block)."""
        devices = self.spec.block(block).devices
        return self.groups.get(tuple(sorted(devices))) if len(devices) > 1 else None

    def mesh(self, block: str) -> Any:
        """A 1-D DeviceMesh over exactly `block`'s devices, for DTensor plans (None for a one-device
        block); only ranks of the block may ask. It is built on the sub-group that every rank
        created at start-up in one order, so asking creates no process group."""
        devices = tuple(sorted(self.spec.block(block).devices))
        if len(devices) == 1:
            return None
        if self.rank not in devices:
            raise ExecutionError(f"rank {self.rank} asked for the mesh of block {block!r}, which runs on {list(devices)}")
        if devices not in self.meshes:
            from torch.distributed.device_mesh import DeviceMesh

            self.meshes[devices] = DeviceMesh.from_group(self.groups[devices], self.device.type)
        return self.meshes[devices]

    def blocks_here(self) -> list[str]:
        """Forward-like blocks this rank runs, in the spec's dependency order."""
        return [n for n in self.spec.topo_order
                if self.rank in self.spec.block(n).devices and not self.spec.block(n).kind.is_backward]


class StageModel(Protocol):
    """What a factory returns for one rank (see the module docstring for the calling convention)."""

    modules: dict[str, torch.nn.Module]

    def meta(self, block: str) -> tuple[TensorMeta, ...]:
        """Output tensors of forward block `block` (any block of the spec, not only local ones)."""

    def data(self, block: str, mb: int) -> tuple[torch.Tensor, ...]:
        """Tensors `block` reads from micro-batch `mb` itself, appended after its inputs."""

    def param_shards(self) -> list[ParamShard]:
        """This rank's parameters mapped onto the reference model's names."""


Factory = Callable[..., StageModel]


def load_factory(ref: str | Factory) -> Factory:
    """Resolve ``"package.module:function"`` (or a callable) to a model factory."""
    if callable(ref):
        return ref
    mod_name, sep, attr = str(ref).partition(":")
    if not sep or not mod_name or not attr:
        raise ExecutionError(f"--model must look like MODULE:FACTORY, got {ref!r}")
    try:
        mod = importlib.import_module(mod_name)
    except ImportError as e:
        raise ExecutionError(f"cannot import model module {mod_name!r}: {e}") from None
    fn = getattr(mod, attr, None)
    if not callable(fn):
        raise ExecutionError(f"model module {mod_name!r} has no factory function {attr!r}")
    return fn


def forward_preds(spec: Spec, block: str) -> tuple[str, ...]:
    """Predecessors of a forward block whose outputs are its inputs (backward ones only order)."""
    return tuple(p for p in spec.preds[block] if not spec.block(p).kind.is_backward)


def forward_succs(spec: Spec, block: str) -> tuple[str, ...]:
    return tuple(s for s in spec.succs[block] if not spec.block(s).kind.is_backward)


def backward_of(spec: Spec, forward: str) -> str | None:
    """The block that produces input gradients for `forward` (BACKWARD or INPUT_GRAD)."""
    for b in spec.blocks:
        if b.forward == forward and b.kind in (Kind.BACKWARD, Kind.INPUT_GRAD):
            return b.name
    return None


def grad_meta(spec: Spec, stage: StageModel, forward: str) -> tuple[TensorMeta, ...]:
    """What the backward block of `forward` outputs: one gradient per float input tensor."""
    out: list[TensorMeta] = []
    for p in forward_preds(spec, forward):
        out.extend(m for m in stage.meta(p) if m.is_float)
    return tuple(out)


def grad_slice(spec: Spec, stage: StageModel, consumer: str, producer: str) -> slice:
    """Where the gradients for `producer`'s float outputs sit in `consumer`'s backward output."""
    offset = 0
    for p in forward_preds(spec, consumer):
        n = sum(1 for m in stage.meta(p) if m.is_float)
        if p == producer:
            return slice(offset, offset + n)
        offset += n
    raise KeyError(producer)
