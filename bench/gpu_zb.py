"""The plain chain and a GPT of real layers against PyTorch's four pipeline schedules, every Tessel
row on a plan searched on block times measured on the GPUs that run it.

The loop, each step on the machine that has what it needs (the search needs the parser and the
solvers, the GPU machine has torch alone):

  here:  python bench/gpu_zb.py prepare                  specs to profile -> bench/plans/gpu_zb/
  there: PYTHONPATH=. python bench/gpu_zb.py profile     block times -> $OUT/gpu_zb_profile.json
  here:  python bench/gpu_zb.py plans --costs FILE       search on them -> bench/plans/gpu_zb/
  there: PYTHONPATH=. python bench/gpu_zb.py run         the tables -> $OUT/gpu_zb.{md,json}

and a second pass, since in a whole pipeline a block runs longer than profiled alone (5-15 % on
the chain, 4 x H200):

  here:  python bench/gpu_zb.py replan --runs RUN.json  the chain rows searched again on the block
         times RUN.json measured -> the rows chain_zb_run and chain_zbv_run (and a costs file)
  there: PYTHONPATH=. python bench/gpu_zb.py run --only chain --keys chain_zbv_run,chain_zb_run

The profile step also times one activation's transfer between two GPUs (`profile_link`); the
plans step searches with that transfer as the spec's `link` (the search keeps it as a lag between
a block and its consumer on another GPU) and with `--effort` (default 60, `tessel search
--effort`; `tessel plan --effort` for the choice rows), `--jobs` rows side by side; where OR-Tools
is installed on the GPU machine (wheels carried with the call) every step can run there.

bench/plans/ is ignored: the plans are made here and carried to the GPU machine with the call.
``python bench/gpu_zb.py --make-plans`` (prepare, then plans on the committed profile
``COSTS``) makes every plan of the last published run again, the same every time.

``python bench/gpu_zb.py all`` does the four in order where torch, CUDA and the search are all
installed. With no CUDA, every step runs tiny models on gloo ranks (a check of the script).

Groups (``--only``):
* ``chain``: 2D residual MLP layers (executor/models/chain.py, hidden 4096, bf16);
* ``gpt32k``: the GPT's layers with a 32k vocabulary, the embedding on the first stage and the
  head and loss on the last;
* ``gpt512k``: the GPT with a 512k vocabulary: the M-shape (vocabulary-parallel embedding and
  head). Its embedding and head span every GPU and cannot be timed alone,
  so its costs are the block times of a first run of the plan (``--from-run``'s way).
For every group: torch's Schedule1F1B (D stages), ScheduleInterleaved1F1B and
ScheduleInterleavedZeroBubble (2D stages, looped), ScheduleZBVZeroBubble (2D stages in a V);
Tessel's search on specs/zerobubble.tsl (a chain of D stages, backward split into input and
weight gradients) and on its V placement (``C=2``: two chunks per GPU, ZB-V's placement); and
the 1F1B baseline plan of the same chain with an unsplit backward, run by this executor.
For gpt32k and gpt512k also `tessel plan`'s own choice: the profile step profiles the GPT unit by
unit with `tessel plan`'s profiler, the plans step runs ``tessel plan --profile`` on that (D=4,
the card's memory), and the run step trains the chosen plan with `Pipeline` (its binding and
DTensor plans) in the same table. To tell a plan's cost from its runner's, ``gpt32k_zbv_pipeline``
runs the hand V plan (``gpt32k_zbv``) by `Pipeline` too, the GPT bound as the executor's factory
splits it, and ``gpt32k_choice_executor`` (only when named in ``--keys``) runs the choice by this
executor, where the choice binds the GPT that way. ``run --trace`` records one warm-up iteration
of every row with torch.profiler (bench/gpu_trace.py) and adds what each trace shows.
"""
from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import asdict
from pathlib import Path

import gpu8
from gpu_common import GPT, PLANS, ROOT, TINY, compute_actions, gpu_info, need_plans, plan_path, record, smoke

D, N = 4, gpu8.N
OUT_DIR = PLANS / "gpu_zb"
MODELS = {"chain": "tessel_dsl.executor.models.chain:factory", "gpt": "tessel_dsl.executor.models.gpt:factory"}
GROUPS = ("chain", "gpt32k", "gpt512k")
# key -> (group, model, how the spec is made, how the plan is made)
KEYS = {
    "chain_zb": ("chain", "chain", "zb1", "tessel"), "chain_zbv": ("chain", "chain", "zb2", "tessel"),
    # the same placements searched again on the block times of a first run of their plans (in a full
    # pipeline a block runs slower than profiled alone, by 5-15 % on 4 x H200, calls n and p)
    "chain_zbv_run": ("chain", "chain", "zb2", "tessel"), "chain_zb_run": ("chain", "chain", "zb1", "tessel"),
    "chain_1f1b": ("chain", "chain", "vshape", "1f1b"),
    "gpt32k_zb": ("gpt32k", "gpt", "zb1", "tessel"), "gpt32k_zbv": ("gpt32k", "gpt", "zb2", "tessel"),
    "gpt32k_1f1b": ("gpt32k", "gpt", "vshape", "1f1b"),
    "gpt512k_mshape": ("gpt512k", "gpt", "mshape", "tessel"),
}
ROW_NAMES = {"zb1": "Tessel zero-bubble chain (searched)", "zb2": "Tessel V, two chunks per GPU (searched)",
             "vshape": "Tessel 1F1B baseline plan, unsplit backward", "mshape": "Tessel M-shape (searched)"}
