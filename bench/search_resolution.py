"""Search effort against the time resolution: each spec as written and with every time x10.

The search divides block times by their common divisor, so the two should cost the same CPU time
and give the same schedule (scaled); the table shows both. Times are CPU seconds of the search
(time.process_time, solver threads included), one run each, measured in one process.

    python bench/search_resolution.py
    python bench/search_resolution.py --specs specs/mshape.tsl bench/specs/m8_llama.tsl
    python bench/search_resolution.py --method auto

The default runs the solver-based search (`method="modulo"`), where the effort is; with `auto`
the M- and NN-shape take the solver-free path, about 0.01 s at either resolution, and their
ratio is then one of two timer readings near zero.
"""
from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tessel_dsl.lang.parser import parse_file  # noqa: E402
from tessel_dsl.schedule import Slot  # noqa: E402
from tessel_dsl.search.driver import search  # noqa: E402

DEFAULT = ["specs/mshape.tsl", "specs/nnshape.tsl", "specs/interleaved.tsl", "bench/specs/m8_llama.tsl"]


def _times(spec, factor: int):
    return replace(spec, blocks=tuple(replace(b, time=b.time * factor) for b in spec.blocks))


def _cpu(spec, method: str):
    t0 = time.process_time()
    result = search(spec, method=method)
    return time.process_time() - t0, result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--specs", nargs="*", default=DEFAULT)
    ap.add_argument("--method", default="modulo", choices=("modulo", "auto", "enumerate"))
    args = ap.parse_args()
    import ortools.sat.python.cp_model  # noqa: F401  (its import would otherwise count against the first row)
    print("| spec | period (x1) | lower bound | CPU s (x1) | CPU s (x10) | ratio | same schedule x10 |")
    print("|---|---|---|---|---|---|---|")
    for path in args.specs:
        spec = parse_file(ROOT / path)
        c1, r1 = _cpu(spec, args.method)
        c10, r10 = _cpu(_times(spec, 10), args.method)
        same = r10.schedule.slots == tuple(Slot(s.start * 10, s.block, s.mb) for s in r1.schedule.slots)
        print(f"| {path} | {r1.info.period} | {r1.info.lower_bound} | {c1:.2f} | {c10:.2f} | "
              f"{max(c1, c10) / max(1e-9, min(c1, c10)):.2f} | {'yes' if same else 'no'} |", flush=True)


if __name__ == "__main__":
    main()
