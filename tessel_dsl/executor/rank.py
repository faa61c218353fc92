"""One rank's life: join the process group, build the stage, run the program, report.

`rank_main` runs in every rank, whether `launch.spawn` started it on this host or `torchrun`
did. It joins the process group, creates the sub-groups and warms up the links, builds its stage
with the user's factory, runs the program for the requested iterations and sends its timings
(and, when asked, losses, outputs and gradients) to rank 0. A watchdog thread turns "no progress
for `timeout` seconds" into an error naming the rank, the step and the action. A spawned rank
reports through a `Channel`, which the parent (`launch`) watches.
"""
from __future__ import annotations

import datetime
import os
import pickle
import sys
import threading
import time
import traceback
from array import array
from dataclasses import dataclass, field
from pathlib import Path

from tessel_dsl.errors import TesselError
from tessel_dsl.executor.run_report import RankResult, RunReport
from tessel_dsl.plan import plan_from_json


@dataclass
class Options:
    """Everything a rank needs besides the plan."""

    model: str
    model_args: dict = field(default_factory=dict)
    backend: str = "gloo"
    timeout: float = 120.0
    steps: int = 1
    warmup: int = 0
    collect: bool = False
    grads: bool = False
    replicas: int = 1  # data-parallel copies of the plan; the world is devices x replicas


class Channel:
    """Files in a job directory that a spawned rank reports through: its progress (a shared
    memory map of three doubles per rank), an error file per rank, and rank 0's result."""

    def __init__(self, job: Path, rank: int, world: int):
        import mmap

        self.job, self.rank = job, rank
        self._fh = open(job / "progress", "r+b")
        self.progress = memoryview(mmap.mmap(self._fh.fileno(), 24 * world)).cast("d")

    def error(self, rank: int, kind: str, msg: str) -> None:
        _write_atomic(self.job / f"error.{rank}", pickle.dumps((kind, msg)))

    def result(self, report) -> None:
        _write_atomic(self.job / "result", pickle.dumps(report))


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


class _Watchdog:
    """Calls `on_stall` when `beat` has not been called for `timeout` seconds."""

    def __init__(self, timeout: float, on_stall):
        self.timeout, self.on_stall = timeout, on_stall
        self.last, self.where = time.monotonic(), "start-up"
        self.done = threading.Event()
        threading.Thread(target=self._loop, daemon=True).start()

    def beat(self, where: str) -> None:
        self.last, self.where = time.monotonic(), where

    def _loop(self) -> None:
        while not self.done.wait(0.2):
            idle = time.monotonic() - self.last
            if idle > self.timeout:
                self.on_stall(f"no progress for {idle:.1f}s at {self.where}")
                return


def _prime(plan, stage, rank, device, opts, beat, links, control, ranks=None, copies=None) -> None:
    """Run one unmeasured iteration of the blocking lowering of the same schedule.

    The first pass through a block can make the host wait for the whole GPU (library handles,
    allocator growth, kernel selection). In the non-blocking program a receive is already posted
    then, spinning on the GPU for a peer that may itself be stuck the same way: the ranks
    deadlock. The blocking program has nothing in flight during compute, so every such first-time
    cost is paid there, and the measured non-blocking iterations start warm.
    """
    import dataclasses

    import torch.distributed as dist

    from tessel_dsl.executor.runtime import RankRunner
    from tessel_dsl.lower import lower

    blocking = dataclasses.replace(plan, programs=lower(plan.spec, plan.schedule, blocking=True))
    for m in stage.modules.values():
        m.zero_grad(set_to_none=True)
    dist.barrier(group=control)
    with loss_context():
        RankRunner(blocking, stage, rank, device, opts.timeout, beat, links, ranks, copies).step(-1)


