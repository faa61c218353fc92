"""The numbers README.md, docs/ and bench/results/ quote, regenerated, and the docs checked against them.

Two kinds of quoted numbers are covered:

- **generated blocks**: Markdown between ``<!-- numbers:NAME -->`` and ``<!-- /numbers:NAME -->``
  belongs to this script; ``--write`` replaces it with fresh output;
- **claims**: a number inside a sentence (``88 -> 78``), found by a pattern and compared with what
  the tool gives now.

TO is solved on a deterministic budget (`--to-effort`, CP-SAT's deterministic time, as
`optimal(effort=...)`), so its cells are the same on every machine and under any load; a
wall-clock `--to-limit` is applied only when given, and then those cells depend on the machine.

Whoever changes what the search returns reruns this script: the check says what moved, ``--write``
updates the blocks, and a drifted claim is fixed by hand. ``tests/integration/test_doc_numbers.py`` runs a
small sample of the same checks.

    python bench/doc_numbers.py                       # check everything (no TO): exit 1 on drift
    python bench/doc_numbers.py --write               # rewrite the blocks (TO solved, effort 60 each)
    python bench/doc_numbers.py --to-effort 60        # check the TO cells too (minutes)
    python bench/doc_numbers.py --only search-d4 --rows vshape/train kshape/infer
    python bench/doc_numbers.py --list                # what is checked, and where
"""
from __future__ import annotations

import argparse
import contextlib
import io
import os
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, NamedTuple

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SIZES = (8, 16, 32, 128)
TO_SIZES = (8, 16)
SPEC_NAMES = ("interleaved", "kshape", "mshape", "nnshape", "vshape", "xshape", "zerobubble")


# ---- the D=4 search table -------------------------------------------------------------------

SEARCH_HEAD = (["spec", "mode", "D", "N_R", "period / LB"] + [f"N={n} makespan (bubble)" for n in SIZES]
               + [f"TO, N={n} (gap)" for n in TO_SIZES])


class ToBudget(NamedTuple):
    """How TO is solved: `effort` is CP-SAT's deterministic time per solve (the answer depends on
    the model alone); `limit`, seconds of wall clock, only if the user gave one."""

    effort: float
    limit: float | None = None


def to_budget(args: argparse.Namespace) -> ToBudget | None:
    """The TO budget the options ask for, or None where TO is not solved (a check with neither
    --to-effort nor --to-limit). Writing always solves TO, on `TO_EFFORT` unless told otherwise."""
    if not (args.write or args.to_effort is not None or args.to_limit is not None):
        return None
    from tessel_dsl.search.optimal import TO_EFFORT

    return ToBudget(TO_EFFORT if args.to_effort is None else args.to_effort, args.to_limit)


def search_row(spec_name: str, mode: str, devices: int, to: ToBudget | None) -> list[str]:
    """One row: the search for N=8 (no time limit, so the search is deterministic), re-extended to
    the larger N as `tessel simulate -n` does, and TO at N=8 and 16 when a budget `to` is given
    (cells left empty otherwise; `?` marks a TO not proven optimal within the budget)."""
    from tessel_dsl.lang.parser import parse_file
    from tessel_dsl.search.driver import search
    from tessel_dsl.search.finish import reextend
    from tessel_dsl.search.optimal import OptimalTimeout, optimal

    spec = parse_file(ROOT / "specs" / f"{spec_name}.tsl", sets={"D": str(devices)}, mode=mode)
    result = search(spec, microbatches=SIZES[0])
    schedules = {n: result.schedule if n == SIZES[0] else reextend(spec, result.schedule, n, info=result.info) for n in SIZES}
    info = result.info
    rel = "=" if info.period == info.lower_bound else ">"
    # A plan that runs a baseline's order with no repetend has no period of its own ("-").
    period = f"{info.period} {rel} {info.lower_bound}" if info.period else f"- / {info.lower_bound}"
    cells = [spec_name, mode, str(devices), str(info.nr or "-"), period]
    cells += [f"{s.makespan(spec)} ({s.bubble_rate(spec):.1%})" for s in schedules.values()]
    for n in TO_SIZES:
        if to is None:
            cells.append("")
            continue
        cpu = time.process_time()
        try:
            result = optimal(spec, n, time_limit=to.limit, effort=to.effort, hint=schedules[n])
        except OptimalTimeout:
            cells.append("none in budget")
            continue
        best = result.schedule.makespan(spec)
        gap = schedules[n].makespan(spec) / best - 1.0
        cells.append(f"{best}{'' if result.info.proven else '?'} ({gap:+.1%})")
        # CPU, not wall, seconds: the solve is single-threaded and the machine may be shared.
        print(f"    TO N={n}: {cells[-1]}, {time.process_time() - cpu:.1f} s CPU", file=sys.stderr, flush=True)
    return cells


