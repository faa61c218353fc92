"""The bound of a device that fills its memory before it may free any (`memfill.fill_bound`):
worked by hand on two chunks per device, and never above the time-optimal solve (TO, an
independent exact model) on random interleaved chains where it is sharper than every other bound."""
from __future__ import annotations

import random

import pytest

from tessel_dsl.lang.parser import parse
from tessel_dsl.search import bounds
from tessel_dsl.search.memfill import fill_bound
from tessel_dsl.search.optimal import optimal
from tests.unit.test_membound_area import bound_without, two_chunks


def _without_fill(spec, n: int, monkeypatch) -> int:
    return bound_without(spec, n, monkeypatch, "tessel_dsl.search.memfill", "fill_bound", 0)


def test_two_chunks_by_hand(monkeypatch):
    # Device 0 runs F0 and F2 (1 each, taking 1) and B2 and B0 (1 each, giving it back), room 2.
    # No backward of device 0 starts before F0 F1 F2 F3 B3 (5); until then at most two forwards
    # fit: 2 of device 0's 4 N units of work. After its last forward it gives back at most 2,
    # two backwards; that last forward ends at least 5 before the end (F2's tail F3 B3 B2 B1 B0).
    # So N = 2 takes at least 5 + (8 - 2 - 2) + 5 = 14, the optimum (TO proves it), where the
    # memory-time bound gives 6 N + 1 = 13 (test_membound_area.py); N = 3 at least 18, below
    # the memory-time bound's 19; TO 20.
    spec = two_chunks(2)
    assert [fill_bound(spec, n) for n in (2, 3)] == [14, 18]
    assert [_without_fill(spec, n, monkeypatch) for n in (2, 3)] == [13, 19]
    for n, optimum in ((2, 14), (3, 20)):
        r = optimal(spec, n, effort=30)
        assert r.info.proven and r.schedule.makespan(spec) == optimum


def test_room_for_every_microbatch_adds_nothing():
    # With room for all N micro-batches at once no device runs out of forwards to do.
    assert fill_bound(two_chunks(8), 4) == 0


def _interleaved(seed: int):
    """Two chunks per device on 2 or 3 devices, random times and memory, room for a few chunks."""
    rng = random.Random(10**6 + seed)
    devices = rng.choice([2, 3])
    stages = 2 * devices
    mems = [rng.randint(1, 3) for _ in range(stages)]
    n = rng.randint(3, 6)
    per_device = max(sum(mems[s] for s in range(stages) if s % devices == d) for d in range(devices))
    room = per_device * rng.randint(1, 3) + rng.randint(0, 2)
    lines = ["placement il", f"devices {devices}", f"memory {room}", f"microbatches {n}", "mode train"]
    for s in range(stages):
        lines.append(f"forward F{s} on {s % devices} time {rng.randint(1, 4)} memory {mems[s]}")
        lines.append(f"backward B{s} of F{s} time {rng.randint(1, 6)} memory -{mems[s]}")
    lines.append(" -> ".join([f"F{s}" for s in range(stages)] + [f"B{s}" for s in reversed(range(stages))]))
    return parse("\n".join(lines) + "\n"), n


# Seeds where this bound is above every other one and TO is quick.
@pytest.mark.parametrize("seed", [87, 110, 213, 353, 377])
def test_never_above_the_time_optimum(seed, monkeypatch):
    spec, n = _interleaved(seed)
    got = fill_bound(spec, n)
    assert got > _without_fill(spec, n, monkeypatch)
    best = optimal(spec, n, effort=8, workers=1)
    assert best.schedule is not None and got <= best.schedule.makespan(spec)
    assert bounds.makespan_bound(spec, n) == got
