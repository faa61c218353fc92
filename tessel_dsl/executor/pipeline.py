"""`Pipeline`: train (or run) your own `nn.Module` with a plan, from your own loop.

```
pipe = Pipeline(plan, model, loss_fn, blocks={"E": ["embed"], "F0": ["layers.0", "layers.1"], ...})
opt = torch.optim.AdamW(pipe.parameters())
for tokens, labels in loader:
    loss = pipe.step(tokens, labels)     # the plan's N micro-batches, this rank's program
    opt.step(); opt.zero_grad()
```

Run one process per rank (``torchrun``, or `tessel_dsl.executor.local_ranks.run_ranks`). With R x D
ranks for a D-device plan, ranks form a 2-D DeviceMesh ``("dp", "pp")``: replica k runs the plan on
ranks ``k*D .. k*D+D-1``, and after each step every parameter's gradient is averaged over the
replicas that hold it. Every rank of a replica must be given the same batch (each replica its own;
checked every step without waiting for the GPU: `batch_agreement.BatchAgreement`). A parameter
used by blocks on several ranks (tied weights) is held by each and its gradient parts are summed
over them first (`ties.py`).

The step runs exactly the plan's program of this rank with `RankRunner`: the loss block's backward
is seeded with 1/N, so the gradients equal those of the mean loss over the N micro-batches, as one
process accumulating over the same micro-batches would get them (with `loss_weight`, the weighted
mean). A multi-device block is run whole on each of its devices (replicated parameters, identical
gradients on every copy) unless `tp` gives it a DTensor plan, which shards it over a DeviceMesh of
exactly those devices (all of the plan's or a subset).
"""
from __future__ import annotations

import hashlib
import json
import os
from typing import Any, Callable, Iterator

import torch
import torch.distributed as dist
from torch import nn
from torch.utils import _pytree as pytree

from tessel_dsl.errors import ExecutionError
from tessel_dsl.executor import pipeline_setup as setup_
from tessel_dsl.executor.bind import Binding
from tessel_dsl.executor.boundary_trace import Trace
from tessel_dsl.executor.checkpoint import load_checkpoint, save_checkpoint
from tessel_dsl.executor.model_api import TensorMeta, forward_succs
from tessel_dsl.executor.preflight import (
    as_pair,
    batch_contents,
    check_batch,
    check_pipeline,
    check_setup,
    split_batch,
)
from tessel_dsl.plan import Plan, plan_to_json


