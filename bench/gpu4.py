"""Four GPUs: the paper's three end-to-end comparisons on the shipped models.

Here (where the search runs):   python bench/gpu4.py --make-plans
On a 4-GPU machine (torch only): PYTHONPATH=. python bench/gpu4.py [--out DIR] [--only gpt,encdec,branches]

* GPT, 512k vocabulary: searched M-shape (non-blocking and blocking) vs 1F1B+ on the M-shape vs
  PyTorch's Schedule1F1B on a V-shape split of the same model.
* Encoder-decoder with a shared 256k embedding: searched NN-shape (both modes) vs 1F1B+.
* Two-branch text/vision model, inference: searched K-shape vs GPipe-order forward on the same
  placement, for 1, 8, 32 and 128 micro-batches (latency of one micro-batch is the N=1 row).
Every row: measured and simulated iteration time, throughput and the largest wait share.
"""
from __future__ import annotations

import time

from gpu_common import (BRANCHES, ENCDEC, GPT, HEADER, PLANS, arg_parser, costed, gpu_info, make_plan, record, row,
                        run_plan, sizes, torch_1f1b, write_results)

N_TRAIN = 32
N_INFER = (1, 8, 32, 128)


def specs():
    from executor.models import shapes
    from tessel_dsl.ir import Mode

    gpt = costed(shapes.mshape(4, head=True, microbatches=N_TRAIN),
                 {"E": 1, "EB": 2, "H": 4, "HB": 7, "F": 2, "B": 4}, {"H": 1, "HB": -1}, capacity=8)
    encdec = costed(shapes.nnshape(4, microbatches=N_TRAIN), {"E1": 1, "E1B": 1, "E2": 1, "E2B": 1, "F": 2, "B": 4},
                    capacity=8)
    branches = costed(shapes.kshape(4, mode=Mode.INFER, microbatches=8), {"J": 2, "F": 2})
    return gpt, encdec, branches


def make_plans() -> None:
    gpt, encdec, branches = specs()
    for blocking in (False, True):
        sfx = "_blocking" if blocking else ""
        print(make_plan(gpt, "tessel", N_TRAIN, PLANS / f"gpt4_mshape_tessel{sfx}.json", blocking))
        print(make_plan(encdec, "tessel", N_TRAIN, PLANS / f"encdec4_nnshape_tessel{sfx}.json", blocking))
    print(make_plan(gpt, "1f1b+", N_TRAIN, PLANS / "gpt4_mshape_1f1b+.json"))
    print(make_plan(encdec, "1f1b+", N_TRAIN, PLANS / "encdec4_nnshape_1f1b+.json"))
    for n in N_INFER:
        print(make_plan(branches, "tessel", n, PLANS / f"branches4_kshape_tessel_n{n}.json"))
        print(make_plan(branches, "gpipe", n, PLANS / f"branches4_kshape_gpipe_n{n}.json"))


def main() -> None:
    ap = arg_parser(__doc__)
    ap.add_argument("--only", default="gpt,encdec,branches", help="comma-separated subset of gpt,encdec,branches")
    args = ap.parse_args()
    if args.make_plans:
        make_plans()
        return
    only = set(args.only.split(","))
    res = {"gpu": gpu_info(), "date": time.strftime("%Y-%m-%d")}
    lines = [f"4-GPU runs on {res['gpu']}, {res['date']}", ""]

    def go(key: str, plan: str, model: str, margs: dict, **kw) -> dict:
        return record(res, key, run_plan(PLANS / plan, model, margs, **kw))

    if "gpt" in only:
        base = record(res, "gpt_torch_1f1b", torch_1f1b(4, N_TRAIN))
        b = base["measured"]["iteration"]
        m = sizes("gpt", GPT)
        rows = [row("Schedule1F1B (torch, V split)", base)]
        for key, plan, name in (("gpt_tessel", "gpt4_mshape_tessel.json", "Tessel M-shape, non-blocking"),
                                ("gpt_tessel_blocking", "gpt4_mshape_tessel_blocking.json", "Tessel M-shape, blocking"),
                                ("gpt_1f1bplus", "gpt4_mshape_1f1b+.json", "1F1B+ M-shape")):
            rows.append(row(name, go(key, plan, "executor.models.gpt:factory", m), b))
        lines += [f"GPT {GPT}, N={N_TRAIN}", "", HEADER, *rows, ""]
    if "encdec" in only:
        m = sizes("encdec", ENCDEC)
        base = go("encdec_1f1bplus", "encdec4_nnshape_1f1b+.json", "executor.models.encdec:factory", m)
        b = base["measured"]["iteration"]
        rows = [row("1F1B+ NN-shape", base)]
        for key, plan, name in (("encdec_tessel", "encdec4_nnshape_tessel.json", "Tessel NN-shape, non-blocking"),
                                ("encdec_tessel_blocking", "encdec4_nnshape_tessel_blocking.json",
                                 "Tessel NN-shape, blocking")):
            rows.append(row(name, go(key, plan, "executor.models.encdec:factory", m), b))
        lines += [f"Encoder-decoder {ENCDEC}, N={N_TRAIN}", "", HEADER, *rows, ""]
    if "branches" in only:
        m = sizes("branches", BRANCHES)
        rows = []
        for n in N_INFER:
            base = go(f"k_gpipe_{n}", f"branches4_kshape_gpipe_n{n}.json", "executor.models.branches:factory", m)
            rows.append(row(f"GPipe order, N={n}", base))
            rows.append(row(f"Tessel K-shape, N={n}", go(f"k_tessel_{n}", f"branches4_kshape_tessel_n{n}.json",
                                                          "executor.models.branches:factory", m),
                            base["measured"]["iteration"]))
        lines += [f"Two-branch inference {BRANCHES}", "", HEADER, *rows, ""]
    write_results(args.out, "gpu4", res, "\n".join(lines))


if __name__ == "__main__":
    main()
