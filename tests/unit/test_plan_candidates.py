"""Candidate placements from a profile, checked against hand-worked cut points, costs and memory."""
from __future__ import annotations

import itertools

import pytest

from tessel_dsl.lang.parser import parse
from tessel_dsl.placement.candidates import balanced_cuts, candidates
from tessel_dsl.placement.costs import Profile, Unit

GB = 10**9


def unit(name, kind, ms, state_gb=0.0, act_mb=1.0):
    """A unit whose forward, input and weight gradient each take `ms`, holding `state_gb` of
    weights + gradients + Adam state (16 bytes per fp32 parameter)."""
    params = int(state_gb * GB / 16)
    return Unit(name, (f"m.{name}",), ms / 1e3, ms / 1e3, ms / 1e3, int(act_mb * 1e6), 0, 4 * params, params, kind)


def test_cut_points_make_the_largest_stage_as_small_as_it_can_be():
    # 1..9 in 3 stages: 15 | 13 | 17 is the only split whose largest stage is 17 (total 45; any
    # first stage beyond 5 is >= 21, and 1..4 leaves 5+6+7 = 18 or 8+9 with 5..7 = 18)
    assert balanced_cuts([1, 2, 3, 4, 5, 6, 7, 8, 9], 3) == [0, 5, 7]
    # a heavy embedding and head get stages of their own
    assert balanced_cuts([4, 1, 1, 1, 1, 4], 3) == [0, 1, 5]
    assert balanced_cuts([5, 5], 2) == [0, 1]
    with pytest.raises(ValueError):
        balanced_cuts([1, 2], 3)


def _model():
    # embedding 2 ms, 6 layers of 10 ms, norm 1 ms, head 9 ms (each of F, I, W)
    units = [unit("embed", "embedding", 2)] + [unit(f"l{i}", "layer", 10) for i in range(6)]
    return Profile(tuple(units + [unit("norm", "norm", 1), unit("head", "head", 9)]))


def test_the_chain_balances_stage_times_with_embedding_and_head_included():
    chain = next(c for c in candidates(_model(), 3, 80 * GB, 6) if c.name == "chain")
    # per unit F+I+W: embed 6, layers 30 each, norm 3, head 27. A stage with 3 layers takes >= 90,
    # so at best 2 layers a stage: 6+60 | 60 | 60+3+27 -- the largest is 90 ms, and no split does
    # better (checked by brute force too)
    blocks = chain.blocks
    assert list(blocks) == ["F0", "F1", "F2"]
    assert blocks["F0"][0] == "m.embed" and blocks["F2"][-2:] == ["m.norm", "m.head"]
    spec = parse(chain.text)
    res_ms = spec.units.time_seconds * 1e3
    times = [sum(b.time for b in spec.blocks if b.devices == (d,)) * res_ms for d in range(3)]
    assert max(times) == pytest.approx(90) == _best_largest([6] + [30] * 6 + [3, 27], 3)


def _best_largest(costs, parts):
    """The smallest largest stage over every way to cut `costs` (brute force)."""
    from itertools import combinations

    best = float("inf")
    for cuts in combinations(range(1, len(costs)), parts - 1):
        bounds = (0, *cuts, len(costs))
        best = min(best, max(sum(costs[a:b]) for a, b in itertools.pairwise(bounds)))
    return best


def test_reserve_is_what_each_device_holds():
    units = [unit("embed", "embedding", 1, state_gb=10)] + [unit(f"l{i}", "layer", 10, state_gb=1) for i in range(8)]
    prof = Profile(tuple(units + [unit("head", "head", 1, state_gb=0.5)]))
    by_name = {c.name: c for c in candidates(prof, 2, 80 * GB, 4)}
    # chain: embed + 4 layers | 4 layers + head
    assert by_name["chain"].reserve_bytes == pytest.approx((14 * GB, 4.5 * GB), rel=1e-6)
    # the embedding's weights (10 GB) are a large share of a device's: it is also spread over both
    e = by_name["mshape-E"]
    assert e.reserve_bytes == pytest.approx((9 * GB, 9.5 * GB), rel=1e-6)
    spec = parse(e.text)
    assert [spec.reserved_on(d) * spec.units.memory_bytes / GB for d in (0, 1)] == pytest.approx([9, 9.5], rel=1e-3)
    assert spec.block("E").devices == (0, 1)


