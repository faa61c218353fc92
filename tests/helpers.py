"""Small Python-built specs for tests that must not depend on the parser, an in-process CLI runner,
and a loader for the bench/ scripts (which are not a package)."""
from __future__ import annotations

import importlib.util

from tessel_dsl.ir import Block, Edge, Kind, Spec
from tessel_dsl.schedule import Schedule
from tessel_dsl.search.compact import compact
from tests.paths import ROOT


def vshape(devices: int = 3, memory: int = 3, fwd: int = 1, bwd: int = 2, microbatches: int = 4) -> Spec:
    """A chain F0..F{D-1} -> B{D-1}..B0 with F_i, B_i on device i."""
    blocks = [Block(f"F{i}", Kind.FORWARD, (i,), fwd, 1) for i in range(devices)]
    blocks += [Block(f"B{i}", Kind.BACKWARD, (i,), bwd, -1, forward=f"F{i}") for i in range(devices)]
    edges = [Edge(f"F{i}", f"F{i + 1}") for i in range(devices - 1)]
    edges += [Edge(f"F{devices - 1}", f"B{devices - 1}")]
    edges += [Edge(f"B{i + 1}", f"B{i}") for i in range(devices - 1)]
    return Spec("vshape", devices, memory, tuple(blocks), tuple(edges), microbatches)


def one_f_one_b(spec: Spec, n: int) -> Schedule:
    """The textbook 1F1B order on a `vshape` spec, compacted."""
    orders = []
    for d in range(spec.devices):
        seq, f, b = [], 0, 0
        for _ in range(min(spec.devices - 1 - d, n)):
            seq.append((f"F{d}", f))
            f += 1
        while f < n:
            seq += [(f"F{d}", f), (f"B{d}", b)]
            f, b = f + 1, b + 1
        seq += [(f"B{d}", k) for k in range(b, n)]
        orders.append(seq)
    return Schedule(n, compact(spec, orders=orders), name="1f1b")


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    """Runs ``tessel <argv>`` in this process: (exit code, stdout, stderr)."""
    from tessel_dsl.cli import main

    code = 0
    try:
        main(list(argv))
    except SystemExit as e:
        code = e.code or 0
    out, err = capsys.readouterr()
    return code, out, err


def load_bench(name: str):
    """The script bench/NAME.py as a module, for tests that run a sample of it."""
    path = ROOT / "bench" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"tessel_bench_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def loose_bounds(monkeypatch) -> None:
    """Make the search state a makespan bound of 0, so no plan is proven by reaching its bound,
    and leave out the whole-schedule model (heldcuts.py, as on a spec over its size limit), which
    would prove it too. Tests of what a cut solve reports use it: on the small shipped specs the
    stated bound (bounds.py) is tight enough to prove most plans whatever the solve did, which
    would leave the cut paths untested."""
    monkeypatch.setattr(importlib.import_module("tessel_dsl.search.heldcuts"), "CUT_MAX_INSTANCES", 0)
    for name in ("bounds", "construct", "driver", "extend", "incumbent", "kcopy"):
        module = importlib.import_module(f"tessel_dsl.search.{name}")
        if hasattr(module, "makespan_bound"):  # imported at the top, or read from bounds when called
            monkeypatch.setattr(module, "makespan_bound", lambda spec, n, above=None: 0)