def markdown_table(head: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def parse_table(text: str) -> list[list[str]]:
    """Rows (cells stripped) of the Markdown table in `text`, header and rule left out."""
    rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in text.splitlines()
            if line.strip().startswith("|")]
    return rows[2:]


# ---- `tessel check` output --------------------------------------------------------------------

def cli_output(*argv: str) -> str:
    """What `tessel ARGV` prints, run in this process at a fixed width without colour."""
    from tessel_dsl.cli import main
    from tessel_dsl.cli.app import console, err_console

    out = io.StringIO()
    env = {"COLUMNS": "100", "NO_COLOR": "1", "TERM": "dumb"}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    # A console made earlier in this process keeps the width and colours it read then (a test run
    # before this one in the same worker): make fresh ones, here and for whoever prints next.
    console._console = err_console._console = None
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            try:
                main(list(argv))
            except SystemExit:
                pass
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        console._console = err_console._console = None
    return "\n".join(line.rstrip() for line in out.getvalue().splitlines())


def check_block(spec_path: str) -> str:
    return "```\n$ tessel check " + spec_path + "\n" + cli_output("check", spec_path) + "\n```"


# ---- blocks and claims ------------------------------------------------------------------------

@dataclass
class Block:
    """A generated region of a Markdown file."""

    name: str
    file: str
    make: Callable[[argparse.Namespace], str]
    # Compare only part of the block (e.g. some rows); None compares the whole text.
    sample: Callable[[str, argparse.Namespace], list[str]] | None = None


@dataclass
class Claim:
    """A number in prose: `pattern`'s groups must equal what `actual` returns."""

    name: str
    file: str
    pattern: str
    actual: Callable[[], tuple[str, ...]]


def _search_rows(args) -> list[tuple[str, str]]:
    if args.rows:
        return [tuple(r.split("/")) for r in args.rows]
    return [(s, m) for s in SPEC_NAMES for m in ("train", "infer")]


def make_search(devices: int, with_to: bool) -> Callable[[argparse.Namespace], str]:
    """The table at `devices`; TO columns only where `with_to` (TO at D=8 takes minutes a row)."""
    head = SEARCH_HEAD if with_to else SEARCH_HEAD[:-len(TO_SIZES)]

    def make(args) -> str:
        rows = []
        for spec_name, mode in _search_rows(args):
            print(f"  search {spec_name} {mode} D={devices}", file=sys.stderr, flush=True)
            row = search_row(spec_name, mode, devices, to_budget(args) if with_to else None)
            rows.append(row if with_to else row[:len(head)])
        return markdown_table(head, rows)

    return make


def sample_search(devices: int) -> Callable[[str, argparse.Namespace], list[str]]:
    def sample(current: str, args) -> list[str]:
        """Problems in the documented rows for the rows asked for (TO cells only when solved)."""
        documented = {(r[0], r[1]): r for r in parse_table(current)}
        problems = []
        budget = to_budget(args)
        for spec_name, mode in _search_rows(args):
            fresh = search_row(spec_name, mode, devices, budget)
            doc = documented.get((spec_name, mode))
            if doc is None:
                problems.append(f"no row for {spec_name} {mode}")
                continue
            width = min(len(doc), len(fresh) if budget is not None else len(fresh) - len(TO_SIZES))
            for col, (want, have) in enumerate(zip(fresh[:width], doc[:width])):
                if want != have:
                    problems.append(f"{spec_name} {mode}, {SEARCH_HEAD[col]}: docs say {have!r}, "
                                    f"the tool gives {want!r}")
        return problems

    return sample


def interleaved_note() -> tuple[str, ...]:
    from tessel_dsl.lang.parser import parse_file
    from tessel_dsl.search.driver import search

    spec = parse_file(ROOT / "specs" / "interleaved.tsl", sets={"D": "4"})
    info = search(spec, microbatches=8).info
    ends = [x.values for x in info.notes if x.kind == "ends-resolved"]
    return (str(ends[0]["before"]), str(ends[0]["after"])) if ends else ("(no end re-solve)", "")


def mshape_period() -> tuple[str, ...]:
    from tessel_dsl.lang.parser import parse_file
    from tessel_dsl.search.driver import search

    info = search(parse_file(ROOT / "specs" / "mshape.tsl")).info
    return str(info.period), str(info.lower_bound)


