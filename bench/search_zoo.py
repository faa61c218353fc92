"""`tessel search` with its default options on the zoo (bench/specs/zoo/), one half at a time.

The zoo's specs were written from published model configurations and frozen before the search
was changed for them; `heldout/` is never used for tuning (bench/specs/zoo/README.md). For every
spec of the chosen half, ``tessel search SPEC --json`` runs as a child process with a limit of
``--timeout`` CPU seconds (RLIMIT_CPU; five times that of wall clock as a backstop), and the
table shows:

* CPU s: the command's own user + system time (`os.wait4`), so other load on the machine does
  not count (it does slow the wall clock);
* period / bound: time per micro-batch of the repetend (its period over its copies) against the
  larger of the work bound (busiest device per micro-batch) and the memory bound the search states;
* makespan / bound: at the spec's N, against the search's makespan lower bound;
* proven: "yes" when the makespan reaches its bound (optimal for this N), "period only" when the
  search's verdict `proven` holds but the makespan is above its bound (that verdict is about the
  period: minimal among the repetends it considers, no budget cut), else "no";
* best baseline: the shortest baseline that fits the placement and memory M, built by `tessel
  compare`'s machinery (`search.baselines.compare`), and Tessel's makespan against it.

A run that hits the limit is shown as ``timeout`` with the CPU it had used; its plan is not counted.

    python bench/search_zoo.py --half tune                      # every spec of one half
    python bench/search_zoo.py --half heldout --devices 8       # only the D=8 specs
    nice python bench/search_zoo.py --half tune --write bench/results/search.md --jsonl zoo.jsonl

``--write FILE`` replaces that half's subsection of the "## Search: the zoo" section of FILE
(the other half's stays), adding the section if it is missing. ``--jobs K`` runs K specs side by
side; CPU seconds are each command's own, so they do not depend on K while K stays below the
number of cores.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# The baselines column comes from this checkout's package, as the searches do (not whichever
# tessel_dsl the interpreter would import first).
sys.path.insert(0, str(ROOT))
ZOO = ROOT / "bench" / "specs" / "zoo"
HALVES = ("tune", "heldout")
WALL_FACTOR = 5  # the wall-clock backstop, in CPU limits (--wall-factor): a shared machine slows the wall clock
SECTION = "## Search: the zoo of specs nobody tuned on (`bench/search_zoo.py`)"


def specs(half: str, devices: list[int] | None) -> list[Path]:
    out = []
    for path in sorted((ZOO / half).glob("*.tsl")):
        d = int(re.search(r"^devices\s+(\d+)", path.read_text(), re.MULTILINE).group(1))
        if devices is None or d in devices:
            out.append(path)
    return out


def run_search(path: Path, timeout: int, wall_factor: int = WALL_FACTOR) -> dict:
    """One default `tessel search`: CPU seconds, exit status and the JSON summary's fields."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "tessel_dsl.cli", "search", str(path), "--json", "-o", str(Path(tmp) / "plan.json")]
        out_path, err_path = Path(tmp) / "stdout", Path(tmp) / "stderr"
        with out_path.open("w") as out_f, err_path.open("w") as err_f:
            limits = ["timeout", str(wall_factor * timeout), "prlimit", f"--cpu={timeout}:{timeout + 5}"]
            proc = subprocess.Popen(limits + cmd, stdout=out_f, stderr=err_f, cwd=tmp, env=env)
            _, status, usage = os.wait4(proc.pid, 0)  # its own CPU (and its children's), not this script's
        rc = os.waitstatus_to_exitcode(status)
        stdout, stderr = out_path.read_text(), err_path.read_text()
    row = {"spec": path.stem, "cpu": round(usage.ru_utime + usage.ru_stime, 1), "rc": rc,
           "command": f"tessel search {path.relative_to(ROOT)} --json"}
    if rc == 0:
        out = json.loads(stdout)
        row.update({k: out.get(k) for k in ("microbatches", "period", "copies", "period_per_microbatch",
                                             "lower_bound", "memory_bound", "makespan", "makespan_bound",
                                             "proven", "time_unit", "note")})
    elif rc == 124:
        row["error"] = f"wall-clock backstop ({wall_factor * timeout} s)"
    elif rc in (-9, 137, -24, 152) or row["cpu"] >= timeout:
        row["error"] = "timeout"
    else:
        row["error"] = (stderr.strip().splitlines() or ["?"])[-1][:120]
    return row


