"""Search benchmark: Tessel on every shipped spec, against the lower bound and the TO optimum.

For each `specs/*.tsl` in train and infer mode at D=4 and D=8 it prints: search time (median of
`--repeat` runs), N_R, the repetend period next to the lower bound, makespan and bubble at
N = 8, 16, 32, 128 (the searched schedule re-extended with `search.reextend`, not searched again), and for N = 8 and 16
the gap between Tessel's makespan and the time-optimal one (TO, solved on the deterministic
budget `--to-effort`, so the same on any machine; a wall-clock `--to-limit` only when given; `?`
marks a TO that was not proven optimal within them). A second table compares solver backends and
repetend methods. Output is Markdown; `--write FILE` replaces the "## Search" section of FILE,
all of it, subsections included, so it refuses a section that holds anything it did not write
(subsections, or the blocks `bench/doc_numbers.py` maintains, as bench/results/search.md's does):
point it at a scratch file.

    python bench/search.py                         # everything (long: TO solves dominate)
    python bench/search.py --specs mshape nnshape --devices 8 --modes train
    python bench/search.py --no-to --repeat 1      # quick look
"""
from __future__ import annotations

import argparse
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tessel_dsl.errors import TesselError  # noqa: E402
from tessel_dsl.lang.parser import parse_file  # noqa: E402
from tessel_dsl.search.optimal import TO_EFFORT  # noqa: E402

SIZES = (8, 16, 32, 128)
TO_SIZES = (8, 16)


def _machine() -> str:
    try:
        model = next(line.split(":", 1)[1].strip() for line in
                     subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines()
                     if line.startswith("Model name"))
    except (StopIteration, OSError):
        model = platform.processor() or "unknown CPU"
    import os

    return f"{model}, {os.cpu_count()} CPU(s), Python {platform.python_version()}, {platform.system()}"


def _pct(x: float) -> str:
    return f"{x:.1%}"


def bench_one(path: Path, mode: str, d: int, args) -> dict:
    """Search once per repeat, re-extend to every N, and solve TO at the small N."""
    from tessel_dsl.search.driver import search
    from tessel_dsl.search.finish import reextend
    from tessel_dsl.search.notes import render
    from tessel_dsl.search.optimal import OptimalTimeout, optimal

    spec = parse_file(path, sets={"D": str(d)}, mode=mode)
    row = {"spec": path.stem, "mode": mode, "D": d}
    times = []
    result = None
    for i in range(args.repeat):
        t0 = time.perf_counter()
        try:
            result = search(spec, microbatches=SIZES[0], solver=args.solver, method=args.method,
                            time_limit=args.time_limit)
        except TesselError as e:
            row["error"] = str(e).splitlines()[0]
            return row
        times.append(time.perf_counter() - t0)
        if times[-1] > args.repeat_below:  # slow searches are timed once: the median would cost too much
            break
    info = result.info
    row.update(seconds=statistics.median(times), runs=len(times), nr=info.nr, period=info.period,
               lb=info.lower_bound, proven=info.proven, method=info.method, note=render(info.notes))
    schedules = {}
    for n in SIZES:
        if n == SIZES[0]:
            s = result.schedule
        elif result.schedule.repetend is not None:  # what `tessel simulate -n` gives: no new search
            s = reextend(spec, result.schedule, n, solver=args.solver, info=result.info)
        else:  # no repetend (e.g. memory grows per micro-batch): search that N on its own
            s = search(spec, microbatches=n, solver=args.solver, method=args.method,
                       time_limit=args.time_limit).schedule
        schedules[n] = s
        row[f"N{n}"] = (s.makespan(spec), s.bubble_rate(spec))
    if not args.no_to:
        for n in TO_SIZES:
            try:
                to = optimal(spec, n, solver=args.solver, time_limit=args.to_limit, effort=args.to_effort,
                             hint=schedules[n])
            except OptimalTimeout:
                row[f"TO{n}"] = None
                continue
            best = to.schedule.makespan(spec)
            row[f"TO{n}"] = (best, schedules[n].makespan(spec) / best - 1.0, to.info.proven)
    return row