# The M-shape on bench/gpu8.py's spec costs: a first run of it gives the 512k group its block times.
def from_run_plan() -> Path:
    return plan_path("gpu_zb", "gpt512k", D, "mshape", "tessel", N, "spec-costs")

# The profile the published plans were searched on (bench/results/gpu_zb_h200x4_2026-11-27.md).
COSTS = ROOT / "bench" / "results" / "gpu_zb_profile_h200x4_2026-11-27.json"
# key -> (model, placement, schedule) in the plan's file name
NAMES = {"chain_zb": ("chain", "zerobubble", "tessel"), "chain_zbv": ("chain", "zerobubble-v", "tessel"),
         "chain_zbv_run": ("chain", "zerobubble-v", "tessel", "run"), "chain_zb_run": ("chain", "zerobubble", "tessel", "run"),
         "chain_1f1b": ("chain", "vshape", "1f1b"), "gpt32k_zb": ("gpt32k", "zerobubble", "tessel"),
         "gpt32k_zbv": ("gpt32k", "zerobubble-v", "tessel"), "gpt32k_1f1b": ("gpt32k", "vshape", "1f1b"),
         "gpt512k_mshape": ("gpt512k", "mshape", "tessel"), "gpt32k_choice": ("gpt32k", "choice", "tessel"),
         "gpt512k_choice": ("gpt512k", "choice", "tessel")}
# `tessel plan`'s own choice of placement and schedule for the GPT groups: the model profiled unit by
# unit on the GPU (tessel_dsl/placement/profile.py), the choice made here from that profile
# (`tessel plan --profile`), the plan run by `Pipeline` with the binding and DTensor plans it wrote.
CHOICES = {"gpt32k_choice": "gpt32k", "gpt512k_choice": "gpt512k"}
# The same plan through the other runner, to tell what a row's plan costs from what its runner
# costs: a hand plan run by `Pipeline` (the GPT bound block by block, `gpt.blocks_by_name`, as the
# choice rows run), and `tessel plan`'s choice run by this executor with the GPT's own factory
# (only where the choice binds the GPT as that factory splits it; a row named in --keys alone).
VIA_PIPELINE = {"gpt32k_zbv_pipeline": "gpt32k_zbv", "gpt512k_mshape_pipeline": "gpt512k_mshape"}
VIA_EXECUTOR = {"gpt32k_choice_executor": "gpt32k_choice", "gpt512k_choice_executor": "gpt512k_choice"}
# What `tessel plan` is told each GPU loses before training starts (CUDA context, NCCL buffers).
RESERVE = "6GB"


def margs(group: str) -> dict:
    if group == "chain":
        return gpu8.chain_args(D)
    if group == "gpt32k":
        return (TINY["gpt"] if smoke() else GPT | {"vocab": 32000}) | {"layers": 2 * D}
    return gpu8.gpt_args(D)


def base_key(key: str) -> str:
    """The row whose plan `key` runs (itself, or the plan a VIA_* row runs by the other runner)."""
    return VIA_PIPELINE.get(key) or VIA_EXECUTOR.get(key) or key


def group_of(key: str) -> str:
    key = base_key(key)
    return CHOICES.get(key) or KEYS[key][0]


def plan_file(key: str) -> Path:
    model, placement, schedule, *variant = NAMES[base_key(key)]
    return plan_path("gpu_zb", model, D, placement, schedule, N, *variant)


def spec_file(key: str) -> Path:
    return plan_file(key).with_suffix(".spec.json")


# -- here: the specs to profile, and the plans searched on what was measured -----------------------

def prepare() -> None:
    from gpu_common import make_plan

    from tessel_dsl.executor.models import shapes
    from tessel_dsl.lang.parser import parse_file
    from tessel_dsl.plan import write_json_atomic
    from tessel_dsl.serialize import to_json

    OUT_DIR.mkdir(parents=True, exist_ok=True)
    zb = {c: parse_file(ROOT / "specs" / "zerobubble.tsl", sets={"D": str(D), "N": str(N), "C": str(c)}) for c in (1, 2)}
    mshape = gpu8.gpt_spec(D, 2 * D)
    print(make_plan(mshape, "tessel", N, from_run_plan()))
    made = {"zb1": zb[1], "zb2": zb[2], "vshape": shapes.vshape(D, microbatches=N), "mshape": mshape}
    for key, (_, _, how, _) in KEYS.items():
        write_json_atomic(spec_file(key), to_json(made[how]))
        print("wrote", spec_file(key))


def load_spec(key: str):
    from tessel_dsl.ir import Spec
    from tessel_dsl.serialize import from_json

    return from_json(Spec, json.loads(spec_file(key).read_text()))


def resolution(ms) -> float:
    """A time unit that makes the median forward block about 16 units: fine enough that rounding
    moves a block by a few percent, coarse enough for the search to stay quick."""
    from statistics import median

    from tessel_dsl.interop.profiled_spec import nice_floor

    return nice_floor(median(m.forward for m in ms if m.forward) / 16)


def costed_spec(key: str, entry: dict, link_s: float = 0.0):
    """The spec of `key` with the block times measured on the GPU and, when `link_s` is given, a
    link whose latency is the transfer time of one activation measured there (`profile_link`),
    so the search keeps that gap between a block and its consumer on another GPU."""
    from dataclasses import replace

    from tessel_dsl.interop.profiled_spec import Measurement, apply_measurements, measurements_from_run
    from tessel_dsl.ir import Link

    spec = load_spec(key)
    if "block_seconds" in entry:
        ms = measurements_from_run(spec, entry["block_seconds"], entry.get("device", ""))
    else:
        ms = [Measurement(**m) for m in entry["measurements"]]
    spec = apply_measurements(spec, ms, time_resolution=resolution(ms))
    if link_s > 0:
        spec = replace(spec, link=Link(round(link_s / spec.units.time_seconds, 3), 0.0))
    return spec