def rank_main(rank: int, world: int, plan_json: dict, opts: Options, init_method: str,
              chan: "Channel | None" = None, local_rank: int | None = None) -> RunReport | None:
    """Run one rank. Returns the merged report on rank 0 under torchrun, else None."""
    import torch
    import torch.distributed as dist

    from tessel_dsl.executor.copy_links import open_copy_links, transport_mode
    from tessel_dsl.executor.groups import warm_up_device, warm_up_links
    from tessel_dsl.executor.model_api import StageContext, load_factory
    from tessel_dsl.executor.runtime import RankRunner

    def report(kind: str, msg: str) -> None:
        if chan is not None:
            chan.error(rank, kind, msg)
        else:
            print(f"error: {msg}", file=sys.stderr, flush=True)

    def stalled(msg: str) -> None:
        report("stalled", f"rank {rank} stalled: {msg}")
        if os.environ.get("TESSEL_DUMP_STACKS"):
            import faulthandler

            faulthandler.dump_traceback(all_threads=True)
        os._exit(3)

    dog = _Watchdog(opts.timeout + 1.0, stalled)
    try:
        plan = plan_from_json(plan_json)
        local = rank if local_rank is None else local_rank
        if opts.backend == "nccl":
            torch.cuda.set_device(local)
            device = torch.device("cuda", local)
        else:
            device = torch.device("cpu")
            # Several ranks share the host's cores: one intra-op thread each avoids oversubscription.
            torch.set_num_threads(int(os.environ.get("TESSEL_RANK_THREADS", "1")))
        dist.init_process_group(opts.backend, init_method=init_method, rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=max(opts.timeout, 1.0)))
        control = dist.new_group(backend="gloo") if opts.backend != "gloo" else dist.group.WORLD
        # Replica k runs the plan on ranks k*D .. k*D+D-1; `dev` is this rank's plan device.
        D = plan.spec.devices
        replica, dev = divmod(rank, D)
        ranks = tuple(range(replica * D, replica * D + D))
        groups, links, dp = _replica_groups(plan, opts, replica)
        dog.beat("building the model")
        loss_context()  # imports DTensor's loss ops here, at start-up, rather than inside the first step
        ctx = StageContext(plan.spec, dev, D, device, groups)
        stage = load_factory(opts.model)(ctx, **opts.model_args)
        if opts.replicas > 1:
            stage = _ReplicaData(stage, replica * plan.schedule.microbatches)
        dog.beat("warming up links")
        warm_up_device(device)
        warm_up_links(links, dev, device, ranks)
        prog = plan.programs[dev].actions

        def beat(it: int, i: int, what: str) -> None:
            dog.beat(f"iteration {it}, step {min(i + 1, len(prog))}/{len(prog)} ({what})")
            if chan is not None:
                chan.progress[rank * 3:rank * 3 + 3] = memoryview(array("d", [it, i, time.monotonic()]))

        runner = RankRunner(plan, stage, dev, device, opts.timeout, beat, links, ranks)
        dog.beat("mapping the links' buffers")
        runner.comm.copies = open_copy_links(runner, control, ranks, transport_mode())
        # Priming matters on GPUs; TESSEL_PRIME=1 turns it on elsewhere (tests use it on gloo).
        if (device.type == "cuda" or os.environ.get("TESSEL_PRIME") == "1") and not plan.programs[dev].blocking:
            _prime(plan, stage, dev, device, opts, beat, links, control, ranks, runner.comm.copies)
        res = RankResult(rank=rank, device=_device_name(device), transport="copy" if runner.comm.copies else "nccl")
        for it in range(opts.warmup + opts.steps):
            for m in stage.modules.values():
                m.zero_grad(set_to_none=True)
            dist.barrier(group=control)
            first = it == 0
            with loss_context():
                step = runner.step(it, collect=opts.collect and first)
            if dp is not None:
                _average_grads(stage, dp, opts.replicas)
            if first:
                res.losses = {mb: float(v) for mb, v in step.losses.items()}
                res.outputs = step.outputs
                if opts.grads:
                    res.grads = [(s.name, s.dim, s.start, None if s.param.grad is None else _grad_shard(s.param).detach().cpu())
                                 for s in stage.param_shards()]
            if it >= opts.warmup:
                res.steps.append(step.timings)
        dog.beat("gathering results")
        gathered = [None] * world if rank == 0 else None
        dist.gather_object(res, gathered, dst=0, group=control)
        dog.done.set()
        dist.destroy_process_group()
        if rank == 0:
            # Replicas run the same programs: the report is replica 0's.
            merged = RunReport.from_ranks(plan, gathered[:plan.spec.devices], opts.backend)
            if chan is not None:
                chan.result(merged)
            return merged
        return None
    except TesselError as e:
        kind = "comm" if "transfer with rank" in str(e) or "within" in str(e) else "raised"
        report(kind, str(e))
    except Exception as e:  # start-up failures: factory, process group, CUDA
        report("raised", f"rank {rank}: {type(e).__name__}: {e}\n{_tail(traceback.format_exc())}")
    finally:
        dog.done.set()
    if chan is not None:
        os._exit(1)
    raise SystemExit(1)


