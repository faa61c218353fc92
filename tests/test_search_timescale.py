"""The search's effort and answer do not depend on the unit the costs are written in: a spec with
every time multiplied by 10 gives the same schedule, multiplied by 10."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from tessel_dsl.lang.parser import parse_file
from tessel_dsl.schedule import Slot
from tessel_dsl.search.driver import search
from tessel_dsl.search.timescale import time_unit
from tessel_dsl.validate import validate

ROOT = Path(__file__).resolve().parent.parent


def _times(spec, factor):
    return replace(spec, blocks=tuple(replace(b, time=b.time * factor) for b in spec.blocks))


def _scaled(slots, factor):
    return tuple(Slot(s.start * factor, s.block, s.mb) for s in slots)


@pytest.mark.parametrize("name,solver,n", [("mshape", "cpsat", 12), ("xshape", "z3", 6)])
def test_times_ten_gives_the_same_schedule_times_ten(name, solver, n):
    spec = parse_file(ROOT / f"specs/{name}.tsl")
    fine = _times(spec, 10)
    base = search(spec, microbatches=n, solver=solver)
    ten = search(fine, microbatches=n, solver=solver)
    validate(fine, ten.schedule)
    assert ten.schedule.slots == _scaled(base.schedule.slots, 10)
    assert ten.schedule.makespan(fine) == 10 * base.schedule.makespan(spec)
    assert ten.info.period == 10 * base.info.period
    assert ten.info.lower_bound == 10 * base.info.lower_bound
    assert ten.info.proven == base.info.proven
    rep, rep10 = base.schedule.repetend, ten.schedule.repetend
    assert rep10.period == 10 * rep.period and rep10.slots == _scaled(rep.slots, 10)
    assert ten.schedule.warmup == _scaled(base.schedule.warmup, 10)
    assert ten.schedule.cooldown == _scaled(base.schedule.cooldown, 10)


def test_time_unit_is_the_common_divisor():
    spec = parse_file(ROOT / "specs/mshape.tsl")
    assert time_unit(spec) == 1
    assert time_unit(_times(spec, 6)) == 6
    odd = replace(spec, blocks=(replace(spec.blocks[0], time=spec.blocks[0].time * 6 + 3),) +
                  tuple(replace(b, time=b.time * 6) for b in spec.blocks[1:]))
    assert time_unit(odd) == 3
