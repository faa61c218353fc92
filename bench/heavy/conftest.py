"""The on-demand checks too heavy for the test suite (`python -m pytest -q bench/heavy`): the
same fixtures and one torch thread per test process as tests/ (tests/conftest.py)."""
from tests.conftest import pytest_runtest_setup  # noqa: F401
