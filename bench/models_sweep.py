"""Every shipped model on 2 and on 4 gloo ranks, each checked against one process: the full sweep
behind tests/integration/test_models.py, which runs a sample of its cases (one training case per
model on 4 ranks, two inference cases on 2; bench/heavy/test_models_rest.py runs the others at
those rank counts). Prints one row per case: whether the pipelined step matched one process
(loss and every gradient, or every sink output, within 1e-5 relative) and its seconds.

    python bench/models_sweep.py                 # all 24 cases (minutes on 2 cores)
    python bench/models_sweep.py --devices 2     # one rank count
"""
from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _cpu() -> float:
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--devices", type=int, nargs="*", default=[2, 4])
    args = ap.parse_args(argv)
    import torch

    torch.set_num_threads(1)  # tiny models: as the tests run them
    from tests.integration import test_models as tm

    cases = [("train", i, c, d) for d in args.devices for i, c in zip(tm.IDS, tm.TRAIN)]
    cases += [("infer", i, c, d) for d in args.devices for i, c in zip(tm.INFER_IDS, tm.INFER)]
    print("| mode | model-shape | ranks | matches one process | wall s | CPU s |")
    print("|---|---|---:|---|---:|---:|")
    failed = 0
    for mode, name, case, devices in cases:
        wall, cpu = time.perf_counter(), _cpu()
        try:
            (tm.train_case if mode == "train" else tm.infer_case)(*case, devices)
            ok = "yes"
        except AssertionError as e:
            ok, failed = f"no: {str(e)[:80]}", failed + 1
        print(f"| {mode} | {name} | {devices} | {ok} | {time.perf_counter() - wall:.1f} | {_cpu() - cpu:.1f} |",
              flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
