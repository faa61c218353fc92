"""Repetends holding every block k times: the unrolled spec, folding its schedule back, and the
uneven chain that only a two-copy repetend runs at its time-optimal rate."""
from __future__ import annotations

from tessel_dsl.lang.parser import parse_file
from tessel_dsl.plan import make_plan, plan_from_json, plan_to_json
from tessel_dsl.search.baselines import build
from tessel_dsl.search.copies import fold, unroll
from tessel_dsl.search.driver import search
from tessel_dsl.search.notes import render
from tessel_dsl.validate import validate
from tests.paths import ROOT


def test_unroll_copies_blocks_and_edges_and_fold_maps_back():
    spec = parse_file(ROOT / "specs/vshape.tsl")
    u = unroll(spec, 2)
    assert len(u.blocks) == 2 * len(spec.blocks) and len(u.edges) == 2 * len(spec.edges)
    assert u.block("B0@1").forward == "F0@1" and u.block("F3@0").devices == spec.block("F3").devices
    gp = build(u, "gpipe", 3)  # any valid schedule of the unrolled spec, 3 super micro-batches
    back = fold(spec, gp, 2, 5)  # 6 micro-batches' worth, the last one dropped
    validate(spec, back, check_memory=False)
    assert sorted((s.block, s.mb) for s in back.slots) == sorted(
        (b.name, mb) for b in spec.blocks for mb in range(5))


def test_uneven_chain_reaches_the_time_optimal_rate_with_two_copies():
    spec = parse_file(ROOT / "bench/specs/uneven_chain.tsl")
    two = search(unroll(spec, 2), microbatches=16)  # the search on the doubled spec, as _with_copies runs it
    assert two.info.period == 21 and two.info.period_proven  # 10.5 per micro-batch
    back = fold(spec, two.schedule, 2, 32)
    validate(spec, back)
    assert back.makespan(spec) == 345
    # 1F1B, the best one-copy answer at N=32 (period 12), needs 390. Memory-capped 1F1B, which
    # plays 1F1B out in time, reaches the same 345 for this N, and the search proper keeps the
    # schedule that can re-extend (a tie keeps the one-copy plan), having tried two copies. Its
    # period 12 is then proven only among repetends holding each block once (two copies reach
    # 10.5), and the note says what the two-copy repetend reached.
    assert build(spec, "1f1b", 32).makespan(spec) == 390
    assert build(spec, "1f1b-capped", 32).makespan(spec) == 345
    # The default search stops at capped 1F1B: 345 is the makespan bound (incumbent.py).
    d = search(spec)
    assert d.info.method == "baseline" and d.info.proven
    assert d.schedule.makespan(spec) == d.info.makespan_bound == 345
    r = search(spec, method="modulo")
    validate(spec, r.schedule)
    assert r.schedule.makespan(spec) == 345 and r.info.period == 12 and r.info.repetend_copies == 1
    assert r.info.copies == 1 and r.info.period_proven
    assert "holding each block 2 times has period 21 (10.5 per micro-batch)" in render(r.info.notes)
    plan = make_plan(spec, r.schedule, r.info)
    assert plan_from_json(plan_to_json(plan)).search == r.info


def test_placements_at_the_bound_do_not_try_copies():
    spec = parse_file(ROOT / "specs/kshape.tsl")
    r = search(spec, microbatches=8)
    assert r.info.period == r.info.lower_bound and r.info.copies == 1 and r.info.repetend_copies == 1
    assert r.schedule.repetend is not None
