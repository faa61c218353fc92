"""Simulator core: 1F1B bubble formula, agreement with the plan, memory, multi-device blocks, report."""
from __future__ import annotations

import json

import pytest

from tessel_dsl.errors import SimulationError
from tessel_dsl.ir import Block, Edge, Kind, Spec
from tessel_dsl.lower import lower
from tessel_dsl.plan import make_plan
from tessel_dsl.program import Action, Op, Program
from tessel_dsl.schedule import Schedule, Slot
from tessel_dsl.simulator import simulate
from tests.helpers import one_f_one_b, vshape
from tests.unit.test_lower import mshape, sequential


@pytest.mark.parametrize("p", [2, 4, 8])
@pytest.mark.parametrize("m", [1, 3, 4, 8, 16, 64])
def test_1f1b_bubble_formula(p, m):
    spec = vshape(p, p, fwd=1, bwd=2)
    sch = one_f_one_b(spec, m)
    report = simulate(make_plan(spec, sch))
    assert report.ok
    assert report.bubble == pytest.approx((p - 1) / (m + p - 1))
    assert report.makespan == (m + p - 1) * 3
    assert all(b == pytest.approx(report.bubble) for b in report.bubble_per_device)


@pytest.mark.parametrize("blocking", [False, True])
def test_free_links_reproduce_planned_start_times(blocking):
    spec = vshape(4, 4)
    sch = one_f_one_b(spec, 12)
    report = simulate(make_plan(spec, sch, blocking=blocking))
    assert report.drift_max == 0 and report.drift_blocks == 0
    assert report.makespan == sch.makespan(spec)
    assert report.bubble == pytest.approx(sch.bubble_rate(spec))
    assert report.peak_memory == sch.peak_memory(spec)
    assert report.period == 3  # F + B per device per micro-batch in 1F1B's steady state
    assert report.comm_total == 0 and report.comm_exposed == 0


def test_multi_device_blocks_hold_all_their_devices():
    spec = mshape()
    sch = sequential(spec, 3)
    report = simulate(make_plan(spec, sch))
    assert report.ok and report.drift_max == 0
    for d in range(spec.devices):
        starts_e = [r[0] for r in report.timeline[d] if r[2] == "E"]
        assert starts_e == [s.start for s in sorted(sch.slots) if s.block == "E"]


def test_joint_block_waits_for_the_last_member():
    blocks = (Block("A", Kind.FORWARD, (0,), 5, 0), Block("J", Kind.FORWARD, (0, 1), 2, 0))
    spec = Spec("j", 2, 4, blocks, ())
    progs = (Program(0, (Action(Op.COMPUTE, "A", 0), Action(Op.COMPUTE, "J", 0))),
             Program(1, (Action(Op.COMPUTE, "J", 0),)))
    report = simulate((spec, progs))
    assert report.ok
    assert report.timeline[1] == ((5.0, 7.0, "J", 0),)
    assert report.makespan == 7
    # idle until device 0 arrives: waiting for a peer, not for data (nothing is sent)
    assert report.peer_wait_per_device == (0, 5) and report.wait_per_device == (0, 0)


def test_memory_overflow_is_reported_with_time_device_action():
    spec = vshape(3, 2)  # GPipe-like order needs 3 units on device 0, M is 2
    orders = []
    for d in range(3):
        orders.append([(f"F{d}", mb) for mb in range(3)] + [(f"B{d}", mb) for mb in range(3)])
    from tessel_dsl.search.compact import compact

    sch = Schedule(3, compact(spec, orders=orders))
    report = simulate((spec, lower(spec, sch), sch))
    assert not report.ok and report.deadlock is None
    first = report.overflows[0]
    assert (first.device, first.time, first.action, first.used, first.capacity) == (0, 2, "F0:2", 3, 2)
    assert report.peak_memory[0] == 3
    assert "memory overflow on device 0 at t=2: F0:2" in report.problems()[0]
    with pytest.raises(SimulationError, match="memory overflow on device 0"):
        simulate((spec, lower(spec, sch), sch), strict=True)


def test_blocking_switch_relowers_the_schedule():
    spec = vshape(3, 3)
    plan = make_plan(spec, one_f_one_b(spec, 4))
    assert simulate(plan).blocking is False
    assert simulate(plan, blocking=True).blocking is True
    with pytest.raises(SimulationError, match="needs the schedule"):
        simulate((spec, plan.programs), blocking=True)


