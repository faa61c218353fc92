"""How far the default search's makespan is from the best known on the zoo (bench/specs/zoo/).

bench/search_zoo.py measures each plan against the search's own analytic lower bound, which is
loose where memory binds, so its gaps mix what the search misses with what the bound misses.
Here every spec of the chosen halves is searched with `tessel search`'s defaults (in process, the
same plan) and then solved time-optimally for the spec's N (TO, `search.optimal.optimal`): one
CP-SAT solve of all N micro-batches, hinted with the search's schedule (so TO can only match or
beat it), under a deterministic budget (`--effort`, CP-SAT's deterministic time) with a fixed
number of workers (`--workers`, CP-SAT's interleaved deterministic mode), so the table is the same
on any machine and under any load. Per spec it records our makespan, TO's, whether TO proved it
optimal, the lower bound CP-SAT proved (its objective bound), the search's analytic makespan bound
(`bounds.makespan_bound`) and the CPU seconds of each part. "Best known" is TO's makespan: the
shortest schedule known for that N, ours included. The best lower bound is the larger of the two
bounds; our makespan at it is optimal (TO is not run where ours is already at the analytic bound).

TO's CPU grows about linearly with the effort: on the D=8 specs, about 10 s plus 1.4 to 4 s per
unit of effort (one worker, a 2-core x86_64 machine; 4 workers took 7 times the CPU of one for
the same effort on deepseek_moe8, with the same answer). `--time-limit` caps each solve by the wall
clock where a deadline matters more than determinism; the rows it cuts are marked.

Each spec runs as its own child process (`--jobs K` side by side, under a CPU limit of
`--cpu-limit` s), so a solve that runs out of memory or time costs its row's TO, not the batch.

    PYTHONPATH=. python bench/zoo_best.py --effort 80 --time-limit 420 --jobs 16 --jsonl best.jsonl  # both halves
    nice python bench/zoo_best.py --half tune --devices 8 --only unet_sdxl8 --effort 20
    python bench/zoo_best.py --half tune heldout --from-jsonl best.jsonl    # the tables again
    python bench/zoo_best.py --bounds-only --from-jsonl bench/results/zoo_best_2026-11-27.jsonl

`--bounds-only` solves nothing: it computes this checkout's makespan bound for every spec (as the
search states it: on the spec with its times divided by their common unit, multiplied back) and
sets it beside the recorded rows' plans (`ours`, TO's `to`) and the bound those rows recorded
(`analytic`), so a change to the bounds shows how many rows it proves. A bound above a recorded
plan's makespan would be unsound: such a row is marked and the command fails.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from search_zoo import HALVES, ROOT, specs  # noqa: E402  (also puts this checkout's package first)

MAX_TASKS = 20000  # block instances (blocks x N) above which TO is not tried (--max-tasks)


def search_part(spec) -> dict:
    """The default search at the spec's N: our schedule, its makespan, bound and CPU."""
    from tessel_dsl.search.driver import search

    cpu0 = time.process_time()
    result = search(spec)
    n = spec.microbatches
    return {"schedule": result.schedule, "devices": spec.devices, "microbatches": n,
            "tasks": len(spec.blocks) * n, "ours": result.schedule.makespan(spec),
            "analytic": result.info.makespan_bound, "search_proven": result.info.proven,
            "search_cpu": round(time.process_time() - cpu0, 2)}


def to_part(spec, hint, effort: float, workers: int, max_tasks: int = MAX_TASKS,
            time_limit: float | None = None) -> dict:
    """TO at the spec's N, hinted with `hint`: its makespan, proof, CP-SAT's bound and CPU;
    `to_cut` says what stopped an unproven solve ("budget", or "time limit": the wall clock)."""
    from tessel_dsl.search.optimal import optimal

    tasks = len(spec.blocks) * spec.microbatches
    if tasks > max_tasks:
        return {"error": f"not tried: {tasks} tasks > --max-tasks {max_tasks}"}
    cpu0 = time.process_time()
    r = optimal(spec, effort=effort, hint=hint, workers=workers, time_limit=time_limit)
    cut = None if r.info.proven else r.info.notes[0].values.get("cause")
    return {"to": r.schedule.makespan(spec), "to_proven": r.info.proven, "to_cut": cut,
            "cp_bound": r.info.makespan_bound, "to_cpu": round(time.process_time() - cpu0, 2)}


