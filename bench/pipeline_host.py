"""Host time of one training step: `Pipeline` against the executor's own runner, on the same plan.

Both run in the same gloo ranks on the CPU, on the same GPT (executor/models/gpt.py) and the same
plan (ZB-V built on specs/zerobubble.tsl with C=2, or a chain with C=1), steps alternating between
the two so that the machine's load falls on both alike:

* executor: `RankRunner` over the blocks of the GPT factory (what ``executor.run``, and so every
  executor row of bench/gpu_zb.py, runs each iteration);
* Pipeline: ``Pipeline.step(x, y)`` on the whole batch, the model bound block by block.

Per step: the slowest rank's wall and the ranks' summed CPU seconds; `Pipeline`'s time before
the runner's step (the batch split, its layout agreed over the ranks) and after it (the loss and
the batch's contents agreed: collectives, so it includes waiting for the slowest rank); each
action's host time by kind (on the CPU a compute action's time is its compute too); and, on
rank 0, the operators a step dispatches (on a GPU about one kernel launch each) and the Python
calls it makes: these two counts are the same on an idle or a busy machine, the times are not.
``--profile`` adds cProfile's tables of rank 0's measured `Pipeline` steps (and the runner's), by
own time and by cumulative time (the project's functions).

    PYTHONPATH=. python bench/pipeline_host.py --devices 2 4 --steps 20 [--profile]
"""
from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SMALL = {"vocab": 512, "hidden": 64, "heads": 4, "seq": 32, "batch": 1}


def make_plan(devices: int, chunks: int, n: int):
    from tessel_dsl.lang.parser import parse_file
    from tessel_dsl.lower import lower
    from tessel_dsl.plan import Plan, SearchInfo
    from tessel_dsl.search import baselines

    spec = parse_file(ROOT / "specs" / "zerobubble.tsl", sets={"D": str(devices), "N": str(n), "C": str(chunks)})
    name = "zb-v" if chunks == 2 else "zb-h1"
    sched = baselines.build(spec, name, n)
    return Plan(spec, sched, lower(spec, sched), SearchInfo(method=name), sched.peak_memory(spec))


def _loss(logits, labels):
    import torch.nn.functional as F

    return F.cross_entropy(logits.float().flatten(0, 1), labels.flatten())


def _kind(plan, text: str) -> str:
    """An action's class: the compute block's kind (F, I, W, B), or its communication op."""
    from tessel_dsl.program import Action, Op

    a = Action.parse(text)
    if a.op is not Op.COMPUTE:
        return a.op.value
    return {"FORWARD": "F", "INPUT_GRAD": "I", "WEIGHT_GRAD": "W", "BACKWARD": "B"}.get(
        plan.spec.block(a.block).kind.name, a.block)


