"""1F1B on a chain whose backward is split into an input gradient I and a weight gradient W: each W
runs right after its I, as one backward, as PyTorch's Schedule1F1B runs a model whose backward is
not split. Checked against the same chain with each I and W merged by hand into one backward
block, and run through the simulator."""
from __future__ import annotations

import pytest

from tessel_dsl.lang.parser import parse
from tessel_dsl.plan import make_plan
from tessel_dsl.search.baselines import NotApplicable, build
from tessel_dsl.search.baselines.chain import unfolded
from tessel_dsl.search.baselines.compare import baseline_row, label
from tessel_dsl.search.compact import device_orders
from tessel_dsl.simulator import simulate
from tessel_dsl.validate import validate

# 4 stages of unequal times, W freeing the activation; device 0 holds 2 micro-batches where 1F1B
# keeps 4 (memory binds there), and an embedding E beside F0 with its weight gradient EW.
FORWARD = """devices 4
memory 8
memory 2 on 0
microbatches 8
mode train
forward E on 0 time 1 memory 0
forward F0 on 0 time 2 memory 1
forward F1 on 1 time 3 memory 1
forward F2 on 2 time 2 memory 1
forward F3 on 3 time 3 memory 1
"""
SPLIT = "placement split4\n" + FORWARD + """weight_grad EW of E time 1
input_grad I0 of F0 time 2
input_grad I1 of F1 time 3
input_grad I2 of F2 time 2
input_grad I3 of F3 time 3
weight_grad W0 of F0 time 2 memory -1
weight_grad W1 of F1 time 3 memory -1
weight_grad W2 of F2 time 2 memory -1
weight_grad W3 of F3 time 3 memory -1
I0 -> W0
I1 -> W1
I2 -> W2
I3 -> W3
E -> F0 -> F1 -> F2 -> F3 -> I3 -> I2 -> I1 -> I0
I0 -> EW
"""
# The same with each stage's I and W one backward block B (time I + W), and EW after B0 in it.
MERGED = "placement merged4\n" + FORWARD + """backward B0 of F0 time 5 memory -1
backward B1 of F1 time 6 memory -1
backward B2 of F2 time 4 memory -1
backward B3 of F3 time 6 memory -1
E -> F0 -> F1 -> F2 -> F3 -> B3 -> B2 -> B1 -> B0
"""
MERGE = {"I0": "B0", "W0": "B0", "EW": "B0", "I1": "B1", "W1": "B1", "I2": "B2", "W2": "B2", "I3": "B3", "W3": "B3"}


def _merged_orders(spec, sched):
    """Each device's order with I, W (and EW) replaced by their stage's B, repeats dropped."""
    out = []
    for row in device_orders(spec, sched.slots):
        merged = []
        for block, mb in row:
            key = (MERGE.get(block, block), mb)
            if not merged or merged[-1] != key:
                merged.append(key)
        out.append(merged)
    return out


@pytest.mark.parametrize("name", ["1f1b", "1f1b-capped", "1f1b+"])
def test_a_split_backward_runs_as_one_in_1f1b(name):
    split, merged = parse(SPLIT, "s.tsl"), parse(MERGED, "m.tsl")
    with unfolded(), pytest.raises(NotApplicable, match="do not retrace"):
        build(split, name, 8)  # as written (what `compare` said before: n/a)
    sched, ref = build(split, name, 8), build(merged, name, 8)
    validate(split, sched)
    # Each W (and EW) runs right after its stage's I: the order is the hand-merged spec's.
    for row in device_orders(split, sched.slots):
        for i, (a, mb) in enumerate(row):
            if a.startswith("I"):
                after = row[i + 1:i + 3] if a == "I0" else row[i + 1:i + 2]
                assert sorted(after) == sorted([("W" + a[1:], mb)] + ([("EW", mb)] if a == "I0" else []))
    assert _merged_orders(split, sched) == device_orders(merged, ref.slots)
    # I frees the previous stage before W runs, so it is never longer than the merged chain.
    assert sched.makespan(split) <= ref.makespan(merged)
    report = simulate(make_plan(split, sched))
    assert report.deadlock is None and report.makespan == sched.makespan(split)
    row, _ = baseline_row(split, name, 8)
    assert label(row).startswith(f"{name} (backward not split")
    assert "each weight gradient runs right after its input gradient" in row.extra["placement"]


def test_a_chain_without_split_backward_is_not_labelled():
    row, _ = baseline_row(parse(MERGED, "m.tsl"), "1f1b", 8)
    assert "backward not split" not in label(row) and "placement" not in (row.extra or {})
