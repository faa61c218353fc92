"""The search on costs as a profiler gives them: the specs of bench/specs/real/ at D = 8 and 16.

Each spec (1 ms resolution, memory in GB, costs derived from published model configurations in
its comment) is searched once for its N with no time limit (so the result is deterministic), and
every applicable baseline is built for the same N under the spec's memory. The table shows, in
milliseconds: the lower bound of the period per micro-batch (`tessel check`'s, the busiest
device's work), Tessel's period per micro-batch and makespan, the period's gap to that bound,
what is proven, the best baseline that fits the memory and its makespan, and the CPU seconds of
the search (time.process_time, after the solver import).

    python bench/search_real.py                      # every spec, D = 8 and 16, then the memory-bound rows
    python bench/search_real.py --only chain8 mshape8:MEM=24 m8_llama
    python bench/search_real.py --probe m8_llama 2 104,98 --effort 5   # one cyclic solve per period

A row is a spec name in bench/specs/real/ (or bench/specs/), optionally with `:K=V,...` parameter
overrides (as `tessel search --set`). The memory-bound rows give the M- and NN-shape less memory
for activations than their models leave (`MEM=24`, GB) and add the 8-GPU M-shape of issue 14
(bench/specs/m8_llama.tsl, 16 GB), and the chain a user writes with less room on its end GPUs
(bench/specs/real/memchain.tsl at D = 8 and 16); then an NN-shape from another model (UL2 20B,
bench/specs/real/ul2_nnshape8.tsl and ul2_nnshape16.tsl) at its own memory and at 30 and 20 GB; and a 16-stage
Llama-3.1-70B with its vocabulary split over all 16 GPUs for the embedding and the head
(bench/specs/real/llama70b_vocab16.tsl), where memory holds 3 micro-batches a stage; and mT5-XL as an NN-shape over 16 GPUs
with a vocabulary-parallel head on all of them and 20 GB for activations (bench/specs/real/mt5xl16.tsl), where memory and
the all-device blocks bind together. The last columns are the memory bound of the
period per micro-batch (`search/membound.py`; the gap is to the larger of it and the lower bound;
shown to 0.1 ms, rounded down so that it stays a lower bound) and the makespan bound (time and memory) with the makespan's gap to it.
"""
from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tessel_dsl.errors import TesselError  # noqa: E402
from tessel_dsl.lang.parser import parse_file  # noqa: E402
from tessel_dsl.search.baselines import RECORDS, build  # noqa: E402
from tessel_dsl.search.driver import search  # noqa: E402

SPECS = ROOT / "bench" / "specs" / "real"
ORDER = ["chain", "mshape", "nnshape", "kshape", "interleaved", "zerobubble"]
DEFAULT = ([f"{shape}{d}" for d in (8, 16) for shape in ORDER]
           + ["mshape8:MEM=24", "nnshape8:MEM=24", "m8_llama", "mshape16:MEM=24", "nnshape16:MEM=24",
              "memchain:D=8", "memchain:D=16", "tpmshape16", "tpmshape16:MEM=16",
              "ul2_nnshape8", "ul2_nnshape16", "ul2_nnshape8:MEM=30", "ul2_nnshape8:MEM=20",
              "ul2_nnshape16:MEM=20", "llama70b_vocab16", "gemma2_27b_chain8", "mt5xl16"])


def load(row: str):
    """The spec a row names (see the module text)."""
    name, _, sets = row.partition(":")
    path = SPECS / f"{name}.tsl"
    if not path.exists():
        path = SPECS.parent / f"{name}.tsl"
    overrides = dict(kv.split("=", 1) for kv in sets.split(",")) if sets else None
    return parse_file(path, sets=overrides)


def best_baseline(spec, n: int) -> tuple[str, int] | None:
    """(name, makespan) of the applicable baseline with the shortest makespan within memory M."""
    best = None
    for record in RECORDS:
        try:
            sched = build(spec, record.name, n)
        except TesselError:
            continue
        if not sched.fits_memory(spec):
            continue
        span = sched.makespan(spec)
        if best is None or span < best[1]:
            best = (record.name, span)
    return best


