"""The installed package (not the source tree) finds its grammar and runs the main job.

CI installs the project non-editably into a fresh venv before running the tests; there this
test runs `tessel` from a directory outside the repository, so only the installed copy of
`tessel_dsl` (and the grammar shipped inside it) can be used. From a plain source checkout,
where nothing is installed, it is skipped.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.paths import ROOT

REPO = ROOT


def _installed_location(tmp_path: Path) -> Path | None:
    probe = subprocess.run(
        [sys.executable, "-c", "import tessel_dsl, sys; sys.stdout.write(tessel_dsl.__file__)"],
        cwd=tmp_path, capture_output=True, text=True)
    return Path(probe.stdout) if probe.returncode == 0 else None


def test_installed_package_ships_the_grammar(tmp_path):
    where = _installed_location(tmp_path)
    if where is None:
        pytest.skip("tessel_dsl is not installed in this interpreter (source checkout only)")
    installed_from_source = REPO in where.parents
    grammar = subprocess.run(
        [sys.executable, "-c",
         "from importlib.resources import files; print(files('tessel_dsl').joinpath('grammar', 'tessel.lark').is_file())"],
        cwd=tmp_path, capture_output=True, text=True)
    if not installed_from_source:
        assert grammar.stdout.strip() == "True", grammar.stderr
    spec = tmp_path / "m.tsl"
    shutil.copy(REPO / "specs" / "vshape.tsl", spec)
    (tmp_path / "lib").mkdir()
    shutil.copy(REPO / "specs" / "lib" / "shapes.tsl", tmp_path / "lib" / "shapes.tsl")
    out = subprocess.run([sys.executable, "-m", "tessel_dsl.cli", "check", str(spec), "--json"],
                         cwd=tmp_path, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["lower_bound"] == 4


def test_installing_adds_one_top_level_name(tmp_path):
    """A non-editable install puts `tessel_dsl` into site-packages and nothing else: no generic
    `executor` or `simulator` package to clash with other distributions or a user's own files."""
    where = _installed_location(tmp_path)
    if where is None or REPO in where.parents:
        pytest.skip("needs a non-editable install (CI makes one)")
    # Read the installed distribution's record from outside the repository: from inside it, the
    # build's leftover tessel_dsl.egg-info in the source tree would be found first.
    probe = subprocess.run(
        [sys.executable, "-c", "import json; from importlib.metadata import distribution; "
         "print(json.dumps([f.parts for f in distribution('tessel-dsl').files or []]))"],
        cwd=tmp_path, capture_output=True, text=True)
    assert probe.returncode == 0, probe.stderr
    files = json.loads(probe.stdout)
    tops = {f[0] for f in files if len(f) > 1 and not f[0].endswith(".dist-info")
            and f[0] not in ("..", "bin", "Scripts")}
    assert tops == {"tessel_dsl"}, tops
    for name in ("executor", "simulator"):
        probe = subprocess.run([sys.executable, "-c", f"import {name}"], cwd=tmp_path, capture_output=True, text=True)
        assert probe.returncode != 0 and "No module named" in probe.stderr, (name, probe.stderr)
    probe = subprocess.run([sys.executable, "-c", "import tessel_dsl.executor, tessel_dsl.simulator"],
                           cwd=tmp_path, capture_output=True, text=True)
    assert probe.returncode == 0, probe.stderr


def test_the_source_tree_is_the_installed_tree():
    """Every package sits under tessel_dsl/ where it is installed: no folder is mapped into the
    package, and the package list is found, not written by hand."""
    import tomllib

    setuptools = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert "package-dir" not in setuptools and "packages" in setuptools
    assert setuptools["packages"]["find"]["include"] == ["tessel_dsl*"]
    tops = sorted(p.parent.name for p in REPO.glob("*/__init__.py"))
    assert set(tops) - {"tests"} == {"tessel_dsl"}, f"Python packages outside tessel_dsl/: {tops}"
    assert (REPO / "tessel_dsl" / "grammar" / "tessel.lark").is_file()


def test_installed_cli_searches_and_simulates(tmp_path):
    """The README's main job, from outside the repository."""
    if _installed_location(tmp_path) is None:
        pytest.skip("tessel_dsl is not installed in this interpreter (source checkout only)")
    plan = tmp_path / "m.plan.json"
    cli = [sys.executable, "-m", "tessel_dsl.cli"]
    spec = REPO / "specs" / "mshape.tsl"
    searched = subprocess.run([*cli, "search", str(spec), "-o", str(plan)], cwd=tmp_path, capture_output=True, text=True)
    assert searched.returncode == 0, searched.stderr
    sim = subprocess.run([*cli, "simulate", str(plan), "--json"], cwd=tmp_path, capture_output=True, text=True)
    assert sim.returncode == 0, sim.stderr
    assert json.loads(sim.stdout)["ok"] is True
    verbs = subprocess.run([*cli, "--help"], cwd=tmp_path, capture_output=True, text=True).stdout
    for verb in ("check", "search", "compare", "simulate", "test", "run", "export", "import", "profile"):
        assert f" {verb} " in verbs, verb
