"""The makespan bound with a spec's `link` (`bounds.py`, `membound.py`, module texts on lags):
every dependency chain a bound sums counts the transfer lag of each edge it crosses, as the search
keeps it. Worked by hand on small specs, checked against the time-optimal solve (an independent
exact model that keeps the same lags), and on an 8-GPU chain where the search's plan is now
proven optimal by the bound."""
from __future__ import annotations

import random
from dataclasses import replace

import pytest

from tessel_dsl.ir import Link
from tessel_dsl.lang.parser import parse, parse_file
from tessel_dsl.search.bounds import idle_bound, makespan_bound
from tessel_dsl.search.driver import search
from tessel_dsl.search.lags import edge_lags
from tessel_dsl.search.membound import holdings, memory_makespan_bound, memory_period_bound
from tessel_dsl.search.onecopy import one_copy_chain_bound
from tessel_dsl.search.optimal import optimal
from tests.paths import ROOT


def _no_link(spec):
    return replace(spec, link=Link(0.0, 0.0))


def chain2(lag: int, memory: int = 8, n: int = 4):
    """F0 (2) on 0 -> F1 (3) on 1 -> B1 (4) on 1 -> B0 (3) on 0, each holding 1 until its backward."""
    return parse(f"""placement chain2
devices 2
memory {memory}
microbatches {n}
mode train
{f'link latency {lag}' if lag else ''}
forward F0 on 0 time 2 memory 1
forward F1 on 1 time 3 memory 1
backward B1 of F1 time 4 memory -1
backward B0 of F0 time 3 memory -1
F0 -> F1 -> B1 -> B0
""")


def test_two_device_chain_by_hand():
    spec = chain2(2)
    assert edge_lags(spec) == {("F0", "F1"): 2, ("B1", "B0"): 2}
    # Device 1 waits for F0 and its transfer (2 + 2) and, after its last block B1, the transfer
    # back and B0 still run (2 + 3): 4 + 7 N + 5. Without the link: 2 + 7 N + 3.
    assert makespan_bound(spec, 4) == 4 + 7 * 4 + 5 == 37
    assert makespan_bound(_no_link(spec), 4) == 2 + 7 * 4 + 3
    # One micro-batch: the whole chain, 2 + 2 + 3 + 4 + 2 + 3.
    assert makespan_bound(spec, 1) == 16
    for n in (1, 4):
        best = optimal(spec, n)
        assert best.info.proven and best.schedule.makespan(spec) == makespan_bound(spec, n)


def vshape(n: int = 4):
    """A V over two devices (F0 F1 F2 F3 on 0 1 1 0, backwards retracing them), forwards 1,
    backwards 2, lag 1 on the four edges that change device."""
    return parse(f"""placement v2
devices 2
memory 8
microbatches {n}
mode train
link latency 1
forward F0 on 0 time 1 memory 1
forward F1 on 1 time 1 memory 1
forward F2 on 1 time 1 memory 1
forward F3 on 0 time 1 memory 1
backward B3 of F3 time 2 memory -1
backward B2 of F2 time 2 memory -1
backward B1 of F1 time 2 memory -1
backward B0 of F0 time 2 memory -1
F0 -> F1 -> F2 -> F3 -> B3 -> B2 -> B1 -> B0
""")


def test_v_by_hand():
    spec = vshape()
    assert set(edge_lags(spec)) == {("F0", "F1"), ("F2", "F3"), ("B3", "B2"), ("B1", "B0")}
    # Device 1 (work 6 per micro-batch) can start no earlier than F0 and its lag (1 + 1) and
    # after its last block (B1 or F2) at least B1's lag and B0 must still run (1 + 2): 6 N + 5.
    # The chain of one micro-batch: 4 + 8 + 4 lags = 16.
    assert makespan_bound(spec, 4) == 2 + 6 * 4 + 3 == 29
    assert makespan_bound(_no_link(spec), 4) == 1 + 6 * 4 + 2
    assert makespan_bound(spec, 1) == 16
    best = optimal(spec, 4)
    assert best.info.proven and best.schedule.makespan(spec) == 29


def test_memory_bound_chain_by_hand():
    # Device 0 holds one micro-batch at a time (memory 1): from F0's start to B0's end runs
    # F0 2, lag 2, F1 3, B1 4, lag 2, B0 3 = 16, so N micro-batches take 16 N, not the
    # 12 N the chain would without the link.
    spec = chain2(2, memory=1)
    got = {(h.device, h.alloc, h.free): h for h in holdings(spec)}
    assert (got[(0, "F0", "B0")].chain, got[(0, "F0", "B0")].limit) == (16, 1)
    assert memory_period_bound(spec) == 16
    assert memory_makespan_bound(spec, 3) == makespan_bound(spec, 3) == 48
    assert makespan_bound(_no_link(spec), 3) == 36
    # The one-copy chain bound: with one micro-batch on device 0 both stages form one run, whose
    # cycle crosses both edges: 5 + 7 + 2 + 2.
    assert one_copy_chain_bound(spec) == 16
    assert one_copy_chain_bound(_no_link(spec)) == 12
    best = optimal(spec, 3)
    assert best.info.proven and best.schedule.makespan(spec) == 48


