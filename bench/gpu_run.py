"""Two GPUs: a searched M-shape plan vs PyTorch's Schedule1F1B on the same embedding-heavy GPT.

Here (where the search runs):   python bench/gpu_run.py --make-plans      (-> bench/plans/gpu_run/, ignored)
On the GPU machine (torch only): PYTHONPATH=. python bench/gpu_run.py [--out DIR]   (bench/plans carried)

Runs the M-shape plan with non-blocking and blocking communication and Schedule1F1B on a V-shape
split of the same model (same weights, micro-batches, GPUs), then prints a Markdown table:
measured iteration time, the plan replayed with the measured block times (simulated), throughput,
and the largest per-device share of time spent waiting, measured and simulated.
"""
from __future__ import annotations

import time

from gpu_common import (
    GPT,
    HEADER,
    arg_parser,
    costed,
    gpu_info,
    make_plan,
    need_plans,
    plan_path,
    record,
    row,
    run_plan,
    sizes,
    torch_1f1b,
    write_results,
)

N = 16


def spec():
    """The 2-GPU M-shape, block costs in ~1 ms units as sized in GPT: a stage of two layers 3
    forward / 6 backward, the vocab-parallel head (half of a 512k vocabulary per GPU) 8 / 14, the
    embedding 1 / 2."""
    from tessel_dsl.executor.models import shapes

    return costed(shapes.mshape(2, head=True, microbatches=N),
                  {"E": 1, "EB": 2, "H": 8, "HB": 14, "F": 3, "B": 6}, {"H": 1, "HB": -1}, capacity=8)


def plan_file(blocking: bool):
    return plan_path("gpu_run", "gpt", 2, "mshape", "tessel", N, "blocking" if blocking else "")


def make_plans() -> None:
    for blocking in (False, True):
        print(make_plan(spec(), "tessel", N, plan_file(blocking), blocking=blocking))


def main() -> None:
    args = arg_parser(__doc__).parse_args()
    if args.make_plans:
        make_plans()
        return
    need_plans(plan_file(False), plan_file(True), how="python bench/gpu_run.py --make-plans")
    results = {"gpu": gpu_info(), "date": time.strftime("%Y-%m-%d"), "model": GPT, "microbatches": N}
    print(results["gpu"], flush=True)
    base = record(results, "torch_1f1b", torch_1f1b(2, N))
    for blocking in (False, True):
        record(results, f"tessel{'_blocking' if blocking else '_nonblocking'}",
               run_plan(plan_file(blocking), "tessel_dsl.executor.models.gpt:factory", sizes("gpt", GPT)))
    b = base["measured"]["iteration"]
    lines = [f"GPT vocab {GPT['vocab']}, hidden {GPT['hidden']}, {GPT['layers']} layers, seq {GPT['seq']}, "
             f"{N} micro-batches of {GPT['batch']}, bf16, on {results['gpu']}", "", HEADER,
             row("Schedule1F1B (torch, V split)", base),
             row("Tessel M-shape, non-blocking", results["tessel_nonblocking"], b),
             row("Tessel M-shape, blocking", results["tessel_blocking"], b)]
    write_results(args.out, "gpu_run", results, "\n".join(lines))


if __name__ == "__main__":
    main()
