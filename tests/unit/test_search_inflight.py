"""Memory-capped 1F1B with searched in-flight limits (`search/inflight.py`): valid, within memory,
shorter than the baseline's own limits where memory binds, never below the stated bound, the same
answer twice, and offered to the search as its best plan in hand."""
from __future__ import annotations

from tessel_dsl.search.baselines import build
from tessel_dsl.search.bounds import makespan_bound
from tessel_dsl.search.inflight import NAME, searched_capped
from tessel_dsl.search.refine import best_baseline
from tessel_dsl.validate import validate
from tests.helpers import vshape
from tests.unit.test_membound import chain


def test_lower_limits_beat_the_memory_limits():
    # 8 stages, forwards 3 2 3 2 ... (backwards twice), two micro-batches fit on every device.
    spec = chain([3, 2, 3, 2, 3, 2, 3, 2], 2, n=8)
    capped = build(spec, "1f1b-capped", 8)
    got = searched_capped(spec, 8)
    assert got is not None
    validate(spec, got)  # dependencies, one block at a time, memory
    assert capped.makespan(spec) == 264
    assert makespan_bound(spec, 8) <= got.makespan(spec) == 255 < 264
    assert searched_capped(spec, 8).slots == got.slots
    best, name = best_baseline(spec, 8, than=None)
    assert name == NAME and best.makespan(spec) == 255


def test_nothing_when_memory_does_not_bind():
    # 1F1B's own depths fit: it reaches the time bound, no lower limit can be shorter.
    spec = vshape(devices=4, memory=4, fwd=1, bwd=2, microbatches=8)
    assert searched_capped(spec, 8) is None
