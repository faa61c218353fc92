"""Parallel branches (a K-shape's two towers) run by 1F1B+ and GPipe+ as one chain of stages.

Reference: the same spec with the towers chained by hand (an edge from the first tower's last
forward to the second tower's first, and back again in the backward), which is a chain these
baselines take as written. Laying the towers out one after the other must give each device the
same order of its own stage's blocks as on that hand-made chain (the blocks on every device, J
and its backward, fall in between as the play on the clock finds them ready, and the towers' real
dependencies are fewer), and a schedule valid on the spec as written that is no longer.
"""
from __future__ import annotations

from dataclasses import replace

import pytest

from tessel_dsl.ir import Edge
from tessel_dsl.search.baselines import NotApplicable, build
from tessel_dsl.search.baselines.chain import unfolded
from tessel_dsl.search.baselines.compare import baseline_row, label
from tessel_dsl.validate import validate
from tests.unit.test_baselines import kshape


def _orders(spec, sched):
    """Each device's order of the blocks that run on it alone."""
    by = {d: [] for d in range(spec.devices)}
    for s in sorted(sched.slots):
        if len(spec.block(s.block).devices) == 1:
            by[spec.block(s.block).devices[0]].append((s.block, s.mb))
    return by


def _chained_by_hand(spec, d):
    h = d // 2
    extra = (Edge(f"F{h - 1}", f"F{h}"), Edge(f"B{h}", f"B{h - 1}")) if any(
        b.name == "JB" for b in spec.blocks) else (Edge(f"F{h - 1}", f"F{h}"),)
    return replace(spec, edges=spec.edges + extra)


@pytest.mark.parametrize("name", ["1f1b+", "gpipe+"])
@pytest.mark.parametrize("d,n,m", [(4, 6, 6), (6, 8, 8), (8, 12, 5)])
@pytest.mark.parametrize("infer", [False, True])
def test_towers_run_as_the_chain_laid_out_by_hand(name, d, n, m, infer):
    spec = kshape(d=d, n=n, m=m, infer=infer)
    hand = _chained_by_hand(spec, d)
    got, ref = build(spec, name), build(hand, name)
    validate(spec, got)
    assert _orders(spec, got) == _orders(hand, ref)
    assert got.makespan(spec) <= ref.makespan(hand)


def test_the_row_says_the_towers_were_laid_out_in_sequence():
    spec = kshape(d=4, n=6, m=6)
    with unfolded(), pytest.raises(NotApplicable, match="do not form one sequence"):
        build(spec, "1f1b+")
    row, _ = baseline_row(spec, "1f1b+", 6)
    assert "branches in sequence" in label(row)
    assert "F0..F1, then F2..F3, then J" in row.extra["placement"]
