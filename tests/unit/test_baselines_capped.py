"""Memory-capped 1F1B (`search/baselines/capped.py`): timelines worked out by hand, 1F1B's closed
form when memory is no limit, and the memory-bound chain of bench/specs/real/memchain.tsl."""
from __future__ import annotations

import pytest

from tessel_dsl.lang.parser import parse_file
from tessel_dsl.search.baselines import build
from tessel_dsl.search.baselines.compare import baseline_row
from tessel_dsl.search.membound import memory_makespan_bound
from tests.helpers import vshape
from tests.paths import ROOT


def _order(spec, sched, d):
    return [(s.block, s.mb) for s in sched.per_device(spec)[d]]


@pytest.mark.parametrize("d", [2, 3, 5])
@pytest.mark.parametrize("bwd", [1, 2, 3])
def test_is_1f1b_when_memory_holds_its_warmups(d, bwd):
    for n in (1, 2, d, 2 * d + 1):
        spec = vshape(devices=d, memory=d, fwd=1, bwd=bwd, microbatches=n)
        assert build(spec, "1f1b-capped").makespan(spec) == (n + d - 1) * (1 + bwd)


def test_one_microbatch_at_a_time():
    # D=2, F 1, B 2, M=1: F0 0-1, F1 1-2, B1 2-4, B0 4-6, and the next micro-batch can only start
    # on device 0 once B0 has freed its memory: 6 per micro-batch.
    spec = vshape(devices=2, memory=1, fwd=1, bwd=2, microbatches=3)
    s = build(spec, "1f1b-capped")
    assert s.makespan(spec) == 18
    assert _order(spec, s, 0) == [("F0", 0), ("B0", 0), ("F0", 1), ("B0", 1), ("F0", 2), ("B0", 2)]


def test_three_stages_two_in_flight_by_hand():
    # D=3, F 1, B 2, M=2, N=4. Limits min(k, D - s): 2, 2, 1. Played out:
    #   t=0 s0 F:0 | t=1 s0 F:1, s1 F:0 | t=2 s1 F:1, s2 F:0 | t=3 s2 B:0 (3-5)
    #   t=5 s1 B:0 (5-7), s2 F:1 | t=6 s2 B:1 (6-8) | t=7 s0 B:0 (7-9) | t=8 s1 B:1 (8-10)
    #   t=9 s0 F:2 | t=10 s0 B:1 (10-12), s1 F:2 | t=11 s2 F:2 | t=12 s0 F:3, s2 B:2 (12-14)
    #   t=13 s1 F:3 | t=14 s1 B:2 (14-16), s2 F:3 | t=15 s2 B:3 (15-17) | t=16 s0 B:2 (16-18)
    #   t=17 s1 B:3 (17-19) | t=19 s0 B:3 (19-21)
    spec = vshape(devices=3, memory=2, fwd=1, bwd=2, microbatches=4)
    s = build(spec, "1f1b-capped")
    assert s.makespan(spec) == 21
    assert _order(spec, s, 0) == [("F0", 0), ("F0", 1), ("B0", 0), ("F0", 2), ("B0", 1), ("F0", 3),
                                  ("B0", 2), ("B0", 3)]
    assert s.peak_memory(spec) == (2, 2, 1)
    # plain 1F1B gives every stage the same one-forward warmup here and needs longer
    assert build(spec, "1f1b").makespan(spec) > 21


def test_memchain_keeps_device_0_within_its_room_and_beats_the_fixed_orders():
    spec = parse_file(ROOT / "bench/specs/real/memchain.tsl")
    capped = build(spec, "1f1b-capped")  # validated with each device's memory inside build
    assert capped.peak_memory(spec)[0] <= spec.capacity(0) == 20
    assert capped.peak_memory(spec)[0] // 3 == 6  # six 3 GB micro-batches on device 0
    assert capped.makespan(spec) >= memory_makespan_bound(spec, spec.microbatches)
    for other in ("1f1b", "gpipe"):
        assert capped.makespan(spec) < build(spec, other).makespan(spec)
    row, _ = baseline_row(spec, "1f1b-capped", spec.microbatches)
    assert row.status == "ok" and not row.over_memory


def test_inference_is_forwards_in_order():
    spec = parse_file(ROOT / "specs/vshape.tsl", mode="infer")
    s = build(spec, "1f1b-capped", 4)
    assert _order(spec, s, 0) == [("F0", mb) for mb in range(4)]
    assert s.makespan(spec) == build(spec, "1f1b", 4).makespan(spec)
