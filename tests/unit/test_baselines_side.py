"""Chain baselines on placements an engineer adapts by hand: a side block folded into the stage it
feeds (1F1B, memory-capped 1F1B, 1F1B+), and interleaved 1F1B made memory-aware where its warmups
cannot simply be shortened. Each is checked against an independent reference (the spec folded by
hand) and run through the simulator."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from tessel_dsl.errors import InfeasibleError, TesselError
from tessel_dsl.lang.parser import parse, parse_file
from tessel_dsl.plan import make_plan
from tessel_dsl.search.baselines import NotApplicable, build
from tessel_dsl.search.baselines.chain import unfolded
from tessel_dsl.search.baselines.compare import baseline_row, label
from tessel_dsl.simulator import simulate

ROOT = Path(__file__).resolve().parents[2]

# A vision tower (V0, V1) on devices 0-1 feeding a language model (L0, L1) on devices 2-3, and the
# text embedding T (1 unit) on device 2 beside it, feeding L0 too. Device 0 holds 2 micro-batches
# where 1F1B keeps 4: memory binds.
TOWERS = """placement towers
devices 4
memory 8
memory 4 on 0
microbatches 8
forward V0 on 0 time 6 memory 2 grad time 12
forward V1 on 1 time 6 memory 2 grad time 12
forward T on 2 time 1 memory 0 grad time 1
forward L0 on 2 time 5 memory 2 grad time 10
forward L1 on 3 time 6 memory 2 grad time 12
V0 -> V1 -> L0 -> L1
T -> L0
independent T
derive backward
"""
# Without T at all, and with T merged into L0 by hand (L0 runs T's unit first, L0B adds TB's):
# the folded baseline lies between the two, since T may run early while L0 waits for V1.
WITHOUT = (TOWERS.replace("forward T on 2 time 1 memory 0 grad time 1\n", "")
           .replace("T -> L0\n", "").replace("independent T\n", ""))
FOLDED = WITHOUT.replace("forward L0 on 2 time 5 memory 2 grad time 10", "forward L0 on 2 time 6 memory 2 grad time 11")

CHAIN_BASELINES = ("1f1b", "1f1b-capped", "1f1b+")


def _simulated(spec, sched):
    report = simulate(make_plan(spec, sched))
    assert report.deadlock is None and report.overflow_count == 0
    assert all(p <= c for p, c in zip(report.peak_memory, spec.capacities))
    return report


@pytest.mark.parametrize("name", CHAIN_BASELINES)
def test_a_side_block_runs_in_the_stage_it_feeds(name):
    side, by_hand, without = parse(TOWERS, "t.tsl"), parse(FOLDED, "f.tsl"), parse(WITHOUT, "w.tsl")
    with unfolded(), pytest.raises(NotApplicable):
        build(side, name, 8)  # as written, no chain of stages: what `compare` said before
    sched = build(side, name, 8)
    assert build(without, name, 8).makespan(without) <= sched.makespan(side) <= build(by_hand, name, 8).makespan(by_hand)
    # T runs right before L0 on device 2, each micro-batch; TB right after L0B
    on2 = [(s.block, s.mb) for s in sorted(sched.slots) if 2 in side.block(s.block).devices]
    for mb in range(8):
        assert on2.index(("T", mb)) + 1 == on2.index(("L0", mb))
        assert on2.index(("L0B", mb)) + 1 == on2.index(("TB", mb))
    assert _simulated(side, sched).makespan == sched.makespan(side)
    row, _ = baseline_row(side, name, 8)
    assert row.status == "ok" and "side blocks folded" in label(row)
    assert row.extra["placement"].endswith("T (device 2) in the stage of L0")


def test_a_chain_as_written_is_not_labelled_adapted():
    row, _ = baseline_row(parse(FOLDED, "f.tsl"), "1f1b-capped", 8)
    assert row.status == "ok" and "placement" not in row.extra and label(row) == "1f1b-capped"


def _interleaved(memory: int):
    spec = parse_file(ROOT / "specs" / "interleaved.tsl", sets={"D": "4"})  # 2 chunks per device
    return dataclasses.replace(spec, memory=memory)


def test_interleaved_1f1b_is_memory_aware_where_shortened_warmups_deadlock():
    # M=4: every device holds 4 chunk activations; Megatron's warmups shortened together deadlock
    # or overflow at every depth, yet an order exists: played under memory, forwards in smaller sets.
    spec = _interleaved(4)
    sched = build(spec, "interleaved-1f1b", 16)
    report = _simulated(spec, sched)
    assert report.makespan == sched.makespan(spec)
    assert max(sched.peak_memory(spec)) <= 4
    row, _ = baseline_row(spec, "interleaved-1f1b", 16)
    assert label(row) == "interleaved-1f1b (capped to memory)"
    # no schedule beats one micro-batch's memory round trip on device 0 over what M holds there
    from tessel_dsl.search.membound import memory_period_bound

    assert row.period >= float(memory_period_bound(spec))


def test_interleaved_1f1b_with_room_is_megatrons_order():
    roomy = _interleaved(16)
    sched = build(roomy, "interleaved-1f1b", 16)
    assert sched.makespan(roomy) == 140  # at the period bound 8 (docs/compare.md)
    assert label(baseline_row(roomy, "interleaved-1f1b", 16)[0]) == "interleaved-1f1b"
    tight = _interleaved(8)  # shortened warmups alone give 234 here
    short = build(tight, "interleaved-1f1b", 16)
    assert short.makespan(tight) < 234 and _simulated(tight, short).makespan == short.makespan(tight)


def test_interleaved_1f1b_still_refuses_what_no_order_fits():
    with pytest.raises((InfeasibleError, TesselError)):
        build(_interleaved(0), "interleaved-1f1b", 4)
