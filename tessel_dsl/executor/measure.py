"""Torch-side profiling of a model's blocks: time forward and backward, measure activation memory.

Each forward block is run alone on the current device with inputs shaped by the model's
`meta()` (random floats, zero integers) and its own micro-batch data from `data(block, 0)`. After
`warmup` untimed runs, `repeats` runs are timed (CUDA events on a GPU, a steady clock on the
CPU) and the median is kept. The backward is timed on a fresh forward graph each repetition, as
one full backward (``B``) and, for specs that split it, as input gradient (``I``) then weight
gradient (``W``), split as the executor splits it (executor/split_backward.py).

Activation memory is what a micro-batch keeps on the device between its forward and backward:
the tensors autograd saves for backward plus the block's inputs and outputs, each storage counted
once and parameters excluded. Counting storages (rather than reading the allocator) gives the
same answer on CPU and GPU and is not disturbed by caching or by other work on the device.
"""
from __future__ import annotations

import statistics
import time
from typing import Any, Callable

import torch

from tessel_dsl.errors import ExecutionError
from tessel_dsl.executor.model_api import (
    StageContext,
    StageModel,
    backward_of,
    forward_preds,
    forward_succs,
    load_factory,
)
from tessel_dsl.executor.split_backward import backward_input, prepare
from tessel_dsl.interop.profiled_spec import Measurement
from tessel_dsl.ir import Kind, Mode, Spec


