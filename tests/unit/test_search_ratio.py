"""Specs whose block times differ by a large factor (a 1 ms and a 1 ns block): the search's work
does not grow with the period's length in time units, and a time limit cuts every phase."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import ClassVar

from tessel_dsl.lang.parser import parse
from tessel_dsl.search import construct
from tessel_dsl.search.bounds import makespan_bound
from tessel_dsl.search.driver import search
from tessel_dsl.search.notes import render
from tessel_dsl.validate import validate
from tests.paths import ROOT

# C on both devices, then A (long) on device 0, then B (one unit) on device 1.
TWO = """placement ratio
devices 2
memory 4
microbatches 4
mode infer
forward C on all time 2
forward A on 0 time {t}
forward B on 1 time 1
C -> A
A -> B
"""

# A four-stage training chain in nanoseconds with a 1 ns block after the last stage: no common
# divisor of the times, periods of millions of units, and a schedule the constructive path
# does not prove, so the solver path runs too.
NS_CHAIN = """placement nschain
resolution time 1ns
devices 4
memory 3
microbatches 8
for i in 0..3:
    forward F{i} on i time 1ms memory 1
forward T on 3 time 1ns memory 0
chain(F{i} for i in 0..3)
F3 -> T
derive backward time 2x
"""


# Spec 5 of bench/search_random.py (seed 1): its one-copy period (38) is above the floor.
TWO_STAGES = """placement rnd
devices 2
memory 6
microbatches 8
mode train
forward F0 on 0 time 4 memory 3 grad time 11
forward F1 on 1 time 11 memory 3
forward F2 on 0 time 7 memory 3
forward F3 on 1 time 1 memory 3
chain(F{k} for k in 0..3)
derive backward time 1x
"""


class _Counted(construct._Packer):
    made: ClassVar[list[construct._Packer]] = []

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        _Counted.made.append(self)


def test_the_packers_work_does_not_grow_with_the_period(monkeypatch):
    monkeypatch.setattr(construct, "_Packer", _Counted)
    work = []
    for t in (10, 1000, 100_000, 1_000_000):
        _Counted.made = []
        spec = parse(TWO.format(t=t))
        # Worked by hand: the period bound is t + 2 (device 0 runs C and A); B is ready at t + 2,
        # which is step 0 modulo the period, where C runs on device 1 (steps 0 and 1): B waits
        # to t + 4.
        assert construct.flat_starts(spec, t + 2) == {"C": 0, "A": 2, "B": t + 4}
        work += [p.work for p in _Counted.made]
    # The same few steps at every t (the old packer built t + 2 bit masks per block, bit by bit).
    assert len(set(work)) == 1 and work[0] < 100, work


def test_a_ratio_of_a_million_is_searched_and_proven():
    spec = parse(TWO.format(t=1_000_000))
    r = search(spec)
    validate(spec, r.schedule)
    assert r.info.method == "constructive" and r.info.proven
    assert r.info.period == 1_000_002 and r.schedule.makespan(spec) == makespan_bound(spec, 4)


def test_a_time_limit_cuts_the_search_of_a_nanosecond_spec():
    spec = parse(NS_CHAIN)
    r = search(spec, time_limit=1.0)
    validate(spec, r.schedule)  # a valid plan, whatever the limit cut
    assert not r.info.proven and "time limit" in render(r.info.notes)


def test_the_fallback_period_is_bisected_not_walked(monkeypatch):
    # The one-micro-batch fallback's period is about 12 million units here; walking it one unit
    # at a time (as the fallback once did) would take millions of checks.
    from tessel_dsl.search import repetend

    calls = []
    original = repetend.cyclic_bound_ok
    monkeypatch.setattr(repetend, "cyclic_bound_ok", lambda *a: calls.append(a[-1]) or original(*a))
    spec = parse(NS_CHAIN)
    rep = repetend.serial_repetend(spec, "cpsat", repetend.Counters())
    assert len(calls) <= 64
    # Worked by hand: with one micro-batch in flight, device 0's window holds F0, everything the
    # chain runs after it, and B0: 4 ms of forwards, 1 + 2 ns for T, 8 ms of backwards.
    assert rep.period == 12_000_003 and rep.nr == 1


def _plan(text: str, tmp: Path, seed: str) -> dict:
    spec = tmp / "spec.tsl"
    spec.write_text(text)
    out = tmp / f"plan{seed}.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONHASHSEED": seed}
    r = subprocess.run([sys.executable, "-m", "tessel_dsl.cli", "search", str(spec), "-o", str(out)],
                       env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    data = json.loads(out.read_text())
    data["search"].pop("seconds")
    return data


def test_a_large_ratio_gives_the_same_plan_every_time(tmp_path):
    text = TWO.format(t=1_000_000).replace("devices 2", "resolution time 1ns\ndevices 2").replace(
        "time 1000000", "time 1ms").replace("time 1\n", "time 1ns\n").replace("time 2\n", "time 2ns\n")
    assert _plan(text, tmp_path, "1") == _plan(text, tmp_path, "2")


def test_a_capped_period_walk_never_tries_the_cap_or_above(monkeypatch):
    # The k-copy search asks only for periods below k times the best per micro-batch: anything at
    # or above it cannot help. Capped at the period the uncapped walk proves minimal, nothing
    # below it exists, so the one-micro-batch repetend comes back, proven (every period below the
    # cap was shown infeasible), and no period at or above the cap was solved.
    from tessel_dsl.search import modulo
    from tessel_dsl.search.clock import Clock
    from tessel_dsl.search.driver import find_repetend
    from tessel_dsl.search.repetend import Counters

    spec = parse(TWO_STAGES)
    kw = dict(solver="cpsat", method="modulo", clock=Clock(None), report=lambda _: None)
    best, proven, _ = find_repetend(spec, counters=Counters(), **kw)
    assert proven and best.period == 38  # above the period floor (29), so the walk has work below it
    tried = []
    original = modulo.solve_period
    monkeypatch.setattr(modulo, "solve_period", lambda s, p, *a, **k: tried.append(p) or original(s, p, *a, **k))
    rep, proven, note = find_repetend(spec, counters=Counters(), cap=best.period, **kw)
    assert tried and max(tried) < best.period
    assert rep.nr == 1 and rep.period >= best.period and proven and "one-micro-batch" not in note
