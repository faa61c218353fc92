"""What `tessel plan` predicts for each candidate of the GPTs profiled on 4 x H200, beside what the
plans of those placements measured there.

The profile is bench/gpu_zb.py's (`units_profile` of `gpt32k_choice` and `gpt512k_choice`); each
group is planned as bench/gpu_zb.py's `choose_plan` plans it (`tessel plan --profile <units>
--devices 4 --memory <the card's> --reserve 6GB --microbatches 16`, here `plan_model` with the
same arguments). Every candidate's predicted ms is the shortest row that fits on it (Tessel's
search or a baseline), as the choice reads it. The measured ms are the runs' medians from the
committed run JSONs, each row naming the plan that ran on that placement:

    python bench/plan_predict.py [--profile FILE] [--spread-overhead S | --overhead-from RUN:KEY]
        [--from-run RUN:KEY ...] [--link-latency S] [--blocks]

`--overhead-from RUN:KEY` sets the spread overhead to what that run measured (its iteration beyond
its replay per spread-block execution, `tessel_dsl.placement.from_run.spread_overhead`) for both
models, so that a run of one model predicts the other; `--from-run RUN:KEY` plans that run's model
as `tessel plan --from-run` does (RUN is a file of bench/results/, KEY a row of it: its candidate
re-costed with the block times it measured, and its spread overhead). `--blocks` also prints, for
every candidate that ran, each block's predicted time (the generated spec's, in ms) beside the
run's median `block_seconds`.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

RESULTS = ROOT / "bench" / "results"
PROFILE = RESULTS / "gpu_zb_profile_h200x4_2026-11-27b.json"
# candidate -> (what ran on that placement, run JSON, its key): the hand-written plans of
# bench/gpu_zb.py and `tessel plan`'s choices, each measured on 4 x H200 (same placement, its own
# schedule). The 32k hand-written plans were searched on blocks profiled alone; the 512k M-shape on
# a first run's block times; the choices on the unit profile.
RAN = {
    "gpt32k": {
        "chain": [("Tessel 1F1B baseline plan", "gpu_zb_h200x4_2026-11-27b.json", "gpt32k_1f1b")],
        "chain-split": [("Tessel zero-bubble chain", "gpu_zb_h200x4_2026-11-27b.json", "gpt32k_zb")],
        "v-split": [("Tessel V, two chunks per GPU", "gpu_zb_h200x4_2026-11-27b.json", "gpt32k_zbv")],
        "mshape-H": [("tessel plan's choice", "gpu_zb_h200x4_2026-11-27b.json", "gpt32k_choice")],
    },
    "gpt512k": {
        "mshape-H": [("tessel plan's choice", "gpu_zb_h200x4_2026-11-27b.json", "gpt512k_choice")],
        "mshape-EH": [("tessel plan's choice", "gpu_zb_h200x4_2026-11-27c.json", "gpt512k_choice"),
                      ("Tessel M-shape (hand-written)", "gpu_zb_h200x4_2026-11-27c.json", "gpt512k_mshape")],
    },
}


def measured(name: str, key: str) -> dict:
    return json.loads((RESULTS / name).read_text())[key]


def predict(profile: Path, group: str, overhead, latency, report=None) -> tuple[dict, dict, float]:
    """Per candidate: the shortest fitting row's ms and schedule; the candidates; CPU seconds."""
    from tessel_dsl.placement.api import _links, plan_model
    from tessel_dsl.placement.candidates import candidates
    from tessel_dsl.placement.costs import Profile

    entry = json.loads(profile.read_text())[f"{group}_choice"]
    prof = Profile.from_json(entry["units_profile"])
    t0 = time.process_time()
    res = plan_model(None, None, devices=4, memory=entry["memory_bytes"], reserve="6GB", microbatches=16,
                     profile=prof, spread_overhead=overhead, link_latency=latency, from_run=report)
    cpu = time.process_time() - t0
    overhead = res.spread_overhead
    best: dict[str, tuple[float, str]] = {}
    for r in res.outcome.rows:
        if r.fits and r.ms is not None and (r.candidate not in best or r.ms < best[r.candidate][0]):
            best[r.candidate] = (r.ms, r.schedule)
    measured = {res.run.candidate: res.run.block_seconds} if res.run else None
    cands = {c.name: c for c in candidates(prof, 4, entry["memory_bytes"] - 6 * 10**9, 16,
                                           links=_links(prof.device, None, latency, overhead), measured=measured)}
    return {"best": best, "chosen": (res.best.candidate, res.best.schedule, res.best.ms),
            "overhead": overhead}, cands, cpu


