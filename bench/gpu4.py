"""Four GPUs (or the device count given): the paper's three end-to-end comparisons on the shipped models.

Here (where the search runs):    python bench/gpu4.py --make-plans [--devices D] [--only ...] [--n-infer ...]
                                 [--profiled RESULTS.json]         (-> bench/plans/gpu4/, ignored)
On the GPU machine (torch only): PYTHONPATH=. python bench/gpu4.py [--devices D] [--out DIR] [--only gpt,encdec,branches]
                                 (bench/plans carried)

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
here (for D=2, bench/results/gpu2_h200_branches_profile-run.json is that file), then `--only
branches` there (rows whose plan is missing are skipped).
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


def plan_name(devices: int, model: str, placement: str, schedule: str, n: int, *variants: str):
    return plan_path("gpu4", model, devices, placement, schedule, n, *variants)


def make_plans(devices: int, profiled: str | None, only: set[str], ns: tuple[int, ...]) -> None:
    s = specs(devices)

    def p(model, placement, schedule, n, *variants):
        return plan_name(devices, model, placement, schedule, n, *variants)

    if profiled:
        runs = json.loads(Path(profiled).read_text())
        if "block_seconds" not in runs.get(PROFILE_RUN, {}):
            raise SystemExit(f"{profiled} has no {PROFILE_RUN!r} run with block_seconds; run "
                             "`gpu4.py --only branches --n-infer 32` on the GPUs first")
        seconds = runs[PROFILE_RUN]["block_seconds"]
        k = measured_costs(s["branches"], seconds)
        print("profiled K-shape costs:", {b.name: b.time for b in k.blocks})
        for n in ns:
            for blocking in (False, True):
                print(make_plan(k, "tessel", n, p("branches", "kshape", "tessel", n, "profiled",
                                                  "blocking" if blocking else ""), blocking))
        return
    if only & {"gpt", "encdec"}:
        for blocking in (False, True):
            b = "blocking" if blocking else ""
            if "gpt" in only:
                print(make_plan(s["gpt"], "tessel", N_TRAIN, p("gpt", "mshape", "tessel", N_TRAIN, b), blocking))
            if "encdec" in only:
                print(make_plan(s["encdec"], "tessel", N_TRAIN, p("encdec", "nnshape", "tessel", N_TRAIN, b), blocking))
        if "gpt" in only:
            print(make_plan(s["gpt"], "1f1b+", N_TRAIN, p("gpt", "mshape", "1f1b+", N_TRAIN)))
        if "encdec" in only:
            print(make_plan(s["encdec"], "1f1b+", N_TRAIN, p("encdec", "nnshape", "1f1b+", N_TRAIN)))
        print(make_plan(s["chain"], "1f1b", N_TRAIN, p("chain", "vshape", "1f1b", N_TRAIN)))
    if "branches" in only:
        for n in ns:
            print(make_plan(s["branches"], "tessel", n, p("branches", "kshape", "tessel", n)))
            print(make_plan(s["branches"], "gpipe", n, p("branches", "kshape", "gpipe", n)))
            print(make_plan(s["branches"], "gpipe", n, p("branches", "kshape", "gpipe", n, "blocking"), True))
            print(make_plan(s["chain_infer"], "1f1b", n, p("chain", "vshape", "1f1b", n, "infer")))


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
    only = set(args.only.split(","))
    ns = tuple(map(int, args.n_infer.split(",")))
    if args.make_plans:
        make_plans(d, args.profiled, only, ns)
        return
    res = {"gpu": gpu_info(), "date": time.strftime("%Y-%m-%d"), "devices": d}
    lines = [f"{d}-GPU runs on {res['gpu']}, {res['date']}", ""]

    def run(key: str, plan, module: str, margs: dict) -> dict:
        need_plans(plan, how=f"python bench/gpu4.py --make-plans --devices {d} --only {args.only} --n-infer {args.n_infer}")
        return record(res, key, run_plan(plan, f"tessel_dsl.executor.models.{module}:factory", margs))

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
        for key, plan, name in (("gpt_1f1b", plan_name(d, "chain", "vshape", "1f1b", N_TRAIN),
                                 "1F1B V split (this executor)"),
                                ("gpt_tessel", plan_name(d, "gpt", "mshape", "tessel", N_TRAIN),
                                 "Tessel M-shape, non-blocking"),
                                ("gpt_tessel_blocking", plan_name(d, "gpt", "mshape", "tessel", N_TRAIN, "blocking"),
                                 "Tessel M-shape, blocking"),
                                ("gpt_1f1bplus", plan_name(d, "gpt", "mshape", "1f1b+", N_TRAIN), "1F1B+ M-shape")):
            rows.append(row(name, run(key, plan, "gpt", m), b))
        lines += [f"GPT {GPT}, N={N_TRAIN}", "", HEADER, *rows, ""]
    if "encdec" in only:
        m = sizes("encdec", ENCDEC)
        base = run("encdec_1f1b", plan_name(d, "chain", "vshape", "1f1b", N_TRAIN), "encdec", m)
        b = base["measured"]["iteration"]
        rows = [row("1F1B V split", base)]
        for key, plan, name in (("encdec_1f1bplus", plan_name(d, "encdec", "nnshape", "1f1b+", N_TRAIN),
                                 "1F1B+ NN-shape"),
                                ("encdec_tessel", plan_name(d, "encdec", "nnshape", "tessel", N_TRAIN),
                                 "Tessel NN-shape, non-blocking"),
                                ("encdec_tessel_blocking", plan_name(d, "encdec", "nnshape", "tessel", N_TRAIN, "blocking"),
                                 "Tessel NN-shape, blocking")):
            rows.append(row(name, run(key, plan, "encdec", m), b))
        lines += [f"Encoder-decoder {ENCDEC}, N={N_TRAIN}", "", HEADER, *rows, ""]
    if "branches" in only:
        m = sizes("branches", BRANCHES)
        rows = []
        for n in ns:
            base = run(f"k_1f1b_{n}", plan_name(d, "chain", "vshape", "1f1b", n, "infer"), "branches", m)
            b = base["measured"]["iteration"]
            rows.append(row(f"1F1B V split, N={n}", base))
            for key, (schedule, *variants), name in (
                    (f"k_gpipe_{n}", ("gpipe",), "GPipe order K-shape"),
                    (f"k_tessel_{n}", ("tessel",), "Tessel K-shape, spec costs"),
                    (f"k_tessel_profiled_{n}", ("tessel", "profiled"), "Tessel K-shape, profiled costs"),
                    (f"k_gpipe_blocking_{n}", ("gpipe", "blocking"), "GPipe order K-shape, blocking"),
                    (f"k_tessel_profiled_blocking_{n}", ("tessel", "profiled", "blocking"),
                     "Tessel K-shape, profiled costs, blocking")):
                plan = plan_name(d, "branches", "kshape", schedule, n, *variants)
                if plan.exists():
                    rows.append(row(f"{name}, N={n}", run(key, plan, "branches", m), b))
        lines += [f"Two-branch inference {BRANCHES}", "", HEADER, *rows, ""]
    part = "" if only == {"gpt", "encdec", "branches"} else "_" + "-".join(sorted(only))
    write_results(args.out, f"gpu{d}{part}", res, "\n".join(lines))


if __name__ == "__main__":
    main()
