"""Searched schedules run each block's micro-batches in index order (the paper's Property 1).

Runtimes that index micro-batches by arrival, such as PyTorch's pipelining losses, depend on it.
"""
from __future__ import annotations

import pytest

from tessel_dsl.lang.parser import parse_file
from tessel_dsl.search.driver import search
from tests.paths import SPECS


@pytest.mark.parametrize("name", ["vshape", "xshape", "mshape", "kshape", "interleaved", "zerobubble"])
@pytest.mark.parametrize("n", [4, 8])
def test_each_block_runs_its_microbatches_in_order(name, n):
    spec = parse_file(SPECS / f"{name}.tsl", sets={"D": "2" if name in ("interleaved", "zerobubble") else "4"})
    schedule = search(spec, microbatches=n).schedule
    for block in spec.blocks:
        starts = sorted((s.start, s.mb) for s in schedule.slots if s.block == block.name)
        assert [mb for _, mb in starts] == list(range(n)), block.name