def _op_counter():
    from torch.utils._python_dispatch import TorchDispatchMode

    class Counter(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.count = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.count += 1
            return func(*args, **(kwargs or {}))

    return Counter()


def _rank(plan, margs: dict, steps: int, warmup: int, profile: bool) -> dict:
    import torch
    import torch.distributed as dist

    from tessel_dsl.executor.groups import make_groups, make_links
    from tessel_dsl.executor.model_api import StageContext, load_factory
    from tessel_dsl.executor.models.common import seeded
    from tessel_dsl.executor.models.gpt import GPT, Config, blocks_by_name
    from tessel_dsl.executor.pipeline import Pipeline
    from tessel_dsl.executor.rank import loss_context
    from tessel_dsl.executor.runtime import RankRunner

    device = torch.device("cpu")
    cfg = Config.of(margs)
    model = seeded(GPT, cfg, device)
    n = plan.schedule.microbatches
    mbs = [model.batch(mb, device) for mb in range(n)]
    x, y = torch.cat([b[0] for b in mbs]), torch.cat([b[1] for b in mbs])
    pipe = Pipeline(plan, model, _loss, blocks=blocks_by_name(plan.spec, cfg.layers))
    rank, world = dist.get_rank(), dist.get_world_size()
    ctx = StageContext(plan.spec, rank, world, device, make_groups(plan.spec, "gloo"))
    stage = load_factory("tessel_dsl.executor.models.gpt:factory")(ctx, **margs)
    runner = RankRunner(plan, stage, rank, device, 100.0, None, make_links(plan.programs, "gloo"))
    prof = {"executor": cProfile.Profile(), "Pipeline": cProfile.Profile()}
    inner = [0.0, 0.0]  # seconds inside the runner's step and in Pipeline's batch split, last step

    def timed(step, slot=0):
        def run(*a, **k):
            t = time.perf_counter()
            try:
                return step(*a, **k)
            finally:
                inner[slot] = time.perf_counter() - t
        return run

    def run_executor():
        with loss_context():
            step = timed(runner.step)(0, collect=True)
        loss = sum(float(v) for v in step.losses.values()) / n if step.losses else None
        return loss, step.timings

    pipe.runner.step = timed(pipe.runner.step)
    pipe._prepare = timed(pipe._prepare, 1)

    def run_pipeline():
        return pipe.step(x, y), pipe.timings

    def zero():
        for p in pipe.parameters():
            p.grad = None
        for m in stage.modules.values():
            m.zero_grad(set_to_none=True)

    runs = {"executor": run_executor, "Pipeline": run_pipeline}
    got = {k: {"wall": [], "cpu": [], "prepare": [], "after": [], "actions": {}, "loss": None} for k in runs}
    for it in range(warmup + steps):
        for name, fn in runs.items():
            zero()
            dist.barrier()
            inner[1] = 0.0
            w0, c0 = time.perf_counter(), time.process_time()
            if profile and it >= warmup and rank == 0:
                loss, marks = prof[name].runcall(fn)
            else:
                loss, marks = fn()
            w, c = time.perf_counter() - w0, time.process_time() - c0
            if got[name]["loss"] is None and loss is not None:
                got[name]["loss"] = loss
            if it >= warmup:
                got[name]["wall"].append(w)
                got[name]["cpu"].append(c)
                got[name]["prepare"].append(inner[1])
                got[name]["after"].append(w - inner[0] - inner[1])
                for text, s, e in marks:
                    got[name]["actions"].setdefault(_kind(plan, text), []).append(e - s)
    # Two more steps each, counted on rank 0: the operators a step dispatches (on a GPU, about
    # one kernel launch each), then the Python calls it makes; no load on the machine changes them.
    for name, fn in runs.items():
        for what in ("ops", "calls"):
            zero()
            dist.barrier()
            if rank != 0:
                fn()
            elif what == "ops":
                counter = _op_counter()
                with counter:
                    fn()
                got[name]["ops"] = counter.count
            else:
                calls = cProfile.Profile()
                calls.runcall(fn)
                got[name]["calls"] = sum(v[1] for v in pstats.Stats(calls).stats.values())
    if profile and rank == 0:
        for name, p in prof.items():
            s = io.StringIO()
            st = pstats.Stats(p, stream=s)
            st.sort_stats("tottime").print_stats(22)
            st.sort_stats("cumulative").print_stats("tessel_dsl|_tensor.py|functional", 30)
            got[name]["profile"] = s.getvalue()
    got["computes"] = sum(1 for a in plan.programs[rank].actions if a.op.name == "COMPUTE")
    return got


def measure(devices: int, chunks: int, n: int, steps: int, warmup: int, profile: bool, margs: dict) -> dict:
    from tessel_dsl.executor.local_ranks import run_ranks

    plan = make_plan(devices, chunks, n)
    got = run_ranks(_rank, devices, plan, margs | {"layers": 2 * devices}, steps, warmup, profile, timeout=1800)
    out = {"devices": devices, "chunks": chunks, "microbatches": n, "computes": [g["computes"] for g in got]}
    for name in ("executor", "Pipeline"):
        walls = [max(w) for w in zip(*(g[name]["wall"] for g in got))]
        cpus = [sum(c) for c in zip(*(g[name]["cpu"] for g in got))]
        kinds = sorted({k for g in got for k in g[name]["actions"]})
        out[name] = {"wall_ms": statistics.median(walls) * 1e3, "cpu_ms": statistics.median(cpus) * 1e3,
                     "prepare_ms": statistics.median(o for g in got for o in g[name]["prepare"]) * 1e3,
                     "after_ms": statistics.median(o for g in got for o in g[name]["after"]) * 1e3,
                     "action_ms": {k: statistics.median(d for g in got for d in g[name]["actions"].get(k, []))
                                   * 1e3 for k in kinds},
                     "ops": got[0][name]["ops"], "calls": got[0][name]["calls"],
                     "loss": got[0][name]["loss"] if got[0][name]["loss"] is not None else got[-1][name]["loss"],
                     "profile": got[0][name].get("profile")}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--devices", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--chunks", type=int, default=2, help="1: a chain (ZB-H1), 2: a V (ZB-V)")
    ap.add_argument("--microbatches", type=int, default=8)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--profile", action="store_true", help="cProfile rank 0's measured steps")
    ap.add_argument("--hidden", type=int, default=SMALL["hidden"])
    args = ap.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    margs = SMALL | {"hidden": args.hidden}
    print(f"GPT {margs} (layers 2 per device), N={args.microbatches}, "
          f"{'ZB-V' if args.chunks == 2 else 'ZB-H1'} plan, gloo on the CPU, one thread per rank; "
          f"medians of {args.steps} steps after {args.warmup}")
    print()
    print("| ranks | compute actions per rank | runner | step wall ms | CPU ms, all ranks | before / after the "
          "runner's step, ms (rank median) | median host ms per action: F / I / W / SEND / RECV / WAIT | rank 0: operators / "
          "Python calls per step | mean loss |")
    print("|---|---|---|---|---|---|---|---|---|")
    profiles = []
    for d in args.devices:
        r = measure(d, args.chunks, args.microbatches, args.steps, args.warmup, args.profile, margs)
        for name in ("executor", "Pipeline"):
            e = r[name]
            acts = " / ".join(f"{e['action_ms'].get(k, float('nan')):.3f}" for k in ("F", "I", "W", "SEND", "RECV", "WAIT"))
            print(f"| {d} | {'/'.join(map(str, r['computes']))} | {name} | {e['wall_ms']:.1f} | {e['cpu_ms']:.1f} | "
                  f"{e['prepare_ms']:.2f} / {e['after_ms']:.2f} | {acts} | {e['ops']} / {e['calls']} | {e['loss']:.6f} |", flush=True)
            if args.profile:
                profiles.append((d, name, e["profile"]))
    for d, name, text in profiles:
        print(f"\n## {d} ranks, rank 0, {name}: cProfile over the measured steps\n")
        print(text)


if __name__ == "__main__":
    main()
