"""Repetend construction: pruning properties, bounds, both methods, completion phases."""
from __future__ import annotations

from tessel_dsl.search.completion import cooldown_blocks, solve_cooldown, solve_warmup, warmup_blocks
from tessel_dsl.search.modulo import solve_period
from tessel_dsl.search.repetend import (
    Counters,
    Shape,
    cyclic_bound_ok,
    entry_memory,
    iter_offsets,
    nr_limit,
    solve_candidate,
)
from tests.helpers import vshape
from tests.paths import SPECS


def test_offsets_follow_both_pruning_properties():
    spec = vshape(devices=4, memory=4, fwd=1, bwd=3)
    shape, counters = Shape.of(spec), Counters()
    seen = list(iter_offsets(spec, shape, 4, 4, counters))
    assert seen and counters.pruned > 0
    for offsets in seen:
        for e in spec.edges:
            assert offsets[e.src] >= offsets[e.dst]  # Property 2
        assert min(offsets.values()) == 0 and max(offsets.values()) == 3
    one_f_one_b = {"F0": 3, "F1": 2, "F2": 1, "F3": 0, "B3": 0, "B2": 0, "B1": 0, "B0": 0}
    assert one_f_one_b in seen


def test_no_candidate_with_fewer_microbatches_reaches_the_bound_on_vshape():
    spec = vshape(devices=4, memory=4, fwd=1, bwd=3)
    shape = Shape.of(spec)
    for nr in (1, 2, 3):
        assert list(iter_offsets(spec, shape, nr, 4, Counters())) == []


def test_cyclic_bound():
    spec = vshape(devices=2, memory=2, fwd=1, bwd=3)
    shape = Shape.of(spec)
    together = {"F0": 0, "F1": 0, "B1": 0, "B0": 0}
    assert not cyclic_bound_ok(spec, shape, together, 4)  # one micro-batch alone spans 8 on device 0
    assert cyclic_bound_ok(spec, shape, together, 8)
    assert cyclic_bound_ok(spec, shape, {"F0": 1, "F1": 0, "B1": 0, "B0": 0}, 4)


def test_entry_memory_counts_the_warmup():
    spec = vshape(devices=3, memory=3)
    offsets = {"F0": 2, "F1": 1, "F2": 0, "B2": 0, "B1": 0, "B0": 0}
    assert entry_memory(spec, offsets) == (2, 1, 0)


def test_candidate_and_cyclic_model_agree_on_vshape():
    spec = vshape(devices=3, memory=3, fwd=1, bwd=3)
    offsets = {"F0": 2, "F1": 1, "F2": 0, "B2": 0, "B1": 0, "B0": 0}
    for solver in ("cpsat", "z3"):
        rep = solve_candidate(spec, offsets, 4, solver, None, Counters())
        assert rep is not None and rep.nr == 3 and rep.period == 4
        assert solve_candidate(spec, offsets, 3, solver, None, Counters()) is None
        status, cyc = solve_period(spec, 4, 3, solver, None)
        assert status == "optimal" and cyc.period == 4
        assert solve_period(spec, 3, 3, solver, None)[0] == "infeasible"


def test_warmup_and_cooldown_sets_and_memory():
    spec = vshape(devices=3, memory=3, fwd=1, bwd=3)
    offsets = {"F0": 2, "F1": 1, "F2": 0, "B2": 0, "B1": 0, "B0": 0}
    rep = solve_candidate(spec, offsets, 4, "cpsat", None, Counters())
    assert sorted(warmup_blocks(rep)) == [("F0", 0), ("F0", 1), ("F1", 0)]
    assert sorted(cooldown_blocks(rep)) == [("B0", 1), ("B0", 2), ("B1", 1), ("B1", 2), ("B2", 1), ("B2", 2),
                                            ("F1", 2), ("F2", 1), ("F2", 2)]
    for solver in ("cpsat", "z3"):
        warm = solve_warmup(spec, rep, solver=solver)
        cool = solve_cooldown(spec, rep, solver=solver)
        assert warm.proven and cool.proven
        assert {(s.block, s.mb) for s in warm.slots} == set(warmup_blocks(rep))
        assert {(s.block, s.mb) for s in cool.slots} == set(cooldown_blocks(rep))


def test_nr_limit_is_block_level_for_xshape():
    from tessel_dsl.analysis import max_inflight
    from tessel_dsl.lang.parser import parse_file

    spec = parse_file(SPECS / "xshape.tsl")
    assert max_inflight(spec) == 2  # both chains' activations charged to every micro-batch
    assert nr_limit(spec) == 4       # each chain's forward alone: M // 1
