"""How good is `tessel plan`'s choice? Each case plans a profile whose costs are set (so the rows
are the same on any machine) and sets the chosen plan, simulated, against the alternatives:

  mshape-spec  the costs of specs/mshape.tsl (E on all devices: 1 ms forward and 1 ms gradient a
               device; D stages of 1 ms forward and 3 ms backward, 1 GB of activations; 6 GB a
               device) as a profile: an embedding unit of D ms forward and D ms weight gradient,
               D layer units; as the spec, links free (the spread embedding's gradient
               sharded, the default, as `tp_plans` shards it). The chosen plan must be an M-shape at least
               as short as `tessel search specs/mshape.tsl`'s plan at the same N.
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
import math
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
    link_latency: float | None = None
    dense_embedding_grad: bool = False


def simulated_ms(spec, sched) -> float:
    from tessel_dsl.plan import make_plan
    from tessel_dsl.simulator import simulate

    return simulate(make_plan(spec, sched)).makespan * spec.units.time_seconds * 1e3


def run_case(case: Case) -> dict:
    """Plan the case; simulate the winner and every fitting row; the numbers the table shows."""
    from tessel_dsl.placement.api import plan_model

    t0 = time.process_time()
    res = plan_model(None, None, devices=case.devices, memory=case.memory, reserve=case.reserve,
                     microbatches=case.microbatches, profile=case.profile, link_latency=case.link_latency,
                     dense_embedding_grad=case.dense_embedding_grad)
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
        cases = [Case("mshape-spec", mshape_spec_profile(D), D, f"{6 * 1000 + 10 * (D + 2)}MB", link_latency=0.0),
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


# -- the GPT at 32k and 512k from the units profiled on 4 x H200 -----------------------------------

# H200 HBM3e, 4.8 TB/s (the card's stated figure): what a table-sized add or a pass over the
# logits costs in the correction below.
HBM = 4.8e12
# The hand-written Tessel plans' measured iterations in that run (bench/results/gpu_zb_h200x4_2026-11-27.md),
# the placement they use, and what the spread head's blocks measured.
MEASURED = {"gpt32k": {"plan": ("chain-split", "Tessel zero-bubble chain", 209.2), "H": (4.86, 4.24)},
            "gpt512k": {"plan": ("mshape-EH", "Tessel M-shape", 449.8), "H": (6.61, 10.2), "B0": 10.74}}


def split_ratio(data: dict) -> float:
    """The executor's I + W over its unsplit B on the GPT-32k's middle stages (two layers each,
    no embedding or head), measured in the same GPU run (`gpt32k_zb` against `gpt32k_1f1b`)."""
    iw = b = 0.0
    for x, y in zip(data["gpt32k_zb"]["measurements"][1:3], data["gpt32k_1f1b"]["measurements"][1:3]):
        iw += x["input_grad"] + x["weight_grad"]
        b += y["backward"]
    return iw / b


def corrected(units: list[dict], ratio: float, tokens: int) -> Profile:
    """The units profiled the former way, as the profiler now measures them (the notes in
    bench/results/plan.md): a layer's former W ran from its outputs and so was one whole backward,
    which becomes its unsplit backward, and its W the executor's I + W (`ratio` of that) less I;
    an embedding's, norm's or head's former W walked nothing else and stays; every W and unsplit
    backward gains the accumulation of its gradient (read two, write one table, at `HBM`); the
    head gains a cross entropy estimated as 18 bytes a logit each way at `HBM`."""
    out = []
    for u in units:
        u = dict(u, modules=tuple(u["modules"]))
        acc = 3 * u["param_bytes"] / HBM
        i, w = u["input_grad"], u["weight_grad"]
        if u["kind"] == "layer":
            u.update(unsplit_backward=w + acc, weight_grad=ratio * w - i + acc)
        else:
            u.update(unsplit_backward=i + w + acc, weight_grad=w + acc)
        if u["kind"] == "head":
            hidden = u["input_bytes"] // (2 * tokens)
            logits = tokens * u["params"] // hidden
            u.update(loss_forward=18 * logits / HBM, loss_backward=18 * logits / HBM)
        out.append(Unit(**u))
    return Profile(tuple(out), "NVIDIA H200 (corrected)", (1, tokens))


def block_ms(text: str, block: str) -> tuple[float, float]:
    """(forward, unsplit backward) ms of `block` in a generated spec's text."""
    from tessel_dsl.lang.parser import parse

    spec = parse(text, "<candidate>")
    res = spec.units.time_seconds * 1e3
    fwd = spec.block(block)
    back = next(b for b in spec.blocks if b.forward == block)
    return fwd.time * res, back.time * res


