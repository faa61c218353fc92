"""Extension: any N >= N_R from the stored parts, valid, and the same after a plan round trip."""
from __future__ import annotations

import importlib

import pytest

from tessel_dsl.errors import InfeasibleError
from tessel_dsl.plan import load_plan, make_plan, save_plan
from tessel_dsl.schedule import Schedule
from tessel_dsl.search.extend import Parts, extend, parts_of
from tessel_dsl.validate import validate
from tests.helpers import vshape

search = importlib.import_module("tessel_dsl.search.driver").search


def test_parts_round_trip_through_a_plan_file(tmp_path):
    spec = vshape(devices=4, memory=4, fwd=1, bwd=3, microbatches=8)
    result = search(spec)
    path = tmp_path / "v.plan.json"
    save_plan(make_plan(spec, result.schedule, result.info), path)
    plan = load_plan(path)
    assert plan.schedule == result.schedule
    again = extend(plan.spec, plan.schedule, 8)
    assert again.slots == result.schedule.slots
    assert extend(plan.spec, plan.schedule, 30).makespan(spec) == (30 + 3) * 4


def test_parts_of_numbers_cooldown_for_n_r():
    spec = vshape(devices=3, memory=3, fwd=1, bwd=3, microbatches=10)
    sched = search(spec).schedule
    parts = parts_of(sched)
    assert all(s.mb < parts.repetend.nr for s in parts.cooldown)
    assert extend(spec, parts, 10).slots == sched.slots


def test_small_n_from_a_plan_is_solved_directly():
    spec = vshape(devices=4, memory=4, fwd=1, bwd=3, microbatches=8)
    sched = search(spec).schedule
    small = extend(spec, sched, 2)
    validate(spec, small)
    assert small.microbatches == 2 and small.makespan(spec) == (2 + 3) * 4
    # ... and that small schedule still extends back up.
    assert extend(spec, small, 8).slots == sched.slots


def test_schedule_without_repetend_cannot_be_extended():
    spec = vshape(devices=2, memory=2, microbatches=2)
    with pytest.raises(InfeasibleError, match="no repetend"):
        extend(spec, Schedule(2, ()), 4)


def test_cooldown_phase_shifts_with_n():
    spec = vshape(devices=3, memory=3, fwd=1, bwd=3, microbatches=5)
    sched = search(spec).schedule
    parts: Parts = parts_of(sched)
    bigger = extend(spec, parts, 9)
    shift = 9 - parts.repetend.nr
    assert {(s.block, s.mb - shift) for s in bigger.cooldown} == {(s.block, s.mb) for s in parts.cooldown}