class Pipeline:
    """This rank's part of `model` under `plan` (see the module docstring).

    `blocks` maps every forward block of the spec to submodule names of `model`, in the order the
    forward calls them (or names a JSON file holding that mapping, kept beside the spec); without
    it, a plan given as a path reads the binding `tessel plan` writes beside it (``plan.blocks.json``). `model`
    may be built on the meta device: then `init(fqn, module)` is called for each local submodule
    after it is allocated on this rank's device (and for submodules outside every block that hold
    buffers), to fill in its weights. `tp` gives DTensor plans for multi-device blocks: per block,
    submodule name -> a ParallelStyle, or a function `(module, mesh) -> module` whose result replaces
    the submodule (`placement.tp.spread_embedding`). `replicas` (or a
    2-D `mesh` named ``("dp", "pp")``) sets data parallelism; by default every rank the world has
    beyond the plan's devices is a replica. `loss_fn(output, *target)` gets the model's whole
    output for a micro-batch (`.logits` of a Hugging Face model's); the step's loss is the mean
    of the micro-batch losses, or with `loss_weight(*target)` (a micro-batch's token count, say)
    their weighted mean over every micro-batch of every replica. Everything that can be checked
    without the other ranks is checked before joining the process group; `batch` (an example
    batch, as `step` takes it) adds the batch's split and a fake run of model and loss.
    `Pipeline.check(...)` (`preflight.check_pipeline`) runs the same checks in the launching
    process, before any rank starts.
    """

    check = staticmethod(check_pipeline)

    def __init__(self, plan: Plan | str | os.PathLike, model: nn.Module, loss_fn: Callable | None = None, *,
                 blocks: dict[str, list[str]] | str | os.PathLike | None = None, replicas: int | None = None,
                 mesh=None,
                 device: torch.device | str | None = None, init: Callable[[str, nn.Module], None] | None = None,
                 tp: dict[str, dict[str, Any]] | None = None, timeout: float = 300.0,
                 loss_weight: Callable[..., Any] | None = None, batch=None):
        setup = check_setup(plan, model, loss_fn, blocks, tp)
        self.plan, spec, self.train = setup.plan, setup.plan.spec, setup.train
        self.loss_fn = loss_fn if self.train else None
        self.loss_weight = loss_weight
        self.graph, self.order, self.blocks, self.tp, self.ties = setup.graph, setup.order, setup.blocks, setup.tp, setup.ties
        self.devices, self.n = spec.devices, self.plan.schedule.microbatches
        if batch is not None:
            check_batch(setup, model, batch, loss_weight)
        setup_.join(self, replicas, mesh, device, timeout)
        self.model = model
        self.binding = Binding(model, self.blocks, self.graph)
        self.binding.device = self.device
        here = [b for b in self.order if self.pp_rank in spec.block(b).devices]
        setup_.materialise_local(self, here, init)
        setup_.parallelize(self, here)
        self.stage = _Stage(self, here)
        setup_.tie_groups(self)
        setup_.host_group(self, timeout)
        self._traces: dict[Any, Trace] = {}
        self.trace: Trace | None = None
        self.iteration = 0
        self._last = None
        setup_.make_runner(self, timeout)

    # -- what the user sees -----------------------------------------------------------------
    def parameters(self) -> Iterator[nn.Parameter]:
        for _, p in self.named_parameters():
            yield p

    def named_parameters(self) -> Iterator[tuple[str, nn.Parameter]]:
        """This rank's parameters under their names in the full model."""
        seen = set()
        for fqn in self.local:
            for n, p in self.binding.modules[fqn].named_parameters():
                if id(p) not in seen:
                    seen.add(id(p))
                    yield f"{fqn}.{n}", p

    def param_groups(self) -> list[dict]:
        """This rank's parameters as optimizer groups, DTensor shards apart from plain tensors:
        foreach and fused optimizers handle one kind per group."""
        plain, sharded = [], []
        for _, p in self.named_parameters():
            (sharded if hasattr(p, "placements") else plain).append(p)
        return [g for g in ({"params": plain}, {"params": sharded}) if g["params"]]

    def step(self, inputs, target=None) -> float:
        """One training step over the plan's N micro-batches of `inputs` and `target` (or of one
        ``(inputs, target)`` pair); returns the mean loss (over micro-batches and replicas) on
        every rank. Gradients accumulate into ``.grad``; the optimizer step is yours.

        The host waits for the GPU once, at the end, to read the loss: the micro-batch losses
        stay on the device and are summed there, together with the batch check's verdict."""
        if not self.train:
            raise ExecutionError("this plan is for inference: use forward(inputs)")
        inputs, target = as_pair(inputs, target)
        self._prepare(inputs, target)
        if self._copies:
            setup_.open_copies(self)
        if not self._primed:
            setup_.prime(self)
        weights = self._weights()
        with self._loss_parallel():
            result = self.runner.step(self.iteration, collect=True, wait=False)
        self._last = result
        step, self.iteration = self.iteration, self.iteration + 1
        self._sum_tied_grads()
        self._reduce_grads()
        owner = min(self.plan.spec.block(self.binding.sink).devices) == self.pp_rank
        part = torch.zeros((), dtype=torch.float64, device=self.device)
        bad_weight = torch.zeros((), dtype=torch.bool, device=self.device)
        if owner and result.losses:
            mbs = sorted(result.losses)
            losses = torch.stack([result.losses[mb].double().reshape(()) for mb in mbs])
            if weights is None:
                part = losses.sum() / (self.n * self.replicas)
            else:  # weights by integer index: a list index would copy host data to the device
                part = (losses * torch.stack([weights[mb] for mb in mbs])).sum() / self._total_weight
        if weights is not None:
            bad_weight = self._total_weight <= 0
        # Summed over the world: the loss (each replica's owner adds its share), and how many
        # ranks saw their pipeline given different batches or a weightless batch.
        total = torch.stack([part, self.agreement.contents_differ(self._contents).double(), bad_weight.double()])
        dist.all_reduce(total)
        loss, differ, weightless = total.tolist()  # the step's one wait for the GPU
        if differ:
            self.agreement.refuse_contents(self._contents, step)
        if weightless:
            raise ExecutionError(f"step {step}: loss_weight gave the batch a total weight of "
                                 f"{float(self._total_weight):g}; it must be positive")
        return loss

    @property
    def timings(self) -> list[tuple[str, float, float]]:
        """This rank's actions in the last step or forward: (action, start, end), seconds from
        its start (read from CUDA events when first asked, which waits for the GPU)."""
        return self._last.timings if self._last is not None else []

    def _weights(self) -> torch.Tensor | None:
        """With `loss_weight`, each micro-batch's weight (from its target) as a float64 vector on
        the device, and the loss seeds that make the gradients those of the weighted mean over
        every micro-batch of every replica: w_mb * R / W, R replicas and W the weights' sum over
        all of them (the replicas' gradients are then averaged); W is kept in `_total_weight`,
        and checked with the loss (`step`). Without, None: the loss is the mean of the
        micro-batch means. Nothing here reads a tensor on the host."""
        if self.loss_weight is None:
            self.runner.seeds = None
            return None
        w = torch.stack([self._weight(self.loss_weight(*self.mbs[mb][2])) for mb in range(self.n)])
        total = w.sum()
        if self.dp_group is not None:
            dist.all_reduce(total, group=self.dp_group)
        self._total_weight = total
        self.runner.seeds = list((w * self.replicas / total).unbind())
        return w

    def _weight(self, v) -> torch.Tensor:
        """One micro-batch's weight as a float64 0-dim tensor on this rank's device."""
        if isinstance(v, torch.Tensor):
            return v.detach().to(self.device, torch.float64, non_blocking=True).sum()
        return torch.full((), float(v), dtype=torch.float64, device=self.device)

    def _loss_parallel(self):
        """With tensor-parallel blocks, a loss over vocabulary-sharded logits (DTensor) is
        computed without gathering them: forward and backward both run in this context."""
        import contextlib

        if not self.tp:
            return contextlib.nullcontext()
        from torch.distributed.tensor.parallel import loss_parallel

        return loss_parallel()

    @torch.no_grad()
    def forward(self, inputs):
        """Run an inference plan over the N micro-batches of `inputs`; returns the model's output
        (micro-batches concatenated) on the ranks of the last block, None on the others."""
        if self.train:
            raise ExecutionError("this plan is for training: use step(inputs, target)")
        self._prepare(inputs, ())
        if self._copies:
            setup_.open_copies(self)
        if not self._primed:
            setup_.prime(self)
        result = self.runner.step(self.iteration, collect=True)
        self._last = result
        step, self.iteration = self.iteration, self.iteration + 1
        if self.agreement.contents_differ(self._contents).item():
            self.agreement.refuse_contents(self._contents, step)
        sink = self.binding.sink
        if self.pp_rank not in self.plan.spec.block(sink).devices:
            return None
        parts = [result.outputs[(sink, mb)] for mb in range(self.n)]
        tensors = [torch.cat(ts) for ts in zip(*parts)]
        leaves, it = self.trace.result, iter(tensors)
        vals = [next(it) if m is not None else o for m, o in zip(leaves.metas, leaves.others)]
        return pytree.tree_unflatten(vals, leaves.spec)

    __call__ = forward

    def write_trace(self, path: str | os.PathLike) -> None:
        """Chrome/Perfetto trace of the last step of replica 0, one row per plan device, written by
        rank 0; all ranks call it. Each rank's times count from its own start of the step."""
        from tessel_dsl.executor.trace import write_trace

        mine = [(self.pp_rank, a, s, e) for a, s, e in self.timings] if self.replica == 0 else []
        every = [None] * dist.get_world_size()
        dist.all_gather_object(every, mine)
        if self.rank == 0:
            write_trace(path, [e for part in every for e in part], f"{self.plan.spec.name} ({self.plan.schedule.name})")
        dist.barrier()

    # -- one step ---------------------------------------------------------------------------
    def _prepare(self, inputs, target: tuple) -> None:
        """Split the batch into micro-batches (checked before anything runs) and trace its shape."""
        leaves, spec = split_batch(inputs, target, self.n)
        self.agreement.same_layout(leaves, self.iteration)
        # Not blocking: a copy from host memory would otherwise wait for all the GPU's queued
        # work; the step's end waits for the GPU before the caller can reuse the batch.
        leaves = [x.to(self.device, non_blocking=True) if isinstance(x, torch.Tensor) else x for x in leaves]
        self._contents = batch_contents(leaves)
        chunks = [x.chunk(self.n) if isinstance(x, torch.Tensor) else [x] * self.n for x in leaves]
        self.mbs = [pytree.tree_unflatten([c[mb] for c in chunks], spec) for mb in range(self.n)]
        key = tuple((tuple(x.shape), x.dtype) if isinstance(x, torch.Tensor) else repr(x)
                    for x in pytree.tree_leaves(self.mbs[0]))
        if key not in self._traces:
            a, k, t = self.mbs[0]
            self._traces[key] = self.binding.trace(a, k, self.loss_fn, t, self.device)
        self.trace = self._traces[key]

    def _sum_tied_grads(self) -> None:
        """Sum the gradient parts of each tied parameter over the ranks holding it, one part per
        block using it (`Tie.count`): one flat all-reduce per set of holding ranks."""
        for devs, group in self.tie_groups.items():
            ties = [t for t in self.summed if t.ranks == devs]
            params = [self.model.get_parameter(t.names[0]) for t in ties]
            grads = []
            for t, p in zip(ties, params):
                if p.grad is None:
                    p.grad = torch.zeros_like(p)
                if self.pp_rank not in t.count:  # its parts are counted on another device
                    p.grad.zero_()
                grads.append(p.grad)
            flat = torch.cat([g.reshape(-1) for g in grads])
            dist.all_reduce(flat, group=group)
            off = 0
            for g in grads:
                g.copy_(flat[off:off + g.numel()].view_as(g))
                off += g.numel()

    def _reduce_grads(self) -> None:
        """Average every local gradient over the replicas (one flat all-reduce)."""
        if self.dp_group is None:
            return
        params = [p for _, p in self.named_parameters() if p.requires_grad]
        for p in params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        grads = [_local(p.grad) for p in params]  # a sharded parameter reduces its own shard
        flat = torch.cat([g.reshape(-1) for g in grads])
        dist.all_reduce(flat, group=self.dp_group)
        flat /= self.replicas
        off = 0
        for g in grads:
            n = g.numel()
            g.copy_(flat[off:off + n].view_as(g))
            off += n

    # -- checkpoints ------------------------------------------------------------------------
    def fingerprint(self) -> str:
        """Identifies the plan (spec and schedule) and the block mapping a checkpoint belongs to."""
        doc = plan_to_json(self.plan)
        body = json.dumps({"spec": doc.get("spec"), "schedule": doc.get("schedule"), "blocks": self.blocks},
                          sort_keys=True, default=str)
        return hashlib.sha256(body.encode()).hexdigest()[:16]

    def _view(self) -> nn.Module:
        """A module holding only the local submodules, under their full-model names."""
        root = nn.Module()
        for fqn in self.local:
            parent = root
            *path, last = fqn.split(".")
            for part in path:
                if not hasattr(parent, part):
                    parent.add_module(part, nn.Module())
                parent = getattr(parent, part)
            parent.add_module(last, self.binding.modules[fqn])
        return root

    def save(self, path: str | os.PathLike, optimizer: torch.optim.Optimizer | None = None, step: int = 0) -> None:
        """Save this rank's parameters (and optimizer state) with torch.distributed.checkpoint;
        all ranks call it together."""
        save_checkpoint(self, path, optimizer, step)

    def load(self, path: str | os.PathLike, optimizer: torch.optim.Optimizer | None = None, *,
             trusted: bool = False) -> int:
        """Load a checkpoint written by `save` for the same plan and mapping; returns its step.
        Checked on every rank before anything is read. Only DCP's metadata classes and plain data
        are unpickled unless `trusted` (DCP's own loader, which runs whatever the files name)."""
        return load_checkpoint(self, path, optimizer, trusted)


