"""Mutation testing of the core modules with mutmut: how many small deliberate bugs the tests catch.

For each target it copies the project's tracked files into a scratch folder (the working tree is
never touched), configures mutmut to mutate only that module (or some of its functions) and to
run only the tests that exercise it, runs it, and prints killed / survived / other counts, the
score, and every survivor as a one-line diff. Run one target at a time on a small machine.

    pip install mutmut                                  # 3.x; runs offline once installed
    python bench/mutation.py --list
    python bench/mutation.py validate metrics           # targets in the order given
    python bench/mutation.py serialize --jobs 2 --show-survivors
    python bench/mutation.py --all                      # every target, smallest first

The score counts killed (a test failed) and timeouts as caught; "no tests" (no selected test ran
the mutated function), "suspicious" and "not checked" (a run stopped before reaching it) count as
not caught; `--report` reads an interrupted run's state without running anything.
"""
from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Target:
    name: str
    module: str                      # file to mutate, relative to the repository root
    tests: tuple[str, ...]           # pytest arguments selecting the tests that exercise it
    functions: tuple[str, ...] = ()  # only these functions (mutmut name globs); empty: the whole file
    what: str = ""


# Smallest first. Memory handling in the search lives in a few functions of larger modules, so
# those targets name them; the executor's gradient seeding likewise. Their tests are the fast
# ones written for them (a solve of a few blocks; one rank run in-process, no process group).
TARGETS = (
    Target("metrics", "tessel_dsl/simulator/metrics.py", ("tests/unit/test_simulator.py", "tests/unit/test_simulator_links.py"),
           what="bubble, steady period, comm split, drift"),
    Target("validate", "tessel_dsl/validate.py", ("tests/unit/test_validate.py", "tests/unit/test_validate_capacity.py"),
           what="the independent schedule validator"),
    Target("serialize", "tessel_dsl/serialize.py", ("tests/unit/test_ir_json.py", "tests/unit/test_plan_capacities.py"),
           what="IR <-> JSON codec behind plan loading"),
    Target("plan", "tessel_dsl/plan.py", ("tests/unit/test_ir_json.py", "tests/unit/test_plan_check.py"),
           what="plan files: schema, version, load/save"),
    Target("lower", "tessel_dsl/lower.py", ("tests/unit/test_lower.py", "tests/unit/test_lower_recv_posting.py"),
           what="send/recv pairing, non-blocking waits"),
    Target("repetend-memory", "tessel_dsl/search/repetend.py",
           ("tests/unit/test_repetend.py", "tests/unit/test_search_memory.py"),
           functions=("x_nr_limit*", "x_entry_memory*", "x_memory_ok*", "x_repetend_problem*"),
           what="entry memory, memory bound, the candidate's capacity"),
    Target("modulo-memory", "tessel_dsl/search/modulo.py",
           ("tests/unit/test_modulo_memory.py", "tests/unit/test_modulo_capacity.py"),
           functions=("x__cpsat_memory_rows*", "x__z3_memory_rows*"),
           what="the cyclic model's memory rows, both backends (small specs solved in a moment)"),
    Target("runtime-grad", "tessel_dsl/executor/runtime.py", ("tests/unit/test_runtime_grads.py",),
           functions=("xǁRankRunnerǁ_output_grads*", "xǁRankRunnerǁ_backward*"),
           what="gradient seeding of backward blocks"),
)
BY_NAME = {t.name: t for t in TARGETS}
CAUGHT = {"killed", "timeout"}


def scratch_copy(dest: Path) -> None:
    """The tracked and untracked-but-not-ignored files of the repository, copied to `dest`."""
    if dest.exists():
        shutil.rmtree(dest)
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, check=True,
                           capture_output=True).stdout.split(b"\0")
    for raw in filter(None, files):
        rel = Path(raw.decode())
        src = ROOT / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)


def configure(dest: Path, target: Target) -> None:
    toml_list = lambda xs: "[" + ", ".join(f'"{x}"' for x in xs) + "]"  # noqa: E731
    config = f"""
[tool.mutmut]
source_paths = ["tessel_dsl"]
only_mutate = {toml_list([target.module])}
also_copy = ["specs/", "bench/"]
pytest_add_cli_args_test_selection = {toml_list(target.tests)}
pytest_add_cli_args = ["-p", "no:cacheprovider", "-q", "-x"]
"""
    with open(dest / "pyproject.toml", "a") as f:
        f.write(config)


