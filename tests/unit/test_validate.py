"""The validator accepts good schedules and names device, step and block for broken ones."""
from __future__ import annotations

import pytest

from tessel_dsl.errors import ScheduleError
from tessel_dsl.schedule import Schedule, Slot
from tessel_dsl.search.compact import compact
from tessel_dsl.validate import validate
from tests.helpers import one_f_one_b, vshape


def _moved(schedule: Schedule, block: str, mb: int, start: int) -> Schedule:
    slots = tuple(Slot(start, s.block, s.mb) if (s.block, s.mb) == (block, mb) else s for s in schedule.slots)
    return Schedule(schedule.microbatches, tuple(sorted(slots)), name="broken")


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8])
def test_one_f_one_b_is_valid_and_optimal(n):
    spec = vshape(devices=3, memory=3)
    sched = one_f_one_b(spec, n)
    validate(spec, sched)
    assert sched.makespan(spec) == (n + spec.devices - 1) * 3


def test_overlap_names_device_step_and_block():
    spec = vshape()
    sched = one_f_one_b(spec, 4)
    # F0:3 runs at t=9 on device 0 in this 1F1B; pull it onto B0:0's slot.
    b00 = next(s for s in sched.slots if (s.block, s.mb) == ("B0", 0))
    broken = _moved(sched, "F0", 3, b00.start)
    with pytest.raises(ScheduleError) as e:
        validate(spec, broken)
    msg = str(e.value)
    assert f"device 0 runs two blocks at once at t={b00.start}" in msg
    assert "F0:3" in msg and "B0:0" in msg
    assert "<-- ERROR HERE" in msg


def test_dependency_names_consumer_and_producer():
    spec = vshape()
    sched = one_f_one_b(spec, 2)
    broken = _moved(sched, "F1", 0, 0)
    with pytest.raises(ScheduleError, match=r"F1:0 starts at t=0 on device 1 but F0:0 only ends at t=1"):
        validate(spec, broken)


def test_memory_overflow_names_device_and_block():
    spec = vshape(devices=2, memory=1)
    # GPipe order: all forwards first, needs 2 units on device 0 for 2 micro-batches.
    orders = [[("F0", 0), ("F0", 1), ("B0", 0), ("B0", 1)], [("F1", 0), ("F1", 1), ("B1", 0), ("B1", 1)]]
    sched = Schedule(2, compact(spec, orders=orders), name="gpipe")
    with pytest.raises(ScheduleError, match=r"memory overflow on device 0 at t=1: F0:1 brings it to 2 > M=1"):
        validate(spec, sched)
    validate(spec, sched, check_memory=False)


def test_missing_and_duplicate_blocks():
    spec = vshape(devices=2, memory=2)
    sched = one_f_one_b(spec, 2)
    missing = Schedule(2, tuple(s for s in sched.slots if (s.block, s.mb) != ("B1", 1)))
    with pytest.raises(ScheduleError, match="B1:1 is never scheduled"):
        validate(spec, missing)
    dup = Schedule(2, sched.slots + (Slot(100, "F0", 0),))
    with pytest.raises(ScheduleError, match="F0:0 is scheduled 2 times"):
        validate(spec, dup)


def test_compact_rejects_orders_that_contradict_dependencies():
    spec = vshape(devices=2, memory=2)
    orders = [[("B0", 0), ("F0", 0)], [("F1", 0), ("B1", 0)]]
    with pytest.raises(ScheduleError, match="contradict the dependencies"):
        compact(spec, orders=orders)


def test_compact_closes_gaps_and_keeps_order():
    spec = vshape(devices=2, memory=2)
    loose = one_f_one_b(spec, 3)
    spread = tuple(Slot(s.start * 3 + 7, s.block, s.mb) for s in loose.slots)
    assert compact(spec, spread) == loose.slots


def test_unwritable_output_is_a_clear_error_and_leaves_nothing(tmp_path):
    from tessel_dsl.errors import TesselError
    from tessel_dsl.fileio import write_text_atomic

    with pytest.raises(TesselError, match="cannot write"):
        write_text_atomic(tmp_path / "missing-dir" / "plan.json", "{}")
    assert list(tmp_path.iterdir()) == []
    write_text_atomic(tmp_path / "ok.json", "{}")
    assert [p.name for p in tmp_path.iterdir()] == ["ok.json"]
    assert (tmp_path / "ok.json").stat().st_mode & 0o777 == 0o644


def _free_start_before(spec, schedule: Schedule, block: str, mb: int, before: int) -> int:
    """The latest start in [0, before) where `block` finds all its devices idle, other slots left as they are."""
    devices = set(spec.block(block).devices)
    t_block = spec.block(block).time
    busy = [(s.start, s.end(spec)) for s in schedule.slots
            if (s.block, s.mb) != (block, mb) and devices & set(spec.block(s.block).devices)]
    for t in reversed(range(before)):
        if all(t + t_block <= a or t >= b for a, b in busy):
            return t
    raise AssertionError(f"no idle gap for {block}:{mb} before t={before}")


