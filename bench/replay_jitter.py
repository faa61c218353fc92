"""Plans replayed on a run's block times with every block instance's time drawn around its median:
does one plan's order leave its devices waiting more than another's when blocks vary?

Each draw gives every action of every plan the same factor (uniform within +-spread, a fixed
seed), so the plans are compared on identical draws; the replay is the executor's
(`executor.trace.replay`: the programs as lowered, transfers free). Also, per device, the replay
with only that device's blocks slowed by the spread throughout:

    python bench/replay_jitter.py bench/results/gpu_zb_h200x4_2026-11-28x.json --tag gpu_zb_x_32 \\
        --row gpt32k_choice PLAN_A PLAN_B --spread 0.1 --draws 30
"""
from __future__ import annotations

import argparse
import json
import random
import statistics


def jitter(plans: dict, block_s: dict[str, float], spread: float, draws: int, seed: int = 0) -> dict[str, list[float]]:
    """Each plan's replayed iteration (ms) in each draw."""
    from tessel_dsl.executor.trace import replay, summarize

    rng = random.Random(seed)
    names = sorted({str(a) for p in plans.values() for prog in p.programs for a in prog.actions})
    out: dict[str, list[float]] = {k: [] for k in plans}
    for _ in range(draws):
        factor = {a: 1 + rng.uniform(-spread, spread) for a in names}
        for k, p in plans.items():
            own = {a: block_s[a.split(":")[0]] * f for a, f in factor.items() if ":" in a and " " not in a}
            out[k].append(summarize(replay(p, block_s, own), p.spec.devices)["iteration"] * 1e3)
    return out


def slowed(plan, block_s: dict[str, float], device: int, spread: float) -> float:
    """The replayed iteration (ms) with `device`'s blocks all `spread` slower."""
    from tessel_dsl.executor.trace import replay, summarize

    times = {b.name: block_s[b.name] * (1 + spread if device in b.devices else 1) for b in plan.spec.blocks}
    return summarize(replay(plan, times), plan.spec.devices)["iteration"] * 1e3


def main(argv: list[str] | None = None) -> None:
    from tessel_dsl.plan import load_plan

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", help="a gpu_zb results .json")
    ap.add_argument("--tag", help="the tag inside the file")
    ap.add_argument("--row", required=True, help="the row whose block medians are used")
    ap.add_argument("plans", nargs="+")
    ap.add_argument("--spread", type=float, default=0.1)
    ap.add_argument("--draws", type=int, default=30)
    args = ap.parse_args(argv)
    data = json.load(open(args.results))
    block_s = (data[args.tag] if args.tag else data)[args.row]["block_seconds"]
    plans = {p: load_plan(p) for p in args.plans}
    got = jitter(plans, block_s, args.spread, args.draws)
    devices = max(p.spec.devices for p in plans.values())
    print(f"| plan | replay ms | mean over {args.draws} draws (+-{args.spread:.0%}) | "
          + " | ".join(f"GPU {d} {args.spread:.0%} slower" for d in range(devices)) + " |")
    print("|---|---|---|" + "---|" * devices)
    from tessel_dsl.executor.trace import replay, summarize

    for name, p in plans.items():
        base = summarize(replay(p, block_s), p.spec.devices)["iteration"] * 1e3
        print(f"| {name} | {base:.2f} | {statistics.mean(got[name]):.2f} | "
              + " | ".join(f"{slowed(p, block_s, d, args.spread):.2f}" for d in range(p.spec.devices)) + " |")


if __name__ == "__main__":
    main()