def run_entry(arg: str) -> tuple[str, dict]:
    """``FILE:KEY`` -> (KEY, the run's summary)."""
    name, _, key = arg.partition(":")
    return key, measured(name, key)


def overhead_from(arg: str, profile: Path, latency) -> float:
    """The spread overhead the run `arg` measured, with the spread blocks of its candidate."""
    from tessel_dsl.placement.api import _links
    from tessel_dsl.placement.candidates import candidates
    from tessel_dsl.placement.costs import Profile
    from tessel_dsl.placement.from_run import from_report

    key, rep = run_entry(arg)
    entry = json.loads(profile.read_text())[f"{key.split('_')[0]}_choice"]
    prof = Profile.from_json(entry["units_profile"])
    cands = candidates(prof, 4, entry["memory_bytes"] - 6 * 10**9, 16, links=_links(prof.device, None, latency))
    got = from_report(rep, {c.name: c.spread for c in cands}, arg)
    if got.spread_overhead is None:
        raise SystemExit(f"{arg}: its plan spreads no block, so it measures no spread overhead")
    print(f"spread overhead from {arg}: ({got.measured_s * 1e3:.1f} - {got.replayed_s * 1e3:.1f} ms) / "
          f"{got.spread_executions} = {got.spread_overhead * 1e3:.3f} ms")
    return got.spread_overhead


def block_ms(text: str) -> dict[str, float]:
    """Each block's time in ms from a generated spec (`forward X ... time T ... grad time G`)."""
    import re

    from tessel_dsl.lang.parser import parse

    spec = parse(text, "<candidate>")
    res = spec.units.time_seconds * 1e3
    out = {}
    for b in spec.blocks:
        out[b.name] = b.time * res
    unsplit = [line for line in text.splitlines() if " grad time " in line]
    for line in unsplit:
        m = re.match(r"forward (\w+) ", line)
        back = next(b for b in spec.blocks if b.forward == m.group(1))
        out["B" + m.group(1)[1:] if m.group(1).startswith("F") else m.group(1) + "B"] = back.time * res
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--profile", type=Path, default=PROFILE)
    p.add_argument("--spread-overhead", type=float, default=None,
                   help="seconds a spread block costs per micro-batch and direction beyond compute and links")
    p.add_argument("--overhead-from", default=None, metavar="RUN:KEY")
    p.add_argument("--from-run", action="append", default=[], metavar="RUN:KEY")
    p.add_argument("--link-latency", type=float, default=None)
    p.add_argument("--blocks", action="store_true")
    args = p.parse_args()
    overhead = args.spread_overhead
    if args.overhead_from:
        overhead = overhead_from(args.overhead_from, args.profile, args.link_latency)
    reports = dict(run_entry(a) for a in args.from_run)
    print("| model | candidate | predicted ms (row) | what ran on it | measured ms | replay of the run ms | "
          "predicted / measured |")
    print("|---|---|---|---|---|---|---|")
    for group, ran in RAN.items():
        report = next((r for k, r in reports.items() if k.startswith(group + "_")), None)
        pred, cands, cpu = predict(args.profile, group, overhead, args.link_latency, report)
        for cand, (ms, sched) in pred["best"].items():
            runs = ran.get(cand) or [("-", None, None)]
            for label, name, key in runs:
                if name is None:
                    print(f"| {group} | {cand} | {ms:.1f} ({sched}) | - | - | - | - |")
                    continue
                m = measured(name, key)
                it, rep = m["measured"]["iteration"] * 1e3, m["simulated"]["iteration"] * 1e3
                print(f"| {group} | {cand} | {ms:.1f} ({sched}) | {label} ({name}) | {it:.1f} | {rep:.1f} | "
                      f"{ms / it:.3f} |")
        c, s, ms = pred["chosen"]
        print(f"| {group} | **chosen: {s} on {c}** | {ms:.1f} | spread overhead {pred['overhead'] * 1e3:.3g} ms"
              f"{'; re-costed from ' + next(a for a in args.from_run if a.split(':')[1].startswith(group)) if report else ''}"
              f" | | | (plan CPU {cpu:.1f} s) |")
        if args.blocks:
            for cand, runs in ran.items():
                if cand not in cands:
                    continue
                ours = block_ms(cands[cand].text)
                for label, name, key in runs:
                    got = measured(name, key)["block_seconds"]
                    row = ", ".join(f"{b} {ours.get(b, float('nan')):.2f}/{got[b] * 1e3:.2f}" for b in got)
                    print(f"  {group} {cand} vs {label}: block predicted/measured ms: {row}")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