def probe(row: str, k: str, periods: str, *, effort: float) -> None:
    """Is a repetend holding each block `k` times feasible at each period? (feasible / infeasible /
    unknown within `effort`), with the CPU seconds of each solve."""
    from tessel_dsl.search.copies import unroll
    from tessel_dsl.search.modulo import solve_period
    from tessel_dsl.search.period_walk import cyclic_nr_limit
    from tessel_dsl.search.timescale import divide_spec, time_unit

    spec = load(row)
    unit = time_unit(spec)  # the search solves in this unit (block times over their common divisor)
    spec = unroll(divide_spec(spec, unit), int(k))
    print("| spec | copies | period ms | per micro-batch ms | answer | CPU s |")
    print("|---|---|---|---|---|---|")
    for period in (int(p) for p in periods.split(",")):
        t0 = time.process_time()
        if period % unit:
            raise SystemExit(f"period {period} is not a multiple of the search's time unit {unit}")
        status, _ = solve_period(spec, period // unit, cyclic_nr_limit(spec), "cpsat", None, effort)
        answer = {"optimal": "feasible"}.get(status, status)
        print(f"| {row} | {k} | {period} | {period / int(k):g} | {answer} | {time.process_time() - t0:.1f} |", flush=True)


def bound_text(x: float) -> str:
    """A lower bound to one decimal, rounded down (rounding up would claim more than it proves);
    the inner rounding keeps float noise (25.7 * 10 = 256.99999...) from dropping a digit."""
    return f"{math.floor(round(x * 10, 6)) / 10:.1f}"


def proven_text(info) -> str:
    if not info.period:  # a baseline's order with no repetend: only the makespan can be proven
        return "yes (makespan at its bound, no repetend)" if info.proven else "no (no repetend)"
    if not info.period_proven:
        return "no"
    over = "once" if info.copies == 1 else f"<= {info.copies} times"
    return ("yes" if info.proven else "period only") + f" (blocks held {over})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*", default=DEFAULT, help="rows: spec names (no .tsl), optionally NAME:K=V,...")
    ap.add_argument("--probe", nargs=3, metavar=("ROW", "K", "PERIODS"),
                    help="instead of the table: solve the cyclic model of ROW unrolled K times (a repetend "
                         "holding each block K times) at each of the comma-separated PERIODS")
    ap.add_argument("--effort", type=float, default=5.0, help="deterministic budget of each --probe solve")
    args = ap.parse_args()
    import ortools.sat.python.cp_model  # noqa: F401  (its import would otherwise count against the first row)
    if args.probe:
        probe(*args.probe, effort=args.effort)
        return
    print("| spec | D | N | lower bound ms | Tessel period ms (per mb) | makespan ms | gap to bound | proven | "
          "best baseline (makespan ms) | CPU s | memory bound ms | makespan bound ms (gap) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name in args.only:
        spec = load(name)
        t0 = time.process_time()
        result = search(spec)
        cpu = time.process_time() - t0
        info, n = result.info, spec.microbatches
        per_mb = info.period / info.repetend_copies
        span = result.schedule.makespan(spec)
        base = best_baseline(spec, n)
        base_txt = "none applies" if base is None else f"{base[0]} ({base[1]})"
        worse = base is not None and span > base[1]
        period_txt = (f"{info.period}" if info.repetend_copies == 1
                      else f"{info.period} / {info.repetend_copies} = {per_mb:g}") if info.period else "-"
        bound = max(info.lower_bound, info.memory_bound)
        mgap = 100 * (span / info.makespan_bound - 1) if info.makespan_bound else 0.0
        print(f"| {name} | {spec.devices} | {n} | {info.lower_bound} | {period_txt} | {span}"
              f"{' (worse than baseline!)' if worse else ''} | "
              f"{f'{100 * (per_mb / bound - 1):.1f}%' if info.period else '-'} | "
              f"{proven_text(info)} | {base_txt} | {cpu:.1f} | {bound_text(info.memory_bound)} | "
              f"{info.makespan_bound} ({mgap:.1f}%) |", flush=True)


if __name__ == "__main__":
    main()