@pytest.mark.parametrize("edge", range(5), ids=lambda i: f"edge{i}")
def test_dependency_in_the_last_microbatch_is_checked(edge):
    # Every rule but one holds in the broken schedule (spread out so there are idle gaps, the
    # consumer moved into one), so only the dependency check of the last micro-batch can see it.
    spec = vshape(devices=3, memory=3)
    n = 4
    e = spec.edges[edge]
    spread = Schedule(n, tuple(sorted(Slot(s.start * 10, s.block, s.mb) for s in one_f_one_b(spec, n).slots)))
    validate(spec, spread)
    src = next(s for s in spread.slots if (s.block, s.mb) == (e.src, n - 1))
    early = _free_start_before(spec, spread, e.dst, n - 1, src.end(spec))
    broken = _moved(spread, e.dst, n - 1, early)
    with pytest.raises(ScheduleError, match=rf"dependency broken: {e.dst}:{n - 1} starts at t={early} "
                                            rf"on device \d but {e.src}:{n - 1} only ends at t={src.end(spec)}"):
        validate(spec, broken)


def _error_line(message: str) -> str:
    return next(line for line in message.splitlines() if "<-- ERROR HERE" in line)


@pytest.mark.parametrize("edge", [0, 2, 4], ids=["F0->F1", "F2->B2", "B1->B0"])
def test_dependency_error_marks_the_consumers_device_in_a_window(edge):
    # A long schedule: the grid shows t-24..t+24 around the consumer's start, pointer on its device.
    spec = vshape(devices=3, memory=3)
    e = spec.edges[edge]
    spread = Schedule(6, tuple(sorted(Slot(s.start * 10, s.block, s.mb) for s in one_f_one_b(spec, 6).slots)))
    src = next(s for s in spread.slots if (s.block, s.mb) == (e.src, 3))
    early = _free_start_before(spec, spread, e.dst, 3, src.end(spec))
    with pytest.raises(ScheduleError) as info:
        validate(spec, _moved(spread, e.dst, 3, early))
    msg = str(info.value)
    dev = spec.block(e.dst).devices[0]
    assert _error_line(msg).startswith(f"dev{dev} | ") and _error_line(msg).endswith(f"(t={early})")
    span = _moved(spread, e.dst, 3, early).makespan(spec)
    assert f"\nt={max(0, early - 24)}..{min(span, early + 24)}\n" in msg


def test_memory_error_marks_the_overflowing_device():
    from tessel_dsl.ir import Block, Edge, Kind, Spec

    # Only device 1 keeps memory, and it runs both forwards before a backward: 2 units > M=1.
    blocks = (Block("A", Kind.FORWARD, (0,), 1, 0), Block("F1", Kind.FORWARD, (1,), 1, 1),
              Block("B1", Kind.BACKWARD, (1,), 1, -1, forward="F1"))
    spec = Spec("lopsided", 2, 1, blocks, (Edge("A", "F1"), Edge("F1", "B1")), 2)
    orders = [[("A", 0), ("A", 1)], [("F1", 0), ("F1", 1), ("B1", 0), ("B1", 1)]]
    sched = Schedule(2, compact(spec, orders=orders), name="lopsided")
    with pytest.raises(ScheduleError, match=r"memory overflow on device 1 at t=2: F1:1 brings it to 2 > M=1") as info:
        validate(spec, sched)
    t = next(s.start for s in sched.slots if (s.block, s.mb) == ("F1", 1))
    assert _error_line(str(info.value)).startswith("dev1 | ")
    assert _error_line(str(info.value)).endswith(f"(t={t})")


def test_unknown_blocks_are_named():
    spec = vshape(devices=2, memory=2)
    sched = one_f_one_b(spec, 2)
    bad = Schedule(2, sched.slots + (Slot(50, "Zed", 0), Slot(60, "Ypsilon", 1)))
    with pytest.raises(ScheduleError, match=r"names blocks the spec does not have: Ypsilon, Zed$"):
        validate(spec, bad)


@pytest.mark.parametrize("mb", [2, 3, -1])
def test_microbatches_outside_the_range_are_named(mb):
    spec = vshape(devices=2, memory=2)
    sched = one_f_one_b(spec, 2)
    bad = Schedule(2, sched.slots + (Slot(50, "F0", mb),))
    with pytest.raises(ScheduleError, match=rf"F0:{mb} is outside micro-batches 0\.\.1$"):
        validate(spec, bad)


def test_negative_start_is_named():
    spec = vshape(devices=2, memory=2)
    sched = one_f_one_b(spec, 2)
    shifted = Schedule(2, tuple(sorted(Slot(s.start - 3, s.block, s.mb) for s in sched.slots)))
    # Every slot before t=3 is now negative; the earliest one is named.
    with pytest.raises(ScheduleError, match=r"F0:0 starts at negative time -3$"):
        validate(spec, shifted)
