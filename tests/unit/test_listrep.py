"""The list-scheduled repetend the period walk starts from (`search/listrep.py`)."""
from __future__ import annotations

import importlib

from tessel_dsl.lang.parser import parse, parse_file
from tessel_dsl.schedule import Schedule
from tessel_dsl.search.clock import Clock
from tessel_dsl.search.extend import Parts, extend
from tessel_dsl.search.listrep import list_repetend
from tessel_dsl.search.period_walk import period_floor
from tessel_dsl.search.repetend import Counters, serial_repetend
from tessel_dsl.validate import validate
from tests.paths import ROOT, SPECS

MEMCHAIN = ROOT / "bench" / "specs" / "real" / "memchain.tsl"
MSHAPE8 = ROOT / "bench" / "specs" / "real" / "mshape8.tsl"


def _steady_memory(spec, rep, warm, cool, n: int) -> Schedule:
    sched = extend(spec, Parts(warm, rep, cool), n)
    validate(spec, sched)  # the validator, not the construction, says whether memory holds
    return sched


def test_where_memory_binds_the_list_repetend_is_valid_far_below_one_micro_batch_at_a_time():
    # The M-shape with 24 GB for activations: list scheduling at the period floor (162 ms) breaks
    # memory; the bisection finds a valid repetend at a period between the floor and the
    # one-micro-batch repetend's (1149 ms), and its extension to many micro-batches is valid.
    spec = parse_file(MSHAPE8, sets={"MEM": "24"})
    floor, serial = period_floor(spec), serial_repetend(spec, "cpsat", Counters()).period
    got = list_repetend(spec, floor, serial)
    assert got is not None
    rep, warm, cool = got
    assert floor < rep.period < serial / 2
    sched = _steady_memory(spec, rep, warm, cool, 40)
    assert sched.microbatches == 40


def test_the_floor_is_kept_when_it_is_valid_there():
    spec = parse_file(MEMCHAIN)
    got = list_repetend(spec, period_floor(spec), 10 ** 6)
    assert got is not None and got[0].period == period_floor(spec) == 66
    _steady_memory(spec, *got, 30)


def test_an_exhausted_time_limit_returns_nothing_tried():
    spec = parse_file(MSHAPE8, sets={"MEM": "24"})
    assert list_repetend(spec, period_floor(spec), 1149, left=lambda: 0.0) is None


def test_the_walk_keeps_the_list_repetend_when_no_solve_settles_a_period(monkeypatch):
    # With no budget for the walk, the repetend kept is the list-scheduled one, said so, instead
    # of the one-micro-batch repetend (the M-shape with 3 micro-batches' memory: 10 against 18).
    walk = importlib.import_module("tessel_dsl.search.period_walk")
    driver = importlib.import_module("tessel_dsl.search.driver")
    findrep = importlib.import_module("tessel_dsl.search.findrep")
    monkeypatch.setattr(walk, "walk_budget", lambda spec: 0.0)
    text = (SPECS / "mshape.tsl").read_text().replace("memory 6, infer 4", "memory 3")
    spec = parse(text, str(SPECS / "mshape_memory3.tsl"))
    serial = serial_repetend(spec, "cpsat", Counters()).period
    listed = list_repetend(spec, period_floor(spec), serial)
    assert (listed[0].period, serial) == (10, 18)
    witnesses: dict = {}
    rep, proven, notes = findrep.find_repetend(spec, solver="cpsat", method="modulo", clock=Clock(None),
                                              counters=Counters(), report=lambda phase: None, witnesses=witnesses)
    assert (rep.period, proven) == (10, False)
    assert "list-repetend" in [n.kind for n in notes]
    parts = driver._complete(spec, rep, solver="cpsat", clock=Clock(None), counters=Counters(), witnesses=witnesses)
    validate(spec, extend(spec, parts, 24))