# What the second 4 x H200 run measured (bench/results/gpu_zb_h200x4_2026-11-27b.md), whose profile
# the current profiler took: the hand-written Tessel plan, its placement and ms; `tessel plan`'s
# choice then (mshape-H at both sizes, spread embedding costed with its whole gradient) and its ms.
MEASURED_B = {"gpt32k": {"plan": ("chain-split", "Tessel zero-bubble chain", 217.5), "choice": 233.2},
              "gpt512k": {"plan": ("mshape-EH", "Tessel M-shape", 455.2), "choice": 500.8}}


def current_profile_table(data: dict) -> list[str]:
    """The GPTs planned from units the current profiler took (unsplit backward, the head's loss
    and every gradient's accumulation measured): as saved, no correction; by default a spread
    embedding's gradient is costed over D (`tp_plans` shards it), and the row with
    `dense_embedding_grad=True` costs it whole, as the run's `tessel plan` did."""
    from tessel_dsl.placement.api import plan_model

    lines = ["| model | spread embedding's gradient | chosen, ms predicted | Tessel's row on every candidate, "
             "ms predicted | the hand-written plan's placement, predicted (its measured ms) | "
             "that run's `tessel plan` choice, measured ms | plan CPU s |", "|---|---|---|---|---|---|---|"]
    for group in ("gpt32k", "gpt512k"):
        entry = data[f"{group}_choice"]
        prof = Profile.from_json(entry["units_profile"])
        for label, dense in (("sharded (default)", False), ("whole (dense_embedding_grad=True)", True)):
            t0 = time.process_time()
            res = plan_model(None, None, devices=4, memory=entry["memory_bytes"], reserve="6GB", microbatches=16,
                             profile=prof, dense_embedding_grad=dense)
            cpu = time.process_time() - t0
            rows = {(r.candidate, r.schedule): r for r in res.outcome.rows}
            tessel = [r for r in res.outcome.rows if r.schedule == "tessel" and r.ms is not None]
            ref_cand, ref_name, ref_ms = MEASURED_B[group]["plan"]
            ref = rows.get((ref_cand, "tessel"))
            lines.append(_choice_row(group, label, res, tessel, ref_cand, ref, ref_name, ref_ms,
                                     MEASURED_B[group]['choice'], cpu))
            print(lines[-1], flush=True)
    return lines


def gpu_profile_table(path: Path) -> list[str]:
    import json

    from tessel_dsl.placement.api import plan_model
    from tessel_dsl.placement.candidates import candidates
    from tessel_dsl.placement.costs import NVLINK, Links

    data = json.loads(path.read_text())
    if all("unsplit_backward" in u for u in data["gpt512k_choice"]["units_profile"]["units"]):
        return current_profile_table(data)
    # The first run's units, from the former profiler: corrected below, and every row but the
    # last costs a spread embedding's gradient whole, as `tp_plans` ran it then.
    ratio = split_ratio(data)
    profiles = {}
    for group in ("gpt32k", "gpt512k"):
        entry = data[f"{group}_choice"]
        tokens = math.prod(entry["units_profile"]["batch_shape"])
        profiles[group] = (entry, Profile.from_json(entry["units_profile"]),
                           corrected(entry["units_profile"]["units"], ratio, tokens))

    def head_ms(prof, memory, links):
        cands = {c.name: c for c in candidates(prof, 4, memory - 6 * GB, 16, links=links)}
        return cands, (block_ms(cands["mshape-H"].text, "H") if "mshape-H" in cands else (None, None))

    # the spread head's time beyond compute and links, fitted on GPT-32k's measured H and HB alone
    entry32 = profiles["gpt32k"][0]
    _, (hf, hb) = head_ms(profiles["gpt32k"][2], entry32["memory_bytes"], NVLINK)
    mf, mb = MEASURED["gpt32k"]["H"]
    overhead = ((mf - hf) + (mb - hb)) / 2 / 1e3
    lines = [f"I + W over B on the GPT-32k's middle stages, measured in that run: {ratio:.3f}; spread "
             f"overhead fitted on GPT-32k's head: {overhead * 1e3:.2f} ms", "",
             "| model | profile | chosen, ms predicted | Tessel's row on every candidate, ms predicted | "
             "the hand-written plan's placement, predicted (its measured ms) | mshape-H's H, F / B ms predicted "
             "(measured) | plan CPU s |", "|---|---|---|---|---|---|---|"]
    for group in ("gpt32k", "gpt512k"):
        entry, saved, fixed = profiles[group]
        for label, prof, ov, dense in (("as saved", saved, 0.0, True), ("corrected", fixed, 0.0, True),
                                       (f"corrected, spread overhead {overhead * 1e3:.2f} ms", fixed, overhead, True),
                                       ("corrected, spread embedding's gradient sharded", fixed, 0.0, False)):
            t0 = time.process_time()
            res = plan_model(None, None, devices=4, memory=entry["memory_bytes"], reserve="6GB", microbatches=16,
                             profile=prof, spread_overhead=ov, dense_embedding_grad=dense)
            cpu = time.process_time() - t0
            rows = {(r.candidate, r.schedule): r for r in res.outcome.rows}
            tessel = [r for r in res.outcome.rows if r.schedule == "tessel" and r.ms is not None]
            ref_cand, ref_name, ref_ms = MEASURED[group]["plan"]
            ref = rows.get((ref_cand, "tessel"))
            cands, (hf, hb) = head_ms(prof, entry["memory_bytes"], Links(NVLINK.bandwidth, NVLINK.latency, ov))
            mf, mb = MEASURED[group]["H"]
            extra = ""
            if "B0" in MEASURED[group] and "mshape-H" in cands:
                extra = f"; mshape-H's B0 {fmt(block_ms(cands['mshape-H'].text, 'F0')[1])} " \
                        f"({MEASURED[group]['B0']})"
            lines.append(_choice_row(group, label, res, tessel, ref_cand, ref, ref_name, ref_ms,
                                     f"{fmt(hf)} / {fmt(hb)} ({mf} / {mb}){extra}", cpu))
            print(lines[-1], flush=True)
    return lines


