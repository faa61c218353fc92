"""The README's two test commands are the ones CI and the folders define: the whole suite is the line
.ci/run reads from .ci/test-command, the unit tests that line on tests/unit/ alone. Every test file sits
in one of the two folders, and the integration marker (`-m "not integration"`) selects the same split."""
from __future__ import annotations

import re
import subprocess

from tests.paths import ROOT

UNIT = " tests/unit"


def _ci_command() -> str:
    # The same extraction .ci/run does.
    script = (ROOT / ".ci" / "run").read_text()
    line = next(s for s in script.splitlines() if s.startswith("cmd=$("))
    return subprocess.run(["bash", "-c", line + '; printf %s "$cmd"'], cwd=ROOT, capture_output=True,
                          text=True, check=True).stdout


def _readme_commands() -> list[str]:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```bash\n(.*?)```", readme, re.S)
    return [line for b in blocks for line in b.splitlines() if line.startswith("python -m pytest")]


def test_readme_shows_the_command_ci_runs_and_its_unit_subset():
    ci = _ci_command()
    assert ci.startswith("python -m pytest"), ci
    assert _readme_commands() == [ci, ci + UNIT]


def test_readme_opens_with_what_a_user_runs_first():
    first = (ROOT / "README.md").read_text(encoding="utf-8").split("```bash\n", 1)[1].splitlines()[0]
    assert first.startswith("pip install") and "tessel search" in first


def test_the_integration_marker_is_registered():
    import tomllib

    markers = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["markers"]
    assert any(m.startswith("integration:") for m in markers)


def test_every_test_file_is_a_unit_or_an_integration_test():
    # A file at the top of tests/ would run in CI but in neither documented subset.
    stray = sorted(p.name for p in (ROOT / "tests").glob("test_*.py"))
    assert not stray, f"move these into tests/unit/ or tests/integration/: {stray}"
    assert (ROOT / "tests" / "unit" / "__init__.py").is_file()
    assert (ROOT / "tests" / "integration" / "__init__.py").is_file()


def test_no_unit_test_is_marked_slow_or_gpu():
    # tests/conftest.py marks those as integration; they belong in tests/integration/ so that
    # `pytest tests/unit` and `pytest -m "not integration"` run the same tests.
    decorator = re.compile(r"^\s*@pytest\.mark\.(slow|gpu)\b", re.M)
    marked = sorted(p.name for p in (ROOT / "tests" / "unit").glob("test_*.py") if decorator.search(p.read_text()))
    assert not marked, marked
