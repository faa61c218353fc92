"""How a `Pipeline` is set up around its model: joining the process group and the (dp, pp)
mesh, the DeviceMeshes and DTensor plans of its tensor-parallel blocks, the groups of its tied
parameters and of its batch checks, and its runner with its links (NCCL's or the copy engines').

Every function takes the `Pipeline` being built (`pipe`; not imported here, which would make a
cycle) and sets what it makes on it; each one that creates process groups does so on every rank
in one order, since `new_group` is collective over the world.
"""
from __future__ import annotations

import datetime
import os
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from tessel_dsl.errors import ExecutionError
from tessel_dsl.executor.batch_agreement import BatchAgreement
from tessel_dsl.executor.meta_init import materialise
from tessel_dsl.executor.preflight import check_world


def join(pipe, replicas, mesh, device, timeout) -> None:
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
    world, D = dist.get_world_size(), pipe.devices
    if mesh is not None:
        shape = tuple(mesh.mesh.shape)
        if len(shape) != 2 or shape[1] != D:
            raise ExecutionError(f"the mesh must be (replicas, {D}) for a {D}-device plan, got {shape}")
        replicas = shape[0]
    replicas = check_world(D, world, replicas)
    pipe.replicas, pipe.rank = replicas, dist.get_rank()
    pipe.replica, pipe.pp_rank = divmod(pipe.rank, D)
    pipe.backend = dist.get_backend()
    if device is None:
        if pipe.backend == "nccl":
            device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", pipe.rank % torch.cuda.device_count())))
            torch.cuda.set_device(device)
        else:
            device = torch.device("cpu")
    pipe.device = torch.device(device)
    if mesh is None:
        from torch.distributed.device_mesh import init_device_mesh

        mesh = init_device_mesh(pipe.device.type, (replicas, D), mesh_dim_names=("dp", "pp"))
    pipe.mesh = mesh
    pipe.ranks = tuple(int(r) for r in mesh.mesh[pipe.replica].tolist())
    pipe.dp_group = mesh.get_group(0) if replicas > 1 else None


def materialise_local(pipe, here: list[str], init) -> None:
    """Local submodules onto the device (allocated and `init`-ed when on meta), the others'
    parameters onto meta, so a rank holds only its own part of the model (`meta_init`)."""
    pipe.local = [f for b in here for f in pipe.blocks[b]]
    materialise(pipe.model, pipe.binding.modules, set(pipe.local), pipe.device, init)


def parallelize(pipe, here: list[str]) -> None:
    """Shard the submodules of local multi-device blocks with their DTensor plans, each over a
    DeviceMesh of exactly its block's devices in this replica: the mesh's "pp" dimension for a
    block on all of them, a mesh on a sub-group for a block on some (a tensor-parallel pair
    {1, 2} of four devices, say)."""
    from torch.distributed.tensor.parallel import ParallelStyle, parallelize_module

    meshes = block_meshes(pipe)
    for b in here:
        if b in pipe.tp:
            mesh = meshes[tuple(sorted(pipe.plan.spec.block(b).devices))]
            styles = {f: s for f, s in pipe.tp[b].items() if isinstance(s, ParallelStyle)}
            parallelize_module(pipe.model, mesh, styles)
            for f, make in pipe.tp[b].items():
                if f in styles:
                    continue
                if not callable(make):
                    raise ExecutionError(f"tensor-parallel plan for {b!r} gives {f!r} a {type(make).__name__}: "
                                         f"a ParallelStyle or a function (module, mesh) -> module is needed")
                swap(pipe, f, make(pipe.model.get_submodule(f), mesh))
            pipe.binding.hooked[b] = [pipe.model.get_submodule(f) for f in styles]


def swap(pipe, fqn: str, new: nn.Module) -> None:
    """Put `new` (a `tp=` entry's module, made from the submodule it replaces) at `fqn`, with
    the block dispatch the bound submodule had: a ParallelStyle can only hook or re-lay the
    module it is given, not replace it."""
    parent, _, name = fqn.rpartition(".")
    pipe.model.get_submodule(parent).register_module(name, new)
    if fqn in pipe.binding.modules:
        old = pipe.binding.modules[fqn]
        pipe.binding.originals[fqn] = new.forward
        new.forward = vars(old).pop("forward")  # the dispatcher, which reads originals when called
        pipe.binding.modules[fqn] = new


