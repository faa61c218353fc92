"""`tessel search` on every shipped spec, at several device counts and N: no run may hang.

For every spec under specs/ (not specs/invalid/ or specs/lib/), examples/, bench/specs/ and
bench/specs/real/, the whole command ``tessel search SPEC [--set D=d] -n N --json`` runs under
``timeout`` (default 300 s), one at a time, with D = 8 and 16 where the spec has a ``D``
parameter (zero-bubble also with C=2, ZB-V's placement) and N = 4, 8, 16 and N_R - 1 (N_R from
the first run's JSON; N_R - 1 is where a repetend does not fit and the search solves N directly
or falls back). The table shows the CPU seconds of the command (the child's user + system time),
the makespan against its lower bound, and whether the plan is proven; ``timeout`` marks a run that
did not finish.

    python bench/search_sweep.py                            # everything (about an hour on 2 cores)
    python bench/search_sweep.py --only zerobubble:D=8,C=2 real/chain8 --sizes 16
    python bench/search_sweep.py --timeout 60 --jsonl sweep.jsonl
    python bench/search_sweep.py --jobs 14                  # specs side by side on a many-core machine

With ``--jobs K`` K specs run side by side (each spec's N one after the other, since N_R - 1
comes from its first run); each command's CPU seconds are its own (`os.wait4`), so they do not
depend on K as long as K stays below the number of cores. At the end the runs are printed again
as one line per spec (N = 4, 8, 16, N_R - 1), the layout of bench/results/search.md.

Every row is appended to `--jsonl` as it finishes, so a long sweep can be followed (and a partial
one kept).
"""
from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SIZES = (4, 8, 16)


def variants() -> list[str]:
    """Row names: a spec path relative to the repository, optionally with ``:K=V,...`` overrides."""
    files = sorted(p for p in (ROOT / "specs").rglob("*.tsl") if p.parent.name not in ("invalid", "lib"))
    files += sorted((ROOT / "examples").glob("*.tsl"))
    files += sorted(p for p in (ROOT / "bench" / "specs").rglob("*.tsl") if "zoo" not in p.parts)  # search_zoo.py's
    out = []
    for path in files:
        rel = str(path.relative_to(ROOT))
        if re.search(r"^\s*param\s+D\s*=", path.read_text(), re.M):
            for d in (8, 16):
                out.append(f"{rel}:D={d}")
                if path.stem == "zerobubble":
                    out.append(f"{rel}:D={d},C=2")
        else:
            out.append(rel)
    return out


def run(name: str, n: int, timeout: float) -> dict:
    """One `tessel search` command: its CPU seconds and the JSON summary's fields that matter."""
    rel, _, sets = name.partition(":")
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "tessel_dsl.cli", "search", str(ROOT / rel), "-n", str(n), "--json",
               "-o", str(Path(tmp) / "plan.json")]
        for kv in filter(None, sets.split(",")):
            cmd += ["--set", kv]
        out_path, err_path = Path(tmp) / "stdout", Path(tmp) / "stderr"
        with out_path.open("w") as out_f, err_path.open("w") as err_f:
            proc = subprocess.Popen(["timeout", str(timeout)] + cmd, stdout=out_f, stderr=err_f, cwd=tmp,
                                    env={**os.environ, "PYTHONPATH": os.pathsep.join(
                                        filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))})
            _, status, usage = os.wait4(proc.pid, 0)  # its own CPU (and its children's), not the sweep's
        proc.returncode = os.waitstatus_to_exitcode(status)
        stdout, stderr = out_path.read_text(), err_path.read_text()
    cpu = usage.ru_utime + usage.ru_stime
    shown = " ".join(f"--set {kv}" for kv in filter(None, sets.split(",")))
    row = {"spec": name, "n": n, "cpu": round(cpu, 2), "rc": proc.returncode,
           "command": f"tessel search {rel} {shown} -n {n} --json".replace("  ", " ")}
    if proc.returncode == 0:
        out = json.loads(stdout)
        row.update({k: out.get(k) for k in ("nr", "period", "lower_bound", "makespan", "makespan_bound",
                                             "proven", "copies", "note")})
    else:
        row["error"] = "timeout" if proc.returncode == 124 else (stderr.strip().splitlines() or ["?"])[-1]
    return row