@pytest.mark.parametrize("bad, message", [
    ((Program(0, (Action(Op.COMPUTE, "F1", 0),)),), "F1 is placed on device"),
    ((Program(0, (Action(Op.COMPUTE, "Zed", 0),)),), "unknown block 'Zed'"),
    ((Program(0, (Action(Op.SEND, "F0", 0, (0,)),)),), "peer device out of range"),
    ((Program(0, (Action(Op.SEND, "F0", 0, (7,)),)),), "peer device out of range"),
])
def test_malformed_programs_are_rejected(bad, message):
    spec = vshape(2, 2)
    progs = bad + (Program(1, ()),)
    with pytest.raises(SimulationError, match=message):
        simulate((spec, progs))


def test_program_count_must_match_devices():
    spec = vshape(2, 2)
    with pytest.raises(SimulationError, match="2 devices"):
        simulate((spec, (Program(0, ()),)))


def test_report_json_is_plain_and_stable():
    spec = vshape(2, 2)
    report = simulate(make_plan(spec, one_f_one_b(spec, 4)))
    data = json.loads(json.dumps(report.to_json()))
    assert data["ok"] is True and data["deadlock"] is None
    assert data["makespan"] == 15 and data["devices"] == 2 and data["microbatches"] == 4
    assert data["bubble"] == pytest.approx(1 / 5, abs=1e-6)
    assert data["peak_memory"] == [2, 1] and data["memory_capacity"] == 2
    assert data["comm"]["transfers"] == 8
    assert data["drift"] == {"max": 0.0, "mean": 0.0, "blocks": 0}


def test_steady_period_of_a_shifted_pattern():
    from tessel_dsl.simulator.metrics import steady_period

    starts = {("A", mb): 10.0 + 4 * mb for mb in range(20)}
    starts[("A", 0)] = 0.0  # warmup irregularity is ignored
    assert steady_period(starts, 20) == 4
    assert steady_period(starts, 2) is None


def test_empty_schedule_simulates_to_nothing():
    spec = vshape(2, 2)
    report = simulate((spec, (Program(0, ()), Program(1, ())), Schedule(0, ())))
    assert report.ok and report.makespan == 0 and report.bubble == 0


@pytest.mark.parametrize("n", [1, 2, 3])
def test_sequential_helper_is_a_valid_schedule(n):
    # Several tests simulate this helper's schedules; it must itself pass the validator, with the
    # micro-batches strictly one after another (each E starts when the previous EB has ended).
    from tessel_dsl.validate import validate

    spec = mshape()
    sch = sequential(spec, n)
    validate(spec, sch)
    chain = sum(b.time for b in spec.blocks)  # E, F0..F3, B3..B0, EB: one path through every block
    assert [s.start for s in sch.slots if s.block == "E"] == [mb * chain for mb in range(n)]
    assert sch.makespan(spec) == n * chain


def _uneven() -> tuple[Spec, Schedule]:
    """Three devices that idle differently: A (4) on 0, B (1) on 1, C (2) on 1 and 2, D (3) on 2."""
    blocks = (Block("A", Kind.FORWARD, (0,), 4, 0), Block("B", Kind.FORWARD, (1,), 1, 0),
              Block("C", Kind.FORWARD, (1, 2), 2, 0), Block("D", Kind.FORWARD, (2,), 3, 0))
    spec = Spec("uneven", 3, 4, blocks, (Edge("A", "B"), Edge("B", "C"), Edge("C", "D")), 2)
    return spec, sequential(spec, 2)


def test_total_bubble_counts_every_device_not_the_worst():
    spec, sch = _uneven()
    report = simulate(make_plan(spec, sch))
    # Device 2 runs C:0, D:0 (7..10), then C:1 (10..12) and D:1 (12..15).
    assert report.ok and report.makespan == 15
    # Busy time per device straight from the slots: a multi-device block counts on each device.
    busy = [0] * spec.devices
    for s in sch.slots:
        for d in spec.block(s.block).devices:
            busy[d] += spec.block(s.block).time
    assert busy == [8, 6, 10]
    per = [1 - b / 15 for b in busy]
    assert report.bubble_per_device == pytest.approx(per)
    assert report.bubble == pytest.approx(1 - sum(busy) / (3 * 15))  # 21 of 45 device-time units idle
    assert report.bubble == pytest.approx(7 / 15)
    assert report.bubble != pytest.approx(max(per))  # the worst device (9/15) is not the total
    assert report.to_json()["bubble"] == pytest.approx(7 / 15, abs=1e-6)


