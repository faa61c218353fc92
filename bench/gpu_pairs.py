"""Two plans of `bench/gpu_zb.py` run one after the other many times, with every GPU's clock and
power sampled, to tell a difference between them from the machine's own drift.

    PYTHONPATH=. python3 bench/gpu_pairs.py --keys gpt32k_choice,gpt32k_zbv_pipeline --runs 10 --limit 540

Each run is one `gpu_zb.py run --no-torch --keys KEY` invocation (a fresh process, the row's plan
only); the keys alternate A B B A A B ... so that neither always runs first after a pause. While it
runs, `nvidia-smi` samples each GPU's SM clock, power, temperature and utilisation every 200 ms;
per run, the medians are over the samples with the GPU at least 90 % busy. The table gives each
run's median iteration (ms), GPU 0's busy time, the clocks, and at the end each key's mean, the
mean of the differences of neighbouring runs (B - A), and the same with every run scaled to the
mean GPU 0 clock (ms x MHz / mean MHz: GPU 0 is the critical GPU of the GPT-32k plans and runs at
its power limit, so its clock moves from run to run whichever plan runs). No new run starts once
`--limit` seconds have passed. Writes `pairs.json`, `pairs.md` and `clocks.csv` to `--out`.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIELDS = ("index", "clocks.sm", "power.draw", "temperature.gpu", "utilization.gpu")
BUSY = 90  # % utilisation from which a sample counts: the iterations, not the process's start


def sample(path: Path, stop: threading.Event) -> None:
    """Every GPU's clock, power, temperature and utilisation every 200 ms, each line stamped with
    this machine's time, until `stop` is set."""
    cmd = ["nvidia-smi", f"--query-gpu={','.join(FIELDS)}", "--format=csv,noheader,nounits", "-lms", "200"]
    path.touch()
    try:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    except FileNotFoundError:  # no NVIDIA driver (a check of the script on the CPU): no clocks
        return
    with proc, open(path, "w") as out:
        for line in proc.stdout:
            out.write(f"{time.time():.3f}, {line.strip()}\n")
            if stop.is_set():
                proc.terminate()
                break


def clocks(path: Path, t0: float, t1: float) -> dict[int, tuple[float, float]]:
    """GPU -> (median MHz, median W) over the samples in [t0, t1] with the GPU at least 90 % busy
    and drawing at least 80 % of the most it drew in that window: utilisation alone also passes
    samples of the process's start (1980 MHz at 121 W in the first call of 2026-11-28)."""
    got: dict[int, list[tuple[float, float]]] = {}
    for line in path.read_text().splitlines():
        try:
            t, gpu, mhz, watts, _temp, util = (x.strip() for x in line.split(","))
            if t0 <= float(t) <= t1 and float(util) >= BUSY:
                got.setdefault(int(gpu), []).append((float(mhz), float(watts)))
        except ValueError:
            continue
    out = {}
    for g, v in got.items():
        top = max(w for _, w in v)
        v = [(m, w) for m, w in v if w >= 0.8 * top]
        out[g] = (statistics.median(m for m, _ in v), statistics.median(w for _, w in v))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keys", required=True, help="two rows of bench/gpu_zb.py, comma-separated")
    ap.add_argument("--only", default="gpt32k", help="their group (bench/gpu_zb.py --only)")
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--steps", type=int, default=9)
    ap.add_argument("--limit", type=float, default=540.0, help="seconds after which no run starts")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    args = ap.parse_args()
    a, b = args.keys.split(",")
    order = [(a, b, b, a)[i % 4] for i in range(args.runs)]
    out, work = Path(args.out), Path("/tmp/gpu_pairs")
    out.mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    stop, trace = threading.Event(), out / "clocks.csv"
    sampler = threading.Thread(target=sample, args=(trace, stop), daemon=True)
    sampler.start()
    start, rows = time.time(), []
    for i, key in enumerate(order):
        if time.time() - start > args.limit:
            break
        folder = work / f"r{i}"
        t0 = time.time()
        done = subprocess.run([sys.executable, str(ROOT / "bench" / "gpu_zb.py"), "run", "--only", args.only,
                               "--no-torch", "--keys", key, "--steps", str(args.steps), "--tag", f"_p{i}",
                               "--out", str(folder)], cwd=ROOT, capture_output=True, text=True)
        t1 = time.time()
        if done.returncode != 0:
            print(done.stdout[-2000:], done.stderr[-3000:])
            raise SystemExit(f"run {i} ({key}) failed")
        [result] = [json.loads(f.read_text()) for f in folder.glob("*.json")]
        row = next(v for k, v in result.items() if isinstance(v, dict) and k == key)
        rows.append({"run": i, "key": key, "ms": row["measured"]["iteration"] * 1e3,
                     "busy0_ms": row["measured"]["busy"][0] * 1e3, "iterations_ms": [x * 1e3 for x in row["iterations"]],
                     "clocks": {str(g): c for g, c in clocks(trace, t0, t1).items()}, "seconds": round(t1 - t0, 1),
                     "window": [t0, t1]})
        print(json.dumps(rows[-1]), flush=True)
        (out / "pairs.json").write_text(json.dumps({"rows": rows}, indent=1))  # kept if a later run fails
    stop.set()
    # a run with no sample that passes the filter (too short, or the GPU below the power cut) has
    # no clock: its scaled figure is nan and it drops out of the scaled pairs below
    sampled = [r["clocks"]["0"][0] for r in rows if "0" in r["clocks"]]
    mhz0 = statistics.mean(sampled) if sampled else float("nan")
    for r in rows:
        r["ms_at_mean_clock"] = r["ms"] * r["clocks"]["0"][0] / mhz0 if "0" in r["clocks"] else float("nan")
    lines = ["| run | row | ms | GPU 0 busy ms | GPU 0 MHz / W | GPUs 1-3 MHz | ms at GPU 0's mean clock |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        c = r["clocks"]
        others = sorted(c[g][0] for g in c if g != "0")
        zero = f"{c['0'][0]:.0f} / {c['0'][1]:.0f}" if "0" in c else "-"
        rest = f"{others[0]:.0f}-{others[-1]:.0f}" if others else "-"
        lines.append(f"| {r['run']} | {r['key']} | {r['ms']:.1f} | {r['busy0_ms']:.1f} | {zero} | {rest} | "
                     f"{r['ms_at_mean_clock']:.1f} |")
    summary = {}
    for field in ("ms", "ms_at_mean_clock"):
        diffs = [(y[field] - x[field]) * (1 if y["key"] == b else -1)
                 for x, y in zip(rows, rows[1:]) if x["key"] != y["key"] and x[field] == x[field] and y[field] == y[field]]
        if not diffs:
            continue
        summary[field] = {a: statistics.mean(r[field] for r in rows if r["key"] == a and r[field] == r[field]),
                          b: statistics.mean(r[field] for r in rows if r["key"] == b and r[field] == r[field]),
                          f"{b} - {a}, neighbouring runs": diffs}
        mean = statistics.mean(diffs)
        sd = statistics.stdev(diffs) if len(diffs) > 1 else float("nan")
        lines.append(f"\n{field}: {a} {summary[field][a]:.2f}, {b} {summary[field][b]:.2f}; {b} - {a} over "
                     f"{len(diffs)} neighbouring pairs: mean {mean:+.2f} ms, sd {sd:.2f}")
    table = "\n".join(lines)
    print(table)
    (out / "pairs.md").write_text(table + "\n")
    (out / "pairs.json").write_text(json.dumps({"rows": rows, "summary": summary}, indent=1))


if __name__ == "__main__":
    main()