def cell(row: dict) -> list[str]:
    if row["rc"] != 0:
        return [row["spec"], str(row["n"]), f"{row['cpu']:.1f}", row["error"][:60], "", ""]
    return [row["spec"], str(row["n"]), f"{row['cpu']:.1f}", str(row["nr"]),
            f"{row['makespan']} / {row['makespan_bound']}", "yes" if row["proven"] else "no"]


def pivot(name: str, rows: list[dict], sizes: list[int]) -> str:
    """One spec's runs as one table line: CPU s, makespan/bound, proven per N (bench/results/search.md layout)."""
    def short(r: dict) -> str:
        if r["rc"] != 0:
            return f"{r['cpu']:.1f} s, **{r['error'][:40]}**"
        return f"{r['cpu']:.1f} s, {r['makespan']}/{r['makespan_bound']}, {'yes' if r['proven'] else 'no'}"
    by_n = {r["n"]: r for r in rows}
    nr = next((r["nr"] for r in rows if r.get("nr")), None)
    cells = [short(by_n[n]) if n in by_n else "-" for n in sizes]
    if nr is None or nr - 1 < 1:
        last = "-"
    else:
        last = f"(N={nr - 1})" if nr - 1 in sizes else (short(by_n[nr - 1]) if nr - 1 in by_n else "-")
    return f"| {name.removeprefix('bench/specs/').removeprefix('specs/').replace('.tsl', '')} | {nr or '-'} | " \
           + " | ".join(cells) + f" | {last} |"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*", help="rows to run (spec path or name, optionally :K=V,...)")
    ap.add_argument("--sizes", nargs="*", type=int, default=list(SIZES), help="N besides N_R - 1")
    ap.add_argument("--no-nr", action="store_true", help="skip the N = N_R - 1 run")
    ap.add_argument("--timeout", type=float, default=300.0)
    ap.add_argument("--jsonl", type=Path, help="append every row to this file as it finishes")
    ap.add_argument("--jobs", type=int, default=1, help="specs run side by side (default 1)")
    args = ap.parse_args(argv)
    names = variants()
    if args.only:
        def pick(want: str) -> str:
            base, _, sets = want.partition(":")
            hits = [v for v in names if v.split(":")[0].endswith(base if base.endswith(".tsl") else base + ".tsl")]
            if not hits:
                sys.exit(f"no spec matches {want!r}")
            return hits[0].split(":")[0] + (f":{sets}" if sets else "")
        names = [pick(w) for w in args.only]
    head = ["spec", "N", "CPU s", "N_R", "makespan / bound", "proven"]
    print("| " + " | ".join(head) + " |\n|" + "---|" * len(head), flush=True)

    def one_spec(name: str) -> list[dict]:
        out, sizes, nr, k = [], list(args.sizes), None, 0
        while k < len(sizes):
            row = run(name, sizes[k], args.timeout)
            out.append(row)
            if args.jsonl:
                with args.jsonl.open("a") as f:
                    f.write(json.dumps(row) + "\n")
            print("| " + " | ".join(cell(row)) + " |", flush=True)
            if nr is None and row.get("nr"):
                nr = row["nr"]
                if not args.no_nr and nr - 1 >= 1 and nr - 1 not in sizes:
                    sizes.append(nr - 1)
            k += 1
        return out

    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        per_spec = list(pool.map(one_spec, names))
    rows = [r for spec_rows in per_spec for r in spec_rows]
    print("\n| spec | N_R | " + " | ".join(f"N={n}" for n in args.sizes) + " | N=N_R-1 |")
    print("|---|---|" + "---|" * (len(args.sizes) + 1))
    for name, spec_rows in zip(names, per_spec):
        print(pivot(name, spec_rows, args.sizes))
    hung = [r for r in rows if r["rc"] == 124]
    print(f"\n{len(rows)} runs, {len(hung)} timed out (> {args.timeout:g} s), "
          f"slowest {max((r['cpu'] for r in rows), default=0):.1f} s CPU", flush=True)
    return 1 if hung else 0


if __name__ == "__main__":
    sys.exit(main())
