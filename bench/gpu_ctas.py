"""How much posted-but-unmatched NCCL transfers slow the compute they overlap with.

    cd bench && PYTHONPATH=.. python gpu_ctas.py [--out DIR]     (2 GPUs)

Its plans are bench/gpu4.py's at two devices: `python bench/gpu4.py --make-plans --devices 2 --only
gpt,branches --n-infer 32` and the same with `--profiled bench/results/gpu2_h200_branches_profile-run.json`,
here; bench/plans is carried to the GPU machine.

Runs the same non-blocking and blocking plans with the point-to-point links' NCCL thread blocks
left to NCCL's choice and capped (`TESSEL_P2P_MAX_CTAS`, see tessel_dsl/executor/groups.py), and prints
each run's iteration time and per-block times. In blocking mode no transfer overlaps compute,
so its block times are the reference.
"""
from __future__ import annotations

import os

from gpu4 import N_TRAIN, plan_name
from gpu_common import BRANCHES, GPT, arg_parser, need_plans, record, run_plan, sizes, write_results

RUNS = [(plan_name(2, "gpt", "mshape", "tessel", N_TRAIN), "gpt", GPT),
        (plan_name(2, "gpt", "mshape", "tessel", N_TRAIN, "blocking"), "gpt", GPT),
        (plan_name(2, "branches", "kshape", "gpipe", 32), "branches", BRANCHES),
        (plan_name(2, "branches", "kshape", "tessel", 32, "profiled"), "branches", BRANCHES),
        (plan_name(2, "branches", "kshape", "tessel", 32, "profiled", "blocking"), "branches", BRANCHES)]
CTAS = ("", "1", "4")


def main() -> None:
    args = arg_parser(__doc__).parse_args()
    need_plans(*(p for p, _, _ in RUNS), how="python bench/gpu4.py --make-plans --devices 2 --only gpt,branches "
               "--n-infer 32 [--profiled bench/results/gpu2_h200_branches_profile-run.json]")
    res: dict = {}
    lines = ["| plan | max CTAs | iteration ms | block ms |", "|---|---|---|---|"]
    for ctas in CTAS:
        os.environ["TESSEL_P2P_MAX_CTAS"] = ctas
        for plan, model, full in RUNS:
            s = record(res, f"{plan.name}:{ctas or 'default'}",
                       run_plan(plan, f"tessel_dsl.executor.models.{model}:factory", sizes(model, full)))
            blocks = ", ".join(f"{b} {t * 1e3:.2f}" for b, t in sorted(s["block_seconds"].items()))
            lines.append(f"| {plan.name} | {ctas or 'default'} | {s['measured']['iteration'] * 1e3:.1f} | {blocks} |")
    write_results(args.out, "gpu_ctas", res, "\n".join(lines))


if __name__ == "__main__":
    main()