def test_bubbles_formula_on_uneven_devices():
    from tessel_dsl.simulator.metrics import bubbles

    total, per = bubbles([8.0, 6.0, 10.0], 14.0)
    assert per == pytest.approx((6 / 14, 8 / 14, 4 / 14))
    assert total == pytest.approx(18 / 42)
    assert bubbles([0.0, 0.0], 0.0) == (0.0, (0.0, 0.0))
    assert bubbles([], 5.0) == (0.0, ())
    assert bubbles([3.0, 1.0], 2.0) == (0.0, (0.0, 0.5))  # busy beyond the span never goes negative


def test_bubbles_below_one_time_unit():
    from tessel_dsl.simulator.metrics import bubbles

    total, per = bubbles([0.25, 0.5], 0.5)
    assert total == pytest.approx(0.25) and per == pytest.approx((0.5, 0.0))


# Gaps between consecutive starts of block A: micro-batch k+1 starts gaps[k] after k. Only the
# middle half counts: gaps of micro-batches N//4 .. 3N//4 - 1 (hand-worked expected means).
@pytest.mark.parametrize("gaps, expected", [
    ([5, 7], 6.0),                            # N=3: gaps 0, 1
    ([9, 2, 4], 3.0),                         # N=4: gaps 1, 2
    ([9, 2, 4, 8], 3.0),                      # N=5: gaps 1, 2
    ([9, 9, 1, 2, 3, 4, 9], 2.5),             # N=8: gaps 2..5
    ([9, 9, 9, 1, 2, 3, 7, 8, 9, 9, 9], 5.0),  # N=12: gaps 3..8
])
def test_steady_period_uses_the_middle_half(gaps, expected):
    from tessel_dsl.simulator.metrics import steady_period

    starts, t = {("A", 0): 0.0}, 0.0
    for mb, g in enumerate(gaps, start=1):
        t += g
        starts[("A", mb)] = t
    assert steady_period(starts, len(gaps) + 1) == expected


def test_steady_period_is_the_mean_gap_of_a_bursty_schedule():
    from tessel_dsl.simulator.metrics import steady_period

    # Bursts of six micro-batches: gaps 329 five times, then 2969. N=24: the middle half is gaps
    # 6..17, two whole bursts: (5 * 329 + 2969) / 6 = 4614 / 6 = 769 per micro-batch (the median
    # gap, 329, is what one burst's micro-batches take, not what the run takes per micro-batch).
    gaps = ([329] * 5 + [2969]) * 4
    starts, t = {("A", 0): 0.0}, 0.0
    for mb, g in enumerate(gaps[:23], start=1):
        t += g
        starts[("A", mb)] = t
    assert steady_period(starts, 24) == 769.0


def test_steady_period_leaves_out_a_warmup_gap_before_a_repeating_pattern():
    from tessel_dsl.simulator.metrics import steady_period

    # N=16: the middle half is gaps 4..11 = 7, then 1, 4 repeating. The pattern (cycle 2) covers
    # the last 7 of the 8 gaps: three whole cycles, (4 + 1) * 3 / 6 = 2.5 (all 8 would give 3.1).
    gaps = [9, 9, 9, 9, 7, 1, 4, 1, 4, 1, 4, 1, 9, 9, 9]
    starts, t = {("A", 0): 0.0}, 0.0
    for mb, g in enumerate(gaps, start=1):
        t += g
        starts[("A", mb)] = t
    assert steady_period(starts, 16) == 2.5


def test_steady_period_skips_missing_starts_and_may_find_nothing():
    from tessel_dsl.simulator.metrics import steady_period

    starts = {("A", mb): 4.0 * mb for mb in range(8)}
    del starts[("A", 3)]  # gaps 2->3 and 3->4 are unknown; 4->5 is the only other one
    assert steady_period(starts, 8) == 4.0
    assert steady_period({("A", 0): 0.0}, 8) is None  # no gap in the window at all
    assert steady_period({}, 3) is None


def test_drift_against_the_plan():
    from tessel_dsl.simulator.metrics import drift

    sch = Schedule(1, (Slot(0, "A", 0), Slot(0, "C", 0), Slot(2, "B", 0), Slot(6, "D", 0)))
    starts = {("A", 0): 0.0, ("B", 0): 2.5, ("C", 0): 1e-9, ("D", 0): 9.0}
    worst, mean, moved = drift(starts, sch)
    assert worst == 3.0
    assert mean == pytest.approx((0 + 0.5 + 1e-9 + 3.0) / 4)
    assert moved == 2  # 1e-9 is not a move
    assert drift(starts, None) is None and drift(starts, Schedule(0, ())) is None
    assert drift({}, sch) is None