def best_baseline(path: Path) -> dict:
    """The shortest baseline within memory M at the spec's N (`tessel compare`'s rows)."""
    from tessel_dsl.lang.parser import parse_file
    from tessel_dsl.search.baselines import BASELINES
    from tessel_dsl.search.baselines.compare import baseline_row, label
    from tessel_dsl.search.baselines.compare import best_baseline as best_row

    spec = parse_file(path)
    rows = [baseline_row(spec, name, spec.microbatches)[0] for name in BASELINES]
    best = best_row(rows)
    if best is None:
        return {"devices": spec.devices, "baseline": None, "baseline_makespan": None}
    return {"devices": spec.devices, "baseline": label(best), "baseline_makespan": best.makespan}


def measure(path: Path, timeout: int, wall_factor: int = WALL_FACTOR) -> dict:
    row = run_search(path, timeout, wall_factor)
    row.update(best_baseline(path))
    return row


def _bound(row: dict) -> float:
    return max(row["lower_bound"], row.get("memory_bound") or 0)


def cells(row: dict) -> list[str]:
    unit = (row.get("time_unit") or "").lstrip("1") or ""
    base = "-" if row["baseline"] is None else f"{row['baseline']} {row['baseline_makespan']}"
    head = [row["spec"], str(row["devices"]), f"{row['cpu']:.1f}"]
    if row["rc"] != 0:
        return head + [f"**{row['error']}**", "", "", base, ""]
    ppm, bound = row["period_per_microbatch"], _bound(row)
    versus = "-" if not row["baseline_makespan"] else f"{row['makespan'] / row['baseline_makespan'] - 1:+.1%}"
    period = f"{ppm:g}" if ppm else "-"  # no repetend: a baseline's order without a fixed-period steady state
    return head + [f"{period} / {bound:.4g} {unit}", f"{row['makespan']} / {row['makespan_bound']} {unit}",
                   _proven(row), base, versus]


def _proven(row: dict) -> str:
    """The proven column (module text): the makespan's optimality first, the period's after."""
    if row["makespan"] <= row["makespan_bound"]:
        return "yes"
    return "period only" if row["proven"] else "no"


COLUMNS = ("spec", "D", "CPU s", "period / bound", "makespan / bound", "proven", "best baseline (makespan)",
           "vs baseline")


def table(half: str, rows: list[dict], timeout: int, devices: list[int] | None) -> str:
    lines = [f"### Half: {half}", ""]
    scope = "every spec" if devices is None else f"the D={'/'.join(map(str, devices))} specs"
    flags = "" if devices is None else " --devices " + " ".join(map(str, devices))
    lines += [f"`nice python bench/search_zoo.py --half {half}{flags} --timeout {timeout}` ({scope} of "
              f"bench/specs/zoo/{half}/, CPU limit {timeout} s each; {platform.machine()}, {os.cpu_count()} cores, "
              "shared):", ""]
    lines += ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(cells(r)) + " |" for r in rows]
    done = [r for r in rows if r["rc"] == 0]
    ran = [r for r in rows if r.get("error") != "not run"]
    if len(ran) < len(rows):
        lines += ["", "Not run: " + ", ".join(r["spec"] for r in rows if r not in ran) + "."]
    if done:
        ratios = [r["makespan"] / r["makespan_bound"] - 1 for r in done]
        worse = [r for r in done if r["baseline_makespan"] and r["makespan"] > r["baseline_makespan"]]
        proven = sum(bool(r["proven"]) for r in done)
        settled = sum(r["makespan"] <= r["makespan_bound"] for r in done)
        lines += ["", f"{len(done)} of {len(rows)} finished within the limit; makespan over its stated lower bound "
                  "(`bounds.makespan_bound`: the largest of the time, idle and memory bounds): median "
                  f"{statistics.median(ratios):.1%}, worst {max(ratios):.1%}, within 5 %: "
                  f"{sum(x <= 0.05 for x in ratios)}; the search's verdict `proven` {proven}, makespan proven "
                  f"optimal (at that bound) {settled} of {len(done)}; worse than the best baseline: {len(worse)}; CPU "
                  f"{sum(r['cpu'] for r in ran):.0f} s in all (median {statistics.median(r['cpu'] for r in ran):.0f} s)."]
    return "\n".join(lines) + "\n"


