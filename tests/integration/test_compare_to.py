"""TO in `tessel compare`: a deterministic solver budget, never a wall-clock limit unless asked
for, and a TO that the budget cut is labelled as not proven optimal."""
from __future__ import annotations

import json
import subprocess
import sys
from types import SimpleNamespace

from tessel_dsl.lang.parser import parse_file
from tessel_dsl.search.baselines.compare import compare
from tessel_dsl.search.optimal import TO_EFFORT
from tests.helpers import run_cli
from tests.paths import ROOT

# On mshape N=8 (1F1B+: 70, the optimum: 60) this budget ends before the optimum is proven, but
# after the solver has improved on the seed: the cut case whose answer a wall clock would move.
SMALL = "0.2"


def _compare(capsys, *args: str) -> SimpleNamespace:
    """`tessel compare` on mshape N=8 beside 1F1B+ with TO, through the CLI's entry point in this
    process (a fresh interpreter only added the OR-Tools import to each of the five runs)."""
    code, out, err = run_cli(capsys, "compare", str(ROOT / "specs/mshape.tsl"), "-n", "8", "-s", "1f1b+", "--to", *args)
    return SimpleNamespace(returncode=code, stdout=out, stderr=err)


def _to_row(r: SimpleNamespace) -> dict:
    assert r.returncode == 0, r.stderr
    row = next(x for x in json.loads(r.stdout)[0]["rows"] if x["schedule"] == "to")
    row.pop("seconds")  # the only timing field
    return row


def test_the_same_compare_gives_the_same_to_alone_and_beside_a_busy_process(capsys):
    alone = _to_row(_compare(capsys, "--to-effort", SMALL, "--json"))
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        busy = _to_row(_compare(capsys, "--to-effort", SMALL, "--json"))
    finally:
        for p in burners:
            p.kill()
            p.wait()
    assert busy == alone
    assert alone["status"] == "ok" and alone["proven"] is False  # the budget, not the problem, ended it
    full = compare(parse_file(ROOT / "specs/mshape.tsl"), 8, schedules=(), to=True)[0]
    assert full.proven and alone["makespan"] >= full.makespan


def test_to_runs_on_a_deterministic_budget_with_no_wall_clock_limit(monkeypatch):
    from ortools.sat.python import cp_model

    seen = []
    original = cp_model.CpSolver.solve

    def spy(self, *args, **kwargs):
        p = self.parameters
        seen.append((p.max_time_in_seconds, p.max_deterministic_time, p.num_workers, p.interleave_search))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(cp_model.CpSolver, "solve", spy)
    compare(parse_file(ROOT / "specs/vshape.tsl"), 4, schedules=("1f1b",), to=True, solver="cpsat")
    assert seen == [(float("inf"), TO_EFFORT, 1, False)]
    seen.clear()
    compare(parse_file(ROOT / "specs/vshape.tsl"), 4, schedules=("1f1b",), to=True, solver="cpsat",
            to_time_limit=30.0)  # a limit the caller asked for is applied, beside the budget
    assert seen == [(30.0, TO_EFFORT, 1, False)]


def test_a_to_cut_by_the_budget_is_labelled_not_proven(capsys):
    cut = _compare(capsys, "--to-effort", SMALL)
    assert cut.returncode == 0, cut.stderr
    text = " ".join(cut.stdout.split())
    assert "to* " in text
    assert f"the solver budget (effort {SMALL}) ran out" in text and "not proven optimal" in text
    row = _to_row(_compare(capsys, "--to-effort", SMALL, "--json"))
    assert [x["kind"] for x in row["extra"]["notes"]] in (["to-cut"], ["to-hint"])
    proven = _compare(capsys)  # the default budget proves this one
    assert proven.returncode == 0, proven.stderr
    assert "to* " not in " ".join(proven.stdout.split()) and "not proven" not in proven.stdout
