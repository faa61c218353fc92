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
replicas that hold it. Every rank of a replica must be given the same batch (each replica its own).

The step runs exactly the plan's program of this rank with `RankRunner`: the loss block's backward
is seeded with 1/N, so the gradients equal those of the mean loss over the N micro-batches, as one
process accumulating over the same micro-batches would get them. A multi-device block is run whole
on each of its devices (replicated parameters, identical gradients on every copy) unless `tp` gives
it a DTensor plan, which shards it over a DeviceMesh of exactly those devices (all of the plan's
or a subset).
"""
from __future__ import annotations

import datetime
import hashlib
import json
import os
from typing import Any, Callable, Iterator

import torch
import torch.distributed as dist
from torch import nn
from torch.utils import _pytree as pytree

from tessel_dsl.errors import ExecutionError
from tessel_dsl.ir import Mode
from tessel_dsl.plan import Plan, plan_to_json

from tessel_dsl.executor.bind import Binding, Trace
from tessel_dsl.executor.block_map import check_blocks, check_tp, forward_graph, read_blocks
from tessel_dsl.executor.checkpoint import load_checkpoint, save_checkpoint
from tessel_dsl.executor.model_api import TensorMeta, forward_succs


class Pipeline:
    """This rank's part of `model` under `plan` (see the module docstring).

    `blocks` maps every forward block of the spec to submodule names of `model`, in the order the
    forward calls them (or names a JSON file holding that mapping, kept beside the spec). `model`
    may be built on the meta device: then `init(fqn, module)` is called for each local submodule
    after it is allocated on this rank's device (and for submodules outside every block that hold
    buffers), to fill in its weights. `tp` gives DTensor plans for multi-device blocks. `replicas` (or a
    2-D `mesh` named ``("dp", "pp")``) sets data parallelism; by default every rank the world has
    beyond the plan's devices is a replica.
    """

    def __init__(self, plan: Plan | str | os.PathLike, model: nn.Module, loss_fn: Callable | None = None, *,
                 blocks: dict[str, list[str]] | str | os.PathLike, replicas: int | None = None, mesh=None,
                 device: torch.device | str | None = None, init: Callable[[str, nn.Module], None] | None = None,
                 tp: dict[str, dict[str, Any]] | None = None, timeout: float = 300.0):
        from tessel_dsl.executor.launch import check_plan, load

        self.plan = load(plan)
        check_plan(self.plan)
        spec = self.plan.spec
        self.train = spec.mode is Mode.TRAIN
        if self.train and loss_fn is None:
            raise ExecutionError("a training plan needs loss_fn(output, *target)")
        self.loss_fn = loss_fn if self.train else None
        self.graph = forward_graph(spec)
        self.order = list(self.graph)
        if isinstance(blocks, (str, os.PathLike)):
            blocks = read_blocks(blocks)
        self.blocks = {b: list(f) for b, f in blocks.items()}
        check_blocks(spec, model, self.order, self.blocks)
        self.tp = {b: dict(p) for b, p in (tp or {}).items()}
        check_tp(spec, self.blocks, self.tp)
        self.devices, self.n = spec.devices, self.plan.schedule.microbatches
        self._join(replicas, mesh, device, timeout)
        self.model = model
        self.binding = Binding(model, self.blocks, self.graph)
        self.binding.device = self.device
        here = [b for b in self.order if self.pp_rank in spec.block(b).devices]
        self._materialise(here, init)
        self._parallelize(here)
        self.stage = _Stage(self, here)
        self._traces: dict[Any, Trace] = {}
        self.trace: Trace | None = None
        self.iteration = 0
        self._make_runner(timeout)

    # -- setting up -------------------------------------------------------------------------
    def _join(self, replicas, mesh, device, timeout) -> None:
        """Join (or reuse) the process group and place this rank in the (dp, pp) mesh."""
        if not dist.is_initialized():
            if "RANK" not in os.environ:
                raise ExecutionError("no process group: start the ranks with torchrun or "
                                     "tessel_dsl.executor.local_ranks.run_ranks")
            backend, bind = ("nccl", None) if torch.cuda.is_available() else ("gloo", None)
            if backend == "nccl":
                bind = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
                torch.cuda.set_device(bind)
            dist.init_process_group(backend, timeout=datetime.timedelta(seconds=timeout), device_id=bind)
        world, D = dist.get_world_size(), self.devices
        if mesh is not None:
            shape = tuple(mesh.mesh.shape)
            if len(shape) != 2 or shape[1] != D:
                raise ExecutionError(f"the mesh must be (replicas, {D}) for a {D}-device plan, got {shape}")
            replicas = shape[0]
        if replicas is None:
            if world % D:
                raise ExecutionError(f"the plan places blocks on {D} devices, which does not divide the "
                                     f"world of {world} ranks into replicas")
            replicas = world // D
        if replicas * D != world:
            raise ExecutionError(f"{D} devices x {replicas} replicas = {D * replicas} ranks, "
                                 f"but the world has {world}")
        self.replicas, self.rank = replicas, dist.get_rank()
        self.replica, self.pp_rank = divmod(self.rank, D)
        self.backend = dist.get_backend()
        if device is None:
            if self.backend == "nccl":
                device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", self.rank % torch.cuda.device_count())))
                torch.cuda.set_device(device)
            else:
                device = torch.device("cpu")
        self.device = torch.device(device)
        if mesh is None:
            from torch.distributed.device_mesh import init_device_mesh

            mesh = init_device_mesh(self.device.type, (replicas, D), mesh_dim_names=("dp", "pp"))
        self.mesh = mesh
        self.ranks = tuple(int(r) for r in mesh.mesh[self.replica].tolist())
        self.dp_group = mesh.get_group(0) if replicas > 1 else None

    def _materialise(self, here: list[str], init) -> None:
        """Local submodules onto the device (allocated and `init`-ed when on meta), the others'
        parameters onto meta, so a rank holds only its own part of the model."""
        local = {f for b in here for f in self.blocks[b]}
        self.local = [f for b in here for f in self.blocks[b]]
        for fqn, mod in self.binding.modules.items():
            if fqn in local:
                if _on_meta(mod):
                    if init is None:
                        raise ExecutionError(f"{fqn!r} is on the meta device: pass init(fqn, module) to fill it")
                    mod.to_empty(device=self.device)
                    with torch.no_grad():
                        init(fqn, mod)
                else:
                    mod.to(self.device)
            else:
                mod.to("meta")
        mapped = set(self.binding.modules)
        for fqn, mod in self.model.named_modules():
            if any(fqn == m or fqn.startswith(m + ".") for m in mapped):
                continue
            own = list(mod.named_buffers(recurse=False))
            if not own:
                continue
            if any(b.is_meta for _, b in own):
                if init is None:
                    raise ExecutionError(f"{fqn!r} holds buffers on the meta device: pass init(fqn, module)")
                for n, b in own:
                    mod._buffers[n] = torch.empty_like(b, device=self.device)
                with torch.no_grad():
                    init(fqn, mod)
            else:
                for n, b in own:
                    mod._buffers[n] = b.to(self.device)

    def _parallelize(self, here: list[str]) -> None:
        """Shard the submodules of local multi-device blocks with their DTensor plans, each over a
        DeviceMesh of exactly its block's devices in this replica: the mesh's "pp" dimension for a
        block on all of them, a mesh on a sub-group for a block on some (a tensor-parallel pair
        {1, 2} of four devices, say)."""
        from torch.distributed.tensor.parallel import parallelize_module

        meshes = self._block_meshes()
        for b in here:
            if b in self.tp:
                parallelize_module(self.model, meshes[tuple(sorted(self.plan.spec.block(b).devices))], self.tp[b])
                self.binding.hooked[b] = [self.model.get_submodule(f) for f in self.tp[b]]

    def _block_meshes(self) -> dict[tuple[int, ...], Any]:
        """This rank's DeviceMesh for each device set of a tensor-parallel block it is in. Every
        rank creates the sub-group of every such set of every replica, in one order (`new_group`
        is collective over the world), and builds meshes on the groups it belongs to."""
        from torch.distributed.device_mesh import DeviceMesh

        spec, every = self.plan.spec, tuple(range(self.devices))
        sets = sorted({tuple(sorted(spec.block(b).devices)) for b in self.tp})
        meshes: dict[tuple[int, ...], Any] = {}
        for devs in sets:
            if devs == every:
                meshes[devs] = self.mesh["pp"]
                continue
            for k in range(self.replicas):
                ranks = [int(self.mesh.mesh[k][d]) for d in devs]
                group = dist.new_group(ranks)
                if self.rank in ranks:
                    meshes[devs] = DeviceMesh.from_group(group, self.device.type)
        return meshes

    def _make_runner(self, timeout: float) -> None:
        from tessel_dsl.executor.groups import make_links, warm_up_device, warm_up_links
        from tessel_dsl.executor.runtime import RankRunner

        links = {}
        # Every rank creates every replica's links, in one order: new_group is collective.
        for k in range(self.replicas):
            made = make_links(self.plan.programs, self.backend, tuple(int(r) for r in self.mesh.mesh[k].tolist()))
            if k == self.replica:
                links = made
        warm_up_device(self.device)
        warm_up_links(links, self.pp_rank, self.device, self.ranks)
        self.runner = RankRunner(self.plan, self.stage, self.pp_rank, self.device, timeout, None, links, self.ranks)
        self._links, self._timeout = links, timeout
        self._primed = self.device.type != "cuda" and os.environ.get("TESSEL_PRIME") != "1"

    def _prime(self) -> None:
        """On GPUs, run the first batch once through the blocking lowering of the same schedule
        and drop its gradients: first-time costs (library handles, allocator growth) are paid
        with nothing in flight, where a posted receive spinning on the GPU could otherwise wait
        forever for a peer stuck the same way (see the executor's `rank._prime`)."""
        import dataclasses

        from tessel_dsl.lower import lower
        from tessel_dsl.executor.runtime import RankRunner

        blocking = dataclasses.replace(self.plan, programs=lower(self.plan.spec, self.plan.schedule, blocking=True))
        with self._loss_parallel():
            RankRunner(blocking, self.stage, self.pp_rank, self.device, self._timeout, None, self._links,
                       self.ranks).step(-1)
        for p in self.parameters():
            p.grad = None
        dist.barrier()
        self._primed = True

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
        every rank. Gradients accumulate into ``.grad``; the optimizer step is yours."""
        if not self.train:
            raise ExecutionError("this plan is for inference: use forward(inputs)")
        if target is None and isinstance(inputs, (tuple, list)) and len(inputs) == 2:
            inputs, target = inputs
        target = target if isinstance(target, (tuple, list)) else (target,)
        self._prepare(inputs, tuple(target))
        if not self._primed:
            self._prime()
        with self._loss_parallel():
            result = self.runner.step(self.iteration, collect=True)
        self.timings = result.timings
        self.iteration += 1
        self._reduce_grads()
        sink = self.binding.sink
        owner = min(self.plan.spec.block(sink).devices) == self.pp_rank
        total = torch.tensor([sum(result.losses.values()) if owner else 0.0], dtype=torch.float64,
                             device=self.device)
        dist.all_reduce(total)
        return float(total) / (self.n * self.replicas)

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
        if not self._primed:
            self._prime()
        result = self.runner.step(self.iteration, collect=True)
        self.timings = result.timings
        self.iteration += 1
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

        mine = [(self.pp_rank, a, s, e) for a, s, e in getattr(self, "timings", [])] if self.replica == 0 else []
        every = [None] * dist.get_world_size()
        dist.all_gather_object(every, mine)
        if self.rank == 0:
            write_trace(path, [e for part in every for e in part], f"{self.plan.spec.name} ({self.plan.schedule.name})")
        dist.barrier()

    # -- one step ---------------------------------------------------------------------------
    def _prepare(self, inputs, target: tuple) -> None:
        """Split the batch into micro-batches (checked before anything runs) and trace its shape."""
        if isinstance(inputs, dict):
            args, kwargs = (), dict(inputs)
        elif isinstance(inputs, (tuple, list)):
            args, kwargs = tuple(inputs), {}
        else:
            args, kwargs = (inputs,), {}
        leaves, spec = pytree.tree_flatten((args, kwargs, target))
        for i, x in enumerate(leaves):
            if isinstance(x, torch.Tensor):
                rows = x.shape[0] if x.dim() else 0
                if x.dim() == 0 or rows % self.n or rows == 0:  # 0 rows would train to a NaN loss
                    raise ExecutionError(f"a batch of {rows} rows does not split into the plan's {self.n} "
                                         f"micro-batches of at least one row (every input and target tensor "
                                         f"is split on dim 0)")
        chunks = [x.to(self.device).chunk(self.n) if isinstance(x, torch.Tensor) else [x] * self.n
                  for x in leaves]
        self.mbs = [pytree.tree_unflatten([c[mb] for c in chunks], spec) for mb in range(self.n)]
        key = tuple((tuple(x.shape), x.dtype) if isinstance(x, torch.Tensor) else repr(x)
                    for x in pytree.tree_leaves(self.mbs[0]))
        if key not in self._traces:
            a, k, t = self.mbs[0]
            self._traces[key] = self.binding.trace(a, k, self.loss_fn, t, self.device)
        self.trace = self._traces[key]

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


def _on_meta(mod: nn.Module) -> bool:
    return any(t.is_meta for t in list(mod.parameters()) + list(mod.buffers()))