def _choice_row(group, label, res, tessel, ref_cand, ref, ref_name, ref_ms, last: str, cpu: float) -> str:
    """One row of the GPT choice tables: the choice, every Tessel candidate, the hand-written
    plan's placement against its measured time, `last` (what the table compares), CPU s."""
    return (f"| {group} | {label} | {res.best.schedule} on {res.best.candidate}, {fmt(res.best.ms)} | "
            f"{', '.join(f'{r.candidate} {fmt(r.ms)}' for r in tessel)} | "
            f"{ref_cand} {fmt(ref and ref.ms)} ({ref_name}: {ref_ms}) | {last} | {cpu:.1f} |")


def split_check_table(repeats: int = 21) -> list[str]:
    """On this CPU: each layer's I + W as the profiler now times them against its unsplit backward,
    for the shipped GPT and a Llama (transformers, random weights), hidden 256, sequence 128."""
    import torch

    from tessel_dsl.executor.models.gpt import GPT, Config
    from tessel_dsl.placement.profile import profile_model

    torch.manual_seed(0)
    models = [("GPT (tessel_dsl.executor.models.gpt)",
               GPT(Config.of({"vocab": 1024, "hidden": 256, "heads": 4, "layers": 2, "seq": 128, "batch": 1})))]
    try:
        from transformers import LlamaConfig, LlamaForCausalLM

        models.append(("LlamaForCausalLM", LlamaForCausalLM(LlamaConfig(
            vocab_size=1024, hidden_size=256, intermediate_size=688, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=128, use_cache=False, tie_word_embeddings=False))))
    except ImportError:
        pass
    lines = ["| model | unit | F ms | I ms | W ms | I + W ms | unsplit B ms | (I + W) / B |", "|---|---|---|---|---|---|---|---|"]
    for name, model in models:
        profile_model(model, torch.randint(0, 1024, (1, 128)), device="cpu", repeats=3, warmup=1)  # first calls
        prof = profile_model(model, torch.randint(0, 1024, (1, 128)), device="cpu", repeats=repeats, warmup=3)
        for u in prof.units:
            if u.kind != "layer":
                continue
            iw = u.input_grad + u.weight_grad
            lines.append(f"| {name} | {u.name} | {u.forward * 1e3:.2f} | {u.input_grad * 1e3:.2f} | "
                         f"{u.weight_grad * 1e3:.2f} | {iw * 1e3:.2f} | {u.unsplit_backward * 1e3:.2f} | "
                         f"{iw / u.unsplit_backward:.3f} |")
            print(lines[-1], flush=True)
    return lines


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--devices", type=int, nargs="*", default=[4])
    p.add_argument("--timing", type=int, nargs="*", default=[])
    p.add_argument("--gpu-profile", type=Path, default=None,
                   help="bench/gpu_zb.py's profile JSON: plan the GPTs from its units profiled on 4 x H200 "
                        "(the former profiler's units are corrected first)")
    p.add_argument("--split-check", action="store_true", help="each layer's I + W against its unsplit backward")
    args = p.parse_args()
    torch_threads()
    if args.split_check:
        print("\n".join(split_check_table()))
        return
    if args.gpu_profile:
        print("\n".join(gpu_profile_table(args.gpu_profile)))
        return
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
