"""Simulator speed: simulated program actions per second for N = 128 and 1024 on D = 4 and 8.

    python bench/simulate.py            # prints a Markdown table (best of 3 runs per row)
    python bench/simulate.py --scale    # CPU time of `tessel simulate plan.json -n N` by phase

Plans come from the 1F1B and 1F1B+ baselines (no search needed), so the numbers measure the
simulator alone: V-shape (single-device blocks only) and M-shape (all-device embedding blocks,
i.e. joint-block barriers) in non-blocking and blocking mode, with free and with costly links.
"""
from __future__ import annotations

import os
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tessel_dsl.ir import Block, Edge, Kind, Link, Spec  # noqa: E402
from tessel_dsl.lower import lower  # noqa: E402
from tessel_dsl.search import baselines  # noqa: E402
from tessel_dsl.simulator import simulate  # noqa: E402


def vshape(d: int) -> Spec:
    blocks = [Block(f"F{i}", Kind.FORWARD, (i,), 1, 1) for i in range(d)]
    blocks += [Block(f"B{i}", Kind.BACKWARD, (i,), 3, -1, forward=f"F{i}") for i in range(d)]
    edges = [Edge(f"F{i}", f"F{i + 1}") for i in range(d - 1)] + [Edge(f"F{d - 1}", f"B{d - 1}")]
    edges += [Edge(f"B{i + 1}", f"B{i}") for i in range(d - 1)]
    return Spec(f"V{d}", d, d, tuple(blocks), tuple(edges))


def mshape(d: int) -> Spec:
    alld = tuple(range(d))
    blocks = [Block("E", Kind.FORWARD, alld, 1, 0)] + [Block(f"F{i}", Kind.FORWARD, (i,), 1, 1) for i in range(d)]
    blocks += [Block(f"B{i}", Kind.BACKWARD, (i,), 3, -1, forward=f"F{i}") for i in range(d)]
    blocks += [Block("EB", Kind.BACKWARD, alld, 1, 0, forward="E")]
    edges = [Edge("E", "F0")] + [Edge(f"F{i}", f"F{i + 1}") for i in range(d - 1)]
    edges += [Edge(f"F{d - 1}", f"B{d - 1}")] + [Edge(f"B{i + 1}", f"B{i}") for i in range(d - 1)]
    edges += [Edge("B0", "EB")]
    return Spec(f"M{d}", d, d + 2, tuple(blocks), tuple(edges))


def best_of(fn, runs: int = 3):
    """Best wall-clock and best CPU time of `runs` calls (CPU time is robust to a busy machine)."""
    wall = cpu = float("inf")
    result = None
    for _ in range(runs):
        t0, c0 = time.perf_counter(), time.process_time()
        result = fn()
        wall = min(wall, time.perf_counter() - t0)
        cpu = min(cpu, time.process_time() - c0)
    return wall, cpu, result


def main() -> None:
    rows = []
    for make, base in ((vshape, "1f1b"), (mshape, "1f1b+")):
        for d in (4, 8):
            spec = make(d)
            for n in (128, 1024):
                sch = baselines.build(spec, base, n)
                for blocking in (False, True):
                    progs = lower(spec, sch, blocking=blocking)
                    for link in (Link(), Link(0.1, 0.0)):
                        wall, cpu, rep = best_of(lambda: simulate((spec, progs, sch), link=link))
                        assert rep.ok
                        rows.append((spec.name, d, n, "blocking" if blocking else "non-blocking",
                                     "free" if link.latency == 0 else f"latency {link.latency:g}",
                                     rep.actions, wall, cpu, rep.actions / wall, rep.actions / cpu))
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"machine: {_cpu_name()}, {os.cpu_count()} CPUs, load average {load:.1f}; "
          f"Python {platform.python_version()}, {platform.system()}")
    print()
    print("| shape | D | N | mode | link | actions | wall s | CPU s | actions/s (wall) | actions/s (CPU) |")
    print("|---|---:|---:|---|---|---:|---:|---:|---:|---:|")
    for name, d, n, mode, link, acts, wall, cpu, rate, crate in rows:
        print(f"| {name} | {d} | {n} | {mode} | {link} | {acts} | {wall:.3f} | {cpu:.3f} | {rate:,.0f} | "
              f"{crate:,.0f} |")
    print()
    print(f"slowest row: {min(r[-2] for r in rows):,.0f} actions/s wall, {min(r[-1] for r in rows):,.0f} "
          "actions/s CPU (target >= 100,000); times are simulate() end to end, best of 3")


def scale(sizes=(1000, 4000, 16000)) -> None:
    """What `tessel simulate plan.json -n N` spends, phase by phase, on the searched M-shape
    (specs/mshape.tsl, 10 blocks): re-extension to N, lowering and checking the plan, simulating
    it (which checks the plan again). The basis of `limits.MAX_SIMULATED_INSTANCES`."""
    from tessel_dsl.lang.parser import parse_file
    from tessel_dsl.plan import make_plan
    from tessel_dsl.search.driver import search
    from tessel_dsl.search.finish import reextend

    spec = parse_file(Path(__file__).resolve().parent.parent / "specs" / "mshape.tsl")
    found = search(spec)
    print("| N | block instances | actions | re-extend CPU s | plan CPU s | simulate CPU s | total CPU s |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for n in sizes:
        c0 = time.process_time()
        sched = reextend(spec, found.schedule, n, info=found.info)
        c1 = time.process_time()
        plan = make_plan(spec, sched, found.info)
        c2 = time.process_time()
        rep = simulate(plan)
        c3 = time.process_time()
        print(f"| {n} | {n * len(spec.blocks)} | {rep.actions} | {c1 - c0:.1f} | {c2 - c1:.1f} | {c3 - c2:.1f} | "
              f"{c3 - c0:.1f} |")


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


if __name__ == "__main__":
    if "--scale" in sys.argv[1:]:
        scale()
    else:
        main()
