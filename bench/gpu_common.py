"""Shared by bench/gpu_run.py and bench/gpu4.py: the GPU-sized specs and their plans (made here,
where the search runs), executor runs and PyTorch's own Schedule1F1B on the same model (there,
where only torch is installed), and the command line and result files both scripts have."""
from __future__ import annotations

import argparse
import inspect
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
# Plans are generated, never committed: each script's make-plans step writes them, deterministically
# from the specs and measured-cost files in the tree, into this ignored folder (TESSEL_BENCH_PLANS
# moves it, as the tests do), one sub-folder per script; a GPU call carries the folder.
PLANS = Path(os.environ.get("TESSEL_BENCH_PLANS") or ROOT / "bench" / "plans")


def plan_path(script: str, model: str, devices: int, placement: str, schedule: str, n: int, *variants: str) -> Path:
    """The one name a bench plan has: ``<script>/<model><D>_<placement>_<schedule>[_<variant>...]_n<N>.json``."""
    tail = "".join(f"_{v}" for v in variants if v)
    return PLANS / script / f"{model}{devices}_{placement}_{schedule}{tail}_n{n}.json"


def need_plans(*paths: Path, how: str) -> None:
    """Stop with the command that makes them when any of `paths` is missing."""
    missing = [str(p.relative_to(PLANS)) for p in paths if not p.exists()]
    if missing:
        raise SystemExit(f"no plan {', '.join(missing)} in {PLANS}: make them first with `{how}` "
                         f"(where the search runs) and carry {PLANS.relative_to(ROOT) if PLANS.is_relative_to(ROOT) else PLANS} "
                         f"to the GPU machine")

# An embedding-heavy GPT: a 256k vocabulary makes the embedding and LM head as large as the layers.
GPT = {"vocab": 512000, "hidden": 4096, "heads": 32, "layers": 4, "seq": 2048, "batch": 1, "dtype": "bf16"}
ENCDEC = {"vocab": 256000, "hidden": 2048, "heads": 16, "layers": 4, "src": 1024, "tgt": 1024, "batch": 2,
          "dtype": "bf16"}
BRANCHES = {"vocab": 32000, "hidden": 4096, "heads": 32, "layers": 4, "cross": 4, "text": 512, "patches": 576,
            "patch_dim": 768, "classes": 1000, "batch": 4, "dtype": "bf16"}


def costed(spec, times: dict[str, int], memory: dict[str, int] | None = None, capacity: int | None = None):
    """`spec` with block times (and memory deltas) replaced by name pattern: exact name first,
    then the first letter class (``F`` forward stage, ``B`` backward stage)."""
    from dataclasses import replace

    def pick(table, b, default):
        if b.name in table:
            return table[b.name]
        key = b.name[0] if b.name[1:].isdigit() else None
        return table.get(key, default)

    blocks = tuple(replace(b, time=pick(times, b, b.time), memory=pick(memory or {}, b, b.memory))
                   for b in spec.blocks)
    return replace(spec, memory=capacity or spec.memory, blocks=blocks)


def make_plan(spec, schedule: str, n: int, path: Path, blocking: bool = False, time_limit: float = 120,
              effort: float = 0.0) -> dict:
    """Search (or build a baseline) and lower; save the plan; return a line for the log. `effort`:
    `tessel search --effort` (the whole schedule re-solved from the one found)."""
    from tessel_dsl.lower import lower
    from tessel_dsl.plan import Plan, SearchInfo, save_plan
    from tessel_dsl.search import baselines

    t = time.time()
    if schedule == "tessel":
        from tessel_dsl.search.driver import search

        res = search(spec, microbatches=n, time_limit=time_limit, effort=effort)
        sched, info = res.schedule, res.info
    else:
        sched, info = baselines.build(spec, schedule, n), SearchInfo(method=schedule)
    plan = Plan(spec, sched, lower(spec, sched, blocking=blocking), info, sched.peak_memory(spec))
    path.parent.mkdir(parents=True, exist_ok=True)
    save_plan(plan, path)
    return {"plan": path.name, "schedule": schedule, "n": n, "makespan_units": sched.makespan(spec),
            "bubble": round(sched.bubble_rate(spec), 4), "seconds": round(time.time() - t, 2)}


