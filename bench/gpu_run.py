"""Two GPUs: a searched M-shape plan vs PyTorch's Schedule1F1B on the same embedding-heavy GPT.

Here (where the search runs):   python bench/gpu_run.py --make-plans
On the GPU machine (torch only): PYTHONPATH=. python bench/gpu_run.py [--out DIR]

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
    PLANS,
    arg_parser,
    costed,
    gpu_info,
    make_plan,
    record,
    row,
    run_plan,
    sizes,
    torch_1f1b,
    write_results,
)

N = 16


def make_plans() -> None:
    from tessel_dsl.executor.models import shapes

    # Block costs in ~1 ms units as sized in GPT: a stage of two layers 3 forward / 6 backward,
    # the vocab-parallel head (half of a 512k vocabulary per GPU) 8 / 14, the embedding 1 / 2.
    spec = costed(shapes.mshape(2, head=True, microbatches=N),
                  {"E": 1, "EB": 2, "H": 8, "HB": 14, "F": 3, "B": 6}, {"H": 1, "HB": -1}, capacity=8)
    for blocking in (False, True):
        name = f"gpt2_n16_mshape_tessel{'_blocking' if blocking else ''}.json"
        print(make_plan(spec, "tessel", N, PLANS / name, blocking=blocking))


def main() -> None:
    args = arg_parser(__doc__).parse_args()
    if args.make_plans:
        make_plans()
        return
    results = {"gpu": gpu_info(), "date": time.strftime("%Y-%m-%d"), "model": GPT, "microbatches": N}
    print(results["gpu"], flush=True)
    base = record(results, "torch_1f1b", torch_1f1b(2, N))
    for mode in ("", "_blocking"):
        record(results, f"tessel{mode or '_nonblocking'}",
               run_plan(PLANS / f"gpt2_n16_mshape_tessel{mode}.json", "tessel_dsl.executor.models.gpt:factory", sizes("gpt", GPT)))
    b = base["measured"]["iteration"]
    lines = [f"GPT vocab {GPT['vocab']}, hidden {GPT['hidden']}, {GPT['layers']} layers, seq {GPT['seq']}, "
             f"{N} micro-batches of {GPT['batch']}, bf16, on {results['gpu']}", "", HEADER,
             row("Schedule1F1B (torch, V split)", base),
             row("Tessel M-shape, non-blocking", results["tessel_nonblocking"], b),
             row("Tessel M-shape, blocking", results["tessel_blocking"], b)]
    write_results(args.out, "gpu_run", results, "\n".join(lines))


if __name__ == "__main__":
    main()