def block_meshes(pipe) -> dict[tuple[int, ...], Any]:
    """This rank's DeviceMesh for each device set of a tensor-parallel block it is in. Every
    rank creates the sub-group of every such set of every replica, in one order (`new_group`
    is collective over the world), and builds meshes on the groups it belongs to."""
    from torch.distributed.device_mesh import DeviceMesh

    spec, every = pipe.plan.spec, tuple(range(pipe.devices))
    sets = sorted({tuple(sorted(spec.block(b).devices)) for b in pipe.tp})
    meshes: dict[tuple[int, ...], Any] = {}
    for devs in sets:
        if devs == every:
            meshes[devs] = pipe.mesh["pp"]
            continue
        for k in range(pipe.replicas):
            ranks = [int(pipe.mesh.mesh[k][d]) for d in devs]
            group = dist.new_group(ranks)
            if pipe.rank in ranks:
                meshes[devs] = DeviceMesh.from_group(group, pipe.device.type)
    return meshes


def tie_groups(pipe) -> None:
    """The process group of each set of devices holding a tied parameter whose gradient
    parts are summed (`ties.py`), created by every rank in one order (`new_group` is
    collective over the world); this rank keeps the groups of the sets it is in."""
    pipe.summed = [t for t in pipe.ties if t.count]
    pipe.tie_groups: dict[tuple[int, ...], Any] = {}
    for devs in sorted({t.ranks for t in pipe.summed}):
        if len(devs) == pipe.devices:
            pipe.tie_groups[devs] = pipe.mesh.get_group("pp")
            continue
        for k in range(pipe.replicas):
            ranks = [int(pipe.mesh.mesh[k][d]) for d in devs]
            group = dist.new_group(ranks)
            if pipe.rank in ranks:
                pipe.tie_groups[devs] = group


def host_group(pipe, timeout: float) -> None:
    """The batch checks over this replica's pipeline ranks (`BatchAgreement`), with a group
    that exchanges host tensors (the batch's layout) without touching the GPU: the pipeline's
    own group where it is gloo, else a gloo group of the same ranks, created by every rank
    for every replica in one order (`new_group` is collective over the world)."""
    pp = pipe.mesh.get_group("pp")
    host = pp
    if pipe.device.type != "cpu":
        for k in range(pipe.replicas):
            ranks = [int(r) for r in pipe.mesh.mesh[k].tolist()]
            group = dist.new_group(ranks, timeout=datetime.timedelta(seconds=timeout), backend="gloo")
            if k == pipe.replica:
                host = group
    pipe.agreement = BatchAgreement(pipe.ranks, pipe.replica, host, pp, pipe.device)


def make_runner(pipe, timeout: float) -> None:
    from tessel_dsl.executor.copy_links import transport_mode
    from tessel_dsl.executor.groups import make_links, warm_up_device, warm_up_links
    from tessel_dsl.executor.runtime import RankRunner

    links = {}
    # Every rank creates every replica's links, in one order: new_group is collective.
    for k in range(pipe.replicas):
        made = make_links(pipe.plan.programs, pipe.backend, tuple(int(r) for r in pipe.mesh.mesh[k].tolist()))
        if k == pipe.replica:
            links = made
    warm_up_device(pipe.device)
    warm_up_links(links, pipe.pp_rank, pipe.device, pipe.ranks)
    pipe.runner = RankRunner(pipe.plan, pipe.stage, pipe.pp_rank, pipe.device, timeout, None, links, pipe.ranks)
    pipe._copies = transport_mode()
    pipe._links, pipe._timeout = links, timeout
    pipe._primed = pipe.device.type != "cuda" and os.environ.get("TESSEL_PRIME") != "1"


def open_copies(pipe) -> None:
    """Decide on the copy links (``TESSEL_TRANSPORT``) and map their buffers once the first
    batch has told the messages' shapes (every rank steps together, so this collective lines
    up); `_copies` holds the setting until then."""
    from tessel_dsl.executor.copy_links import open_copy_links

    pipe.runner.comm.copies = open_copy_links(pipe.runner, None, pipe.ranks, pipe._copies)
    pipe._copies = None


def prime(pipe) -> None:
    """On GPUs, run the first batch once through the blocking lowering of the same schedule
    and drop its gradients: first-time costs (library handles, allocator growth) are paid
    with nothing in flight, where a posted receive spinning on the GPU could otherwise wait
    forever for a peer stuck the same way (see the executor's `rank._prime`)."""
    import dataclasses

    from tessel_dsl.executor.runtime import RankRunner
    from tessel_dsl.lower import lower

    blocking = dataclasses.replace(pipe.plan, programs=lower(pipe.plan.spec, pipe.plan.schedule, blocking=True))
    with pipe._loss_parallel():
        RankRunner(blocking, pipe.stage, pipe.pp_rank, pipe.device, pipe._timeout, None, pipe._links,
                   pipe.ranks, pipe.runner.comm.copies).step(-1)
    for p in pipe.parameters():
        p.grad = None
    dist.barrier()
    pipe._primed = True
