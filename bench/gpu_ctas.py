"""How much posted-but-unmatched NCCL transfers slow the compute they overlap with.

    cd bench && PYTHONPATH=.. python gpu_ctas.py [--out DIR]     (2 GPUs, plans from gpu4.py --devices 2)

Runs the same non-blocking and blocking plans with the point-to-point links' NCCL thread blocks
left to NCCL's choice and capped (`TESSEL_P2P_MAX_CTAS`, see tessel_dsl/executor/groups.py), and prints
each run's iteration time and per-block times. In blocking mode no transfer overlaps compute,
so its block times are the reference.
"""
from __future__ import annotations

import os

from gpu_common import BRANCHES, GPT, PLANS, arg_parser, record, run_plan, sizes, write_results

RUNS = [("gpt2_mshape_tessel.json", "gpt", GPT), ("gpt2_mshape_tessel_blocking.json", "gpt", GPT),
        ("branches2_kshape_gpipe_n32.json", "branches", BRANCHES),
        ("branches2_kshape_tessel_profiled_n32.json", "branches", BRANCHES),
        ("branches2_kshape_tessel_profiled_blocking_n32.json", "branches", BRANCHES)]
CTAS = ("", "1", "4")


def main() -> None:
    args = arg_parser(__doc__).parse_args()
    res: dict = {}
    lines = ["| plan | max CTAs | iteration ms | block ms |", "|---|---|---|---|"]
    for ctas in CTAS:
        os.environ["TESSEL_P2P_MAX_CTAS"] = ctas
        for plan, model, full in RUNS:
            s = record(res, f"{plan}:{ctas or 'default'}",
                       run_plan(PLANS / plan, f"tessel_dsl.executor.models.{model}:factory", sizes(model, full)))
            blocks = ", ".join(f"{b} {t * 1e3:.2f}" for b, t in sorted(s["block_seconds"].items()))
            lines.append(f"| {plan} | {ctas or 'default'} | {s['measured']['iteration'] * 1e3:.1f} | {blocks} |")
    write_results(args.out, "gpu_ctas", res, "\n".join(lines))


if __name__ == "__main__":
    main()
