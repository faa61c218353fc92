"""CPU of the whole `tessel search` command on the five D=4 training placements, side by side with
the authors' Tessel (github zhiqi-0/Tessel) run as its evaluation scripts run it.

Each command is a fresh process, so interpreter start, imports and writing the plan count. CPU is
user + system time of the child (`resource.RUSAGE_CHILDREN`), the median of `--repeat` runs; the
runs of both tools alternate, so both see the same load. Next to the CPU each tool's result: the
period of its repetend and the makespan of N = 8 micro-batches.

The reference runs in its own environment (z3-solver, numpy, more-itertools), from a checkout at
`--ref` (default /tmp/tessel-ref) with `--ref-python` (default /tmp/venv-ref/bin/python):

    git -C <mirror of zhiqi-0/Tessel> archive HEAD | tar -x -C /tmp/tessel-ref
    python3 -m venv /tmp/venv-ref && /tmp/venv-ref/bin/pip install z3-solver numpy more-itertools

Its two modes, as in its evaluation/*.sh: lazy (`compose_n` with the micro-batch count of
evaluation/search_tessel.sh) and fast (`--fast-search`); both get the memory M of our spec (the
placements, costs and memory are the same: forward 1, backward 3, +1 / -1 memory). The best of
the two (least CPU) is the reference's time for a placement. Its period and makespan are read
from what it prints: the width of its schedule for n micro-batches and of the one it unrolls to
n + 2 (the period is half the difference; N = 8 extends by that period). Without the checkout or
the interpreter the reference columns are left out with a message.

    python bench/search_cpu.py                    # both tools, median of 3
    python bench/search_cpu.py --repeat 1 --no-ref
"""
from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
N = 8
TARGET_SUM = 2.6  # issue 14, item 6: CPU seconds summed over the five placements
# placement: (memory M of specs/<name>.tsl, micro-batches of the reference's lazy mode)
PLACEMENTS = {"vshape": (4, 4), "xshape": (4, 3), "mshape": (6, 6), "nnshape": (6, 6), "kshape": (6, 3)}


def _cpu_of(cmd: list[str], cwd: Path, env: dict[str, str] | None = None,
            timeout: float = 900) -> tuple[float, subprocess.CompletedProcess]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, proc


def byte_compile(python: str, *dirs: Path) -> None:
    """Compile the Python files of `dirs` to bytecode with `python` before timing, as `pip install`
    does for an installed package. From an editable install or a checkout, with
    PYTHONDONTWRITEBYTECODE set (as on the machine of bench/results/search.md), every command would otherwise
    compile every module it imports again: for Tessel DSL's 50 modules about 0.28 s of CPU a
    command. The reference's checkout gets the same."""
    for d in dirs:
        subprocess.run([python, "-m", "compileall", "-q", str(d)], capture_output=True, check=False)


def tessel_command() -> list[str]:
    script = Path(sys.executable).with_name("tessel")
    return [str(script)] if script.exists() else [sys.executable, "-m", "tessel_dsl.cli"]


def run_tessel(name: str, out: Path) -> tuple[float, dict]:
    plan = out / f"{name}.plan.json"
    cmd = tessel_command() + ["search", str(ROOT / "specs" / f"{name}.tsl"), "-n", str(N), "--json",
                              "-o", str(plan)]
    cpu, proc = _cpu_of(cmd, out)
    if proc.returncode != 0:
        raise SystemExit(f"tessel search {name} failed ({proc.returncode}):\n{proc.stderr}")
    s = json.loads(proc.stdout)
    return cpu, {"period": s["period"], "makespan": s["makespan"], "bound": s["makespan_bound"],
                 "proven": s["proven"]}


def _width(line: str) -> int:
    """Time steps of one device row of the reference's schedule printout (`--` is an idle step,
    a block spanning k steps prints as k copies joined by '-', '|' marks the repetend)."""
    return sum(1 if tok == "--" else len(tok.split("-")) for tok in line.split() if tok != "|")


def _rows(lines: list[str], title: str) -> list[str]:
    i = lines.index(title) + 1
    rows = []
    while i < len(lines) and lines[i].strip():
        rows.append(lines[i])
        i += 1
    return rows


def parse_reference(stdout: str) -> dict | None:
    """Period and N=8 makespan from the reference's printout; None when it found no schedule."""
    lines = stdout.splitlines()
    if "best schedule:" not in lines or "Unrolled schedule:" not in lines:
        return None
    best, unrolled = _rows(lines, "best schedule:"), _rows(lines, "Unrolled schedule:")
    width, width2 = max(map(_width, best)), max(map(_width, unrolled))
    mids = [int(t[1:]) for row in best for t in re.split(r"[\s-]+", row) if re.fullmatch(r"[fb]\d+", t)]
    n = max(mids) + 1
    period = (width2 - width) // 2
    return {"period": period, "makespan": width + (N - n) * period if n <= N else None, "n": n}