def test_lags_stay_out_of_the_idle_bound():
    # The bounds.py module text's example: a transfer from A leaves every device free for the
    # all-device E, so device 0 does not idle through the lag.
    spec = parse("""placement idle
devices 2
memory 4
microbatches 2
mode infer
link latency 5
forward A on 1 time 1
forward B on 0 time 1
forward E on all time 5
A -> B
""")
    best = optimal(spec, 2)
    assert best.info.proven and best.schedule.makespan(spec) == 13
    assert idle_bound(spec, 2) == 1 + 2 * 6 == 13
    assert makespan_bound(spec, 2) <= 13


def _random_chain(rng: random.Random, n: int):
    devices = rng.choice([2, 3])
    stages = rng.randint(devices, devices + 2)
    place = [s % devices if rng.random() < 0.7 else rng.randrange(devices) for s in range(stages)]
    lines = [f"placement r{rng.random():.6f}".replace("0.", "x"), f"devices {devices}",
             f"memory {rng.randint(2, 6)}", f"microbatches {n}", "mode train",
             f"link latency {rng.randint(1, 3)}"]
    for s in range(stages):
        lines.append(f"forward F{s} on {place[s]} time {rng.randint(1, 3)} memory 1")
        lines.append(f"backward B{s} of F{s} time {rng.randint(1, 4)} memory -1")
    lines.append(" -> ".join([f"F{s}" for s in range(stages)] + [f"B{s}" for s in reversed(range(stages))]))
    return parse("\n".join(lines) + "\n")


@pytest.mark.parametrize("seed", range(6))
def test_bound_never_above_the_time_optimum(seed):
    rng = random.Random(seed)
    spec = _random_chain(rng, 3)
    assert edge_lags(spec)
    best = optimal(spec, 3)
    assert best.info.proven
    assert makespan_bound(spec, 3) <= best.schedule.makespan(spec)
    assert makespan_bound(spec, 3) >= makespan_bound(_no_link(spec), 3)


CHAIN8 = """placement chain8_embed_head
resolution time 100us
resolution memory 10MB
devices 8
memory 80GB reserve 30GB
link latency 0.3ms
microbatches 24
mode train
forward E on 0 time 0.6ms memory 0.2GB
weight_grad EW of E time 0.6ms memory -0.2GB
for i in 0..7:
    forward F{i} on i time 2.4ms memory 4GB
    input_grad I{i} of F{i} time 2.4ms
    weight_grad W{i} of F{i} time 1.8ms memory -4GB
    I{i} -> W{i}
forward H on 7 time 0.9ms memory 1.5GB
input_grad HI of H time 0.9ms
weight_grad HW of H time 0.6ms memory -1.5GB
HI -> HW
E -> chain(F{i} for i in 0..7) -> H -> HI -> chain(I{7-i} for i in 0..7) -> EW
"""


def test_eight_gpu_chain_with_a_link_is_proven():
    spec = parse(CHAIN8)
    assert set(edge_lags(spec).values()) == {3}  # 0.3 ms in units of 0.1 ms
    # GPU 7 runs F7 I7 W7 H HI HW: 24 + 24 + 18 + 9 + 9 + 6 = 90 per micro-batch, and starts
    # after E, F0..F6 and the seven transfers between them: 6 + 7 * 24 + 7 * 3 = 195.
    assert makespan_bound(spec, 24) == 195 + 24 * 90 == 2355
    assert makespan_bound(_no_link(spec), 24) == 2355 - 21
    result = search(spec)
    assert result.schedule.makespan(spec) == result.info.makespan_bound == 2355
    assert result.info.proven


# Bounds of shipped specs without a link (or with one too fast to give a lag), as they were
# before lags counted: they must not move. (At N = 4 the zero-bubble chain's is 22 now, from
# `subset_bound`, not from any lag: test_bounds_subset.py.)
UNCHANGED = {"specs/zerobubble.tsl": {1: 13, 16: 67}, "specs/nnshape.tsl": {1: 20, 4: 44, 16: 140},
             "specs/mshape.tsl": {1: 18, 4: 36, 16: 108}, "bench/specs/real/memchain.tsl": {1: 282, 4: 417, 24: 1353}}


@pytest.mark.parametrize("path", sorted(UNCHANGED))
def test_no_lag_no_change(path):
    spec = parse_file(ROOT / path)
    assert not edge_lags(spec)
    assert {n: makespan_bound(spec, n) for n in UNCHANGED[path]} == UNCHANGED[path]
