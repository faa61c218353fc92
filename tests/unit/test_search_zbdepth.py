"""Memory-capped ZB-H1 with searched forward depths (`search/zbdepth.py`): valid, within memory,
shorter than the baseline where memory binds, never below the time-optimal makespan, the same
answer twice, offered to the search as its best plan in hand, and rebuilt for another N."""
from __future__ import annotations

from tessel_dsl.lang.parser import parse
from tessel_dsl.search.baselines import build
from tessel_dsl.search.bounds import makespan_bound
from tessel_dsl.search.finish import baseline_for
from tessel_dsl.search.optimal import optimal
from tessel_dsl.search.refine import best_baseline
from tessel_dsl.search.zbdepth import NAME, searched_depths
from tessel_dsl.validate import validate
from tests.helpers import vshape

# Four stages with a split backward, (F, I, W) times below; room for two micro-batches a device,
# where ZB-H1 keeps up to four on the first.
TIMES = [(2, 2, 3), (3, 3, 2), (3, 2, 3), (1, 2, 2)]


def _spec(n: int = 8):
    lines = ["placement zb_tight", "devices 4", "memory 2", f"microbatches {n}", "mode train"]
    for i, (f, ig, w) in enumerate(TIMES):
        lines += [f"forward F{i} on {i} time {f} memory 1", f"input_grad I{i} of F{i} time {ig}",
                  f"weight_grad W{i} of F{i} time {w} memory -1", f"I{i} -> W{i}"]
    lines.append("chain(F{k} for k in 0..3) -> chain(I{3-k} for k in 0..3)")
    return parse("\n".join(lines) + "\n")


def test_lower_depths_beat_the_baseline():
    spec = _spec()
    capped = build(spec, "zb-h1-capped", 8)
    got = searched_depths(spec, 8, capped.makespan(spec))
    validate(spec, got)  # dependencies, one block at a time, memory
    assert makespan_bound(spec, 8) <= got.makespan(spec) == 95 < capped.makespan(spec) == 101
    # TO (an exact model) proves 94: the descent comes within one unit of the optimum
    best = optimal(spec, 8, effort=10, workers=1)
    assert best.info.proven and best.schedule.makespan(spec) == 94
    assert searched_depths(spec, 8, 101).slots == got.slots
    assert searched_depths(spec, 8, 95) is None  # nothing strictly shorter than what is in hand
    sched, name = best_baseline(spec, 8, than=None)
    assert name == NAME and sched.makespan(spec) == 95


def test_rebuilt_for_another_n():
    spec = _spec()
    for n in (6, 12):
        got, capped = baseline_for(spec, NAME, n), build(spec, "zb-h1-capped", n)
        validate(spec, got)
        tuned = searched_depths(spec, n, capped.makespan(spec))
        assert got.microbatches == n and got.slots == (tuned or capped).slots


def test_nothing_without_a_split_backward():
    spec = vshape(devices=4, memory=2, fwd=1, bwd=2, microbatches=8)
    assert searched_depths(spec, 8, 10 ** 6) is None
