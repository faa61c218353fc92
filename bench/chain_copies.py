"""How fast can a memory-bound chain repeat? k-copy repetends against the baseline and the optimum.

For a chain spec (one forward stage and its backward per device), prints:

1. for k = 1 .. K copies, the smallest period the exact cyclic model of `search/chaincycle.py`
   finds by bisection (between k times the larger of the busiest device's work and the memory
   bound, and k times the one-copy period), whether every period below it was proven infeasible
   within the budget, and the CPU seconds;
2. memory-capped 1F1B's makespan for N and 2N and its steady rate between them;
3. with `--direct N`: one time-optimal solve of N micro-batches of the chain (CP-SAT, memory as
   the micro-batches each stage holds, the first stage's forwards and backwards in micro-batch
   order, which the paper's Property 1 allows), seeded with memory-capped 1F1B, under a deterministic budget: the makespan and
   whether it is proven optimal, against `makespan_bound`.

    python bench/chain_copies.py                                   # memchain D=8, k = 1..3
    python bench/chain_copies.py --row memchain:D=8 --copies 3 --effort 10 --direct 24 --direct-effort 60
"""
from __future__ import annotations

import argparse
import sys
import time
from fractions import Fraction
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tessel_dsl.analysis import lower_bound  # noqa: E402
from tessel_dsl.lang.parser import parse_file  # noqa: E402
from tessel_dsl.search.baselines import build  # noqa: E402
from tessel_dsl.search.bounds import makespan_bound  # noqa: E402
from tessel_dsl.search.chaincycle import chain_period_search  # noqa: E402
from tessel_dsl.search.membound import memory_period_bound  # noqa: E402
from tessel_dsl.search.onecopy import chain_stage_blocks, one_copy_chain_bound  # noqa: E402


def load(row: str):
    name, _, sets = row.partition(":")
    path = ROOT / "bench" / "specs" / "real" / f"{name}.tsl"
    if not path.exists():
        path = ROOT / "bench" / "specs" / f"{name}.tsl"
    return parse_file(path, sets=dict(kv.split("=", 1) for kv in sets.split(",")) if sets else None)


def direct(spec, n: int, effort: float) -> tuple[str, int, int, float]:
    """(status, makespan, solver's lower bound, CPU s) of the time-optimal solve (module text)."""
    from ortools.sat.python import cp_model

    stages = chain_stage_blocks(spec)
    f = [a.time for a, _, _ in stages]
    b = [c.time for _, c, _ in stages]
    limit = [spec.capacity(d) // a.memory for a, _, d in stages]
    count = len(stages)
    seed = build(spec, "1f1b-capped", n)
    at = {(s.block, s.mb): s.start for s in seed.slots}
    horizon = seed.makespan(spec)
    m = cp_model.CpModel()
    x = [[m.new_int_var(0, horizon, "") for _ in range(count)] for _ in range(n)]
    y = [[m.new_int_var(0, horizon, "") for _ in range(count)] for _ in range(n)]
    end = m.new_int_var(0, horizon, "makespan")
    for i in range(n):
        for s in range(count - 1):
            m.add(x[i][s + 1] >= x[i][s] + f[s])
            m.add(y[i][s] >= y[i][s + 1] + b[s + 1])
        m.add(y[i][-1] >= x[i][-1] + f[-1])
        m.add(end >= y[i][0] + b[0])
        if i:  # the first stage's forwards and backwards in micro-batch order (Property 1)
            m.add(x[i][0] >= x[i - 1][0] + f[0])
            m.add(y[i][0] >= y[i - 1][0] + b[0])
        for s in range(count):
            m.add_hint(x[i][s], at[(stages[s][0].name, i)])
            m.add_hint(y[i][s], at[(stages[s][1].name, i)])
    for s in range(count):
        m.add_no_overlap([m.new_fixed_size_interval_var(x[i][s], f[s], "") for i in range(n)]
                         + [m.new_fixed_size_interval_var(y[i][s], b[s], "") for i in range(n)])
        holds = []
        for i in range(n):  # held from the start of F_s to the start of B_s
            holds.append(m.new_interval_var(x[i][s], m.new_int_var(0, horizon, ""), y[i][s], ""))
        m.add_cumulative(holds, [1] * n, limit[s])
    m.minimize(end)
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1
    solver.parameters.random_seed = 1
    solver.parameters.max_deterministic_time = effort
    t0 = time.process_time()
    st = solver.solve(m)
    return solver.status_name(st).lower(), int(solver.objective_value), int(solver.best_objective_bound), \
        time.process_time() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--row", default="memchain:D=8")
    ap.add_argument("--copies", type=int, default=3)
    ap.add_argument("--effort", type=float, default=10.0, help="deterministic budget of each period's solve")
    ap.add_argument("--direct", type=int, default=0, help="also solve N micro-batches time-optimally")
    ap.add_argument("--direct-effort", type=float, default=60.0)
    args = ap.parse_args()
    import ortools.sat.python.cp_model  # noqa: F401  (not counted against the first row)

    spec = load(args.row)
    one = one_copy_chain_bound(spec)
    floor = max(Fraction(lower_bound(spec)), memory_period_bound(spec))
    print(f"{args.row}: busiest device {lower_bound(spec)}, memory bound {float(floor):g} per micro-batch, "
          f"one-copy bound {one}")
    print("| copies | period found | per micro-batch | every shorter period infeasible | CPU s |")
    print("|---|---|---|---|---|")
    for k in range(1, args.copies + 1):
        low = -(-(floor * k).numerator // (floor * k).denominator)
        t0 = time.process_time()
        period, _, settled = chain_period_search(spec, k, low, k * one + 1, effort=args.effort)
        cpu = time.process_time() - t0
        got = "none" if period is None else str(period)
        per = "-" if period is None else f"{period / k:g}"
        print(f"| {k} | {got} | {per} | {'yes' if settled else 'no (budget)'} | {cpu:.1f} |", flush=True)
    n = spec.microbatches
    a, b = build(spec, "1f1b-capped", n).makespan(spec), build(spec, "1f1b-capped", 2 * n).makespan(spec)
    print(f"\n1f1b-capped: makespan {a} at N={n}, {b} at N={2 * n}: {(b - a) / n:g} per micro-batch between them")
    if args.direct:
        st, span, low, cpu = direct(spec, args.direct, args.direct_effort)
        print(f"direct N={args.direct}: makespan {span} ({st}; solver bound {low}), makespan_bound "
              f"{makespan_bound(spec, args.direct)}, {cpu:.1f} s CPU")


if __name__ == "__main__":
    main()
