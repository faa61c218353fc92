"""Four GPUs (or the device count given): the paper's three end-to-end comparisons on the shipped models.

Here (where the search runs):    python bench/gpu4.py --make-plans [--devices D] [--profiled RESULTS.json]
On the GPU machine (torch only): PYTHONPATH=. python bench/gpu4.py [--devices D] [--out DIR] [--only gpt,encdec,branches]

* GPT, 512k vocabulary: searched M-shape (non-blocking and blocking) vs 1F1B+ on the M-shape vs
  1F1B on a V-shape split of the same model, both as PyTorch's Schedule1F1B and as the same 1F1B
  order run by this executor (which separates the placement's gain from the runtime's).
* Encoder-decoder with a shared 256k embedding: searched NN-shape (both modes) vs 1F1B+ on the
  NN-shape vs 1F1B on a V split (the first stage embeds source and target with the one table).
* Two-branch text/vision model, inference: 1F1B on a V split (the branches one after the other)
  vs GPipe order and the searched K-shape on the K placement, for 1, 8, 32 and 128 micro-batches
  (the latency of one micro-batch is the N=1 row). The K-shape is searched twice: on the spec's
  unit costs, and on block times measured on the GPUs (`--profiled`: the `block_seconds` of the
  GPipe-order N=32 run in an earlier results file, multi-device cross encoder included), with
  blocking rows for the GPipe order and the profiled K-shape.
Every row: measured and simulated iteration time, throughput and the largest wait share.

The profiled K-shape takes three steps, since the search does not run on the GPU machine:
`--only branches --n-infer 32` there, `--make-plans --devices D --profiled <its gpuD_branches.json>`
here, then `--only branches` there (rows whose plan is missing are skipped).
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

from gpu_common import (
    BRANCHES,
    ENCDEC,
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

N_TRAIN = 32
N_INFER = (1, 8, 32, 128)
PROFILE_RUN = "k_gpipe_32"  # the run whose measured block times become the profiled K-shape costs


def specs(devices: int):
    from tessel_dsl.executor.models import shapes
    from tessel_dsl.ir import Mode

    f = {f"F{i}": 2 for i in range(devices)} | {f"B{i}": 4 for i in range(devices)}
    gpt = costed(shapes.mshape(devices, head=True, microbatches=N_TRAIN),
                 {"E": 1, "EB": 2, "H": 4, "HB": 7, "F": 2, "B": 4}, {"H": 1, "HB": -1}, capacity=8)
    encdec = costed(shapes.nnshape(devices, microbatches=N_TRAIN),
                    {"E1": 1, "E1B": 1, "E2": 1, "E2B": 1, "F": 2, "B": 4}, capacity=8)
    branches = costed(shapes.kshape(devices, mode=Mode.INFER, microbatches=8), {"J": 2, "F": 2})
    chain = costed(shapes.vshape(devices, microbatches=N_TRAIN), f, capacity=devices)
    chain_infer = costed(shapes.vshape(devices, mode=Mode.INFER, microbatches=8), f)
    return {"gpt": gpt, "encdec": encdec, "branches": branches, "chain": chain, "chain_infer": chain_infer}


def measured_costs(spec, seconds: dict[str, float]):
    """`spec` with the block times a run measured, as `tessel profile --from-run` writes them."""
    from tessel_dsl.interop.profiled_spec import apply_measurements, measurements_from_run

    return apply_measurements(spec, measurements_from_run(spec, seconds))


def plan_name(model: str, devices: int, rest: str) -> str:
    return f"{model}{devices}_{rest}.json"


def make_plans(devices: int, profiled: str | None) -> None:
    s = specs(devices)
    p = lambda model, rest: PLANS / plan_name(model, devices, rest)  # noqa: E731
    if profiled:
        runs = json.loads(Path(profiled).read_text())
        if "block_seconds" not in runs.get(PROFILE_RUN, {}):
            raise SystemExit(f"{profiled} has no {PROFILE_RUN!r} run with block_seconds; run "
                             "`gpu4.py --only branches --n-infer 32` on the GPUs first")
        seconds = runs[PROFILE_RUN]["block_seconds"]
        k = measured_costs(s["branches"], seconds)
        print("profiled K-shape costs:", {b.name: b.time for b in k.blocks})
        for n in N_INFER:
            for blocking in (False, True):
                sfx = "_blocking" if blocking else ""
                print(make_plan(k, "tessel", n, p("branches", f"kshape_tessel_profiled{sfx}_n{n}"), blocking))
        return
    for blocking in (False, True):
        sfx = "_blocking" if blocking else ""
        print(make_plan(s["gpt"], "tessel", N_TRAIN, p("gpt", f"mshape_tessel{sfx}"), blocking))
        print(make_plan(s["encdec"], "tessel", N_TRAIN, p("encdec", f"nnshape_tessel{sfx}"), blocking))
    print(make_plan(s["gpt"], "1f1b+", N_TRAIN, p("gpt", "mshape_1f1b+")))
    print(make_plan(s["encdec"], "1f1b+", N_TRAIN, p("encdec", "nnshape_1f1b+")))
    print(make_plan(s["chain"], "1f1b", N_TRAIN, p("chain", "vshape_1f1b")))
    for n in N_INFER:
        print(make_plan(s["branches"], "tessel", n, p("branches", f"kshape_tessel_n{n}")))
        print(make_plan(s["branches"], "gpipe", n, p("branches", f"kshape_gpipe_n{n}")))
        print(make_plan(s["branches"], "gpipe", n, p("branches", f"kshape_gpipe_blocking_n{n}"), True))
        print(make_plan(s["chain_infer"], "1f1b", n, p("chain", f"vshape_infer_1f1b_n{n}")))


def main() -> None:
    ap = arg_parser(__doc__)
    ap.add_argument("--devices", type=int, default=4, help="GPUs to use (an even number; default 4)")
    ap.add_argument("--only", default="gpt,encdec,branches", help="comma-separated subset of gpt,encdec,branches")
    ap.add_argument("--n-infer", default=",".join(map(str, N_INFER)),
                    help="micro-batch counts of the two-branch inference runs (comma-separated)")
    ap.add_argument("--profiled", metavar="RESULTS_JSON",
                    help="with --make-plans: search the K-shape on the block times measured in this results file")
    args = ap.parse_args()
    d = args.devices
    if args.make_plans:
        make_plans(d, args.profiled)
        return
    only = set(args.only.split(","))
    res = {"gpu": gpu_info(), "date": time.strftime("%Y-%m-%d"), "devices": d}
    lines = [f"{d}-GPU runs on {res['gpu']}, {res['date']}", ""]

    def run(key: str, plan: str, module: str, margs: dict) -> dict:
        return record(res, key, run_plan(PLANS / plan, f"tessel_dsl.executor.models.{module}:factory", margs))

    if "gpt" in only:
        m = sizes("gpt", GPT)
        base = record(res, "gpt_torch_1f1b", torch_1f1b(d, N_TRAIN))
        b = base["measured"]["iteration"]
        rows = [row("Schedule1F1B (torch, V split)", base)]
        # The same cap on NCCL's thread blocks that this executor's links use (tessel_dsl/executor/groups.py).
        os.environ["NCCL_MAX_CTAS"] = "1"
        rows.append(row("Schedule1F1B (torch, V split), NCCL_MAX_CTAS=1",
                        record(res, "gpt_torch_1f1b_ctas1", torch_1f1b(d, N_TRAIN)), b))
        del os.environ["NCCL_MAX_CTAS"]
        for key, plan, name in (("gpt_1f1b", plan_name("chain", d, "vshape_1f1b"), "1F1B V split (this executor)"),
                                ("gpt_tessel", plan_name("gpt", d, "mshape_tessel"), "Tessel M-shape, non-blocking"),
                                ("gpt_tessel_blocking", plan_name("gpt", d, "mshape_tessel_blocking"),
                                 "Tessel M-shape, blocking"),
                                ("gpt_1f1bplus", plan_name("gpt", d, "mshape_1f1b+"), "1F1B+ M-shape")):
            rows.append(row(name, run(key, plan, "gpt", m), b))
        lines += [f"GPT {GPT}, N={N_TRAIN}", "", HEADER, *rows, ""]
    if "encdec" in only:
        m = sizes("encdec", ENCDEC)
        base = run("encdec_1f1b", plan_name("chain", d, "vshape_1f1b"), "encdec", m)
        b = base["measured"]["iteration"]
        rows = [row("1F1B V split", base)]
        for key, plan, name in (("encdec_1f1bplus", plan_name("encdec", d, "nnshape_1f1b+"), "1F1B+ NN-shape"),
                                ("encdec_tessel", plan_name("encdec", d, "nnshape_tessel"),
                                 "Tessel NN-shape, non-blocking"),
                                ("encdec_tessel_blocking", plan_name("encdec", d, "nnshape_tessel_blocking"),
                                 "Tessel NN-shape, blocking")):
            rows.append(row(name, run(key, plan, "encdec", m), b))
        lines += [f"Encoder-decoder {ENCDEC}, N={N_TRAIN}", "", HEADER, *rows, ""]
    if "branches" in only:
        m = sizes("branches", BRANCHES)
        rows = []
        for n in map(int, args.n_infer.split(",")):
            base = run(f"k_1f1b_{n}", plan_name("chain", d, f"vshape_infer_1f1b_n{n}"), "branches", m)
            b = base["measured"]["iteration"]
            rows.append(row(f"1F1B V split, N={n}", base))
            for key, rest, name in ((f"k_gpipe_{n}", f"kshape_gpipe_n{n}", "GPipe order K-shape"),
                                    (f"k_tessel_{n}", f"kshape_tessel_n{n}", "Tessel K-shape, spec costs"),
                                    (f"k_tessel_profiled_{n}", f"kshape_tessel_profiled_n{n}",
                                     "Tessel K-shape, profiled costs"),
                                    (f"k_gpipe_blocking_{n}", f"kshape_gpipe_blocking_n{n}",
                                     "GPipe order K-shape, blocking"),
                                    (f"k_tessel_profiled_blocking_{n}", f"kshape_tessel_profiled_blocking_n{n}",
                                     "Tessel K-shape, profiled costs, blocking")):
                if (PLANS / plan_name("branches", d, rest)).exists():
                    rows.append(row(f"{name}, N={n}", run(key, plan_name("branches", d, rest), "branches", m), b))
        lines += [f"Two-branch inference {BRANCHES}", "", HEADER, *rows, ""]
    part = "" if only == {"gpt", "encdec", "branches"} else "_" + "-".join(sorted(only))
    write_results(args.out, f"gpu{d}{part}", res, "\n".join(lines))


if __name__ == "__main__":
    main()