class _Stage:
    """The `StageModel` the runtime drives: one bound module per local block."""

    def __init__(self, pipe: Pipeline, here: list[str]):
        self.pipe = pipe
        self.modules = {b: _BlockModule(pipe, b) for b in here}

    def meta(self, block: str) -> tuple[TensorMeta, ...]:
        pipe, trace = self.pipe, self.pipe.trace
        succ = forward_succs(pipe.plan.spec, block)
        if succ:
            return trace.output_metas(block)
        if pipe.train:
            return (trace.loss,)
        return tuple(m for m in trace.result.metas if m is not None)

    def data(self, block: str, mb: int) -> tuple[torch.Tensor, ...]:
        return (mb,)  # the block module looks the micro-batch up itself

    def param_shards(self):
        return []


class _BlockModule(nn.Module):
    """A local block: its submodules (for `.parameters()`) and the call into the bound model."""

    def __init__(self, pipe: Pipeline, block: str):
        super().__init__()
        self.parts = nn.ModuleList(pipe.binding.modules[f] for f in pipe.blocks[block])
        self.block = block
        object.__setattr__(self, "pipe", pipe)  # not a child: its parameters are not all ours

    def forward(self, *inputs_and_mb):
        *received, mb = inputs_and_mb
        pipe = self.pipe
        args, kwargs, target = pipe.mbs[mb]
        last = self.block == pipe.binding.sink
        out = pipe.binding.run_block(self.block, pipe.trace, tuple(received), args, kwargs,
                                     pipe.loss_fn if last else None, target)
        return out


def _local(t: torch.Tensor) -> torch.Tensor:
    """The storage of this rank's shard of a DTensor (written in place), or `t` itself."""
    return getattr(t, "_local_tensor", t)

