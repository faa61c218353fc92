"""Training with `Pipeline` on GPUs: the searched M-shape plan vs PyTorch's Schedule1F1B, with data
parallelism, on the embedding-heavy GPT of bench/gpu_common.py (512k vocabulary, bf16, AdamW).

Here (where the search runs):    python bench/gpu_train.py --make-plans   (-> bench/plans/gpu_train/, ignored)
On the GPU machine (torch only): PYTHONPATH=. python bench/gpu_train.py [--out DIR]   (bench/plans carried)
On CPUs (tiny sizes, gloo):      python bench/gpu_train.py --steps 2 --warmup 1

Rows, each a full training step (N micro-batches per replica, gradients averaged over the replicas
with one all-reduce, AdamW step):
* Tessel M-shape, 2 pipeline x 2 data-parallel ranks: `Pipeline` with the GPT's blocks bound by
  name, embedding and LM head sharded over the replica's two GPUs with DTensor plans
  (vocabulary-parallel embedding, column-parallel head with loss_parallel);
* Schedule1F1B, 2 x 2: torch.distributed.pipelining on a V split of the same model (embedding in
  the first stage, head in the last), the same data parallelism;
* the same two at 4 pipeline ranks (one replica).
Every row: median step time, tokens/s, peak memory of each GPU (max_memory_allocated over the
timed steps, weights, gradients and optimizer state included), and the first step's loss, which
must agree between the rows (same weights, same batches; checked).
"""
from __future__ import annotations

import inspect
import json
import os
import statistics
import sys
import time
from pathlib import Path

from gpu_common import (
    GPT,
    arg_parser,
    costed,
    gpu_info,
    make_plan,
    need_plans,
    plan_path,
    sizes,
    smoke,
    v_split_stage,
)

N = 16
PLAN = {d: plan_path("gpu_train", "gpt", d, "mshape", "tessel", N) for d in (2, 4)}


def make_plans() -> None:
    import gpu_run

    from tessel_dsl.executor.models import shapes

    # At 2 GPUs, bench/gpu_run.py's plan; at 4, as bench/gpu4.py costs the 4-GPU GPT (one layer per
    # GPU), with 16 micro-batches.
    print(make_plan(gpu_run.spec(), "tessel", N, PLAN[2]))
    spec = costed(shapes.mshape(4, head=True, microbatches=N),
                  {"E": 1, "EB": 2, "H": 4, "HB": 7, "F": 2, "B": 4}, {"H": 1, "HB": -1}, capacity=8)
    print(make_plan(spec, "tessel", N, PLAN[4]))


# -- what every rank runs ---------------------------------------------------------------------

def _setup():
    import torch

    if torch.cuda.is_available():
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _model(device):
    from tessel_dsl.executor.models.common import seeded
    from tessel_dsl.executor.models.gpt import GPT as Model
    from tessel_dsl.executor.models.gpt import Config

    cfg = Config.of(sizes("gpt", GPT))
    return cfg, seeded(Model, cfg, device)


def _batch(cfg, step: int, replica: int, device):
    """Replica `replica`'s batch of step `step`: N micro-batches of `cfg.batch` rows (the same
    in every row of the table)."""
    import torch

    g = torch.Generator().manual_seed(1000 * step + replica)
    s = torch.randint(0, cfg.vocab, (N * cfg.batch, cfg.seq + 1), generator=g).to(device)
    return s[:, :-1].contiguous(), s[:, 1:].contiguous()


def _loss(logits, labels):
    import torch.nn.functional as F

    return F.cross_entropy(logits.float().flatten(0, 1), labels.flatten())


