"""Two rows of one GPU run compared action by action: where one plan's device spends its extra time.

Every Tessel row of bench/gpu_zb.py keeps each measured iteration's compute actions (``actions``:
``[device, action, start us, end us]``). Given a results file and two row keys, this prints, for
one device, each block's median duration in both rows, then the actions whose median over the
iterations differs most, with the action that ran just before each on that device (an order
effect, such as a weight gradient run right after its own input gradient, shows up there):

    python bench/gpu_actions.py bench/results/gpu_zb_h200x4_DATE.json --tag gpu_zb_z_32 \\
        --rows gpt32k_choice gpt32k_zbv_pipeline --device 0
"""
from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict


def per_action(row: dict, device: int, skip: int = 0) -> tuple[dict[str, float], dict[str, str]]:
    """Median duration (ms) of each action of `device` over the row's iterations (the first `skip`
    dropped), and the action that ran before it (in the first kept iteration)."""
    runs: dict[str, list[float]] = defaultdict(list)
    before: dict[str, str] = {}
    for i, acts in enumerate(row["actions"][skip:]):
        mine = sorted((s, e, a) for d, a, s, e in acts if d == device)
        for j, (s, e, a) in enumerate(mine):
            runs[a].append((e - s) / 1e3)
            if i == 0:
                before[a] = mine[j - 1][2] if j else "-"
    return {a: statistics.median(v) for a, v in runs.items()}, before


def block_of(action: str) -> str:
    return action.split(":")[0]


def compare(a: dict, b: dict, device: int, skip: int, top: int) -> list[str]:
    (da, pa), (db, pb) = per_action(a, device, skip), per_action(b, device, skip)
    common = sorted(set(da) & set(db))
    lines = [f"device {device}: busy (sum of action medians) {sum(da[x] for x in common):.2f} / "
             f"{sum(db[x] for x in common):.2f} ms over {len(common)} actions", "",
             "| block | median ms, first | median ms, second | sum over micro-batches, first - second |",
             "|---|---|---|---|"]
    blocks: dict[str, list[str]] = defaultdict(list)
    for x in common:
        blocks[block_of(x)].append(x)
    for blk, xs in sorted(blocks.items()):
        lines.append(f"| {blk} | {statistics.median(da[x] for x in xs):.3f} | {statistics.median(db[x] for x in xs):.3f} "
                     f"| {sum(da[x] - db[x] for x in xs):+.2f} |")
    lines += ["", "| action | first ms | after (first) | second ms | after (second) |", "|---|---|---|---|---|"]
    for x in sorted(common, key=lambda x: -abs(da[x] - db[x]))[:top]:
        lines.append(f"| {x} | {da[x]:.3f} | {pa.get(x, '-')} | {db[x]:.3f} | {pb.get(x, '-')} |")
    return lines


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", help="a gpu_zb results .json (one call's tags, or one tag's rows)")
    ap.add_argument("--tag", help="the tag inside the file (default: the only one, or the file itself)")
    ap.add_argument("--rows", nargs=2, required=True, metavar=("FIRST", "SECOND"))
    ap.add_argument("--device", type=int, default=0)
    ap.add_argument("--skip", type=int, default=0, help="iterations to drop at the start")
    ap.add_argument("--top", type=int, default=15)
    args = ap.parse_args(argv)
    data = json.load(open(args.results))
    if args.tag:
        data = data[args.tag]
    elif all(isinstance(v, dict) and "gpu" in v for v in data.values()) and len(data) == 1:
        data = next(iter(data.values()))
    missing = [r for r in args.rows if "actions" not in data.get(r, {})]
    if missing:
        raise SystemExit(f"{', '.join(missing)}: no per-action times in {args.results} (rows recorded before "
                         f"bench rows kept them, or not a Tessel row)")
    print("\n".join(compare(data[args.rows[0]], data[args.rows[1]], args.device, args.skip, args.top)))


if __name__ == "__main__":
    main()
