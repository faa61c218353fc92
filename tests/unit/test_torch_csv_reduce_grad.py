"""Where the torch CSV export puts ``REDUCE_GRAD``: once per stage, right after that stage's last
gradient action on its rank (B, or W when the backward is split), never before any of them."""
from __future__ import annotations

import pytest

from tessel_dsl.interop.torch_csv import export_torch_csv
from tessel_dsl.plan import make_plan
from tests.unit.test_torch_csv import chain, greedy


def _stage_actions(row: list[str], stage: int) -> list[str]:
    return [a for a in row if a.startswith(str(stage)) and "SEND" not in a and "RECV" not in a]


@pytest.mark.parametrize("ranks, split", [([0, 1], True), ([0, 1, 1, 0], False), ([0, 1, 1, 0], True)])
def test_reduce_grad_follows_each_stages_last_gradient(ranks, split):
    spec = chain(ranks, split=split)
    rows = [r.split(",") for r in export_torch_csv(make_plan(spec, greedy(spec, 3, late_w=True)),
                                                     comms=True).splitlines()]
    last = "W" if split else "B"
    for stage, rank in enumerate(ranks):
        row = rows[rank]
        assert row.count(f"{stage}REDUCE_GRAD") == 1
        mine = _stage_actions(row, stage)
        # the stage's compute actions, then REDUCE_GRAD: every gradient action of all 3 micro-batches before it
        at = mine.index(f"{stage}REDUCE_GRAD")
        assert sorted(a for a in mine[:at] if a[len(str(stage))] == last) == [f"{stage}{last}{m}" for m in range(3)]
        before = row[row.index(f"{stage}REDUCE_GRAD") - 1]  # straight after, sends included
        assert before.startswith(f"{stage}{last}") and before[len(str(stage)) + 1:].isdigit()
        assert all(a[len(str(stage))] not in "BIW" for a in mine[at + 1:])  # nothing of its backward after
