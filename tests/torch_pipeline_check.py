"""Run a PyTorch pipeline CSV with torch's own runtime and compare it with a single process.

Used by tests/integration/test_torch_csv_runtime.py: `run_pipeline` forks one gloo process per rank, each builds the
same tiny Linear stages (fixed seed), loads the CSV into `_PipelineScheduleRuntime` and runs one
step; `reference` runs the whole model in one process. Checked with torch 2.13.
"""
from __future__ import annotations

import os
import tempfile

import torch

HIDDEN = 8
BATCH_PER_MB = 2


def make_layers(stages: int) -> list[torch.nn.Module]:
    torch.manual_seed(1234)
    return [torch.nn.Sequential(torch.nn.Linear(HIDDEN, HIDDEN), torch.nn.Tanh()) for _ in range(stages)]


def make_data(microbatches: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(99)
    x = torch.randn(microbatches * BATCH_PER_MB, HIDDEN, generator=g)
    y = torch.randn(microbatches * BATCH_PER_MB, HIDDEN, generator=g)
    return x, y


def loss_fn(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.mse_loss(out, target)


def reference(stages: int, microbatches: int) -> tuple[list[float], list[list[torch.Tensor]]]:
    """Per-micro-batch losses and per-stage gradients of a plain single-process run."""
    layers = make_layers(stages)
    model = torch.nn.Sequential(*layers)
    x, y = make_data(microbatches)
    losses = []
    for xm, ym in zip(x.chunk(microbatches), y.chunk(microbatches)):
        loss = loss_fn(model(xm), ym)
        (loss / microbatches).backward()
        losses.append(loss.item())
    return losses, [[p.grad.clone() for p in layer.parameters()] for layer in layers]


def _worker(rank: int, world: int, csv_path: str, fmt: str, ranks: list[int], microbatches: int,
            init_file: str, out_dir: str) -> None:
    import torch.distributed as dist
    from torch.distributed.pipelining import PipelineStage
    from torch.distributed.pipelining.schedules import _PipelineScheduleRuntime

    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        layers = make_layers(len(ranks))
        mine = [k for k, r in enumerate(ranks) if r == rank]
        stages = [PipelineStage(layers[k], k, len(ranks), torch.device("cpu")) for k in mine]
        sched = _PipelineScheduleRuntime(stages, microbatches, loss_fn=loss_fn)
        sched._load_csv(csv_path, format=fmt)
        x, y = make_data(microbatches)
        losses: list[torch.Tensor] = []
        sched.step(x, target=y, losses=losses)
        torch.save({
            "losses": [float(v.detach()) for v in losses],
            "grads": {k: [p.grad.clone() for p in layers[k].parameters()] for k in mine},
        }, os.path.join(out_dir, f"rank{rank}.pt"))
    finally:
        dist.destroy_process_group()


def run_pipeline(csv_path: str, ranks: list[int], microbatches: int, fmt: str = "compute_only"
                 ) -> tuple[list[float], dict[int, list[torch.Tensor]]]:
    """Losses (from the rank holding the last stage) and gradients of every stage."""
    import torch.multiprocessing as mp

    world = max(ranks) + 1
    with tempfile.TemporaryDirectory() as tmp:
        init_file = os.path.join(tmp, "init")
        # Forked, as run_ranks forks CPU ranks: a spawned rank would import torch again (seconds each).
        mp.start_processes(_worker, args=(world, csv_path, fmt, ranks, microbatches, init_file, tmp),
                           nprocs=world, join=True, start_method="fork")
        results = [torch.load(os.path.join(tmp, f"rank{r}.pt")) for r in range(world)]
    losses = results[ranks[-1]]["losses"]
    grads: dict[int, list[torch.Tensor]] = {}
    for res in results:
        grads.update(res["grads"])
    return losses, grads
