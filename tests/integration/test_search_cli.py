"""`tessel search` on the command line: plan file, JSON summary, exit codes, no partial output."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tessel_dsl.plan import load_plan
from tessel_dsl.validate import validate
from tests.paths import ROOT


def tessel(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "tessel_dsl.cli", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=240)


def test_search_writes_a_valid_plan_and_json_summary(tmp_path):
    out = tmp_path / "v.json"
    r = tessel("search", str(ROOT / "specs/vshape.tsl"), "-o", str(out), "--json", "-n", "12", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout)
    assert summary["period"] == summary["lower_bound"] == 4 and summary["gap"] == 0
    assert summary["makespan"] == (12 + 3) * 4 and summary["proven"] is True
    plan = load_plan(out)
    validate(plan.spec, plan.schedule)
    assert plan.search.period == 4 and plan.programs
    assert list(plan.peak_memory) == summary["peak_memory"]


def test_default_output_name_and_table(tmp_path):
    r = tessel("search", str(ROOT / "specs/kshape.tsl"), "--mode", "infer", "--solver", "z3",
               "--method", "enumerate", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "kshape.plan.json").exists()
    assert "repetend period" in r.stdout and "kshape.plan.json" in r.stdout


def test_time_limit_says_unproven(tmp_path):
    r = tessel("search", str(ROOT / "specs/nnshape.tsl"), "--set", "D=8", "--time-limit", "0.01", "--json", "-o", "m.json",
               cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout)
    assert summary["proven"] is False and summary["note"]


def test_user_errors_exit_1_without_traceback_or_file(tmp_path):
    spec = tmp_path / "tight.tsl"
    text = (ROOT / "specs/vshape.tsl").read_text().replace("memory D,", "memory 0,", 1)
    spec.write_text(text.replace('include "lib/', f'include "{ROOT}/specs/lib/'))
    assert "memory 0" in spec.read_text()
    r = tessel("search", str(spec), "-o", "out.json", cwd=tmp_path)
    assert r.returncode == 1
    assert "Traceback" not in r.stderr and "micro-batch" in r.stderr and "memory" in r.stderr
    assert not (tmp_path / "out.json").exists()
    r = tessel("search", str(tmp_path / "missing.tsl"), cwd=tmp_path)
    assert r.returncode in (1, 2) and "Traceback" not in r.stderr


def test_usage_errors_exit_2(tmp_path):
    for args in (["--solver", "gurobi"], ["--method", "magic"], ["--mode", "eval"], ["-n", "0"]):
        r = tessel("search", str(ROOT / "specs/vshape.tsl"), *args, cwd=tmp_path)
        assert r.returncode == 2, (args, r.stderr)
        assert "Traceback" not in r.stderr


def test_summary_states_the_makespan_gap_in_the_specs_units(tmp_path):
    import shutil

    from tessel_dsl.search.bounds import makespan_bound
    from tessel_dsl.simulator import simulate

    # X-shape at N=8 stays 2 units above its makespan bound (70 against 68; memory decides that,
    # which the bound leaves out); here with a time resolution, so the gap has a unit to show in.
    shutil.copytree(ROOT / "specs/lib", tmp_path / "lib")
    spec_path = tmp_path / "x10ms.tsl"
    spec_path.write_text((ROOT / "specs/xshape.tsl").read_text().replace(
        "\nmicrobatches N", "\nresolution time 10ms\nmicrobatches N"))
    r = tessel("search", str(spec_path), "-o", str(tmp_path / "nn.json"), "-n", "8", "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)
    plan = load_plan(tmp_path / "nn.json")
    # The bound by hand: device 1 idles through F0 (1) before its first block and B0 (3) after its
    # last, and runs 8 units per micro-batch: 1 + 8 * 8 + 3 = 68.
    assert s["makespan_bound"] == plan.search.makespan_bound == makespan_bound(plan.spec, 8) == 68
    assert s["makespan"] == simulate(plan).makespan == 70 and s["makespan_gap"] == 2
    assert s["time_unit"] == "10ms" and s["copies"] == 1 and s["period_proven"] is True
    table = tessel("search", str(spec_path), "-o", str(tmp_path / "nn2.json"), "-n", "8", cwd=tmp_path)
    assert s["makespan_gap"] > 0  # N=8 leaves a gap to the bound, so the table must state it in ms
    words = " ".join(" ".join(line.strip("│ ") for line in table.stdout.splitlines()).split())  # may wrap
    b, g = s["makespan_bound"], s["makespan_gap"]
    assert f"{s['makespan']} ({s['makespan'] * 10} ms) (lower bound {b} ({b * 10} ms): {g} ({g * 10} ms) above)" \
        in words


@pytest.mark.parametrize("name, span, solver_loaded", [("mshape", 60, False), ("xshape", 70, True)])
def test_search_command_loads_only_what_it_uses_and_plans_as_the_library_does(tmp_path, name, span, solver_loaded):
    # The command imports none of the other verbs' libraries, and CP-SAT (without pandas) only
    # when a solver runs: M-shape's constructive schedule reaches both bounds, X-shape's does not;
    # the plan is the one the library's search() gives (same schedule, same stated bounds).
    out = tmp_path / "m.json"
    code = ("import sys; from tessel_dsl.cli import main\n"
            f"try:\n    main(['search', {str(ROOT / f'specs/{name}.tsl')!r}, '-n', '8', '-o', {str(out)!r}])\n"
            "except SystemExit as e:\n    assert not e.code, e.code\n"
            "print(sorted(m for m in ('pandas', 'z3', 'torch', 'simpy', 'tessel_dsl.simulator',"
            " 'tessel_dsl.cli.harness', 'tessel_dsl.cli.compare') if m in sys.modules),"
            " 'ortools.sat.python.cp_model' in sys.modules)")
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=240)
    assert r.stdout.strip().splitlines()[-1] == f"[] {solver_loaded}", r.stdout + r.stderr
    from tessel_dsl.lang.parser import parse_file
    from tessel_dsl.search.driver import search

    spec = parse_file(ROOT / f"specs/{name}.tsl")
    lib = search(spec, microbatches=8)
    plan = load_plan(out)
    assert sorted(plan.schedule.slots) == sorted(lib.schedule.slots)
    assert plan.search.makespan_bound == lib.info.makespan_bound
    assert plan.schedule.makespan(spec) == span


def test_a_verb_loads_alone_and_help_still_lists_every_verb():
    from tessel_dsl.cli import _verb_module

    assert _verb_module(["search", "x.tsl"]) == "search"
    assert _verb_module(["test", "x.tsl"]) == "harness" and _verb_module(["import", "x"]) == "export"
    assert _verb_module(["--help"]) is None and _verb_module(["nosuch"]) is None and _verb_module([]) is None
    r = tessel("--help", cwd=ROOT)
    for verb in ("check", "search", "compare", "simulate", "test", "run", "export", "import", "profile"):
        assert verb in r.stdout
    r = tessel("search", "--help", cwd=ROOT)
    assert r.returncode == 0 and "--time-limit" in r.stdout
