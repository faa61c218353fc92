"""Integration tests live in tests/integration/: those that start process groups, torchrun agents, the
GPU bench scripts or the `tessel` command in a subprocess, and long searches, fuzz and property runs.
tests/unit/ holds the rest. Both folders import shared support from tests/ (helpers, paths, the
pipeline and executor support modules). `python -m pytest -q tests/unit` runs the unit tests, and so
does `-m "not integration"`; CI runs everything (.ci/test-command)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

INTEGRATION = Path(__file__).resolve().parent / "integration"


def pytest_collection_modifyitems(config, items):
    for item in items:
        if (INTEGRATION in Path(item.path).resolve().parents
                or item.get_closest_marker("slow") or item.get_closest_marker("gpu")):
            item.add_marker(pytest.mark.integration)


def pytest_runtest_setup(item):
    # The tests' models are tiny: torch's intra-op thread pool costs more than it saves, most of
    # all on a busy machine of two cores: the one-process reference ran 28 s of CPU for 20 steps
    # of the test Llama on two threads, 1.4 s on one, with the same losses (load average about 7).
    # Ranks run one thread each already (run_ranks, rank.py); this is the test process itself.
    torch = sys.modules.get("torch")
    if torch is not None and torch.get_num_threads() != 1:
        torch.set_num_threads(1)
