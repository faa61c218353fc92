"""The search on the real-cost specs of bench/specs/real/ (1 ms resolution, memory in GB): a small
sample of bench/search_real.py, which runs every spec at D = 8 and 16."""
from __future__ import annotations

from pathlib import Path

import pytest

from tessel_dsl.lang.parser import parse_file
from tessel_dsl.search.baselines import build
from tessel_dsl.search.driver import search
from tessel_dsl.validate import validate

REAL = Path(__file__).resolve().parent.parent / "bench" / "specs" / "real"


def _busiest(spec) -> int:
    # The period's lower bound recomputed from the blocks: each device's work for one micro-batch.
    work = [0] * spec.devices
    for b in spec.blocks:
        for d in set(b.devices):
            work[d] += b.time
    return max(work)


@pytest.mark.parametrize("name, bound, baseline", [
    ("chain8", 53 + 105, "1f1b"),   # the last stage, with the head: forward 53 ms, backward 105 ms
    ("kshape8", 19 + 39 + 11 + 14, None),  # an image-tower device: F, B, J, JB
])
def test_d8_real_costs_reach_the_bound(name, bound, baseline):
    spec = parse_file(REAL / f"{name}.tsl")
    assert spec.devices == 8 and _busiest(spec) == bound
    n = 8
    result = search(spec, microbatches=n)
    info = result.info
    validate(spec, result.schedule)
    assert max(result.schedule.peak_memory(spec)) <= spec.memory
    assert info.lower_bound == bound
    per_mb = info.period / info.repetend_copies
    assert per_mb <= 1.03 * bound or info.period_proven
    assert per_mb == bound  # these two reach it exactly
    assert result.schedule.makespan(spec) >= info.makespan_bound
    if baseline is not None:
        assert result.schedule.makespan(spec) <= build(spec, baseline, n).makespan(spec)
