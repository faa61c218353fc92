"""The replay a measured run is compared with (executor/trace.py, executor/run_report.py).

Worked by hand on two devices and two micro-batches, GPipe order, where micro-batch 1's first
forward runs three times as long as micro-batch 0's: the replay must charge each action what it
took (so its busy time is the run's own), not every micro-batch its block's median.
"""
from __future__ import annotations

from tessel_dsl.executor.models import shapes
from tessel_dsl.executor.run_report import RunReport
from tessel_dsl.executor.trace import replay, summarize
from tessel_dsl.plan import Plan
from tessel_dsl.program import Program
from tessel_dsl.schedule import Schedule


def _plan() -> Plan:
    dev0 = "F0:0 SEND F0:0>1 F0:1 SEND F0:1>1 RECV B1:0<1 WAIT B1:0<1 B0:0 RECV B1:1<1 WAIT B1:1<1 B0:1"
    dev1 = "RECV F0:0<0 WAIT F0:0<0 F1:0 B1:0 SEND B1:0>0 RECV F0:1<0 WAIT F0:1<0 F1:1 B1:1 SEND B1:1>0"
    return Plan(shapes.vshape(2, microbatches=2), Schedule(2, ()),
                (Program.from_text(0, dev0, False), Program.from_text(1, dev1, False)))


MEDIANS = {"F0": 2.0, "F1": 1.0, "B1": 2.0, "B0": 2.0}
OWN = {"F0:0": 1.0, "F0:1": 3.0}


def _computes(events):
    return {(d, a): (s, e) for d, a, s, e in events if " " not in a}


def test_each_action_takes_its_own_duration():
    # dev0: F0:0 0-1, F0:1 1-4; dev1: F1:0 1-2, B1:0 2-4, F1:1 4-5 (after F0:1), B1:1 5-7;
    # dev0: B0:0 4-6, B0:1 7-9 (after B1:1).
    got = _computes(replay(_plan(), MEDIANS, OWN))
    assert got == {(0, "F0:0"): (0.0, 1.0), (0, "F0:1"): (1.0, 4.0), (1, "F1:0"): (1.0, 2.0),
                   (1, "B1:0"): (2.0, 4.0), (1, "F1:1"): (4.0, 5.0), (1, "B1:1"): (5.0, 7.0),
                   (0, "B0:0"): (4.0, 6.0), (0, "B0:1"): (7.0, 9.0)}
    # With the medians alone (F0 2 s each) the same programs take 10 s.
    assert summarize(replay(_plan(), MEDIANS), 2)["iteration"] == 10.0


def test_the_report_replays_the_runs_own_durations():
    # The measured run: the replay's timeline with every transfer taking 0.5 s more on dev1's side.
    events = [(d, a, s + (0.5 if d == 1 else 0.0), e + (0.5 if d == 1 else 0.0))
              for (d, a), (s, e) in _computes(replay(_plan(), MEDIANS, OWN)).items()]
    report = RunReport(_plan(), "gloo", "cpu", [events])
    s = report.summary()
    assert s["simulated"]["busy"] == s["measured"]["busy"] == [8.0, 6.0]
    assert s["simulated"]["iteration"] == 9.0 and s["simulated_block_medians"]["iteration"] == 10.0
    assert s["block_seconds"] == MEDIANS