def _timed(step_fn, device, steps: int, warmup: int, replica: int, cfg) -> dict:
    import torch
    import torch.distributed as dist

    times, losses = [], []
    for it in range(warmup + steps):
        if it == warmup and device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        x, y = _batch(cfg, it, replica, device)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        dist.barrier()
        t0 = time.perf_counter()
        losses.append(step_fn(x, y))
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        if it >= warmup:
            times.append(time.perf_counter() - t0)
    t = torch.tensor(times, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    peak = torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else 0.0
    peaks = [None] * dist.get_world_size()
    dist.all_gather_object(peaks, round(peak, 2))
    return {"times": t.tolist(), "losses": losses, "peak_gib": peaks}


def tessel_rank(plan_file: str, replicas: int, steps: int, warmup: int) -> dict:
    import torch
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    from tessel_dsl.executor.models.gpt import blocks_by_name
    from tessel_dsl.executor.pipeline import Pipeline
    from tessel_dsl.plan import load_plan

    device = _setup()
    plan = load_plan(plan_file)
    cfg, model = _model(device)
    tp = {"E": {"embed": RowwiseParallel(input_layouts=Replicate())},
          "H": {"head": ColwiseParallel(output_layouts=Shard(-1), use_local_output=False)}}
    pipe = Pipeline(plan, model, _loss, blocks=blocks_by_name(plan.spec, cfg.layers), replicas=replicas, tp=tp)
    if device.type == "cuda":
        torch.cuda.empty_cache()
    opt = torch.optim.AdamW(pipe.param_groups(), lr=1e-4)

    def step(x, y):
        loss = pipe.step(x, y)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss
    return _timed(step, device, steps, warmup, pipe.replica, cfg)


def torch_rank(devices: int, replicas: int, steps: int, warmup: int) -> dict:
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B

    from tessel_dsl.executor.models.common import split_evenly

    device = _setup()
    backend = "nccl" if device.type == "cuda" else "gloo"
    dist.init_process_group(backend, device_id=device if device.type == "cuda" else None)
    mesh = init_device_mesh(device.type, (replicas, devices), mesh_dim_names=("dp", "pp"))
    replica, rank = divmod(dist.get_rank(), devices)
    cfg, full = _model(device)
    part = split_evenly(cfg.layers, devices)[rank]

    mod = v_split_stage(full, part, rank == 0, rank == devices - 1)
    del full
    if device.type == "cuda":
        torch.cuda.empty_cache()
    stage = PipelineStage(mod, rank, devices, device, group=mesh["pp"].get_group())
    sched = Schedule1F1B(stage, N, loss_fn=_loss)
    opt = torch.optim.AdamW(mod.parameters(), lr=1e-4)
    dp = mesh["dp"].get_group() if replicas > 1 else None

    # Merging every micro-batch's logits (vocabulary-sized) would cost tens of GiB: losses only.
    no_outputs = {"return_outputs": False} if "return_outputs" in inspect.signature(sched.step).parameters else {}

    def step(x, y):
        losses: list = []
        if rank == 0:
            sched.step(x)
        elif rank == devices - 1:
            sched.step(target=y, losses=losses, **no_outputs)
        else:
            sched.step()
        if dp is not None:  # the same flat all-reduce of the gradients as Pipeline's
            params = [p for p in mod.parameters() if p.grad is not None]
            flat = torch.cat([p.grad.reshape(-1) for p in params])
            dist.all_reduce(flat, group=dp)
            flat /= replicas
            off = 0
            for p in params:
                p.grad.copy_(flat[off:off + p.numel()].view_as(p.grad))
                off += p.numel()
        opt.step()
        opt.zero_grad(set_to_none=True)
        total = torch.tensor([sum(float(v.detach()) for v in losses)], dtype=torch.float64, device=device)
        dist.all_reduce(total)
        return float(total) / (N * replicas)
    return _timed(step, device, steps, warmup, replica, cfg)


# -- the table ----------------------------------------------------------------------------------

def summarise(name: str, res: dict, replicas: int, cfg) -> dict:
    it = statistics.median(res["times"])
    tokens = replicas * N * cfg["batch"] * cfg["seq"]
    return {"run": name, "step_s": it, "tokens_per_s": tokens / it, "peak_gib": res["peak_gib"],
            "first_loss": res["losses"][0], "last_loss": res["losses"][-1], "times": res["times"]}


def main() -> None:
    ap = arg_parser(__doc__)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    args = ap.parse_args()
    if args.make_plans:
        make_plans()
        return
    need_plans(*PLAN.values(), how="python bench/gpu_train.py --make-plans")
    os.environ.setdefault("CUDA_MODULE_LOADING", "EAGER")
    import torch

    from tessel_dsl.executor.local_ranks import run_ranks

    cfg = sizes("gpt", GPT)
    world = torch.cuda.device_count() if torch.cuda.is_available() else 4
    results = {"gpu": gpu_info(), "date": time.strftime("%Y-%m-%d"), "model": cfg, "microbatches": N, "rows": []}
    print(results["gpu"], flush=True)
    runs = [("Tessel M-shape (Pipeline, DTensor E/H)", 2, 2, "tessel"), ("Schedule1F1B (V split)", 2, 2, "torch"),
            ("Tessel M-shape (Pipeline, DTensor E/H)", 4, 1, "tessel"), ("Schedule1F1B (V split)", 4, 1, "torch")]
    for name, d, r, kind in runs:
        if d * r > world:
            print(f"skipped {name} {d}x{r}: {world} devices", flush=True)
            continue
        t = time.time()
        if kind == "tessel":
            res = run_ranks(tessel_rank, d * r, PLAN[d], r, args.steps, args.warmup, threads=1 if smoke() else 4)
        else:
            res = run_ranks(torch_rank, d * r, d, r, args.steps, args.warmup, threads=1 if smoke() else 4)
        row = summarise(f"{name}, {d} pipeline x {r} data-parallel", res[0], r, cfg)
        row["layout"] = [d, r]
        row["wall_s"] = round(time.time() - t, 1)
        results["rows"].append(row)
        print(json.dumps(row), flush=True)
    rows = results["rows"]
    lines = [f"{results['gpu']}; GPT {cfg}; N={N} micro-batches per replica; AdamW",
             "", "| run | step ms | tokens/s | vs Schedule1F1B | peak GiB per GPU | first-step loss |",
             "|---|---|---|---|---|---|"]
    for i, row in enumerate(rows):
        base = next((b for b in rows if "Schedule1F1B" in b["run"] and b["layout"] == row["layout"]), None)
        speed = f"{row['tokens_per_s'] / base['tokens_per_s']:.2f}x" if base else "-"
        lines.append(f"| {row['run']} | {row['step_s'] * 1e3:.1f} | {row['tokens_per_s']:.0f} | {speed} | "
                     f"{' / '.join(f'{p:.1f}' for p in row['peak_gib'])} | {row['first_loss']:.4f} |")
    table = "\n".join(lines)
    print(table)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "gpu_train.json").write_text(json.dumps(results, indent=1))
    (out / "gpu_train.md").write_text(table + "\n")
    # Same weights, same batches: the first step's loss must agree between the rows of one
    # layout (bf16 on GPUs).
    tol = 1e-4 if smoke() else 2e-2
    for layout in {tuple(row["layout"]) for row in rows}:
        firsts = [row["first_loss"] for row in rows if tuple(row["layout"]) == layout]
        if any(abs(f - firsts[0]) > tol * abs(firsts[0]) for f in firsts):
            print(f"CHECK FAILED: first-step losses differ for {layout}: {firsts}", flush=True)
            sys.exit(1)
        print(f"check {layout}: first-step losses agree within {tol:g} relative: {firsts}")


if __name__ == "__main__":
    main()
