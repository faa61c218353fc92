"""The Tessel paper's Table 3 (steady-state bubble rate of training schedules), measured.

    python bench/table3.py                  # prints a Markdown table: measured / paper per cell
    python bench/table3.py --time-limit 60  # limit of each Tessel search, seconds

Same numbers as `tessel compare --table3`; see docs/compare.md for why Chimera-direct differs.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tessel_dsl.views.table3 import table3  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--time-limit", type=float, default=120.0)
    ap.add_argument("--solver", default="auto")
    ap.add_argument("--specs-dir", type=Path, default=ROOT / "specs")
    args = ap.parse_args()
    rows = table3(args.specs_dir, solver=args.solver, time_limit=args.time_limit)
    print("| model | placement | 1F1B (V) | Chimera-direct (X) | 1F1B+ | Tessel |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        cells = []
        for cell, paper in zip(r.cells, r.paper):
            got = ("x" if cell.status == "n/a" else cell.status) if cell.status != "ok" else f"{cell.steady_bubble:.1%}"
            if cell.status == "ok" and cell.proven is False:
                got += " (limit)"
            cells.append(f"{got} / {'x' if paper is None else f'{paper:g}%'}")
        print(f"| {r.model} | {r.placement} | " + " | ".join(cells) + " |")
    print("\nCells: measured / paper. Steady-state bubble = idle share of one period.")


if __name__ == "__main__":
    main()
