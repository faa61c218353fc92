"""The README's two test commands are the ones CI and the integration marker define: the whole
suite is the line .ci/run reads from .ci/test-command, the unit tests that line less the tests
tests/conftest.py marks as integration."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

from .conftest import INTEGRATION_MODULES, INTEGRATION_TESTS

ROOT = Path(__file__).resolve().parents[1]
FAST = ' -m "not integration"'


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
    assert _readme_commands() == [ci, ci + FAST]


def test_readme_opens_with_what_a_user_runs_first():
    first = (ROOT / "README.md").read_text(encoding="utf-8").split("```bash\n", 1)[1].splitlines()[0]
    assert first.startswith("pip install") and "tessel search" in first


def test_the_integration_marker_is_registered_and_its_modules_exist():
    import tomllib

    markers = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["markers"]
    assert any(m.startswith("integration:") for m in markers)
    missing = sorted(m for m in INTEGRATION_MODULES if not (ROOT / "tests" / m).is_file())
    missing += sorted(t for t in INTEGRATION_TESTS if not (ROOT / "tests" / t.split("::")[0]).is_file()
                      or f"def {t.split('::')[1]}(" not in (ROOT / "tests" / t.split("::")[0]).read_text())
    assert not missing, f"tests/conftest.py names tests that do not exist: {missing}"