def smoke() -> bool:
    """No GPU here: run everything tiny on CPU ranks (gloo), to check the script before a lease."""
    import torch

    return not torch.cuda.is_available()


TINY = {"gpt": {"vocab": 64, "hidden": 16, "heads": 2, "layers": 4, "seq": 8, "batch": 1},
        "encdec": {"vocab": 64, "hidden": 16, "heads": 2, "layers": 2, "src": 8, "tgt": 6, "batch": 1},
        "branches": {"vocab": 64, "hidden": 16, "heads": 2, "layers": 2, "cross": 2, "text": 8, "patches": 6,
                     "patch_dim": 12, "classes": 5, "batch": 1}}


def sizes(kind: str, full: dict) -> dict:
    return TINY[kind] if smoke() else full


def run_plan(path: Path, model: str, args: dict, steps: int = 3, warmup: int = 2) -> dict:
    import tessel_dsl.executor as executor

    t = time.time()
    rep = executor.run(path, model, backend="gloo" if smoke() else "nccl", steps=steps, warmup=warmup, timeout=100, collect=True,
                       model_args=args)
    s = rep.summary()
    s["wall_s"] = round(time.time() - t, 1)
    return s


# -- PyTorch's Schedule1F1B on a V-shape split of the same GPT -------------------------------------

def v_split_stage(full, part, first: bool, last: bool):
    """One rank's part of the GPT for `torch.distributed.pipelining` on a V split: layers `part`,
    with the embedding on the first stage and the norm + full head on the last."""
    import torch
    from torch import nn

    class Stage(nn.Module):
        def __init__(self):
            super().__init__()
            self.first, self.last = first, last
            self.layers = nn.ModuleList(full.layers[j] for j in part)
            if first:
                self.embed, self.pos = full.embed, full.pos
            if last:
                self.norm, self.head = full.norm, full.head

        def forward(self, x):
            if self.first:
                x = self.embed(x) + self.pos(torch.arange(x.shape[1], device=x.device))
            for layer in self.layers:
                x = layer(x)
            return self.head(self.norm(x)) if self.last else x

    return Stage()


def join_group(rank: int, world: int, port: int):
    """Join the world's process group on localhost; returns this rank's device (its GPU with NCCL,
    or the CPU with gloo and one thread per rank, so that smoke runs don't oversubscribe the cores)."""
    import torch
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    if torch.cuda.is_available():
        torch.cuda.set_device(rank)
        dev = torch.device("cuda", rank)
        dist.init_process_group("nccl", rank=rank, world_size=world, device_id=dev)
    else:
        dev = torch.device("cpu")
        torch.set_num_threads(1)
        dist.init_process_group("gloo", rank=rank, world_size=world)
    return dev


def _torch_1f1b_rank(rank: int, world: int, port: int, n: int, steps: int, warmup: int, out: str) -> None:
    import torch
    import torch.distributed as dist
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B

    from tessel_dsl.executor.models.common import lm_loss, seeded, split_evenly
    from tessel_dsl.executor.models.gpt import GPT as Model
    from tessel_dsl.executor.models.gpt import Config

    dev = join_group(rank, world, port)
    cfg = Config.of(sizes("gpt", GPT))
    full = seeded(Model, cfg, dev)
    part = split_evenly(cfg.layers, world)[rank]

    def loss_fn(logits, labels):
        return lm_loss(logits.float(), labels)

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize()

    stage_mod = v_split_stage(full, part, rank == 0, rank == world - 1)
    stage = PipelineStage(stage_mod, rank, world, dev)
    sched = Schedule1F1B(stage, n, loss_fn=loss_fn)
    batches = [full.batch(mb, dev) for mb in range(n)]
    tokens = torch.cat([b[0] for b in batches])
    labels = torch.cat([b[1] for b in batches])
    no_outputs = {"return_outputs": False} if "return_outputs" in inspect.signature(sched.step).parameters else {}
    times = []
    for it in range(warmup + steps):
        stage_mod.zero_grad(set_to_none=True)
        sync()
        dist.barrier()
        t0 = time.perf_counter()
        if rank == 0:
            sched.step(tokens)
        elif rank == world - 1:
            # Merging every micro-batch's logits (vocab-sized) would cost tens of GiB; only
            # the losses are needed.
            sched.step(target=labels, **no_outputs)
        else:
            sched.step()
        sync()
        if it >= warmup:
            times.append(time.perf_counter() - t0)
    t = torch.tensor(times, device=dev)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    if rank == 0:
        Path(out).write_text(json.dumps({"iterations": t.tolist()}))
    dist.destroy_process_group()