def results(dest: Path) -> dict[str, str]:
    out = subprocess.run(["mutmut", "results", "--all", "true"], cwd=dest, capture_output=True, text=True).stdout
    return {m.group(1): m.group(2) for m in re.finditer(r"^\s*(\S+): (.+)$", out, re.M)}


def diff_line(dest: Path, mutant: str) -> str:
    """The mutated line, before -> after, from `mutmut show`."""
    shown = subprocess.run(["mutmut", "show", mutant], cwd=dest, capture_output=True, text=True).stdout
    minus = [l[1:].strip() for l in shown.splitlines() if l.startswith("-") and not l.startswith("---")]
    plus = [l[1:].strip() for l in shown.splitlines() if l.startswith("+") and not l.startswith("+++")]
    return f"`{' / '.join(minus)}` -> `{' / '.join(plus)}`"


def run_target(target: Target, args) -> dict:
    dest = Path(args.workdir) / target.name
    wall = time.perf_counter()
    log = dest / "mutmut-run.log"
    rc = 0
    if not args.report:
        scratch_copy(dest)
        configure(dest, target)
        cmd = ["mutmut", "run", "--max-children", str(args.jobs)]
        if target.functions:
            prefix = target.module[:-3].replace("/", ".")
            cmd += [f"{prefix}.{f}" for f in target.functions]
        proc = subprocess.run(cmd, cwd=dest, capture_output=True, text=True)
        log.write_text(proc.stdout + proc.stderr)
        rc = proc.returncode
    found = results(dest)
    if target.functions:
        pats = [re.compile(re.escape(target.module[:-3].replace("/", ".")) + r"\." + re.escape(f).replace(r"\*", ".*"))
                for f in target.functions]
        found = {k: v for k, v in found.items() if any(p.fullmatch(k) for p in pats)}
    counts: dict[str, int] = {}
    for status in found.values():
        counts[status] = counts.get(status, 0) + 1
    total = sum(counts.values())
    caught = sum(n for s, n in counts.items() if s in CAUGHT)
    survivors = sorted(k for k, v in found.items() if v not in CAUGHT)
    return {"target": target, "counts": counts, "total": total, "caught": caught,
            "score": caught / total if total else None, "survivors": survivors, "dest": dest,
            "wall": time.perf_counter() - wall, "rc": rc, "log": log}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("targets", nargs="*", help="target names (see --list)")
    ap.add_argument("--all", action="store_true", help="every target, smallest first")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--jobs", type=int, default=2, help="mutants tested at once (mutmut --max-children)")
    ap.add_argument("--workdir", default="/tmp/tessel-mutation", help="scratch folder (one copy per target)")
    ap.add_argument("--show-survivors", action="store_true", help="print each survivor's diff")
    ap.add_argument("--report", action="store_true",
                    help="no new run: report what the last (possibly interrupted) run left in --workdir")
    args = ap.parse_args(argv)
    if args.list:
        for t in TARGETS:
            scope = ", ".join(t.functions) if t.functions else "whole file"
            print(f"{t.name:16} {t.module} ({scope}) -- {t.what}; tests: {' '.join(t.tests)}")
        return 0
    if shutil.which("mutmut") is None:
        print("mutmut is not installed: pip install mutmut", file=sys.stderr)
        return 2
    names = [t.name for t in TARGETS] if args.all else args.targets
    unknown = [n for n in names if n not in BY_NAME]
    if unknown or not names:
        ap.error(f"unknown target(s) {unknown}; see --list" if unknown else "name a target or use --all")
    print("| target | module | mutants | killed | timeout | survived | no tests | other | score | wall s |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    rows = []
    for name in names:
        r = run_target(BY_NAME[name], args)
        rows.append(r)
        c = r["counts"]
        known = {"killed", "timeout", "survived", "no tests"}
        other = sum(n for s, n in c.items() if s not in known)
        score = "-" if r["score"] is None else f"{r['score']:.1%}"
        print(f"| {name} | `{r['target'].module}` | {r['total']} | {c.get('killed', 0)} | {c.get('timeout', 0)} | "
              f"{c.get('survived', 0)} | {c.get('no tests', 0)} | {other} | {score} | {r['wall']:.0f} |", flush=True)
        if r["total"] == 0:
            print(f"  no mutants ran (mutmut exit {r['rc']}); see {r['log']}", file=sys.stderr)
    if args.show_survivors:
        for r in rows:
            for m in r["survivors"]:
                print(f"- {r['target'].name}: {m.rsplit('.', 1)[-1]} {diff_line(r['dest'], m)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