def _replica_groups(plan, opts: Options, replica: int):
    """This replica's block groups and links, and this device's data-parallel group (None with one
    replica). Every rank creates every group, in one order: `new_group` is collective."""
    import torch.distributed as dist

    from tessel_dsl.executor.groups import make_groups, make_links

    D, mine = plan.spec.devices, None
    for k in range(opts.replicas):
        ranks = tuple(range(k * D, k * D + D))
        made = (make_groups(plan.spec, opts.backend, ranks), make_links(plan.programs, opts.backend, ranks))
        if k == replica:
            mine = made
    dp = None
    if opts.replicas > 1:
        for d in range(D):
            g = dist.new_group([k * D + d for k in range(opts.replicas)], backend=opts.backend)
            if d == dist.get_rank() % D:
                dp = g
    return mine[0], mine[1], dp


class _ReplicaData:
    """A stage whose micro-batch `mb` reads the model's micro-batch ``offset + mb``: replica k
    trains on micro-batches k*N .. k*N+N-1, as one process stepping over all of them would."""

    def __init__(self, stage, offset: int):
        self.stage, self.offset = stage, offset
        self.modules = stage.modules

    def meta(self, block):
        return self.stage.meta(block)

    def data(self, block, mb):
        return self.stage.data(block, self.offset + mb)

    def param_shards(self):
        return self.stage.param_shards()


def _average_grads(stage, group, replicas: int) -> None:
    """Mean of every local gradient over the replicas (one flat all-reduce)."""
    import torch
    import torch.distributed as dist

    params = [p for m in stage.modules.values() for p in m.parameters() if p.requires_grad]
    params = list({id(p): p for p in params}.values())
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    grads = [_local(p.grad) for p in params]  # a DTensor parameter reduces its own shard
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat, group=group)
    flat /= replicas
    off = 0
    for g in grads:
        g.copy_(flat[off:off + g.numel()].view_as(g))
        off += g.numel()


def _grad_shard(p):
    """This rank's part of `p`'s gradient, laid out as `p` is: a DTensor gradient may come back
    in another layout (a vocabulary-sharded embedding's is replicated), and its slice is local."""
    g = p.grad
    if hasattr(g, "placements"):
        if tuple(g.placements) != tuple(p.placements):
            g = g.redistribute(p.device_mesh, p.placements)
        return g.to_local()
    return g


def _local(t):
    """The storage of this rank's part of a DTensor (written in place), or `t` itself."""
    return getattr(t, "_local_tensor", t)


def loss_context():
    """DTensor's ``loss_parallel`` for a step's forwards and backwards: a cross entropy over
    logits sharded on the vocabulary (a DTensor) is then computed without gathering them.
    Plain tensors are unaffected."""
    from torch.distributed.tensor.parallel import loss_parallel

    return loss_parallel()


def _device_name(device) -> str:
    import torch

    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return "cpu"


def _tail(tb: str, lines: int = 6) -> str:
    return "\n".join(tb.strip().splitlines()[-lines:])