class _Timer:
    """Median wall time of a callable on `device` (CUDA events there, perf_counter on the CPU)."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"

    def once(self, fn: Callable[[], Any]) -> float:
        if self.cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) / 1e3
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0


def _inputs(spec: Spec, stage: StageModel, block: str, device: torch.device, grad: bool) -> list[torch.Tensor]:
    gen = torch.Generator(device="cpu").manual_seed(0)
    out: list[torch.Tensor] = []
    for p in forward_preds(spec, block):
        for m in stage.meta(p):
            if m.dtype.is_floating_point:
                t = torch.randn(m.shape, generator=gen).to(device=device, dtype=m.dtype)
                out.append(t.requires_grad_(grad))
            else:
                out.append(torch.zeros(m.shape, dtype=m.dtype, device=device))
    return out


class _BlockRun:
    """Forward and backward of one block on fixed inputs, as the executor runs them."""

    def __init__(self, spec: Spec, stage: StageModel, block: str, device: torch.device):
        self.module = stage.modules[block]
        self.train = spec.mode is Mode.TRAIN and backward_of(spec, block) is not None
        self.loss = self.train and not forward_succs(spec, block)
        self.inputs = _inputs(spec, stage, block, device, self.train)
        self.data = tuple(t.to(device) if isinstance(t, torch.Tensor) else t for t in stage.data(block, 0))
        self.params = [p for p in self.module.parameters() if p.requires_grad]

    def forward(self) -> tuple[torch.Tensor, ...]:
        with torch.set_grad_enabled(self.train):
            out = self.module(*self.inputs, *self.data)
        return out if isinstance(out, tuple) else (out,)

    def grads_for(self, outs: tuple[torch.Tensor, ...]) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        pairs = [(o, torch.ones_like(o) if self.loss else torch.randn_like(o))
                 for o in outs if o.is_floating_point() and o.requires_grad]
        return [o for o, _ in pairs], [g for _, g in pairs]

    def activation_bytes(self) -> int:
        """Bytes of distinct storages the forward keeps for backward, inputs and outputs included."""
        skip = {p.untyped_storage().data_ptr() for p in self.module.parameters()}
        seen: dict[int, int] = {}

        def note(t: torch.Tensor) -> None:
            s = t.untyped_storage()
            if s.data_ptr() not in skip:
                seen[s.data_ptr()] = s.nbytes()

        def pack(t: torch.Tensor) -> torch.Tensor:
            note(t)
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            outs = self.forward()
        if not self.train:
            return 0
        for t in (*self.inputs, *outs):
            if isinstance(t, torch.Tensor):
                note(t)
        return sum(seen.values())


def _measure_block(run: _BlockRun, split: bool, timer: _Timer, repeats: int, warmup: int) -> dict[str, float]:
    def fwd_only() -> None:
        with torch.no_grad() if not run.train else torch.enable_grad():
            run.forward()

    result: dict[str, float] = {}
    for _ in range(warmup):
        fwd_only()
    result["forward"] = statistics.median(timer.once(fwd_only) for _ in range(repeats))
    if not run.train:
        return result
    samples: dict[str, list[float]] = {"backward": [], "input_grad": [], "weight_grad": []}
    leaves = [t for t in run.inputs if t.requires_grad]
    for i in range(warmup + repeats):
        outs, grads = run.grads_for(run.forward())
        if not outs:
            raise ExecutionError("its outputs do not depend on anything that needs a gradient")
        if split:
            pending = []
            # The executor reads the graph during the forward (`prepare`), off the input pass.
            split_at = prepare(outs, run.inputs, run.params)
            t_i = timer.once(lambda: pending.append(backward_input(outs, grads, run.inputs, run.params, split_at)[1]))
            t_w = timer.once(lambda: pending[0].run())
            if i >= warmup:
                samples["input_grad"].append(t_i)
                samples["weight_grad"].append(t_w)
        else:
            t_b = timer.once(lambda: torch.autograd.backward(outs, grads))
            if i >= warmup:
                samples["backward"].append(t_b)
        for t in (*leaves, *run.params):
            t.grad = None
    for k, v in samples.items():
        if v:
            result[k] = statistics.median(v)
    return result


def measure(spec: Spec, model: str | Callable, *, device: str | torch.device | None = None,
            repeats: int = 10, warmup: int = 3, model_args: dict | None = None,
            progress: Callable[[str], None] | None = None) -> list[Measurement]:
    """Measure every forward block of `spec` (and its backward) with the user's model factory.

    A block the profiler cannot run alone (typically a multi-device block whose module needs its
    process group) comes back with `note` saying why; the caller keeps the spec's costs for it.
    """
    if repeats < 1 or warmup < 0:
        raise ExecutionError("--repeats must be at least 1 and --warmup at least 0")
    dev = torch.device(device) if device is not None else torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ExecutionError("--device cuda was asked for but CUDA is not available")
    factory = load_factory(model)
    timer = _Timer(dev)
    stages: dict[int, StageModel] = {}
    out: list[Measurement] = []
    for name in spec.topo_order:
        block = spec.block(name)
        if block.kind is not Kind.FORWARD:
            continue
        rank = block.devices[0]
        if progress:
            progress(name)
        try:
            if rank not in stages:
                ctx = StageContext(spec, rank, spec.devices, dev)
                stages[rank] = factory(ctx, **(model_args or {}))
            if name not in stages[rank].modules:
                raise ExecutionError(f"the model has no module for block {name!r} on rank {rank}")
            split = any(b.forward == name and b.kind is Kind.INPUT_GRAD for b in spec.blocks)
            run = _BlockRun(spec, stages[rank], name, dev)
            times = _measure_block(run, split, timer, repeats, warmup)
            act = run.activation_bytes()
        except ExecutionError as e:
            if not block.is_multi_device:
                raise ExecutionError(f"profiling block {name}: {e}") from None
            out.append(Measurement(name, note=f"not measured ({e})"))
            continue
        except Exception as e:  # a user module failing is reported, not a traceback
            if not block.is_multi_device:
                raise ExecutionError(f"profiling block {name} on {dev}: {type(e).__name__}: {e}") from None
            out.append(Measurement(name, note=f"not measured alone ({type(e).__name__}: {e})"))
            continue
        out.append(Measurement(name, times.get("forward"), times.get("backward"), times.get("input_grad"),
                               times.get("weight_grad"), act, device=str(dev)))
    return out