def test_a_memory_bound_configuration_picks_the_candidate_that_fits():
    from tessel_dsl.placement.choose import choose

    units = [unit("embed", "embedding", 1, state_gb=10)] + [unit(f"l{i}", "layer", 10, state_gb=1) for i in range(8)]
    prof = Profile(tuple(units + [unit("head", "head", 1, state_gb=0.5)]))
    # 12 GB a device: every placement keeping the embedding whole on one device holds 14 GB there;
    # only the spread embedding (9 and 9.5 GB) fits
    out = choose(candidates(prof, 2, 12 * GB, 4), 4)
    assert out.best.candidate == "mshape-E" and out.best.fits
    whole = [r for r in out.rows if not r.candidate.startswith("mshape-E")]
    assert whole and all(not r.fits and "weights" in r.reason for r in whole)
    # with room for all, the choice is the shortest of every row
    roomy = choose(candidates(prof, 2, 80 * GB, 4), 4)
    assert roomy.best.ms == min(r.ms for r in roomy.rows if r.ms is not None)
    assert all(r.fits for r in roomy.rows)


def _tied():
    """Embedding and head of 1M parameters each, one tensor between them (4 MB; 16 MB with its
    gradient and Adam state), and four 0.4 MB layers."""
    units = ((Unit("embed", ("wte",), 4e-3, 0.0, 4e-3, 10**6, 0, 4 * 10**6, 10**6, "embedding"),)
             + tuple(Unit(f"layer{i}", (f"h.{i}",), 1e-3, 1e-3, 1e-3, 10**6, 10**5, 10**5, 25000) for i in range(4))
             + (Unit("head", ("lm_head",), 4e-3, 4e-3, 4e-3, 10**6, 10**5, 4 * 10**6, 10**6, "head"),))
    return Profile(units, "set by hand", (1, 8), 0.0, (("embed", "head"),), ((10**6, 4 * 10**6),))


def test_a_tied_weight_is_reserved_once_on_a_device_that_runs_both_its_units():
    got = {c.name: c for c in candidates(_tied(), 2, GB, 4)}
    # chain: embedding + 3 layers on 0, a layer + head on 1: each holds its own copy
    assert got["chain"].reserve_bytes == pytest.approx((16e6 + 3 * 0.4e6, 0.4e6 + 16e6))
    # V: the embedding's chunk and the head's chunk both on device 0, one 16 MB tensor
    assert got["v-split"].blocks == {"F0": ["wte"], "F1": ["h.0", "h.1"], "F2": ["h.2", "h.3"], "F3": ["lm_head"]}
    assert got["v-split"].reserve_bytes == pytest.approx((16e6, 4 * 0.4e6))
    assert any("sums its gradient" in n for n in got["chain"].notes)
    assert not any("sums" in n for n in got["v-split"].notes)


def test_spread_placements_of_a_tied_model_are_listed_as_refused_with_why():
    from tessel_dsl.placement import plan_model

    res = plan_model(None, None, devices=2, memory="1GB", microbatches=4, profile=_tied())
    refused = {r.candidate: r.reason for r in res.outcome.rows if r.schedule == "-"}
    assert set(refused) == {"mshape-E", "mshape-H", "mshape-EH"}
    assert all("tie_word_embeddings=False" in why for why in refused.values())
    searched = {r.candidate for r in res.outcome.rows if r.ms is not None}
    assert searched == {"chain", "chain-split", "interleaved-2", "interleaved-3", "v-split"}



def test_weights_filling_a_device_to_the_byte_are_a_row_not_a_traceback():
    from tessel_dsl.placement.choose import choose

    prof = Profile(tuple([unit("embed", "embedding", 1, 1.0)] + [unit(f"l{i}", "layer", 10, 1.0) for i in range(4)]
                         + [unit("head", "head", 1, 1.0)]))
    chain = next(c for c in candidates(prof, 2, 80 * GB, 2) if c.name == "chain")
    full = int(max(chain.reserve_bytes))  # weights and Adam state fill the chain's fuller device
    cands = [c for c in candidates(prof, 2, full, 2) if c.name in ("chain", "mshape-EH")]
    assert cands[0].weights_fit
    out = choose(cands, 2)
    row = next(r for r in out.rows if r.candidate == "chain")
    assert not row.fits and row.ms is None and "memory" in row.reason and "<chain>" not in row.reason


def test_activations_are_written_as_profiled_none_as_none():
    # The embedding measured no activations (0 bytes): written as holding none, as a user writes
    # specs/mshape.tsl's E, with nothing freed by its backward. Measured at 1 KB, far below the
    # memory resolution (20 KB here, a hundredth of a stage's two layers of 1 MB), it is still one unit: a block
    # that holds memory is never written as holding none.
    def spec_for(embed_mb):
        units = [unit("embed", "embedding", 2, act_mb=embed_mb)] + [unit(f"l{i}", "layer", 10) for i in range(4)]
        by_name = {c.name: c for c in candidates(Profile(tuple(units + [unit("head", "head", 3)])), 2, 80 * GB, 4)}
        return parse(by_name["mshape-E"].text)

    none = spec_for(0.0)
    assert none.block("E").memory == 0 and none.block("EB").memory == 0
    some = spec_for(0.001)
    assert some.block("E").memory == 1 == -some.block("EB").memory
    assert some.units.memory_bytes == 2 * 10**4