def one(path: Path, effort: float, workers: int, max_tasks: int = MAX_TASKS, time_limit: float | None = None,
        out=sys.stdout) -> None:
    """Measure one spec in this process: one JSON line after the search, one after TO (a TO
    killed for memory or CPU leaves the first)."""
    from tessel_dsl.lang.parser import parse_file
    from tessel_dsl.search.solvers import cpsat_module

    cpsat_module.lean = True  # as `tessel` does: CP-SAT without pandas
    spec = parse_file(path)
    row = search_part(spec)
    hint = row.pop("schedule")
    print(json.dumps(row), file=out, flush=True)
    try:
        if row["ours"] <= row["analytic"]:  # already optimal: TO could only spend CPU proving it again
            part = {"to": row["ours"], "to_proven": True, "to_skipped": True, "to_cpu": 0.0}
        else:
            part = to_part(spec, hint, effort, workers, max_tasks, time_limit)
    except (Exception, MemoryError) as e:  # noqa: BLE001 -- the row records what went wrong
        part = {"error": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:160]}
    print(json.dumps(part), file=out, flush=True)


def measure(path: Path, half: str, args) -> dict:
    """`one` in a child process under a CPU limit; its CPU from `os.wait4`."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    cmd = [sys.executable, __file__, "--one", str(path), "--effort", str(args.effort), "--workers",
           str(args.workers), "--max-tasks", str(args.max_tasks)]
    cmd += ["--time-limit", str(args.time_limit)] if args.time_limit else []
    limit = ["prlimit", f"--cpu={args.cpu_limit}:{args.cpu_limit + 5}"] if args.cpu_limit else []
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(limit + cmd, stdout=out, stderr=err, env=env)
        _, status, usage = os.wait4(proc.pid, 0)  # the child's own CPU, threads included
        out.seek(0), err.seek(0)
        stdout, stderr = out.read(), err.read()
    rc = os.waitstatus_to_exitcode(status)
    row = {"half": half, "spec": path.stem, "effort": args.effort, "workers": args.workers, "rc": rc,
           "cpu": round(usage.ru_utime + usage.ru_stime, 1)}
    for line in stdout.splitlines():
        row.update(json.loads(line))
    if rc != 0:
        why = (stderr.strip().splitlines() or [f"exit status {rc}"])[-1][:160]
        if rc < 0:
            why = f"killed by signal {-rc} (CPU limit {args.cpu_limit or 'none'} s, or out of memory)"
        row.setdefault("error", why)
    return row


def _tasks(path: Path) -> int:
    from tessel_dsl.lang.parser import parse_file

    spec = parse_file(path)
    return len(spec.blocks) * spec.microbatches


def best_bound(row: dict) -> int:
    return max(row.get("analytic") or 0, row.get("cp_bound") or 0)


def _gap(a, b) -> float | None:
    return a / b - 1 if a is not None and b else None


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:+.1%}"


COLUMNS = ("spec", "D", "N", "ours", "TO (proven?)", "best lower bound", "ours / TO", "ours / bound",
           "CPU s search + TO")


def cells(row: dict) -> list[str]:
    head = [row["spec"], str(row.get("devices", "?")), str(row.get("microbatches", "?"))]
    if "ours" not in row:
        return head + [f"**{row.get('error', '?')}**"] + [""] * (len(COLUMNS) - 4)
    if row.get("to_skipped"):
        to = "not run: ours at the bound"
    elif "to" in row:
        wall = ", wall-clock limit" if row.get("to_cut") == "time limit" else ""
        to = f"{row['to']} ({'yes' if row['to_proven'] else 'no'}{wall})"
    else:
        to = f"**{row.get('error', 'not run')}**"
    bound = best_bound(row)
    which = "CP-SAT" if (row.get("cp_bound") or 0) > (row.get("analytic") or 0) else "analytic"
    cpu = f"{row['search_cpu']:.1f} + {row['to_cpu']:.1f}" if "to_cpu" in row else f"{row['search_cpu']:.1f}"
    return head + [str(row["ours"]), to, f"{bound} ({which})", _pct(_gap(row["ours"], row.get("to"))),
                   _pct(_gap(row["ours"], bound)), cpu]


def _spread(name: str, gaps: list[float]) -> str:
    if not gaps:
        return f"{name}: no rows"
    return (f"{name}: median {statistics.median(gaps):.1%}, worst {max(gaps):.1%}, within 2 %: "
            f"{sum(g <= 0.02 + 1e-12 for g in gaps)}, within 5 %: {sum(g <= 0.05 + 1e-12 for g in gaps)} of {len(gaps)}")


def table(half: str, rows: list[dict], effort: float, workers: int) -> str:
    runs = sorted({(r["effort"], r["workers"]) for r in rows if "effort" in r}) or [(effort, workers)]
    how = ", ".join(f"effort {e:g}, {w} worker{'s' * (w != 1)}" for e, w in runs)
    lines = [f"### Half: {half} (TO {how})", "",
             "Best known = TO's makespan (CP-SAT on all N micro-batches, hinted with ours, so never longer); "
             "best lower bound = the larger of the search's analytic makespan bound and the objective bound "
             "CP-SAT proved; ours at that bound is optimal.", ""]
    lines += ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(cells(r)) + " |" for r in rows]
    done = [r for r in rows if "ours" in r]
    with_to = [r for r in done if "to" in r]
    lines += ["", "- " + _spread("ours over the best known (TO)", [_gap(r["ours"], r["to"]) for r in with_to]),
              "- " + _spread("ours over the best lower bound", [_gap(r["ours"], best_bound(r)) for r in done])]
    at = sum(r["ours"] <= best_bound(r) for r in done)
    beaten = [f"{r['spec']} (ours {_pct(_gap(r['ours'], r['to']))})" for r in with_to if r["to"] < r["ours"]]
    ran = [r for r in with_to if not r.get("to_skipped")]
    lines += [f"- ours proven optimal (at the best lower bound): {at} of {len(done)}; TO proven: "
              f"{sum(bool(r['to_proven']) for r in ran)} of the {len(ran)} it ran on; the search's own verdict "
              f"\"proven\": {sum(bool(r['search_proven']) for r in done)} of {len(done)}",
              "- TO shorter than ours: " + (", ".join(beaten) if beaten else "none") + "; no TO: "
              + (", ".join(r["spec"] for r in rows if "to" not in r) or "none") + "; TO cut by the wall clock: "
              + (", ".join(r["spec"] for r in rows if r.get("to_cut") == "time limit") or "none")]
    return "\n".join(lines) + "\n"


def stated_bound(path: Path, ours: int | None = None) -> int:
    """The makespan bound `tessel search` states for the spec at its own N; with `ours`, the one
    it states beside a plan of that makespan (the one-device bound and the whole schedule with
    memory as cuts are asked for only above the others: `bounds.makespan_bound`'s `above`,
    `heldcuts.held_cuts`)."""
    from tessel_dsl.lang.parser import parse_file
    from tessel_dsl.search.bounds import makespan_bound
    from tessel_dsl.search.heldcuts import held_cuts
    from tessel_dsl.search.timescale import divide_spec, time_unit

    spec = parse_file(path)
    unit = time_unit(spec)
    base, n = divide_spec(spec, unit), spec.microbatches
    above = None if ours is None else -(-ours // unit)
    if above is not None and above > makespan_bound(base, n, above=above):
        held_cuts(base, n, above)
    return makespan_bound(base, n, above=above) * unit


def bounds_table(half: str, rows: list[dict]) -> tuple[str, int]:
    """The recorded rows of one half against this checkout's bound; (text, rows where the bound
    is above a recorded plan)."""
    lines = [f"### Half: {half} (bounds only)", "",
             "| spec | N | ours | TO | bound recorded | bound now | ours / bound now | best known / bound now |",
             "|---|---|---|---|---|---|---|---|"]
    unsound = 0
    before = after = best_before = best_after = plain_before = plain_after = 0
    for r in rows:
        if "ours" not in r:
            lines.append(f"| {r['spec']} | - | **{r.get('error', 'not run')}** | | | {r.get('now', '-')} | | |")
            continue
        best = min(r["ours"], r.get("to") or r["ours"])
        now, was = r["now"], r.get("analytic") or 0
        bad = now > best
        unsound += bad
        before += r["ours"] <= max(was, r.get("cp_bound") or 0)
        after += r["ours"] <= max(now, r.get("cp_bound") or 0)
        best_before += best <= max(was, r.get("cp_bound") or 0)
        best_after += best <= max(now, r.get("cp_bound") or 0)
        plain_before += r["ours"] <= was
        plain_after += r["ours"] <= now
        to = "-" if "to" not in r else f"{r['to']}{'' if r.get('to_proven') else ' (not proven)'}"
        lines.append(f"| {r['spec']} | {r.get('microbatches', '?')} | {r['ours']} | {to} | {was} | {now}"
                     f"{' **above a plan**' if bad else ''} | {_pct(_gap(r['ours'], now))} | {_pct(_gap(best, now))} |")
    done = sum("ours" in r for r in rows)
    lines += ["", f"- ours at the analytic bound (what the plan states, proven with no solve): {plain_before} of "
              f"{done} with the recorded bound, {plain_after} of {done} with the bound now",
              f"- ours proven optimal (at the larger of the analytic bound and CP-SAT's): {before} of {done} "
              f"with the recorded bound, {after} of {done} with the bound now",
              f"- best known (the shorter of ours and TO) proven optimal the same way: {best_before} of {done} before, "
              f"{best_after} of {done} now"]
    return "\n".join(lines) + "\n", unsound


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--half", nargs="+", choices=HALVES, default=list(HALVES))
    ap.add_argument("--devices", nargs="*", type=int, help="only specs with these device counts")
    ap.add_argument("--only", nargs="*", help="spec names (file stems) to run")
    ap.add_argument("--effort", type=float, default=600, help="TO's deterministic budget (default 600)")
    ap.add_argument("--workers", type=int, default=1, help="CP-SAT workers per TO solve (default 1)")
    ap.add_argument("--max-tasks", type=int, default=MAX_TASKS, help=f"skip TO above this many (default {MAX_TASKS})")
    ap.add_argument("--time-limit", type=float, help="a wall-clock limit on each TO solve, as a backstop only: "
                    "a row it cuts depends on the machine's speed and load, and says so")
    ap.add_argument("--cpu-limit", type=int, default=0, help="CPU seconds per spec, then it is killed (default: none)")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--jsonl", type=Path, help="append every row to this file as it finishes")
    ap.add_argument("--from-jsonl", type=Path, help="print the tables from rows recorded by --jsonl instead")
    ap.add_argument("--bounds-only", action="store_true",
                    help="solve nothing: this checkout's makespan bound beside the rows of --from-jsonl")
    ap.add_argument("--one", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.one:
        one(args.one, args.effort, args.workers, args.max_tasks, args.time_limit)
        return 0
    todo = [(half, p) for half in args.half for p in specs(half, args.devices) if not args.only or p.stem in args.only]
    rows: dict[tuple[str, str], dict] = {}
    if args.from_jsonl:
        for line in args.from_jsonl.read_text().splitlines():
            row = json.loads(line)
            rows[(row["half"], row["spec"])] = row  # the last row of a spec wins
        for half, p in todo:
            rows.setdefault((half, p.stem), {"spec": p.stem, "error": "not run"})
    if args.bounds_only:
        if not args.from_jsonl:
            ap.error("--bounds-only needs --from-jsonl (the recorded plans to set the bound beside)")
        unsound = 0
        for half in args.half:
            got = []
            for h, p in todo:
                if h == half:
                    row = dict(rows[(h, p.stem)])
                    row["now"] = stated_bound(p, row.get("ours"))
                    got.append(row)
            text, bad = bounds_table(half, got)
            unsound += bad
            print(text)
        return 1 if unsound else 0
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        # The largest first, so that the longest solves do not start last.
        left = sorted((t for t in todo if (t[0], t[1].stem) not in rows), key=lambda t: -_tasks(t[1]))
        futures = [pool.submit(measure, p, half, args) for half, p in left]
        for fut in concurrent.futures.as_completed(futures):
            row = fut.result()
            rows[(row["half"], row["spec"])] = row
            print("| " + " | ".join(cells(row)) + " |", file=sys.stderr, flush=True)
            if args.jsonl:
                with args.jsonl.open("a") as fh:
                    fh.write(json.dumps(row) + "\n")
    for half in args.half:
        print(table(half, [rows[(h, p.stem)] for h, p in todo if h == half], args.effort, args.workers))
    return 0


if __name__ == "__main__":
    sys.exit(main())