BLOCKS = [
    Block("search-d4", "bench/results/search.md", make_search(4, with_to=True), sample_search(4)),
    Block("search-d8", "bench/results/search.md", make_search(8, with_to=False), sample_search(8)),
    Block("check-mshape", "README.md", lambda args: check_block("specs/mshape.tsl")),
]

CLAIMS = [
    Claim("readme-search-mshape", "README.md",
          r"tessel search specs/mshape\.tsl -o m\.json +# period (\d+) = lower bound (\d+)", mshape_period),
    Claim("search-end-resolve", "docs/search.md", r"interleaved D=4, N=8: (\d+) -> (\d+)", interleaved_note),
]


def block_text(path: Path, name: str) -> str:
    text = path.read_text()
    m = re.search(rf"<!-- numbers:{re.escape(name)} -->\n(.*?)\n<!-- /numbers:{re.escape(name)} -->", text, re.S)
    if m is None:
        raise SystemExit(f"{path}: no block '{name}' (<!-- numbers:{name} --> ... <!-- /numbers:{name} -->)")
    return m.group(1)


def replace_block(path: Path, name: str, body: str) -> None:
    text = path.read_text()
    old = block_text(path, name)
    start = f"<!-- numbers:{name} -->\n"
    new = text.replace(start + old + "\n", start + body + "\n", 1)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(new)
    tmp.replace(path)


def check_claim(claim: Claim) -> list[str]:
    text = (ROOT / claim.file).read_text()
    found = re.findall(claim.pattern, text)
    if not found:
        return [f"{claim.file}: the sentence for '{claim.name}' is gone (pattern {claim.pattern!r})"]
    actual = claim.actual()
    return [f"{claim.file}: {claim.name}: docs say {' / '.join(f)}, the tool gives {' / '.join(actual)}"
            for f in found if tuple(f) != tuple(actual)]


def run(args) -> list[str]:
    """Problems found (empty: the docs match); with `args.write`, blocks are rewritten instead."""
    problems = []
    for block in BLOCKS:
        if args.only and block.name not in args.only:
            continue
        path = ROOT / block.file
        current = block_text(path, block.name)
        if args.write:
            fresh = block.make(args)
            if fresh != current:
                replace_block(path, block.name, fresh)
                print(f"rewrote {block.file} [{block.name}]", file=sys.stderr)
            continue
        if block.sample is not None and (args.rows or to_budget(args) is None):
            problems += [f"{block.file} [{block.name}]: {p}" for p in block.sample(current, args)]
            continue
        fresh = block.make(args)
        if fresh != current:
            problems.append(f"{block.file} [{block.name}] differs from the tool's output:\n--- docs\n{current}\n"
                            f"--- tool\n{fresh}")
    for claim in CLAIMS:
        if args.only and claim.name not in args.only:
            continue
        problems += check_claim(claim)
    return problems


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--write", action="store_true", help="rewrite the generated blocks")
    ap.add_argument("--only", nargs="*", help="block or claim names")
    ap.add_argument("--rows", nargs="*", help="search table rows as spec/mode (default: all)")
    ap.add_argument("--to-effort", type=float, default=None, metavar="E",
                    help="solve TO with this deterministic budget per solve (CP-SAT's deterministic time; "
                         "default with --write or --to-limit: TO_EFFORT, 60) and check/write those cells too")
    ap.add_argument("--to-limit", type=float, default=None, metavar="SECONDS",
                    help="also stop each TO solve after this much wall clock: the TO cells then depend on "
                         "the machine's speed and load")
    ap.add_argument("--list", action="store_true", help="list blocks and claims")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.list:
        for b in BLOCKS:
            print(f"block  {b.name:24} {b.file}")
        for c in CLAIMS:
            print(f"claim  {c.name:24} {c.file}")
        return 0
    if args.write and args.rows:
        parser().error("--write rewrites whole blocks: leave out --rows")
    if args.to_effort is not None and args.to_effort <= 0:
        parser().error("--to-effort must be positive")
    if args.to_limit is not None and args.to_limit <= 0:
        parser().error("--to-limit must be positive")
    budget = to_budget(args)
    if budget is not None:
        print(f"TO: effort {budget.effort:g} per solve"
              + (f", wall-clock limit {budget.limit:g} s: the TO cells depend on this machine's speed and load"
                 if budget.limit is not None else " (deterministic: the same cells on any machine)"),
              file=sys.stderr, flush=True)
    problems = run(args)
    for p in problems:
        print(p)
    if not args.write:
        print("docs match the tool" if not problems else f"{len(problems)} number(s) drifted", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
