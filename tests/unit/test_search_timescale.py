"""The search's effort and answer do not depend on the unit the costs are written in: a spec with
every time multiplied by 10 gives the same schedule, multiplied by 10."""
from __future__ import annotations

from dataclasses import replace

from tessel_dsl.lang.parser import parse_file
from tessel_dsl.schedule import Slot
from tessel_dsl.search.timescale import time_unit
from tests.paths import ROOT


def _times(spec, factor):
    return replace(spec, blocks=tuple(replace(b, time=b.time * factor) for b in spec.blocks))


def _scaled(slots, factor):
    return tuple(Slot(s.start * factor, s.block, s.mb) for s in slots)


def test_time_unit_is_the_common_divisor():
    spec = parse_file(ROOT / "specs/mshape.tsl")
    assert time_unit(spec) == 1
    assert time_unit(_times(spec, 6)) == 6
    odd = replace(spec, blocks=(replace(spec.blocks[0], time=spec.blocks[0].time * 6 + 3),) +
                  tuple(replace(b, time=b.time * 6) for b in spec.blocks[1:]))
    assert time_unit(odd) == 3
