"""Default searches of small random valid specs: how long each takes, and where the time goes.

    python bench/search_random.py --specs 30              # the table in bench/results/search.md
    python bench/search_random.py --only 5                # print spec 5, search it here, list its CP-SAT solves

Every spec comes from (seed, index) alone: 2-4 devices, 2-8 forward stages (some on every device,
tensor-parallel), a chain or a random DAG of edges, training (derived or explicit `grad time`
backwards, sometimes split into input and weight gradients) or inference, 1 ms or unitless times
(sometimes one block 100 to 10,000 times longer than the others), device memory from what one
micro-batch needs to twice that, per-device `memory ... on` lines. Each search runs in a child
process (CPU time measured there; killed past `--limit` seconds of wall clock) and reports the
CPU seconds spent in each phase of the search (`driver.Progress`).
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def valid_spec(r: random.Random) -> str:
    """A small spec that parses and has a schedule (one micro-batch fits in every device's memory)."""
    d = r.randint(2, 4)
    ms = r.random() < 0.4
    unit = "ms" if ms else ""
    lines = ["placement rnd", f"devices {d}"] + (["resolution time 1ms"] if ms else [])
    stages = r.randint(2, 2 * d)
    train = r.random() < 0.7
    split = train and r.random() < 0.2
    mem = [0] * d
    long_one = r.randrange(stages) if r.random() < 0.15 else None
    body = []
    for i in range(stages):
        on = "all" if r.random() < 0.15 else str(r.randrange(d) if r.random() < 0.3 else i % d)
        t = r.randint(1, 12) * (r.choice([100, 1000, 10000]) if i == long_one else 1)
        m = r.randint(0, 3) if train else 0
        line = f"forward F{i} on {on} time {t}{unit} memory {m}"
        if train and not split and r.random() < 0.2:
            line += f" grad time {r.randint(1, 24)}{unit}"
        body.append(line)
        for dev in (range(d) if on == "all" else [int(on)]):
            mem[dev] += m
        if split:
            body.append(f"input_grad I{i} of F{i} on {on} time {t}{unit}")
            body.append(f"weight_grad W{i} of F{i} on {on} time {max(1, t // 2)}{unit} memory -{m}")
    if r.random() < 0.6:
        body.append(f"chain(F{{k}} for k in 0..{stages - 1})")
    else:
        for j in range(1, stages):
            for i in r.sample(range(j), k=min(j, r.randint(1, 2))):
                body.append(f"F{i} -> F{j}")
    if split:
        for i in range(stages):
            body.append(f"F{i} -> I{i}")
            body.append(f"I{i} -> W{i}")
        body += [f"I{i + 1} -> I{i}" for i in range(stages - 1)]  # gradients flow back
    cap = max(1, max(mem))
    lines.append(f"memory {cap + r.randint(0, cap)}")
    if r.random() < 0.3:
        dev = r.randrange(d)
        lines.append(f"memory {max(1, mem[dev]) + r.randint(0, 2)} on {dev}")
    lines.append(f"microbatches {r.randint(4, 12)}")
    lines.append(f"mode {'train' if train else 'infer'}")
    lines += body
    if train and not split:
        lines.append(f"derive backward time {r.choice(['1x', '2x', '2x', '3x'])}")
    return "\n".join(lines) + "\n"


def make(seed: int, index: int) -> str:
    return valid_spec(random.Random(f"{seed}:search-random:{index}"))


def _child(text: str, queue) -> None:
    from tessel_dsl.errors import TesselError
    from tessel_dsl.lang.parser import parse
    from tessel_dsl.search.driver import search
    from tessel_dsl.search.notes import render

    phases: dict[str, float] = {}
    last = [None, time.process_time()]

    def progress(p) -> None:
        name = p.phase.split(" ")[0]
        now = time.process_time()
        if last[0] is not None:
            phases[last[0]] = phases.get(last[0], 0.0) + now - last[1]
        last[:] = [name, now]

    t0 = time.process_time()
    try:
        spec = parse(text)
        res = search(spec, progress=progress)
        out = {"method": res.info.method, "proven": res.info.proven, "period": res.info.period,
               "lower": res.info.lower_bound, "copies": res.info.copies, "note": render(res.info.notes)}
    except TesselError as e:
        out = {"method": "error", "note": str(e).splitlines()[0][:120]}
    out["cpu_s"] = time.process_time() - t0
    out["phases"] = phases
    queue.put(out)


def run_one(text: str, limit: float) -> dict:
    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    p = ctx.Process(target=_child, args=(text, queue), daemon=True)
    t0 = time.monotonic()
    p.start()
    p.join(limit)
    if p.is_alive():
        p.kill()
        p.join()
        return {"method": "killed", "cpu_s": float("nan"), "wall_s": limit, "phases": {}}
    out = queue.get() if not queue.empty() else {"method": "crashed", "cpu_s": float("nan"), "phases": {}}
    out["wall_s"] = time.monotonic() - t0
    return out


def solves() -> None:
    """Print every cyclic-model solve of the search: blocks, period, budget, answer, CP-SAT's
    deterministic time and the CPU seconds it took."""
    from tessel_dsl.search import modulo
    from tessel_dsl.search.solvers import cpsat

    run_model, solve_period = cpsat.run_model, modulo.solve_period

    def spy_period(spec, period, *args, **kwargs):
        print(f"  period {period} of {len(spec.blocks)} blocks", end="", flush=True)
        return solve_period(spec, period, *args, **kwargs)

    def spy_model(model, *, effort, time_limit):
        c0 = time.process_time()
        status, solver = run_model(model, effort=effort, time_limit=time_limit)
        print(f": effort {effort:g} -> {status}, deterministic time {solver.deterministic_time:.2f}, "
              f"{time.process_time() - c0:.1f} s CPU", flush=True)
        return status, solver

    modulo.solve_period, cpsat.run_model = spy_period, spy_model


def table(rows: list[tuple[int, dict]]) -> str:
    lines = ["| spec | method | proven | period (bound) | CPU s | slowest phase (CPU s) |",
             "|---:|---|---|---|---:|---|"]
    for i, r in rows:
        phase = max(r["phases"].items(), key=lambda kv: kv[1], default=("-", 0.0))
        lines.append(f"| {i} | {r['method']} | {r.get('proven', '-')} | {r.get('period', '-')} "
                     f"({r.get('lower', '-')}) | {r['cpu_s']:.1f} | {phase[0]} ({phase[1]:.1f}) |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--specs", type=int, default=30)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--limit", type=float, default=600.0, help="wall-clock seconds per search")
    ap.add_argument("--only", type=int, help="print spec INDEX and search it here")
    args = ap.parse_args()
    if args.only is not None:
        text = make(args.seed, args.only)
        print(text)
        solves()
        print(run_one(text, args.limit))
        return
    rows = []
    for i in range(args.specs):
        r = run_one(make(args.seed, i), args.limit)
        rows.append((i, r))
        print(f"  spec {i}: {r['method']} {r['cpu_s']:.1f} s CPU", file=sys.stderr, flush=True)
    print(table(rows))
    cpu = sorted(r["cpu_s"] for _, r in rows)
    print(f"\n{len(rows)} specs (seed {args.seed}); median {cpu[len(cpu) // 2]:.1f} s CPU, slowest {cpu[-1]:.1f} s")


if __name__ == "__main__":
    main()