def write(target: Path, half: str, body: str) -> None:
    """Replace this half's subsection of the zoo section of `target`, leaving the rest alone."""
    text = target.read_text() if target.exists() else "# Benchmark results\n"
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.strip() == SECTION), None)
    if start is None:
        intro = [SECTION, "", "Default `tessel search` on bench/specs/zoo/ (README there), each half on its own.", ""]
        lines = lines + [""] + intro
        start = len(lines) - len(intro)
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    sub = next((i for i in range(start + 1, end) if lines[i].strip() == f"### Half: {half}"), None)
    new = body.rstrip("\n").splitlines() + [""]
    if sub is None:
        at = end
        while at > start + 1 and not lines[at - 1].strip():
            at -= 1
        lines = lines[:at] + [""] + new + lines[end:]
    else:
        sub_end = next((i for i in range(sub + 1, end) if lines[i].startswith("### ")), end)
        lines = lines[:sub] + new + lines[sub_end:]
    tmp = target.with_suffix(".md.tmp")
    tmp.write_text("\n".join(lines).rstrip("\n") + "\n")
    tmp.replace(target)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--half", choices=HALVES, required=True)
    ap.add_argument("--devices", nargs="*", type=int, help="only specs with these device counts")
    ap.add_argument("--only", nargs="*", help="spec names (file stems) to run")
    ap.add_argument("--timeout", type=int, default=300, help="CPU seconds per search (default 300)")
    ap.add_argument("--wall-factor", type=int, default=WALL_FACTOR,
                    help=f"wall-clock backstop in multiples of --timeout (default {WALL_FACTOR})")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--jsonl", type=Path, help="append every row to this file as it finishes")
    ap.add_argument("--write", type=Path, help="replace this half's table in the zoo section of this file")
    ap.add_argument("--from-jsonl", type=Path, help="print (and --write) the table from rows recorded by --jsonl "
                    "instead of running; a spec without a row shows as not run")
    args = ap.parse_args(argv)
    paths = [p for p in specs(args.half, args.devices) if not args.only or p.stem in args.only]
    rows: dict[str, dict] = {}
    if args.from_jsonl:
        for line in args.from_jsonl.read_text().splitlines():
            row = json.loads(line)
            if row.get("half") == args.half:
                rows[row["spec"]] = row
        for p in paths:
            rows.setdefault(p.stem, {"spec": p.stem, "cpu": 0.0, "rc": -1, "error": "not run", "devices": "?",
                                     "baseline": None, "baseline_makespan": None})
        paths = [p for p in paths if p.stem in rows]
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futures = {pool.submit(measure, p, args.timeout, args.wall_factor): p for p in paths if p.stem not in rows}
        for fut in concurrent.futures.as_completed(futures):
            row = fut.result()
            rows[row["spec"]] = row
            print("| " + " | ".join(cells(row)) + " |", file=sys.stderr, flush=True)
            if args.jsonl:
                with args.jsonl.open("a") as fh:
                    fh.write(json.dumps({"half": args.half, **row}) + "\n")
    text = table(args.half, [rows[p.stem] for p in paths], args.timeout, args.devices)
    print(text)
    if args.write:
        write(args.write, args.half, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