def _plan_one(key: str, entry: dict, gpu: str, link_s: float, effort: float) -> dict:
    """One row's plan (searched, or 1F1B built) on its measured costs; saved beside the others."""
    from gpu_common import make_plan

    from tessel_dsl.search import baselines

    how, schedule = KEYS[key][2], KEYS[key][3]
    spec = costed_spec(key, entry, link_s)
    t = time.process_time()
    made = make_plan(spec, schedule, N, plan_file(key), time_limit=None, effort=effort if schedule == "tessel" else 0)
    made.update(unit=spec.units.time_label, costs={b.name: b.time for b in spec.blocks}, effort=effort,
                search_cpu_s=round(time.process_time() - t, 1), link_units=spec.link.latency,
                source="block times of a first run of the plan" if "block_seconds" in entry
                else "blocks profiled alone", device=gpu)
    if how.startswith("zb"):
        for base in ("1f1b", "zb-h1", "zb-v"):
            try:
                made[f"baseline_{base}_units"] = baselines.build(spec, base, N).makespan(spec)
            except Exception as e:  # noqa: BLE001 - a baseline that does not apply to this placement
                made[f"baseline_{base}_units"] = f"n/a ({str(e)[:60]})"
    print(key, json.dumps(made), flush=True)
    return made


def searched_record() -> dict:
    """What the plans step recorded (`searched.json`: each row's plan and the costs it was searched
    on); empty before any plans step."""
    f = OUT_DIR / "searched.json"
    return json.loads(f.read_text()) if f.exists() else {}


def plans(costs: Path, choice_runs: list[Path] = (), effort: float = 0.0, transfers: bool = True,
          jobs: int = 1) -> None:
    """Search (or build 1F1B) on the measured costs; save each plan and what it was searched on.
    On the zero-bubble specs the baselines ZB-H1 and ZB-V are built on the same costs too, and
    their simulated length is kept beside the search's (what `tessel compare` prints). `jobs`
    rows are searched side by side (each search is deterministic on its own)."""
    import concurrent.futures
    import multiprocessing

    from tessel_dsl.plan import write_json_atomic

    prof = json.loads(costs.read_text())
    info = {"profile": str(costs), "gpu": prof.get("gpu", ""), "plans": {}}
    todo = []
    for key in KEYS:
        if key not in prof:
            print(f"{key}: not in {costs}, skipped")
            continue
        link_s = prof.get("link", {}).get(KEYS[key][0], {}).get("seconds", 0.0) if transfers else 0.0
        todo.append((key, prof[key], prof.get("gpu", ""), link_s, effort))
    with concurrent.futures.ProcessPoolExecutor(max(1, jobs), mp_context=multiprocessing.get_context("fork")) as pool:
        made = list(pool.map(_plan_one, *zip(*todo))) if todo else []
    info["plans"].update({t[0]: m for t, m in zip(todo, made)})
    runs: dict[str, list[dict]] = {}
    for f in choice_runs:  # every run of each model's choices, in the order given (a later one of a placement wins)
        for k, v in json.loads(f.read_text()).items():
            if k in CHOICES and "block_seconds" in v:
                runs.setdefault(k, []).append(v)
    info["choice_runs"] = [str(f) for f in choice_runs]
    for key in CHOICES:
        if key in prof:
            info["plans"][key] = choose_plan(key, prof[key], prof.get("gpu", ""), runs.get(key, []), effort)
    # rows not searched this time keep what they were searched on (a second pass may re-plan one row)
    kept = searched_record()
    for e in info["plans"].values():
        e.setdefault("profile", str(costs))
    info["plans"] = {**kept.get("plans", {}), **info["plans"]}
    write_json_atomic(OUT_DIR / "searched.json", info)


# row -> the row whose run's block times it is searched again on (`replan`)
SECOND_PASS = {"chain_zbv_run": "chain_zbv", "chain_zb_run": "chain_zb"}


def replan(runs: list[Path], effort: float, jobs: int = 1) -> Path:
    """The second pass: each SECOND_PASS row's costs are the block times that the newest of `runs`
    (JSON files of the run step) holding its first row measured, the link the profile measured
    (searched.json's profile); written beside the plans as ``second_pass_costs.json``, then
    searched by `plans` like any profile."""
    from tessel_dsl.plan import write_json_atomic

    found: dict[str, tuple[Path, dict]] = {}
    for f in runs:  # a later file wins
        data = json.loads(f.read_text())
        for tables in [data, *(v for v in data.values() if isinstance(v, dict))]:
            for row, first in SECOND_PASS.items():
                if isinstance(tables.get(first), dict) and "block_seconds" in tables[first]:
                    found[row] = (f, tables[first])
    if not found:
        raise SystemExit(f"none of {', '.join(map(str, runs))} holds a run of {', '.join(SECOND_PASS.values())}")
    searched = searched_record()
    profile = Path(searched["profile"]) if Path(searched.get("profile", "")).exists() else COSTS
    costs = {"gpu": searched.get("gpu", ""), "date": time.strftime("%Y-%m-%d"),
             "link": json.loads(profile.read_text()).get("link", {})}
    for row, (f, entry) in found.items():
        costs[row] = {"block_seconds": entry["block_seconds"], "device": entry.get("device", ""),
                      "source": f"{f.name} ({SECOND_PASS[row]}'s run)"}
        if not spec_file(row).exists():
            write_json_atomic(spec_file(row), json.loads(spec_file(SECOND_PASS[row]).read_text()))
    out = OUT_DIR / "second_pass_costs.json"
    write_json_atomic(out, costs)
    plans(out, effort=effort, jobs=jobs)
    return out


