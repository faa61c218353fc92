"""The lint gate: `ruff check` with the project's rules (pyproject.toml: pyflakes and import order)."""
from __future__ import annotations

import subprocess
import sys

import pytest

from tests.paths import ROOT


def _ruff(*args: str) -> subprocess.CompletedProcess:
    probe = subprocess.run([sys.executable, "-m", "ruff", "--version"], capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip("ruff is not installed (pip install '.[test]' installs it)")
    return subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--output-format", "concise",
                           *args, str(ROOT)], capture_output=True, text=True, cwd=ROOT)


def test_no_unused_or_undefined_names():
    r = _ruff("--select", "F")
    assert r.returncode == 0, r.stdout + r.stderr


def test_ruff_check_passes():
    r = _ruff()
    assert r.returncode == 0, r.stdout + r.stderr
