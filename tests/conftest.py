"""Integration tests live in tests/integration/: those that start process groups, torchrun agents, the
GPU bench scripts or the `tessel` command in a subprocess, and long searches, fuzz and property runs.
tests/unit/ holds the rest. Both folders import shared support from tests/ (helpers, paths, the
pipeline and executor support modules). `python -m pytest -q tests/unit` runs the unit tests, and so
does `-m "not integration"`; CI runs everything (.ci/test-command)."""
from __future__ import annotations

from pathlib import Path

import pytest

INTEGRATION = Path(__file__).resolve().parent / "integration"


def pytest_collection_modifyitems(config, items):
    for item in items:
        if (INTEGRATION in Path(item.path).resolve().parents
                or item.get_closest_marker("slow") or item.get_closest_marker("gpu")):
            item.add_marker(pytest.mark.integration)
