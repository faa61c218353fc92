"""How good is `tessel plan`'s choice? Each case plans a profile whose costs are set (so the rows
are the same on any machine) and sets the chosen plan, simulated, against the alternatives:

  mshape-spec  the costs of specs/mshape.tsl (E on all devices: 1 ms forward and 1 ms gradient a
               device; D stages of 1 ms forward and 3 ms backward, 1 GB of activations; 6 GB a
               device) as a profile: an embedding unit of D ms forward and D ms weight gradient,
               D layer units. The chosen plan must be an M-shape at least as short as
               `tessel search specs/mshape.tsl`'s plan at the same N.
  gpt-512k     the shipped GPT at bench/gpu_common.py's size (512k vocabulary, hidden 4096,
               sequence 2048, bf16; tessel_dsl.executor.models.gpt), costed from FLOPs at an
               assumed 400 TFLOP/s (bench/plan_gpt.py's `estimate`), one layer a device, 80 GB
               less 8 GB a device.
  chain        a balanced chain: 2D layers of 1 ms forward, input and weight gradient each,
               100 MB of activations, 1 GB of weights and Adam state; embedding and head
               0.1 ms. At least as short as ZB-V and 1F1B.
  memory-bound the chain with an embedding and a head of 6 GB of weights and Adam state each
               (a large vocabulary) and 10 GB a device: the V, which holds both on device 0,
               does not fit; the shortest that fits must win.

Every row: the chosen candidate and schedule, its makespan from the SimPy simulator, the best
baseline on the chosen candidate, the shortest baseline anywhere that fits, and (where it
applies) the reference. `--timing` adds the CPU seconds of profiling the shipped GPT scaled down
(vocabulary 8192, hidden 64, sequence 64, D layers; 5 timed runs a unit after 2 warm-up runs,
after one untimed profile that pays torch's first-call costs) on this CPU and of planning the
512k GPT's estimate (D layers, N = 4D, every candidate's search and baselines), for D = 4, 8
and 16.

    python bench/plan_choice.py [--devices 4 8] [--timing 4 8 16]
"""
from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from tessel_dsl.placement.costs import Profile, Unit  # noqa: E402

GB, MB = 10**9, 10**6


def mshape_spec_profile(D: int) -> Profile:
    """specs/mshape.tsl's costs in ms and GB: E spread over D devices costs 1 ms a device, so the
    whole embedding is D ms; each stage one layer."""
    units = [Unit("embed", ("embed",), D / 1e3, 0.0, D / 1e3, 0, 0, 0, 0, "embedding")]
    units += [Unit(f"layer{i}", (f"layers.{i}",), 1e-3, 1.5e-3, 1.5e-3, GB, 0, 0, 0) for i in range(D)]
    return Profile(tuple(units), "specs/mshape.tsl's costs", ())


def chain_profile(D: int, edge_state: float = 0.0) -> Profile:
    """2D layers of 1 ms forward, input and weight gradient, 100 MB of activations and 1 GB of
    weights and Adam state each; embedding and head 0.1 ms and `edge_state` each."""
    def unit(name, kind, ms, state, act=MB):
        params = int(state / 16)
        return Unit(name, (name,), ms / 1e3, 0.0 if kind == "embedding" else ms / 1e3, ms / 1e3, act, 0,
                    4 * params, params, kind)

    return Profile((unit("embed", "embedding", 0.1, edge_state),)
                   + tuple(unit(f"layer{i}", "layer", 1, GB, 100 * MB) for i in range(2 * D))
                   + (unit("head", "head", 0.1, edge_state),), "set by hand")


def gpt_profile(D: int) -> Profile:
    import json
    import tempfile

    from plan_gpt import estimate

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "gpt.json"
        estimate(argparse.Namespace(layers=D, output=str(out)))
        return Profile.from_json(json.loads(out.read_text()))


@dataclass
class Case:
    name: str
    profile: Profile
    devices: int
    memory: str
    reserve: str = "0"
    microbatches: int | None = None


def simulated_ms(spec, sched) -> float:
    from tessel_dsl.plan import make_plan
    from tessel_dsl.simulator import simulate

    return simulate(make_plan(spec, sched)).makespan * spec.units.time_seconds * 1e3


def run_case(case: Case) -> dict:
    """Plan the case; simulate the winner and every fitting row; the numbers the table shows."""
    from tessel_dsl.placement.api import plan_model

    t0 = time.process_time()
    res = plan_model(None, None, devices=case.devices, memory=case.memory, reserve=case.reserve,
                     microbatches=case.microbatches, profile=case.profile)
    cpu = time.process_time() - t0
    out = res.outcome
    sim = {k: simulated_ms(*v) for k, v in out.schedules.items()
           if any(r.fits and (r.candidate, r.schedule) == k for r in out.rows)}
    best = out.best
    chosen = sim[(best.candidate, best.schedule)]
    on_best = [(r.schedule, sim[(r.candidate, r.schedule)]) for r in out.rows
               if r.fits and r.candidate == best.candidate and r.schedule not in ("tessel", "-")]
    baselines = [(f"{r.schedule} on {r.candidate}", sim[(r.candidate, r.schedule)]) for r in out.rows
                 if r.fits and r.schedule not in ("tessel", "-")]
    unfit = [r for r in out.rows if r.ms is not None and not r.fits]
    return {"case": case, "res": res, "cpu": cpu, "chosen": chosen, "sim": sim,
            "best_on_chosen": min(on_best, key=lambda x: x[1], default=None),
            "best_baseline": min(baselines, key=lambda x: x[1], default=None),
            "shortest_unfit": min(unfit, key=lambda r: r.ms, default=None),
            "named": {name: min((v for (c, s), v in sim.items() if s == name), default=None)
                      for name in ("1f1b", "zb-v", "zb-h1", "interleaved-1f1b")}}