_CHILD_CPU = [0.0]


def _children_cpu() -> float:
    """CPU seconds of the subprocesses finished since the last call."""
    r = os.times()
    total = r.children_user + r.children_system
    new, _CHILD_CPU[0] = total - _CHILD_CPU[0], total
    return new


def choose_plan(key: str, entry: dict, gpu: str, runs: list[dict] | dict | None = None, effort: float = 0.0) -> dict:
    """`tessel plan --profile` on the units' profile measured on the GPU: the plan, its spec, its
    binding beside `plan_file(key)`, and the candidates' table. `runs`: earlier runs' reports of the
    plans `tessel plan` chose for this model (one report or a list), each given to it as
    `--from-run` (each candidate that ran re-costed with the block times its run measured, and the
    largest spread overhead they showed)."""
    import subprocess

    from tessel_dsl.plan import write_json_atomic

    OUT_DIR.mkdir(parents=True, exist_ok=True)
    prof = plan_file(key).with_suffix(".units.json")
    write_json_atomic(prof, entry["units_profile"])
    cmd = [sys.executable, "-m", "tessel_dsl.cli", "plan", "--profile", str(prof), "--devices", str(D),
           "--memory", f"{entry['memory_bytes']}B", "--reserve", RESERVE, "--microbatches", str(N),
           "--effort", str(effort), "-o", str(plan_file(key)), "--json"]
    runs = [runs] if isinstance(runs, dict) else list(runs or ())
    for i, run in enumerate(runs):
        report = plan_file(key).with_suffix(f".run{i + 1 if i else ''}.json")
        write_json_atomic(report, run)
        cmd[-3:-3] = ["--from-run", str(report)]
    _children_cpu()
    t = time.process_time()
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT,
                          env=dict(os.environ, PYTHONPATH=os.pathsep.join(
                              [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])))
    cpu = time.process_time() - t + _children_cpu()
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{done.stderr[-3000:]}")
    got = json.loads(done.stdout[done.stdout.index("{"):])
    got.update(command="tessel plan " + " ".join(cmd[4:]), device=gpu, search_cpu_s=round(cpu, 1),
               source="units profiled alone on the GPU, placement and schedule chosen by `tessel plan`"
               + (f", with earlier runs of its {', '.join(r['plan'] for r in runs)} plans (--from-run)" if runs else ""))
    print(key, json.dumps({k: v for k, v in got.items() if k != "rows"}))
    # kept at once, so that a choice made on its own (not by the plans step) names its row in the tables
    kept = searched_record()
    write_json_atomic(OUT_DIR / "searched.json", {**kept, "plans": {**kept.get("plans", {}), key: got}})
    return got


# -- there: measure the blocks ----------------------------------------------------------------------

def profile(out: str, only: set[str]) -> dict:
    import torch

    import tessel_dsl.executor as executor
    from tessel_dsl.executor.measure import measure

    dev = "cuda:0" if torch.cuda.is_available() else "cpu"
    res = {"gpu": gpu_info(), "date": time.strftime("%Y-%m-%d")}
    for key, (group, model, how, _) in KEYS.items():
        if group not in only:
            continue
        t = time.time()
        if how == "mshape":
            need_plans(from_run_plan(), how="python bench/gpu_zb.py prepare")
            rep = executor.run(from_run_plan(), MODELS[model], backend="gloo" if smoke() else "nccl", steps=2,
                               warmup=1, timeout=100, model_args=margs(group))
            s = rep.summary()
            res[key] = {"block_seconds": s["block_seconds"], "device": res["gpu"], "plan": from_run_plan().name,
                        "iteration": s["measured"]["iteration"]}
        else:
            ms = measure(load_spec(key), MODELS[model], device=dev, repeats=10, warmup=3, model_args=margs(group))
            res[key] = {"measurements": [asdict(m) for m in ms]}
            torch.cuda.empty_cache() if dev != "cpu" else None
        res[key]["seconds"] = round(time.time() - t, 1)
        print(key, json.dumps(res[key]), flush=True)
    for key, group in CHOICES.items():
        if group not in only:
            continue
        t = time.time()
        res[key] = profile_units(group, dev)
        res[key]["seconds"] = round(time.time() - t, 1)
        print(key, json.dumps(res[key]["units_profile"]["units"][:2]), flush=True)
        with open(os.path.join(out, "gpu_zb_profile.json"), "w") as fh:
            json.dump(res, fh, indent=1)
    res["link"] = profile_link([g for g in ("chain", "gpt32k") if g in only])
    print("link", json.dumps(res["link"]), flush=True)
    res["split_check"] = split_check(res)
    print(res["split_check"])
    with open(os.path.join(out, "gpu_zb_profile.json"), "w") as fh:
        json.dump(res, fh, indent=1)
    return res