def torch_1f1b(world: int, n: int, steps: int = 3, warmup: int = 2) -> dict:
    import tempfile

    import torch.multiprocessing as mp

    from tessel_dsl.executor.launch import free_port

    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "r.json")
        t = time.time()
        mp.spawn(_torch_1f1b_rank, args=(world, free_port(), n, steps, warmup, out), nprocs=world)
        its = json.loads(Path(out).read_text())["iterations"]
    it = statistics.median(its)
    return {"schedule": "torch Schedule1F1B (V split)", "microbatches": n, "iterations": its,
            "measured": {"iteration": it}, "throughput_mb_per_s": n / it, "wall_s": round(time.time() - t, 1)}


def compute_actions(rep) -> list[list[list]]:
    """Every measured iteration's compute actions as ``[device, action, start us, end us]``: the
    per-instance times behind the medians the tables print, so two rows whose medians differ can
    be told apart action by action without a profiler trace."""
    from tessel_dsl.executor.trace import _computes

    return [[[d, a, round(s * 1e6), round(e * 1e6)] for d, a, s, e in _computes(t)] for t in rep.timelines]


def gpu_info() -> str:
    import torch

    if smoke():
        return "CPU smoke run (tiny sizes, gloo)"
    return f"{torch.cuda.device_count()} x {torch.cuda.get_device_name(0)}, torch {torch.__version__}"


def row(name: str, s: dict, base: float | None = None) -> str:
    m, sim = s["measured"], s.get("simulated")
    it = m["iteration"] * 1e3
    speed = f"{base / m['iteration']:.2f}x" if base else "-"
    if sim:
        wm = max(s["wait_share_measured"])
        ws = max(s["wait_share_simulated"])
        return (f"| {name} | {it:.1f} | {sim['iteration'] * 1e3:.1f} | {s['throughput_mb_per_s']:.2f} | {speed} | "
                f"{wm:.1%} | {ws:.1%} | {(wm - ws) * 100:+.1f} pt |")
    return f"| {name} | {it:.1f} | - | {s['throughput_mb_per_s']:.2f} | {speed} | - | - | - |"


HEADER = ("| run | iteration ms (measured) | iteration ms (simulated) | micro-batches/s | vs baseline | "
          "max wait share (measured) | max wait share (simulated) | difference |\n|---|---|---|---|---|---|---|---|")


def arg_parser(doc: str | None) -> argparse.ArgumentParser:
    """The options both GPU scripts take: ``--make-plans`` (here, where the search runs) and
    ``--out`` (where the result files go, default ``$OUT`` or the current folder)."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--make-plans", action="store_true", help="search and save the plans in bench/plans/<script>/ "
                    "(ignored; generated here, carried to the GPU machine)")
    ap.add_argument("--out", default=os.environ.get("OUT", "."), help="folder for the .json and .md results")
    return ap


def record(results: dict, key: str, summary: dict) -> dict:
    """Keeps one run's summary under `key` and prints it at once (a long run shows progress)."""
    results[key] = summary
    print(key, json.dumps(summary), flush=True)
    return summary


def write_results(out: str, stem: str, results: dict, table: str) -> None:
    """Prints the table and writes ``<stem>.json`` (every summary) and ``<stem>.md`` (the table)."""
    print(table)
    with open(os.path.join(out, f"{stem}.json"), "w") as fh:
        json.dump(results, fh, indent=1)
    with open(os.path.join(out, f"{stem}.md"), "w") as fh:
        fh.write(table + "\n")