def _pair():
    blocks = (Block("A", Kind.FORWARD, (0,), 1, 0), Block("B", Kind.FORWARD, (1,), 1, 0),
              Block("C", Kind.OTHER, (1,), 10, 0))
    from tessel_dsl.ir import Tensor

    return Spec("pair", 2, 4, blocks, (Edge("A", "B", Tensor((100,), "u8")),))


def test_exposed_comm_counts_the_sender_side():
    # A blocking sender waits for the whole transfer (t=1..3) while the non-blocking receiver is
    # busy with C: the transfer is exposed on the sender's side only, and still counts as exposed.
    from tessel_dsl.ir import Link

    spec = _pair()
    p0 = Program(0, (Action(Op.COMPUTE, "A", 0), Action(Op.SEND, "A", 0, (1,))), blocking=True)
    p1 = Program(1, (Action(Op.RECV, "A", 0, (0,)), Action(Op.COMPUTE, "C", 0),
                     Action(Op.WAIT, "A", 0, (0,)), Action(Op.COMPUTE, "B", 0)))
    report = simulate((spec, (p0, p1)), link=Link(2.0, 0.0))
    assert report.ok and report.wait_per_device == (2.0, 0.0)
    assert (report.comm_total, report.comm_exposed, report.comm_hidden) == (2.0, 2.0, 0.0)


def test_makespan_includes_a_trailing_comm_wait_and_a_stuck_device():
    from tessel_dsl.ir import Link

    spec = _pair()
    # Device 0's blocking send waits until device 1 receives after C (10) plus 2: its last compute
    # ends at 1, yet the iteration ends at 12.
    p0 = Program(0, (Action(Op.COMPUTE, "A", 0), Action(Op.SEND, "A", 0, (1,))), blocking=True)
    p1 = Program(1, (Action(Op.COMPUTE, "C", 0), Action(Op.RECV, "A", 0, (0,))), blocking=True)
    report = simulate((spec, (p0, p1)), link=Link(2.0, 0.0))
    assert report.ok and report.makespan == 12
    # A device stuck on a receive that never comes: the makespan is where it got to (A ends at 1).
    stuck = (Program(0, (Action(Op.COMPUTE, "A", 0), Action(Op.RECV, "C", 0, (1,)), Action(Op.WAIT, "C", 0, (1,)))),
             Program(1, ()))
    report = simulate((spec, stuck))
    assert not report.ok and report.deadlock is not None and report.makespan == 1
    # Stuck before computing anything, next to a device with nothing to do: nothing ran at all.
    at_once = (Program(0, (Action(Op.RECV, "C", 0, (1,)), Action(Op.WAIT, "C", 0, (1,)))), Program(1, ()))
    report = simulate((spec, at_once))
    assert not report.ok and report.makespan == 0


ZB16 = """placement zb16
resolution time 1ms
resolution memory 10MB
devices 16
memory 24GB reserve 7GB
memory 24GB reserve 10.7GB on 0, 15
microbatches 32
mode train
forward E on 0 time 1ms memory 0
input_grad EI of E time 1ms memory 0
for i in 0..15:
    forward F{i} on i time 69ms memory 1.14GB
    input_grad I{i} of F{i} time 69ms memory -0.4GB
    weight_grad W{i} of F{i} time 69ms memory -0.74GB
    I{i} -> W{i}
forward H on 15 time 72ms memory 3.15GB
input_grad HI of H time 72ms memory -3.15GB
E -> chain(F{i} for i in 0..15) -> H -> HI -> chain(I{15-i} for i in 0..15) -> EI
"""


def test_steady_period_ignores_a_repetend_the_schedule_does_not_run():
    # A plan that runs a baseline's order for its N keeps its repetend for other N only
    # (`repetend_start` None), so the steady part is the middle half of the run, not the
    # repetend's micro-batches: read over those (here nearly the whole run) memory-capped ZB-H1
    # on 16 GPUs seemed to take 348.7 ms a micro-batch, below the last GPU's 351 ms of work.
    from dataclasses import replace

    from tessel_dsl.lang.parser import parse
    from tessel_dsl.schedule import Repetend
    from tessel_dsl.search.baselines import build

    spec = parse(ZB16)
    order = build(spec, "zb-h1-capped", 32)
    kept = replace(order, repetend=Repetend(1, 2423, tuple(Slot(0, b.name, 0) for b in spec.blocks)))
    assert kept.repetend_start is None
    got = simulate(make_plan(spec, kept))
    assert got.period == simulate(make_plan(spec, order)).period == 351 == got.lower_bound