def _link_rank(nbytes: list[int], repeats: int) -> dict:
    """One rank of `profile_link`: ranks 0 and 1 pass a buffer back and forth over a two-rank
    group made as the executor makes its links; rank 0 times each round trip on the GPU."""
    import torch
    import torch.distributed as dist

    from tessel_dsl.executor.groups import _link_options

    cuda = torch.cuda.is_available()
    backend = "nccl" if cuda else "gloo"
    device = torch.device("cuda", int(os.environ["LOCAL_RANK"])) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    dist.init_process_group(backend)
    group = dist.new_group([0, 1], backend=backend, pg_options=_link_options(backend))
    rank, peer = dist.get_rank(), 1 - dist.get_rank()
    out = {}
    for n in nbytes:
        buf = torch.zeros(n, dtype=torch.uint8, device=device)
        times = []
        for it in range(repeats + 3):
            dist.barrier(group)
            if cuda:
                torch.cuda.synchronize()
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
            t0 = time.perf_counter()
            for first in ((True, False) if rank == 0 else (False, True)):
                w = dist.isend(buf, peer, group=group) if first else dist.irecv(buf, peer, group=group)
                w.wait()
            if cuda:
                b.record()
                b.synchronize()
            if it >= 3:
                times.append((a.elapsed_time(b) / 1e3 if cuda else time.perf_counter() - t0) / 2)
        out[n] = sorted(times)[len(times) // 2]
    dist.destroy_process_group()
    return out


def profile_link(only: list[str]) -> dict:
    """group -> the time one activation of that group takes from one GPU to the next (half the
    median round trip between GPUs 0 and 1, nothing else running): the link the plans are
    searched with."""
    from tessel_dsl.executor.local_ranks import run_ranks

    sizes = {}
    for group in only:
        m = margs(group)
        rows = m["batch"] * (m.get("seq") or 1)
        sizes[group] = rows * m["hidden"] * (2 if m.get("dtype") == "bf16" else 4)
    got = run_ranks(_link_rank, 2, sorted(set(sizes.values())), 20)[0]
    return {g: {"bytes": n, "seconds": got[n]} for g, n in sizes.items()}


def profile_units(group: str, dev: str) -> dict:
    """The GPT of `group` profiled unit by unit (embedding, each layer, norm, head) with the code
    `tessel plan` profiles a model with, on one micro-batch of its tokens."""
    import torch

    from tessel_dsl.executor.models.common import seeded
    from tessel_dsl.executor.models.gpt import GPT as Model
    from tessel_dsl.executor.models.gpt import Config
    from tessel_dsl.placement.profile import profile_model

    model = seeded(Model, Config.of(margs(group)), torch.device(dev))
    tokens, _ = model.batch(0, torch.device(dev))
    prof = profile_model(model, tokens, device=dev, repeats=10, warmup=3)
    memory = torch.cuda.get_device_properties(0).total_memory if dev != "cpu" else 8 * 10**9
    del model
    if dev != "cpu":
        torch.cuda.empty_cache()
    return {"units_profile": prof.to_json(), "memory_bytes": memory}


def split_check(res: dict) -> str:
    """Stage by stage, I + W of the split chain against B of the unsplit one (same layers)."""
    lines = []
    for group in ("chain", "gpt32k"):
        a, b = res.get(f"{group}_zb"), res.get(f"{group}_1f1b")
        if not a or not b:
            continue
        for x, y in zip(a["measurements"], b["measurements"]):
            if x["input_grad"] is None or y["backward"] is None:
                continue
            iw = x["input_grad"] + x["weight_grad"]
            lines.append(f"{group} {x['block']}: F {x['forward'] * 1e3:.2f} I {x['input_grad'] * 1e3:.2f} "
                         f"W {x['weight_grad'] * 1e3:.2f} ms; I+W {iw * 1e3:.2f} vs B {y['backward'] * 1e3:.2f} ms "
                         f"({iw / y['backward']:.3f}x)")
    return "\n".join(lines)


# -- there: the tables ------------------------------------------------------------------------------

def _loss(logits, labels):
    import torch.nn.functional as F

    # flatten, not reshape: a vocabulary-sharded DTensor (loss_parallel) keeps its last dimension
    return F.cross_entropy(logits.float().flatten(0, 1), labels.flatten())


def _pipeline_rank(plan: str, margs: dict, steps: int, warmup: int, trace: str | None,
                   blocks: dict[str, list[str]] | None = None) -> dict:
    """One rank of a `Pipeline` run of `plan` on the GPT: `blocks` binds its blocks to the GPT's
    submodules (by default the binding `tessel plan` wrote beside the plan), with the DTensor plans
    `tessel plan` gives its multi-device blocks; the plan's N micro-batches per step, gradients
    zeroed between steps (as every row)."""
    import torch
    import torch.distributed as dist
    from gpu_trace import maybe

    from tessel_dsl.executor.models.common import seeded
    from tessel_dsl.executor.models.gpt import GPT as Model
    from tessel_dsl.executor.models.gpt import Config
    from tessel_dsl.executor.pipeline import Pipeline
    from tessel_dsl.placement.tp import tp_plans
    from tessel_dsl.plan import load_plan

    cuda = torch.cuda.is_available()
    device = torch.device("cuda", int(os.environ["LOCAL_RANK"])) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    loaded = load_plan(plan)
    if blocks is None:
        blocks = json.loads(blocks_file(Path(plan)).read_text())
    cfg = Config.of(margs)
    model = seeded(Model, cfg, device)
    n = loaded.schedule.microbatches
    mbs = [model.batch(mb, device) for mb in range(n)]
    x, y = torch.cat([b[0] for b in mbs]), torch.cat([b[1] for b in mbs])
    pipe = Pipeline(loaded, model, _loss, blocks=blocks, tp=tp_plans(loaded, blocks, model))
    if cuda:
        torch.cuda.empty_cache()
    rank = dist.get_rank()
    walls, timings, first = [], [], None
    for it in range(warmup + steps):
        for p in pipe.parameters():
            p.grad = None
        if cuda:
            torch.cuda.synchronize()
        dist.barrier()
        t0 = time.perf_counter()
        with maybe(trace, rank, it, warmup - 1):
            loss = pipe.step(x, y)
            if cuda:
                torch.cuda.synchronize()
        if it == 0:
            first = loss
        if it >= warmup:
            walls.append(time.perf_counter() - t0)
            timings.append(list(pipe.timings))
    peak = torch.cuda.max_memory_allocated(device) / 2**30 if cuda else 0.0
    return {"rank": rank, "device": torch.cuda.get_device_name(device) if cuda else "cpu", "steps": timings,
            "walls": walls, "loss": first, "allocated_gib": round(peak, 2),
            "transport": "copy" if pipe.runner.comm.copies is not None else "nccl"}


def blocks_file(plan: Path) -> Path:
    """The block -> submodule binding `tessel plan` writes beside its plan."""
    return plan.with_name(plan.name.removesuffix(".json") + ".blocks.json")


def pipeline_row(key: str, steps: int, warmup: int, trace: str | None = None) -> dict:
    """The plan of `key` run by `Pipeline` on D local ranks: `tessel plan`'s choice with the
    binding it wrote, a hand plan (VIA_PIPELINE) with the GPT bound as the executor's factory
    splits it; the same summary as the executor's rows (iteration, measured and replayed wait,
    peak memory)."""
    from tessel_dsl.executor.local_ranks import run_ranks
    from tessel_dsl.executor.models.gpt import blocks_by_name
    from tessel_dsl.executor.run_report import RankResult, RunReport
    from tessel_dsl.plan import load_plan

    plan, m = load_plan(plan_file(key)), margs(group_of(key))
    blocks = blocks_by_name(plan.spec, m["layers"]) if key in VIA_PIPELINE else None
    t = time.time()
    with gpu8.PeakMemory() as mem:
        got = run_ranks(_pipeline_rank, D, str(plan_file(key)), m, steps, warmup, trace, blocks,
                        timeout=300, threads=1)
    ranks = [RankResult(rank=g["rank"], device=g["device"], steps=g["steps"], transport=g["transport"]) for g in got]
    rep = RunReport.from_ranks(plan, ranks, "gloo" if smoke() else "nccl")
    s = rep.summary()
    s.update(actions=compute_actions(rep), loss=got[0]["loss"], replicas=1, peak_gib=mem.gib(D), allocated_gib=[g["allocated_gib"] for g in got],
             step_wall_s=[max(w) for w in zip(*(g["walls"] for g in got))], wall_s=round(time.time() - t, 1),
             runner="Pipeline")
    return s


def choice_by_executor(key: str, steps: int, warmup: int, trace: str | None = None) -> dict:
    """`tessel plan`'s choice (VIA_EXECUTOR) run by this executor with the GPT's own factory,
    which splits the layers evenly over the stages: refused unless the choice binds the GPT so."""
    from tessel_dsl.executor.models.gpt import blocks_by_name
    from tessel_dsl.plan import load_plan

    plan, m = load_plan(plan_file(key)), margs(group_of(key))
    chosen = json.loads(blocks_file(plan_file(key)).read_text())
    factory = blocks_by_name(plan.spec, m["layers"])
    if {b: list(f) for b, f in chosen.items()} != factory:
        raise RuntimeError(f"{VIA_EXECUTOR[key]} binds {chosen}, the GPT factory would run {factory}: "
                           f"only `Pipeline` runs this plan")
    s = gpu8.tessel_row(plan_file(key), MODELS["gpt"], m, 1, trace=trace, steps=steps, warmup=warmup)
    s["runner"] = "executor"
    return s


def actions_per_rank(key: str) -> dict[int, int]:
    from tessel_dsl.plan import load_plan

    return {p.device: len(p.actions) for p in load_plan(plan_file(key)).programs}


def run(out: str, only: set[str], steps: int, warmup: int, torch_rows: bool = True, tag: str = "",
        torch_kinds: tuple[str, ...] | None = None, keys: list[str] | None = None, trace: bool = False,
        budget: float | None = None) -> None:
    """Every row of the groups in `only`, in one process (one machine, one table). With `trace`,
    every row also records its last warm-up iteration (bench/gpu_trace.py): one gzipped trace per
    row, packed per group into ``gpu_zb<tag>_traces_<group>.tar`` (few files come back from a
    lease), and a table of what each trace shows. `budget` (seconds since the start) skips the
    rows that would start after it, so a time-limited call still writes its tables."""
    import tempfile

    import gpu_trace

    started = time.time()
    searched = searched_record()
    found = searched.get("plans", {})
    wanted = [k for k in [*KEYS, *VIA_PIPELINE, *CHOICES, *VIA_EXECUTOR]
              if group_of(k) in only and (keys is None or k in keys) and (k not in VIA_EXECUTOR or keys)]
    need_plans(*(plan_file(k) for k in wanted), how=f"python bench/gpu_zb.py --make-plans (or prepare, profile there, "
               f"plans --costs {COSTS.relative_to(ROOT)})")
    os.environ.setdefault("CUDA_MODULE_LOADING", "EAGER")
    res = {"gpu": gpu_info(), "date": time.strftime("%Y-%m-%d"), "devices": D, "microbatches": N,
           "searched": searched}
    print(res["gpu"], flush=True)
    lines = [f"{D}-GPU runs on {res['gpu']}, {res['date']}; N={N} micro-batches; every Tessel plan searched on "
             f"block times measured on {searched.get('gpu', '?')} ({searched.get('profile', '?')})", ""]
    trace_lines: list[str] = []
    kw = {"steps": steps, "warmup": warmup}
    scratch = Path(tempfile.mkdtemp(prefix="gpu_zb_traces_"))

    def one(key: str, fn, actions=None) -> dict | None:
        if budget is not None and time.time() - started > budget:
            res[key] = {"error": f"skipped: past the {budget:g} s budget"}
            print(key, "SKIPPED", flush=True)
            return None
        folder = scratch / key if trace else None
        try:
            s = fn(str(folder) if folder else None)
            if folder:
                s["trace"] = gpu_trace.collect(folder, scratch / f"{key}.trace.json.gz", actions and actions())
            s = record(res, key, s)
        except Exception as e:  # noqa: BLE001 - reported in the table; the other rows still run
            res[key] = {"error": f"{type(e).__name__}: {e}"}
            print(key, "FAILED", res[key]["error"], flush=True)
            s = None
        with open(os.path.join(out, f"gpu_zb{tag}_partial.json"), "w") as fh:
            json.dump(res, fh, indent=1)
        return s

    for group in only if isinstance(only, list) else [g for g in GROUPS if g in only]:
        m, model = margs(group), ("chain" if group == "chain" else "gpt")
        kinds = tuple(gpu8.TORCH) if torch_rows else ()
        kinds = tuple(k for k in kinds if torch_kinds is None or k in torch_kinds)

        def torch_fn(k, m=m, model=model):
            return lambda tr: gpu8.torch_row(model, k, D, m, trace=tr, **kw)

        def tessel_fn(key, m=m, model=model):
            return lambda tr: gpu8.tessel_row(plan_file(key), MODELS[model], m, 1, trace=tr, **kw)

        rows = [(f"{group}_torch_{k}", f"{gpu8.TORCH[k][0]} (torch)", torch_fn(k), None) for k in kinds]
        rows += [(key, f"{ROW_NAMES[how]}, {found.get(key, {}).get('source', '?')}", tessel_fn(key),
                  lambda key=key: actions_per_rank(key))
                 for key, (g, _, how, _) in KEYS.items() if g == group and (keys is None or key in keys)]
        rows += [(key, f"{ROW_NAMES[KEYS[base][2]]}, {found.get(base, {}).get('source', '?')}, Pipeline",
                  lambda tr, key=key: pipeline_row(key, trace=tr, **kw), lambda key=key: actions_per_rank(key))
                 for key, base in VIA_PIPELINE.items() if group_of(key) == group and (keys is None or key in keys)]
        rows += [(key, f"tessel plan's choice: {choice_name(found.get(key, {}))}, Pipeline",
                  lambda tr, key=key: pipeline_row(key, trace=tr, **kw), lambda key=key: actions_per_rank(key))
                 for key, g in CHOICES.items() if g == group and (keys is None or key in keys)]
        rows += [(key, f"tessel plan's choice: {choice_name(found.get(base, {}))}, this executor",
                  lambda tr, key=key: choice_by_executor(key, trace=tr, **kw), lambda key=key: actions_per_rank(key))
                 for key, base in VIA_EXECUTOR.items() if group_of(key) == group and keys is not None and key in keys]
        if keys is not None:  # the Tessel rows in the order --keys names them (a GPU may slow down as a call goes on)
            rows = rows[:len(kinds)] + sorted(rows[len(kinds):], key=lambda r: keys.index(r[0]))
        table, base, runs = [], None, []
        for key, name, fn, actions in rows:
            s = one(key, fn, actions)
            runs.append(s)
            if s is None:
                table.append(f"| {name} | failed: {res[key]['error'][:120]} | | | | | |")
                continue
            base = base or (s if "Schedule1F1B" in name else None)
            table.append(gpu8.line(name, s, base))
            if s.get("trace"):
                trace_lines += gpu_trace.lines(f"{group} {name.split(',')[0]}", s["trace"])
        lines += [f"{group} {m}, {D} pipeline ranks", "", gpu8.HEADER, *table, ""]
        losses = [s["loss"] for s in runs if s and s.get("loss") is not None]
        tol = 1e-5 if smoke() else 2e-2
        if losses and any(abs(v - losses[0]) > tol * abs(losses[0]) for v in losses):
            lines += [f"CHECK FAILED: {group}: first-iteration losses differ: {losses}", ""]
        elif losses:
            lines += [f"check: {group}: first-iteration losses agree within {tol:g} relative", ""]
        pack(scratch, out, f"gpu_zb{tag}_traces_{group}", f"{group}_*.trace.json.gz")
    if trace_lines:
        lines += ["Traces: one warm-up iteration per row, every rank (bench/gpu_trace.py)", "", gpu_trace.HEADER,
                  *trace_lines, ""]
    from gpu_common import write_results

    from tessel_dsl.executor.comm import comm_streams_mode, recv_post_mode
    from tessel_dsl.executor.copy_links import transport_mode
    from tessel_dsl.executor.groups import P2P_MAX_CTAS

    res["p2p_max_ctas"] = os.environ.get("TESSEL_P2P_MAX_CTAS", P2P_MAX_CTAS)
    res["recv_post"], res["comm_streams"] = recv_post_mode(), comm_streams_mode()
    res["transport"] = transport_mode()
    lines.insert(1, f"TESSEL_TRANSPORT={res['transport']} (nccl: NCCL's send and receive; copy: copy-engine slots), "
                    f"TESSEL_P2P_MAX_CTAS={res['p2p_max_ctas']} (thread blocks of each point-to-point link; 0: NCCL's "
                    f"choice), TESSEL_RECV_POST={res['recv_post']} (when receives are posted), "
                    f"TESSEL_COMM_STREAMS={res['comm_streams']}")
    write_results(out, f"gpu_zb{tag}", res, "\n".join(lines))
    os.remove(os.path.join(out, f"gpu_zb{tag}_partial.json"))  # the whole is written: few files come back
    if any("CHECK FAILED" in x for x in lines) or any("error" in v for v in res.values() if isinstance(v, dict)):
        sys.exit(1)


def pack(scratch: Path, out: str, stem: str, pattern: str, limit: int = 15 * 2**20) -> None:
    """The traces matching `pattern` into ``stem.tar`` (``stem_2.tar``... past `limit` bytes: a
    lease brings back files of at most 16 MiB)."""
    import tarfile

    part, size, tar = 1, 0, None
    for f in sorted(scratch.glob(pattern)):
        if tar is None or (size and size + f.stat().st_size > limit):
            if tar:
                tar.close()
                part += 1
            tar = tarfile.open(os.path.join(out, f"{stem}{'' if part == 1 else f'_{part}'}.tar"), "w")
            size = 0
        tar.add(f, arcname=f.name)
        size += f.stat().st_size
        f.unlink()
    if tar:
        tar.close()


def choice_name(made: dict) -> str:
    c = made.get("chosen")
    return f"{c['candidate']} / {c['schedule']}" if c else "?"


def main() -> None:
    global D
    from gpu_common import arg_parser

    ap = arg_parser(__doc__)
    ap.add_argument("step", nargs="?", choices=("prepare", "profile", "plans", "run", "replan", "all"))
    ap.add_argument("--costs", type=Path, help="plans: the profile JSON written by the profile step")
    ap.add_argument("--runs", default="", help="replan: comma-separated run JSONs of this script; the chain rows "
                    "are searched again on the block times they measured")
    ap.add_argument("--choice-runs", default="", help="plans: comma-separated run JSONs of this script whose "
                    "choice rows `tessel plan` is given as --from-run (every run of a model's choices, in this order)")
    ap.add_argument("--only", default=",".join(GROUPS), help="comma-separated subset of " + ",".join(GROUPS)
                    + " (run: in this order)")
    ap.add_argument("--steps", type=int, default=3, help="measured iterations per row")
    ap.add_argument("--warmup", type=int, default=2, help="unmeasured iterations first")
    ap.add_argument("--no-torch", action="store_true", help="run: only the Tessel rows")
    ap.add_argument("--tag", default="", help="run: suffix of the result files")
    ap.add_argument("--torch", default="", help="run: comma-separated subset of PyTorch's schedules "
                    f"({','.join(gpu8.TORCH)}; default all)")
    ap.add_argument("--keys", default="", help="run: comma-separated subset of the Tessel rows, run in this order "
                    f"({','.join([*KEYS, *VIA_PIPELINE, *CHOICES, *VIA_EXECUTOR])}; default all of the "
                    f"groups but {', '.join(VIA_EXECUTOR)}, which run only when named)")
    ap.add_argument("--trace", action="store_true", help="run: record one warm-up iteration of every row with "
                    "torch.profiler (bench/gpu_trace.py)")
    ap.add_argument("--budget", type=float, help="run: seconds after which no further row starts")
    ap.add_argument("--effort", type=float, default=60.0, help="plans: `tessel search --effort` of every searched "
                    "plan (0: the search alone)")
    ap.add_argument("--jobs", type=int, default=1, help="plans: rows searched side by side")
    ap.add_argument("--no-transfers", action="store_true", help="plans: search as if transfers were free (no link)")
    ap.add_argument("--devices", type=int, default=4, help="pipeline ranks (GPUs); the published tables use 4")
    args = ap.parse_args()
    D = args.devices
    only = list(dict.fromkeys(args.only.split(",")))  # run: the groups in this order
    if set(only) - set(GROUPS):
        raise SystemExit(f"--only takes {', '.join(GROUPS)}")
    os.makedirs(args.out, exist_ok=True)
    if args.make_plans:  # every plan of the published run, from the committed profile
        prepare()
        plans(args.costs or COSTS)
        return
    if args.step is None:
        raise SystemExit("give a step (prepare, profile, plans, run, all) or --make-plans")
    if args.step in ("prepare", "all"):
        prepare()
    if args.step in ("profile", "all"):
        profile(args.out, only)
    if args.step in ("plans", "all"):
        costs = args.costs or Path(args.out) / "gpu_zb_profile.json"
        plans(costs, [Path(f) for f in args.choice_runs.split(",") if f], args.effort, not args.no_transfers,
              args.jobs)
    if args.step == "replan":
        if not args.runs:
            raise SystemExit("replan needs --runs: the JSON files of a run step")
        print("costs:", replan([Path(f) for f in args.runs.split(",")], args.effort, args.jobs))
    if args.step in ("run", "all"):
        run(args.out, only, args.steps, args.warmup, not args.no_torch, args.tag,
            tuple(args.torch.split(",")) if args.torch else None, list(dict.fromkeys(args.keys.split(","))) if args.keys else None,
            args.trace, args.budget)


if __name__ == "__main__":
    main()
