"""A rank killed mid-step under spawned ranks (fresh interpreters, as on GPUs) is named without a
library traceback; tests/integration/test_executor_faults.py runs the same with forked ranks."""
from __future__ import annotations

import pytest

pytest.importorskip("torch")

from tests.integration.test_executor_faults import test_a_killed_rank_is_named_without_a_library_traceback as killed  # noqa: E402,E501


def test_a_killed_spawned_rank_is_named_without_a_library_traceback(monkeypatch):
    killed(monkeypatch, "spawn")
