"""The seeds of tests/integration/test_search_devchain.py's random chains with blocks on every
device that the suite leaves out of its sample (seeds up to 40): the chain model against the
general cyclic model of the unrolled spec, one and two copies."""
from __future__ import annotations

import pytest

from tests.integration.test_search_devchain import BARRIER_SEEDS, check_random_barrier_chain


@pytest.mark.parametrize("seed", [s for s in range(40) if s not in BARRIER_SEEDS])
def test_random_barrier_chain(seed):
    check_random_barrier_chain(seed)
