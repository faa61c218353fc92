"""Which side is loose, the search or its bound: the default search, its stated makespan bound
and a time-optimal solve (TO) side by side at a few small N for one spec.

At the spec's own N (32 or 64) TO proves almost nothing where memory binds, so a gap between a
plan and its bound (bench/results/search.md, bench/search_zoo.py) does not say which of the two
is loose. At small N it often does: where TO, hinted with the search's schedule (so it can only
match or beat it), finds nothing shorter, or proves the search's makespan optimal, the search is
not what is loose there; where its proven optimum is above the stated bound, the bound is. The
trend over N then says which side the gap at the spec's N more likely comes from; it proves
nothing at that N.

TO runs on a deterministic budget (`--effort`, CP-SAT's deterministic time, one worker), so
the table is the same on any machine. CPU is this process's (search, then TO).

    python bench/small_n.py bench/specs/real/kshape16.tsl --set MEM=24 --n 4 8 12 16 --effort 60
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def row(spec, n: int, effort: float) -> dict:
    """Search, stated bound and hinted TO for `n` micro-batches."""
    from tessel_dsl.search.driver import search
    from tessel_dsl.search.optimal import OptimalTimeout, optimal

    cpu = time.process_time()
    found = search(spec, microbatches=n)
    ours, bound = found.schedule.makespan(spec), found.info.makespan_bound
    mid = time.process_time()
    try:
        best = optimal(spec, n, effort=effort, hint=found.schedule, workers=1)
        to, proven = best.schedule.makespan(spec), best.info.proven
    except OptimalTimeout:  # (never with a hint: the hint is a solution)
        to, proven = ours, False
    return dict(n=n, ours=ours, bound=bound, to=to, proven=proven,
                search_cpu=mid - cpu, to_cpu=time.process_time() - mid)


def main(argv: list[str] | None = None) -> int:
    from tessel_dsl.errors import TesselError
    from tessel_dsl.lang.parser import parse_file

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("spec", type=Path)
    ap.add_argument("--set", nargs="*", default=[], metavar="K=V", help="spec parameters, as `tessel search --set`")
    ap.add_argument("--n", nargs="+", type=int, default=[4, 8], help="micro-batch counts (default 4 8)")
    ap.add_argument("--effort", type=float, default=60, help="TO's deterministic budget (default 60)")
    args = ap.parse_args(argv)
    try:
        spec = parse_file(args.spec, sets=dict(kv.split("=", 1) for kv in args.set))
    except TesselError as e:  # (a bad spec is the spec's error, with file, line and column)
        print(e, file=sys.stderr)
        return 1
    words = ["python bench/small_n.py", str(args.spec), *(f"--set {kv}" for kv in args.set),
             "--n", *map(str, args.n), "--effort", f"{args.effort:g}"]
    print(f"`{' '.join(words)}`:\n")
    print("| N | stated bound | search | TO (hinted) | TO proven | search over TO | TO over bound | CPU s search + TO |")
    print("|---|---|---|---|---|---|---|---|")
    for n in args.n:
        r = row(spec, n, args.effort)
        print(f"| {n} | {r['bound']} | {r['ours']} | {r['to']} | {'yes' if r['proven'] else 'no'} "
              f"| {100 * (r['ours'] / r['to'] - 1):+.1f}% | {100 * (r['to'] / r['bound'] - 1):+.1f}% "
              f"| {r['search_cpu']:.1f} + {r['to_cpu']:.1f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
