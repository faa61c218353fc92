"""The same spec and options give a byte-identical plan (its timing field aside), whatever else the
machine is doing and whatever the interpreter's hash seed: every solver budget the search uses is
deterministic, and nothing depends on wall-clock time unless ``--time-limit`` is given."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.paths import ROOT


def _plan(spec: str, out: Path, hash_seed: str, *extra: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONHASHSEED": hash_seed}
    r = subprocess.run([sys.executable, "-m", "tessel_dsl.cli", "search", str(ROOT / spec), "-o", str(out),
                        *extra], env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    data = json.loads(out.read_text())
    data["search"].pop("seconds")  # the only timing field of a plan
    return data


@pytest.mark.parametrize("spec,extra", [
    ("specs/mshape.tsl", ()),
    ("specs/interleaved.tsl", ("-n", "8")),
    ("specs/kshape.tsl", ("--solver", "z3", "-n", "6")),
])
def test_same_plan_alone_and_beside_a_busy_process(tmp_path, spec, extra):
    alone = _plan(spec, tmp_path / "a.json", "1", *extra)
    # Two processes spinning on the CPU while the second search runs: under the old wall-clock
    # budgets and multi-threaded solver runs, load like this changed which schedule came back.
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        busy = _plan(spec, tmp_path / "b.json", "2", *extra)
    finally:
        for p in burners:
            p.kill()
            p.wait()
    assert busy == alone


def test_no_solver_call_has_a_wall_clock_limit_or_parallel_nondeterminism(monkeypatch):
    """Every CP-SAT solve of a search without --time-limit runs under deterministic settings: no
    wall-clock limit, one worker or CP-SAT's interleaved (deterministic) parallel mode."""
    from ortools.sat.python import cp_model

    from tessel_dsl.lang.parser import parse_file
    from tessel_dsl.search.driver import search

    seen = []
    original = cp_model.CpSolver.solve

    def spy(self, *args, **kwargs):
        p = self.parameters
        seen.append((p.max_time_in_seconds, p.num_workers, p.interleave_search))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(cp_model.CpSolver, "solve", spy)
    search(parse_file(ROOT / "specs/interleaved.tsl"), microbatches=8, solver="cpsat")
    assert len(seen) >= 4  # period search, polish, warmup, cooldown, end re-solve
    for limit, workers, interleave in seen:
        assert limit == float("inf")
        assert workers == 1 or interleave
