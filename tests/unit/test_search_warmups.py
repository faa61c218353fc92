"""1F1B+ with each stage's warmup searched (`search/warmups.py`): the stage queues it plays, the
two baselines it spans (1F1B+ and GPipe+ as members of its family), valid schedules shorter than
both on M- and NN-shapes, never below the stated bound, the same answer twice, and offered to the
search as its best plan in hand."""
from __future__ import annotations

from tessel_dsl.lang.parser import parse_file
from tessel_dsl.schedule import Schedule
from tessel_dsl.search.baselines import build
from tessel_dsl.search.baselines.chain import unfolded
from tessel_dsl.search.baselines.pinned import pinned_orders
from tessel_dsl.search.bounds import makespan_bound
from tessel_dsl.search.compact import compact
from tessel_dsl.search.finish import baseline_for
from tessel_dsl.search.lockstep import NAME as LOCKSTEP
from tessel_dsl.search.refine import best_baseline
from tessel_dsl.search.warmups import NAME, _queue, searched_warmups
from tessel_dsl.validate import validate
from tests.helpers import vshape
from tests.paths import ROOT


def test_a_stage_queue_by_hand():
    assert _queue(2, 4, True) == [("F", 0), ("F", 1), ("B", 0), ("F", 2), ("B", 1), ("F", 3), ("B", 2), ("B", 3)]
    assert _queue(4, 4, True) == [("F", 0), ("F", 1), ("F", 2), ("F", 3), ("B", 0), ("B", 1), ("B", 2), ("B", 3)]
    assert _queue(2, 3, False) == [("F", 0), ("F", 1), ("F", 2)]


def _played(spec, n, warm):
    orders = pinned_orders(spec, "1F1B+", lambda stages: [_queue(warm(s, len(stages)), n, True)
                                                        for s in range(len(stages))])
    return Schedule(n, compact(spec, orders=orders))


def test_its_family_holds_both_baselines():
    # Warmups S - s are 1F1B+'s; all N are GPipe+'s where memory holds every micro-batch (60 GB
    # hold all 32 here; GPipe+ would go in waves otherwise).
    spec = parse_file(ROOT / "bench" / "specs" / "real" / "nnshape16.tsl")
    plus, gpipe = build(spec, "1f1b+", 32), build(spec, "gpipe+", 32)
    assert (plus.makespan(spec), gpipe.makespan(spec)) == (2307, 2091)
    assert _played(spec, 32, lambda s, stages: stages - s).slots == plus.slots
    assert _played(spec, 32, lambda s, stages: 32).slots == gpipe.slots


def test_shorter_than_both_on_the_m_shape():
    spec = parse_file(ROOT / "specs" / "mshape.tsl")
    n = spec.microbatches
    got = searched_warmups(spec, n, 132)
    assert got is not None
    validate(spec, got)  # dependencies, one block at a time, memory
    assert makespan_bound(spec, n) <= got.makespan(spec) == 128 < 132
    assert searched_warmups(spec, n, 132).slots == got.slots
    assert searched_warmups(spec, n, 128) is None  # nothing strictly shorter than what is in hand
    # The search is offered it beside the other tuned plays: here the lockstep one (116) is the
    # shorter (tests/unit/test_lockstep.py), so that one is its best plan in hand.
    best, name = best_baseline(spec, n, than=None)
    assert best.makespan(spec) <= 128 and name in (NAME, LOCKSTEP)


def test_shorter_than_both_on_the_nn_shape_over_16_devices():
    spec = parse_file(ROOT / "bench" / "specs" / "real" / "nnshape16.tsl")
    got = searched_warmups(spec, 32, 2091)
    validate(spec, got)
    assert makespan_bound(spec, 32) == 1955 <= got.makespan(spec) == 2005


def test_nothing_where_it_does_not_apply():
    # A chain without multi-device blocks at its time bound: 1F1B+ is 1F1B, nothing is shorter.
    spec = vshape(devices=4, memory=4, fwd=1, bwd=2, microbatches=8)
    assert searched_warmups(spec, 8, build(spec, "1f1b", 8).makespan(spec)) is None
    # Two towers meeting in an all-device block, as written: no chain to pin it into.
    kshape = parse_file(ROOT / "specs" / "kshape.tsl")
    with unfolded():
        assert searched_warmups(kshape, kshape.microbatches, 10**6) is None


def test_a_plan_naming_it_rebuilds_it_for_another_n():
    # A plan that runs these warmups' order without a repetend re-extends by searching the
    # warmups again for the new N (`finish.baseline_for`), never worse than GPipe+ there.
    spec = parse_file(ROOT / "specs" / "mshape.tsl")
    for n in (8, 12):
        got, gpipe = baseline_for(spec, NAME, n), build(spec, "gpipe+", n)
        validate(spec, got)
        assert got.microbatches == n
        tuned = searched_warmups(spec, n, gpipe.makespan(spec))
        assert got.slots == (tuned or gpipe).slots
    assert baseline_for(spec, NAME, 8).makespan(spec) == 64 < build(spec, "gpipe+", 8).makespan(spec) == 72


def test_towers_get_warmups_searched_on_the_chain_they_are_laid_out_as():
    # With the towers one after the other (`baselines/branches.py`) 1F1B+'s warmups are searched
    # like any chain's: a schedule valid on the spec as written, every block of every micro-batch
    # once, and, asked to beat one, only ever a shorter one.
    from tessel_dsl.validate import validate

    kshape = parse_file(ROOT / "specs" / "kshape.tsl")
    n = kshape.microbatches
    got = searched_warmups(kshape, n, 10**6)
    validate(kshape, got)
    assert sorted((s.block, s.mb) for s in got.slots) == sorted((b.name, mb) for b in kshape.blocks for mb in range(n))
    than = got.makespan(kshape)
    again = searched_warmups(kshape, n, than)
    assert again is None or again.makespan(kshape) < than