def run_reference(name: str, mode: str, ref: Path, python: str, limit: float) -> tuple[float, dict | None]:
    memory, lazy_n = PLACEMENTS[name]
    cmd = [python, "examples/simulator/cases_tessel.py", "--placement", name, "--ndevs", "4",
           "--memory", str(memory)]
    cmd += ["--nmicros", str(lazy_n)] if mode == "lazy" else ["--fast-search"]
    env = dict(os.environ, PYTHONPATH=".")
    try:
        cpu, proc = _cpu_of(cmd, ref, env, timeout=limit)
    except subprocess.TimeoutExpired:
        return limit, {"error": f"over {limit:g} s"}
    if proc.returncode != 0:
        # e.g. the fast mode's compaction needs more than M on V-shape; that mode doesn't count
        last = (proc.stderr.strip().splitlines() or ["?"])[-1]
        return cpu, {"error": last}
    return cpu, parse_reference(proc.stdout)


def reference_missing(ref: Path, python: str) -> str | None:
    if not (ref / "examples" / "simulator" / "cases_tessel.py").exists():
        return f"no reference checkout at {ref}: reference columns skipped"
    if shutil.which(python) is None and not Path(python).exists():
        return f"no reference interpreter {python}: reference columns skipped"
    probe = subprocess.run([python, "-c", "import z3, numpy, more_itertools"], capture_output=True)
    if probe.returncode != 0:
        return f"{python} lacks z3-solver, numpy or more-itertools: reference columns skipped"
    return None


def _result(r: dict | None) -> str:
    if r is None:
        return "no schedule"
    if "error" in r:
        return r["error"] if r["error"].startswith("over") else "fails: " + r["error"].split(":")[0]
    span = "-" if r["makespan"] is None else str(r["makespan"])
    return f"{r['period']}, {span}"


def _ok(r: dict | None) -> bool:
    return r is not None and "error" not in r


def _best(med: dict, res: dict, name: str, modes: list[str]) -> float:
    """The reference's CPU for a placement: its cheaper mode among those that gave a schedule."""
    return min((med[(name, m)] for m in modes if _ok(res[(name, m)])), default=float("inf"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--ref", type=Path, default=Path("/tmp/tessel-ref"))
    ap.add_argument("--ref-python", default="/tmp/venv-ref/bin/python")
    ap.add_argument("--no-ref", action="store_true", help="measure Tessel DSL only")
    ap.add_argument("--ref-limit", type=float, default=300,
                    help="wall seconds per reference run; a mode over it is not repeated and doesn't count")
    ap.add_argument("--placements", nargs="+", default=list(PLACEMENTS), choices=list(PLACEMENTS))
    args = ap.parse_args()

    missing = "reference columns skipped (--no-ref)" if args.no_ref else reference_missing(args.ref, args.ref_python)
    if missing:
        print(missing, file=sys.stderr)
    modes = [] if missing else ["lazy", "fast"]
    import tessel_dsl

    byte_compile(sys.executable, Path(tessel_dsl.__file__).parent)
    if modes:
        byte_compile(args.ref_python, args.ref)
    cpu: dict[tuple[str, str], list[float]] = {}
    res: dict[tuple[str, str], dict | None] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.repeat):
            for name in args.placements:
                c, r = run_tessel(name, Path(tmp))
                cpu.setdefault((name, "tessel"), []).append(c)
                res[(name, "tessel")] = r
                for mode in modes:
                    if (name, mode) in res and not _ok(res[(name, mode)]):
                        continue  # failed or ran over the limit once: not repeated
                    c, r = run_reference(name, mode, args.ref, args.ref_python, args.ref_limit)
                    cpu.setdefault((name, mode), []).append(c)
                    res[(name, mode)] = r
    med = {k: statistics.median(v) for k, v in cpu.items()}

    head = "| placement | M | Tessel DSL CPU s | period, makespan N=8 (bound) |"
    rule = "|---|---:|---:|---|"
    if modes:
        head += (" reference lazy CPU s | period, makespan | reference fast CPU s | period, makespan |"
                 " reference best CPU s | reference / Tessel DSL |")
        rule += "---:|---|---:|---|---:|---:|"
    print(head)
    print(rule)
    tot_t = tot_r = 0.0
    for name in args.placements:
        t = res[(name, "tessel")]
        row = (f"| {name} | {PLACEMENTS[name][0]} | {med[(name, 'tessel')]:.2f} | "
               f"{t['period']}, {t['makespan']} ({t['bound']}{', proven' if t['proven'] else ''}) |")
        tot_t += med[(name, "tessel")]
        if modes:
            best = _best(med, res, name, modes)
            tot_r += best
            for m in modes:
                cell = f"{med[(name, m)]:.2f}" if _ok(res[(name, m)]) else "-"
                row += f" {cell} | {_result(res[(name, m)])} |"
            row += f" {best:.2f} | {best / med[(name, 'tessel')]:.1f}x |"
        print(row)
    total = f"| sum | | {tot_t:.2f} | |"
    if modes:
        total += f" | | | | {tot_r:.2f} | {tot_r / tot_t:.1f}x |"
    print(total)
    print()
    print(f"median of {args.repeat}", end="")
    if set(args.placements) == set(PLACEMENTS):  # the target is for the five together
        print(f"; Tessel DSL target: at most {TARGET_SUM} s summed ({'met' if tot_t <= TARGET_SUM else 'not met'})",
              end="")
    if modes:
        slower = [n for n in args.placements if med[(n, "tessel")] >= _best(med, res, n, modes)]
        print(f"; below the reference's best mode on {len(args.placements) - len(slower)} of "
              f"{len(args.placements)} placements" + (f" (not on {', '.join(slower)})" if slower else ""))
    else:
        print()


if __name__ == "__main__":
    main()
