"""One full server (D GPUs, 8 on the real thing): the searched plans against PyTorch's own
pipeline schedules, and the data-parallel runtime, at any even device count D.

Here (where the search runs):    python bench/gpu8.py --make-plans --devices D [--only ...]  (-> bench/plans/gpu8/)
On the GPU machine (torch only): PYTHONPATH=. python bench/gpu8.py --devices D [--out DIR] [--only ...]
                                 (bench/plans carried)
On CPUs (tiny sizes, gloo):      the same command; every row runs on gloo ranks with tiny models

Row groups (``--only`` takes a comma-separated subset):
* ``gpt``: the embedding-heavy GPT of bench/gpu_common.py with 2D layers, N micro-batches: the
  searched M-shape (vocabulary-parallel embedding and head over all D GPUs, this executor) against
  torch.distributed.pipelining's Schedule1F1B (D stages), ScheduleInterleaved1F1B and
  ScheduleInterleavedZeroBubble (2D stages, two per GPU, looped) on a plain split of the same model.
* ``zb``: a balanced chain of 2D residual MLP layers (tessel_dsl/executor/models/chain.py): the plan searched
  from the shipped specs/zerobubble.tsl (backward split into input- and weight-gradient blocks)
  against Schedule1F1B, ScheduleInterleavedZeroBubble and ScheduleZBVZeroBubble (2D stages, V order).
* ``train``: the GPT training step (forward, backward, gradients averaged over the replicas) of the
  data-parallel runtime (`tessel run --replicas`): the M-shape at D/2 pipeline ranks x 2 replicas
  started by one launcher, and the same run split into two torchrun agents of D/2 GPUs each
  (each agent sees only its own GPUs, as on two hosts). The first-iteration losses must agree.
Every row: iteration time, micro-batches/s, peak memory of every GPU; every Tessel row also its
largest wait share measured and replayed from the plan with the measured block times, and the
largest per-device difference between the two (the target is within 6 points).

Peak memory is what NVML reports as used on each GPU (the most over the row's whole run, less
what was used before it): the same measure for this executor and for PyTorch's schedules, CUDA
context, NCCL buffers and the caching allocator's reserve included.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

from gpu_common import (
    GPT,
    ROOT,
    arg_parser,
    compute_actions,
    costed,
    gpu_info,
    join_group,
    make_plan,
    need_plans,
    plan_path,
    record,
    sizes,
    smoke,
    write_results,
)

N = 16
CHAIN = {"hidden": 4096, "batch": 4096, "dtype": "bf16"}
TINY_CHAIN = {"hidden": 16, "batch": 4}
GROUPS = ("gpt", "zb", "train")
# The torch schedules compared, and how each places its stages: one per GPU, two per GPU looped
# (stage r and r+D on GPU r), or two per GPU in a V (stage r and 2D-1-r on GPU r).
TORCH = {"1f1b": ("Schedule1F1B", "one"), "i1f1b": ("ScheduleInterleaved1F1B", "loop"),
         "izb": ("ScheduleInterleavedZeroBubble", "loop"), "zbv": ("ScheduleZBVZeroBubble", "v")}


def gpt_args(devices: int) -> dict:
    """The GPT with two layers per GPU at D pipeline ranks (one per stage of the looped schedules)."""
    return sizes("gpt", GPT) | {"layers": 2 * devices}


def chain_args(devices: int) -> dict:
    return (TINY_CHAIN if smoke() else CHAIN) | {"layers": 2 * devices}


def plan_names(devices: int) -> dict[str, Path]:
    layers, half = 2 * devices, devices // 2
    return {"gpt": plan_path("gpu8", "gpt", devices, "mshape", "tessel", N, f"l{layers}"),
            "zb": plan_path("gpu8", "chain", devices, "zerobubble", "tessel", N),
            "train": plan_path("gpu8", "gpt", half, "mshape", "tessel", N, f"l{layers}")}


def gpt_spec(devices: int, layers: int):
    """The M-shape costed as bench/gpu4.py costs it (one layer: forward 2, backward 4), with each
    stage's cost scaled by its layer count."""
    from tessel_dsl.executor.models import shapes

    k = layers // devices
    return costed(shapes.mshape(devices, head=True, microbatches=N),
                  {"E": 1, "EB": 2, "H": 4, "HB": 7, "F": 2 * k, "B": 4 * k}, {"H": 1, "HB": -1}, capacity=8)