def mshape_reference(D: int, n: int) -> float:
    """`tessel search specs/mshape.tsl --set D=D` at N = n, simulated, in ms (1 unit = 1 ms)."""
    from tessel_dsl.lang.parser import parse_file
    from tessel_dsl.search.driver import search

    spec = parse_file(ROOT / "specs" / "mshape.tsl", sets={"D": str(D), "N": str(n)})
    return simulated_ms(spec, search(spec, microbatches=n).schedule) / (spec.units.time_seconds * 1e3)


def fmt(x) -> str:
    return "-" if x is None else f"{x:.4g}"


def choice_table(devices: list[int]) -> list[str]:
    lines = ["| case | D | N | chosen | ms (simulated) | best baseline on it | best baseline that fits | "
             "1F1B | ZB-V | reference | holds | CPU s |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for D in devices:
        n = 4 * D
        cases = [Case("mshape-spec", mshape_spec_profile(D), D, f"{6 * 1000 + 10 * (D + 2)}MB"),
                 Case("gpt-512k", gpt_profile(D), D, "80GB", "8GB"),
                 Case("chain", chain_profile(D), D, "80GB"),
                 Case("memory-bound", chain_profile(D, 6 * GB), D, "10GB")]
        for case in cases:
            got = run_case(case)
            best = got["res"].best
            ok, ref = [], None
            bo, bb = got["best_on_chosen"], got["best_baseline"]
            ok.append(bo is None or got["chosen"] <= bo[1] + 1e-9)
            ok.append(bb is None or got["chosen"] <= bb[1] + 1e-9)
            if case.name == "mshape-spec":
                ref = mshape_reference(D, n)
                ok += [best.candidate.startswith("mshape"), got["chosen"] <= ref + 1e-9]
            if case.name == "chain":
                ok += [got["named"][k] is None or got["chosen"] <= got["named"][k] + 1e-9 for k in ("1f1b", "zb-v")]
            fitting = [v for v in got["sim"].values()]
            ok.append(got["chosen"] <= min(fitting) + 1e-9)
            unfit = got["shortest_unfit"]
            note = f" (shorter, does not fit: {unfit.schedule} on {unfit.candidate} {fmt(unfit.ms)})" if (
                unfit is not None and unfit.ms < got["chosen"]) else ""
            out_rows = got["res"].outcome.rows
            left = sorted({f"{r.candidate} ({r.peak_gb:.3g} GB)" for r in out_rows
                           if r.ms is None and r.gb and "weights" in r.reason})
            if left:
                note += f"; weights alone over: {', '.join(left)}"
            lines.append(
                f"| {case.name} | {D} | {n} | {best.schedule} on {best.candidate} | {fmt(got['chosen'])}{note} | "
                f"{fmt(bo and bo[1])} ({bo[0] if bo else '-'}) | {fmt(bb and bb[1])} ({bb[0] if bb else '-'}) | "
                f"{fmt(got['named']['1f1b'])} | {fmt(got['named']['zb-v'])} | {fmt(ref)} | "
                f"{'yes' if all(ok) else 'NO'} | {got['cpu']:.1f} |")
            print(lines[-1], flush=True)
    return lines


def timing_table(devices: list[int]) -> list[str]:
    import torch

    from tessel_dsl.executor.models.gpt import GPT, Config
    from tessel_dsl.placement.api import plan_model
    from tessel_dsl.placement.profile import profile_model

    warm = GPT(Config.of({"vocab": 8192, "hidden": 64, "heads": 4, "layers": 2, "seq": 64, "batch": 1}))
    profile_model(warm, torch.randint(0, 8192, (1, 64)), device="cpu")  # torch's first-call costs, not counted
    lines = ["| D | units | profile CPU s (scaled-down GPT, this CPU) | plan CPU s (512k GPT estimate: candidates, "
             "searches, baselines) | chosen |", "|---|---|---|---|---|"]
    for D in devices:
        cfg = Config.of({"vocab": 8192, "hidden": 64, "heads": 4, "layers": D, "seq": 64, "batch": 1})
        torch.manual_seed(0)
        model = GPT(cfg)
        tokens = torch.randint(0, cfg.vocab, (cfg.batch, cfg.seq))
        t0 = time.process_time()
        prof = profile_model(model, tokens, device="cpu")
        prof_cpu = time.process_time() - t0
        t0 = time.process_time()
        res = plan_model(None, None, devices=D, memory="80GB", reserve="8GB", profile=gpt_profile(D))
        lines.append(f"| {D} | {len(prof.units)} | {prof_cpu:.1f} | {time.process_time() - t0:.1f} | "
                     f"{res.best.schedule} on {res.best.candidate} |")
        print(lines[-1], flush=True)
    return lines


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--devices", type=int, nargs="*", default=[4])
    p.add_argument("--timing", type=int, nargs="*", default=[])
    args = p.parse_args()
    torch_threads()
    if args.devices:
        print("\n".join(choice_table(args.devices)))
    if args.timing:
        print()
        print("\n".join(timing_table(args.timing)))


def torch_threads() -> None:
    try:
        import torch

        torch.set_num_threads(1)  # CPU seconds of one core, comparable between runs
    except ImportError:
        pass


if __name__ == "__main__":
    main()