def table(rows: list[dict], with_to: bool) -> str:
    head = ["spec", "mode", "D", "search s", "N_R", "period / LB"]
    head += [f"N={n} makespan (bubble)" for n in SIZES]
    if with_to:
        head += [f"gap to TO, N={n}" for n in TO_SIZES]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        if "error" in r:
            cells = [r["spec"], r["mode"], str(r["D"]), "error: " + r["error"]] + [""] * (len(head) - 4)
            lines.append("| " + " | ".join(cells) + " |")
            continue
        mark = "" if r["proven"] else " (not proven)"
        runs = f" (median of {r['runs']})" if r["runs"] > 1 else ""
        ok = "=" if r["period"] == r["lb"] else ">"
        cells = [r["spec"], r["mode"], str(r["D"]), f"{r['seconds']:.2f}{runs}{mark}", str(r["nr"]),
                 f"{r['period']} {ok} {r['lb']}" if r["period"] else f"- (direct; LB {r['lb']})"]
        cells += [f"{r[f'N{n}'][0]} ({_pct(r[f'N{n}'][1])})" for n in SIZES]
        if with_to:
            for n in TO_SIZES:
                to = r.get(f"TO{n}")
                cells.append("no TO schedule within the budget" if to is None else
                             f"{to[1]:+.1%} (TO {to[0]}{'' if to[2] else '?'})")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def solver_table(paths: list[Path], args) -> str:
    """Search time and period per (solver, method) on the D=4 training specs."""
    from tessel_dsl.search.driver import search

    combos = [(s, m) for s in ("cpsat", "z3") for m in ("modulo", "enumerate")]
    head = ["spec"] + [f"{s} / {m}" for s, m in combos]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for path in paths:
        spec = parse_file(path, sets={"D": "4"}, mode="train")
        cells = [path.stem]
        for solver, method in combos:
            t0 = time.perf_counter()
            try:
                r = search(spec, microbatches=8, solver=solver, method=method, time_limit=args.compare_limit)
                dt = time.perf_counter() - t0
                cells.append(f"{dt:.2f} s, P={r.info.period}{'' if r.info.proven else ' (not proven)'}")
            except TesselError as e:
                cells.append("error: " + str(e).splitlines()[0][:60])
            print(f"  {path.stem} {solver}/{method}: {cells[-1]}", file=sys.stderr, flush=True)
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def write_section(target: Path, body: str) -> None:
    """Replace (or append) the '## Search' section of a results page, leaving other sections alone."""
    text = target.read_text() if target.exists() else "# Benchmark results\n"
    lines = text.splitlines()
    start = next((i for i, l in enumerate(lines) if l.strip() == "## Search"), None)
    if start is None:
        new = text.rstrip("\n") + "\n\n" + body.rstrip("\n") + "\n"
    else:
        end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
        kept = [l for l in lines[start + 1:end] if l.startswith("### ") or l.startswith("<!-- numbers:")]
        if kept:
            raise SystemExit(f"{target}: its '## Search' section holds more than this script writes "
                             f"({kept[0].strip()!r}); --write would delete it. Write to a scratch file instead.")
        new = "\n".join(lines[:start] + body.rstrip("\n").splitlines() + ([""] + lines[end:] if end < len(lines) else [])) + "\n"
    tmp = target.with_suffix(".md.tmp")
    tmp.write_text(new)
    tmp.replace(target)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--specs", nargs="*", help="spec names (default: every specs/*.tsl)")
    ap.add_argument("--devices", nargs="*", type=int, default=[4, 8])
    ap.add_argument("--modes", nargs="*", default=["train", "infer"])
    ap.add_argument("--solver", default="auto")
    ap.add_argument("--method", default="auto")
    ap.add_argument("--time-limit", type=float, default=None,
                    help="per search, seconds of wall clock (default: none; a limit makes the schedules "
                         "depend on the machine)")
    ap.add_argument("--repeat", type=int, default=3, help="searches per case (median reported)")
    ap.add_argument("--repeat-below", type=float, default=5.0, help="repeat only searches faster than this")
    ap.add_argument("--to-effort", type=float, default=TO_EFFORT, metavar="E",
                    help=f"deterministic budget per TO solve (CP-SAT's deterministic time; default {TO_EFFORT:g})")
    ap.add_argument("--to-limit", type=float, default=None, metavar="SECONDS",
                    help="also stop each TO solve after this much wall clock (default: none; a limit makes "
                         "the TO cells depend on the machine's speed and load)")
    ap.add_argument("--no-to", action="store_true", help="skip the TO solves")
    ap.add_argument("--no-solvers", action="store_true", help="skip the solver/method comparison")
    ap.add_argument("--compare-limit", type=float, default=None,
                    help="per search in the solver comparison, seconds of wall clock (default: none; every "
                         "solve has a deterministic budget, and a limit makes the periods depend on the machine)")
    ap.add_argument("--write", type=Path, help="replace the '## Search' section of this Markdown file")
    args = ap.parse_args()
    for name in ("time_limit", "to_effort", "to_limit", "compare_limit"):
        if getattr(args, name) is not None and getattr(args, name) <= 0:
            ap.error(f"--{name.replace('_', '-')} must be positive")
    if args.to_limit is not None and not args.no_to:
        print(f"TO limited to {args.to_limit:g} s of wall clock: its cells depend on this machine's speed and load",
              file=sys.stderr)

    paths = sorted((ROOT / "specs").glob("*.tsl"))
    if args.specs:
        paths = [p for p in paths if p.stem in args.specs]
    rows = []
    for path in paths:
        for mode in args.modes:
            for d in args.devices:
                t0 = time.perf_counter()
                rows.append(bench_one(path, mode, d, args))
                print(f"  {path.stem} {mode} D={d}: {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
    command = "python bench/search.py " + " ".join(sys.argv[1:])
    if args.to_limit is None:
        budget = f"TO on a deterministic budget of effort {args.to_effort:g} per solve, the same on any machine"
    else:
        budget = (f"TO on effort {args.to_effort:g} and at most {args.to_limit:g} s of wall clock per solve, "
                  "so its cells depend on this machine's speed and load")
    out = ["## Search", "", f"Machine: {_machine()}.", f"Command: `{command.strip()}`.", "",
           "Tessel search per shipped spec (time to search for N=8; other N re-extend the same schedule; "
           "`(not proven)` = a budget or the time limit cut the search short; gap to TO = Tessel's makespan over the "
           f"time-optimal one, {budget}; `?` = TO not proven optimal).", "",
           table(rows, not args.no_to)]
    if not args.no_solvers:
        d4 = [p for p in paths]
        limit = "no wall-clock limit" if args.compare_limit is None else f"limit {args.compare_limit:g} s"
        out += ["", f"Solver backends and repetend methods (D=4, train, N=8, {limit}):", "",
                solver_table(d4, args)]
    text = "\n".join(out) + "\n"
    print(text)
    if args.write:
        write_section(args.write, text)


if __name__ == "__main__":
    main()