def make_plans(devices: int, only: set[str] | None = None) -> None:
    from tessel_dsl.errors import TesselError
    from tessel_dsl.lang.parser import parse_file
    from tessel_dsl.plan import load_plan

    names = plan_names(devices)
    refused = []
    made = {"gpt": lambda: gpt_spec(devices, 2 * devices), "train": lambda: gpt_spec(devices // 2, 2 * devices),
            "zb": lambda: parse_file(ROOT / "specs" / "zerobubble.tsl", sets={"D": str(devices), "N": str(N)})}
    for key in (k for k in GROUPS if only is None or k in only):
        path = names[key]
        print(make_plan(made[key](), "tessel", N, path))
        # A plan the GPU side would refuse to load is found here, not in a lease.
        try:
            load_plan(path)
        except TesselError as e:
            path.unlink()
            refused.append(f"{path.name}: {e}")
    if refused:
        raise SystemExit("saved plans that do not load again were removed:\n" + "\n".join(refused))


# -- peak memory of every GPU, the same way for every row ------------------------------------------

class PeakMemory:
    """Polls NVML's used memory of every GPU while a row runs; `gib()` is the most seen on each,
    less the idle reading taken at the start. No NVML (CPU runs): no numbers."""

    def __init__(self, period: float = 0.02):
        self.period, self.handles, self.base, self.peak = period, [], [], []
        try:
            import pynvml

            pynvml.nvmlInit()
            self.nvml = pynvml
            self.handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
        except Exception:  # no NVML here: the rows carry no memory numbers
            self.nvml = None

    def _used(self) -> list[int]:
        return [self.nvml.nvmlDeviceGetMemoryInfo(h).used for h in self.handles]

    def __enter__(self):
        self.stop = threading.Event()
        if self.handles:
            self.base = self._used()
            self.peak = list(self.base)
            self.thread = threading.Thread(target=self._poll, daemon=True)
            self.thread.start()
        return self

    def _poll(self) -> None:
        while not self.stop.is_set():
            self.peak = [max(a, b) for a, b in zip(self.peak, self._used())]
            self.stop.wait(self.period)

    def __exit__(self, *exc):
        self.stop.set()
        if self.handles:
            self.thread.join()

    def gib(self, count: int) -> list[float] | None:
        if not self.handles:
            return None
        return [round((p - b) / 2**30, 2) for p, b in zip(self.peak[:count], self.base[:count])]


# -- PyTorch's schedules on a plain split of the same model ----------------------------------------

def _local_stages(kind: str, rank: int, world: int) -> tuple[int, list[int]]:
    placement = TORCH[kind][1]
    if placement == "one":
        return world, [rank]
    if placement == "loop":
        return 2 * world, [rank, rank + world]
    return 2 * world, [rank, 2 * world - 1 - rank]


def _stage_module(model: str, full, s: int, stages: int):
    """Stage `s` of `stages`: an even share of the layers, the embedding in the first stage and
    the head (with the loss outside it) in the last, as bench/gpu_common.py splits the GPT."""
    from torch import nn

    from tessel_dsl.executor.models.common import split_evenly

    part = split_evenly(len(full.layers), stages)[s]
    first, last = s == 0, s == stages - 1

    class Stage(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.ModuleList(full.layers[j] for j in part)
            if model == "gpt" and first:
                self.embed, self.pos = full.embed, full.pos
            if model == "gpt" and last:
                self.norm, self.head = full.norm, full.head

        def forward(self, x):
            if model == "gpt" and first:
                x = self.embed(x) + self.pos.weight
            for layer in self.layers:
                x = layer(x)
            return self.head(self.norm(x)) if model == "gpt" and last else x

    return Stage()


def _torch_rank(rank: int, world: int, port: int, model: str, kind: str, margs: dict, n: int, steps: int,
                warmup: int, out: str, trace: str | None = None) -> None:
    import inspect

    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from gpu_trace import maybe
    from torch.distributed import pipelining

    from tessel_dsl.executor.models import chain, gpt
    from tessel_dsl.executor.models.common import lm_loss, seeded

    dev = join_group(rank, world, port)
    mod = gpt if model == "gpt" else chain
    cfg = mod.Config.of(margs)
    full = seeded(mod.GPT if model == "gpt" else mod.Chain, cfg, dev)
    total, mine = _local_stages(kind, rank, world)
    stages = [pipelining.PipelineStage(_stage_module(model, full, s, total), s, total, dev) for s in mine]
    batches = [full.batch(mb, dev) for mb in range(n)]
    del full
    if dev.type == "cuda":
        torch.cuda.empty_cache()

    def loss_fn(y, target):
        return lm_loss(y.float(), target) if model == "gpt" else F.mse_loss(y.float(), target.float())

    cls = getattr(pipelining, TORCH[kind][0])
    sched = cls(stages[0], n, loss_fn=loss_fn) if len(stages) == 1 else cls(stages, n, loss_fn=loss_fn)
    inputs = torch.cat([b[0] for b in batches])
    target = torch.cat([b[1] for b in batches])
    # Merging every micro-batch's logits (vocabulary-sized) would cost tens of GiB: losses only.
    extra = {"return_outputs": False} if "return_outputs" in inspect.signature(sched.step).parameters else {}
    has_first, has_last = 0 in mine, total - 1 in mine

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize()

    times, first_loss = [], None
    for it in range(warmup + steps):
        for st in stages:
            st.submod.zero_grad(set_to_none=True)
        sync()
        dist.barrier()
        t0 = time.perf_counter()
        losses: list = []
        args = (inputs,) if has_first else ()
        kw = {"target": target, "losses": losses, **extra} if has_last else {}
        with maybe(trace, rank, it, warmup - 1):  # the last warm-up iteration, when asked
            sched.step(*args, **kw)
            sync()
        if it == 0 and has_last:
            first_loss = sum(float(v.detach()) for v in losses) / n
        if it >= warmup:
            times.append(time.perf_counter() - t0)
    t = torch.tensor(times, device=dev)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    peak = torch.cuda.max_memory_allocated(dev) / 2**30 if dev.type == "cuda" else 0.0
    info = [None] * world
    dist.all_gather_object(info, (round(peak, 2), first_loss))
    if rank == 0:
        loss = next(v for _, v in info if v is not None)
        Path(out).write_text(json.dumps({"iterations": t.tolist(), "allocated_gib": [p for p, _ in info],
                                         "loss": loss}))
    dist.destroy_process_group()


def torch_row(model: str, kind: str, devices: int, margs: dict, steps: int, warmup: int,
              trace: str | None = None) -> dict:
    """PyTorch's schedule `kind` on a plain split of the model; with `trace` (a folder), every rank
    records its last warm-up iteration there (bench/gpu_trace.py)."""
    import tempfile

    import torch.multiprocessing as mp

    from tessel_dsl.executor.launch import free_port

    with tempfile.TemporaryDirectory() as tmp, PeakMemory() as mem:
        out = os.path.join(tmp, "r.json")
        t = time.time()
        mp.spawn(_torch_rank, args=(devices, free_port(), model, kind, margs, N, steps, warmup, out, trace),
                 nprocs=devices)
        r = json.loads(Path(out).read_text())
    it = statistics.median(r["iterations"])
    return {"schedule": f"torch {TORCH[kind][0]}", "microbatches": N, "replicas": 1, "iterations": r["iterations"],
            "measured": {"iteration": it}, "throughput_mb_per_s": N / it, "loss": r["loss"],
            "peak_gib": mem.gib(devices), "allocated_gib": r["allocated_gib"], "wall_s": round(time.time() - t, 1)}


# -- this executor -------------------------------------------------------------------------------

def tessel_row(plan: Path, model: str, margs: dict, replicas: int, steps: int, warmup: int,
               trace: str | None = None) -> dict:
    """This executor on `plan`; with `trace` (a folder), every rank records its last warm-up
    iteration there (bench/gpu_trace.py)."""
    from gpu_trace import traced_model

    import tessel_dsl.executor as executor

    t = time.time()
    model, margs = traced_model(model, margs, trace, warmup - 1)
    with PeakMemory() as mem:
        rep = executor.run(plan, model, backend="gloo" if smoke() else "nccl", steps=steps, warmup=warmup,
                           timeout=100, collect=True, model_args=margs, replicas=replicas)
    s = rep.summary()
    s.pop("timeline", None)
    s["actions"] = compute_actions(rep)
    s.update(replicas=replicas, peak_gib=mem.gib(rep.plan.spec.devices * replicas), wall_s=round(time.time() - t, 1))
    return s


def two_agents_row(plan: Path, model: str, margs: dict, steps: int, warmup: int) -> dict:
    """The same data-parallel run as `tessel_row(..., replicas=2)`, started as two torchrun agents
    of D/2 ranks each (node ranks 0 and 1 on this host), each agent seeing only its own GPUs."""
    import torch

    from tessel_dsl.executor.launch import free_port
    from tessel_dsl.plan import load_plan

    per = load_plan(plan).spec.devices
    port = free_port()
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", str(per),
           "--master-addr", "127.0.0.1", "--master-port", str(port), "-m", "tessel_dsl.executor", str(plan),
           "--model", model, "--replicas", "2", "--steps", str(steps), "--warmup", str(warmup), "--timeout", "100",
           "--json"] + [a for k, v in margs.items() for a in ("--model-arg", f"{k}={v}")]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    t = time.time()
    procs = []
    with PeakMemory() as mem:
        for node in (0, 1):
            e = dict(env)
            if torch.cuda.is_available():
                e["CUDA_VISIBLE_DEVICES"] = ",".join(str(node * per + i) for i in range(per))
            else:
                e["TESSEL_RANK_THREADS"] = "1"
            c = cmd[:5] + ["--node-rank", str(node)] + cmd[5:]
            procs.append(subprocess.Popen(c, env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        outs = [p.communicate(timeout=600) for p in procs]
    for node, (p, (_, err)) in enumerate(zip(procs, outs)):
        if p.returncode != 0:
            raise RuntimeError(f"torchrun agent {node} exited with {p.returncode}:\n{err[-3000:]}")
    text = outs[0][0]
    s = json.loads(text[text.index("{"):])
    s.pop("timeline", None)
    s.update(replicas=2, agents=2, peak_gib=mem.gib(2 * per), wall_s=round(time.time() - t, 1))
    return s


# -- the table -------------------------------------------------------------------------------------

HEADER = ("| row | iteration ms | micro-batches/s | vs Schedule1F1B | peak GiB per GPU (NVML) | "
          "max wait share measured / replayed | largest per-device difference |\n|---|---|---|---|---|---|---|")


def wait_gap(s: dict) -> float | None:
    """Largest |measured - replayed| wait share over the devices, in points (Tessel rows)."""
    if "wait_share_simulated" not in s:
        return None
    return max(abs(a - b) for a, b in zip(s["wait_share_measured"], s["wait_share_simulated"])) * 100


def line(name: str, s: dict, base: dict | None) -> str:
    it = s["measured"]["iteration"]
    mbs = s.get("replicas", 1) * s["microbatches"] / it
    # Three decimals: a ratio checked against a bar such as 1.10x must not round up to it.
    speed = f"{base['measured']['iteration'] / it:.3f}x" if base else "-"
    peak = " / ".join(f"{p:.1f}" for p in s["peak_gib"]) if s.get("peak_gib") else "-"
    gap = wait_gap(s)
    wait = (f"{max(s['wait_share_measured']):.1%} / {max(s['wait_share_simulated']):.1%}" if gap is not None else "-")
    if s.get("transport") == "copy":  # the executor's copy-engine links moved the messages
        name += " [copy engines]"
    return (f"| {name} | {it * 1e3:.1f} | {mbs:.2f} | {speed} | {peak} | {wait} | "
            f"{'-' if gap is None else f'{gap:.1f} pt'} |")


def main() -> None:
    ap = arg_parser(__doc__)
    ap.add_argument("--devices", type=int, default=8, help="GPUs to use (an even number; default 8)")
    ap.add_argument("--only", default=",".join(GROUPS), help="comma-separated subset of " + ",".join(GROUPS))
    ap.add_argument("--steps", type=int, default=3, help="measured iterations per row")
    ap.add_argument("--warmup", type=int, default=2, help="unmeasured iterations first")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    d = args.devices
    if d < 2 or d % 2:
        raise SystemExit("--devices must be an even number of at least 2")
    only = set(args.only.split(","))
    if only - set(GROUPS):
        raise SystemExit(f"--only takes {', '.join(GROUPS)}")
    if args.make_plans:
        make_plans(d, only)
        return
    names = plan_names(d)
    need_plans(*(names[g] for g in only), how=f"python bench/gpu8.py --make-plans --devices {d} --only {args.only}")
    os.environ.setdefault("CUDA_MODULE_LOADING", "EAGER")
    res = {"gpu": gpu_info(), "date": time.strftime("%Y-%m-%d"), "devices": d, "microbatches": N}
    print(res["gpu"], flush=True)
    lines = [f"{d}-GPU runs on {res['gpu']}, {res['date']}; N={N} micro-batches (per replica)", ""]
    kw = {"steps": args.steps, "warmup": args.warmup}
    gpt_model, chain_model = "tessel_dsl.executor.models.gpt:factory", "tessel_dsl.executor.models.chain:factory"

    def run_row(key: str, fn) -> dict | None:
        """One row; a failure is recorded and the other rows still run (one lease, every row)."""
        try:
            s = record(res, key, fn())
        except Exception as e:  # noqa: BLE001 - reported in the table and the JSON
            res[key] = {"error": f"{type(e).__name__}: {e}"}
            print(key, "FAILED", res[key]["error"], flush=True)
            s = None
        with open(os.path.join(args.out, f"gpu8_d{d}_partial.json"), "w") as fh:
            json.dump(res, fh, indent=1)
        return s

    def check_losses(what: str, runs: list[dict]) -> None:
        """Same weights, same micro-batches: every row's first-iteration loss must agree (bf16 on
        GPUs, so a relative 2e-2)."""
        losses = [s["loss"] for s in runs if s is not None and s.get("loss") is not None]
        tol = 1e-5 if smoke() else 2e-2
        if not losses:
            return
        if any(abs(v - losses[0]) > tol * abs(losses[0]) for v in losses):
            lines.append(f"CHECK FAILED: {what}: first-iteration losses differ: {losses}")
        else:
            lines.append(f"check: {what}: first-iteration losses agree within {tol:g} relative: "
                         + ", ".join(f"{v:.6f}" for v in losses))
        lines.append("")

    def section(title: str, rows: list[tuple[str, str, callable]], baseline: bool = True) -> None:
        out, base, runs = [], None, []
        for key, name, fn in rows:
            s = run_row(key, fn)
            runs.append(s)
            if s is None:
                out.append(f"| {name} | failed: {res[key]['error'][:120]} | | | | | |")
                continue
            base = base or (s if baseline and "Schedule1F1B" in name else None)
            out.append(line(name, s, base))
        lines.extend([title, "", HEADER, *out, ""])
        check_losses(title.split(" {")[0], runs)

    if "gpt" in only:
        m = gpt_args(d)
        section(f"GPT {m}, {d} pipeline ranks",
                [(f"gpt_torch_{k}", f"{TORCH[k][0]} (torch)", lambda k=k: torch_row("gpt", k, d, m, **kw))
                 for k in ("1f1b", "i1f1b", "izb")]
                + [("gpt_tessel", "Tessel M-shape (searched)", lambda: tessel_row(names["gpt"], gpt_model, m, 1, **kw))])
    if "zb" in only:
        m = chain_args(d)
        section(f"Balanced chain {m}, {d} pipeline ranks",
                [(f"zb_torch_{k}", f"{TORCH[k][0]} (torch)", lambda k=k: torch_row("chain", k, d, m, **kw))
                 for k in ("1f1b", "izb", "zbv")]
                + [("zb_tessel", "Tessel zero-bubble spec (searched)",
                    lambda: tessel_row(names["zb"], chain_model, m, 1, **kw))])
    if "train" in only:
        m, p = gpt_args(d), d // 2
        section(f"Training, GPT {m}: Tessel M-shape at {p} pipeline x 2 data-parallel ranks",
                [("train_one_launcher", f"one launcher, {p} x 2",
                  lambda: tessel_row(names["train"], gpt_model, m, 2, **kw)),
                 ("train_two_agents", f"two torchrun agents of {p} GPUs, {p} x 2",
                  lambda: two_agents_row(names["train"], gpt_model, m, **kw))], baseline=False)
    part = "" if only == set(GROUPS) else "_" + "-".join(sorted(only))
    write_results(args.out, f"gpu8_d{d}{part}", res, "\n".join(lines))
    if any("CHECK FAILED" in x for x in lines) or any("error" in v for v in res.values() if isinstance(v, dict)):
        sys.exit(1)


if __name__ == "__main__":
    main()
