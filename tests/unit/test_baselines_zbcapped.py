"""Memory-capped ZB-H1 (`search/baselines/zbcapped.py`): timelines worked out by hand, ZB-H1
itself when memory holds its design, and validity, memory and memory-capped 1F1B (the backward
merged into one block) as a ceiling on random zero-bubble chains."""
from __future__ import annotations

import random

import pytest

from tessel_dsl.ir import Block, Edge, Kind, Spec
from tessel_dsl.lang.parser import parse_file
from tessel_dsl.search.baselines import build
from tessel_dsl.search.baselines.compare import baseline_row, label
from tessel_dsl.validate import validate
from tests.paths import ROOT
from tests.unit.test_baselines import zbchain

NAME = "zb-h1-capped"


def _order(spec, sched, d):
    return [(s.block, s.mb) for s in sched.per_device(spec)[d]]


def test_three_stages_two_in_flight_by_hand():
    # D=3, F = I = W = 1, F holds 1 unit until its W starts, M=2, N=4. Resident limits 2, 2, 2;
    # forwards awaiting their I at most min(3 - s, 2) = 2, 2, 1. A free stage runs its ready I,
    # else its next F within both limits, else its oldest W:
    #   t=0 s0 F:0 | t=1 s0 F:1, s1 F:0 | t=2 s1 F:1, s2 F:0 | t=3 s2 I:0
    #   t=4 s1 I:0, s2 F:1 | t=5 s0 I:0, s1 W:0 (F:2 would be a third resident), s2 I:1
    #   t=6 s0 W:0, s1 I:1, s2 W:0 | t=7 s0 I:1, s1 W:1, s2 W:1 | t=8 s0 F:2
    #   t=9 s0 W:1, s1 F:2 | t=10 s0 F:3, s2 F:2 | t=11 s1 F:3, s2 I:2 | t=12 s1 I:2, s2 F:3
    #   t=13 s0 I:2, s1 W:2, s2 I:3 | t=14 s0 W:2, s1 I:3, s2 W:2 | t=15 s0 I:3, s1 W:3, s2 W:3
    #   t=16 s0 W:3, ends at 17.
    spec = zbchain(d=3, n=4, m=2)
    s = build(spec, NAME)
    assert s.makespan(spec) == 17
    assert _order(spec, s, 0) == [("F0", 0), ("F0", 1), ("I0", 0), ("W0", 0), ("I0", 1), ("F0", 2), ("W0", 1),
                                  ("F0", 3), ("I0", 2), ("W0", 2), ("I0", 3), ("W0", 3)]
    assert s.peak_memory(spec) == (2, 2, 2)
    # ZB-H1's fixed sequence under the same memory needs longer, and so does memory-capped 1F1B
    # with I + W as one backward of 2 (21, worked out in test_baselines_capped.py)
    assert build(spec, "zb-h1").makespan(spec) == 19
    merged = _merged(spec)
    assert build(merged, "1f1b-capped").makespan(merged) == 21


@pytest.mark.parametrize("d", [2, 3, 4])
def test_one_in_flight_runs_each_micro_batch_alone(d):
    # M=1: device 0 holds a micro-batch from F0 until W0 starts, and W0 runs there before the next
    # F0, so each micro-batch takes its D forwards, D input gradients and W0: N (2D + 1).
    for n in (1, 2, 5):
        spec = zbchain(d=d, n=n, m=1)
        assert build(spec, NAME).makespan(spec) == n * (2 * d + 1)


@pytest.mark.parametrize("p", [2, 3, 4, 5])
@pytest.mark.parametrize("tf,ti,tw", [(1, 1, 1), (1, 2, 1), (2, 2, 1), (3, 2, 1), (2, 3, 2), (1, 1, 2)])
def test_is_zb_h1_when_memory_holds_its_design(p, tf, ti, tw):
    for n in (1, p, p + 3):
        spec = zbchain(d=p, n=n, tf=tf, ti=ti, tw=tw)  # M = p: ZB-H1's own limit
        zb = build(spec, "zb-h1")
        assert build(spec, NAME).makespan(spec) == zb.makespan(spec)
    row, _ = baseline_row(spec, NAME, spec.microbatches)
    assert label(row) == NAME  # capped by name: no "(capped to memory)" tag


def _merged(spec: Spec) -> Spec:
    """The same chain with each stage's I and W as one backward block (time I + W, freeing the
    activation at its start, as W does): what memory-capped 1F1B schedules."""
    blocks, edges = [], []
    fwd = [b for b in spec.blocks if b.kind is Kind.FORWARD]
    for b in fwd:
        k = b.name[1:]
        i, w = spec.block(f"I{k}"), spec.block(f"W{k}")
        blocks += [b, Block(f"B{k}", Kind.BACKWARD, b.devices, i.time + w.time, w.memory, forward=b.name)]
    d = len(fwd)
    edges += [Edge(f"F{k}", f"F{k + 1}") for k in range(d - 1)] + [Edge(f"F{d - 1}", f"B{d - 1}")]
    edges += [Edge(f"B{k + 1}", f"B{k}") for k in range(d - 1)]
    return Spec(spec.name, spec.devices, spec.memory, tuple(blocks), tuple(edges), spec.microbatches)


def _random_chain(rng: random.Random) -> Spec:
    d = rng.randint(2, 5)
    blocks, edges = [], []
    for k in range(d):
        act = rng.randint(1, 3)
        blocks += [Block(f"F{k}", Kind.FORWARD, (k,), rng.randint(1, 4), act),
                   Block(f"I{k}", Kind.INPUT_GRAD, (k,), rng.randint(1, 4), 0, f"F{k}"),
                   Block(f"W{k}", Kind.WEIGHT_GRAD, (k,), rng.randint(1, 4), -act, f"F{k}")]
        edges.append(Edge(f"I{k}", f"W{k}"))
    names = [f"F{k}" for k in range(d)] + [f"I{k}" for k in reversed(range(d))]
    edges += [Edge(a, b) for a, b in zip(names, names[1:])]
    need = max(b.memory for b in blocks)
    return Spec("zbrand", d, rng.randint(need, need * (d + 1)), tuple(blocks), tuple(edges), rng.randint(1, 9))


def test_random_chains_valid_within_memory_and_never_behind_capped_1f1b_or_zb_h1():
    rng = random.Random(27)
    for _ in range(60):
        spec = _random_chain(rng)
        s = build(spec, NAME)
        validate(spec, s)  # dependencies, one block at a time per device, memory M
        assert max(s.peak_memory(spec)) <= spec.memory
        span = s.makespan(spec)
        merged = _merged(spec)
        assert span <= build(merged, "1f1b-capped").makespan(merged)
        assert span <= build(spec, "zb-h1").makespan(spec)
        assert build(spec, NAME).slots == s.slots  # deterministic


def test_memory_bound_zero_bubble_chain_and_the_search_starts_from_it():
    from tessel_dsl.search.refine import best_baseline

    # bench/specs/real/zerobubble8.tsl with 12 GB for activations: 4 micro-batches of 2.85 GB
    spec = parse_file(ROOT / "bench/specs/real/zerobubble8.tsl", sets={"MEM": "12"})
    s = build(spec, NAME)
    assert max(s.peak_memory(spec)) <= spec.capacity(0)
    span = s.makespan(spec)
    for other in ("zb-h1", "gpipe"):
        assert span < build(spec, other).makespan(spec)
    got = best_baseline(spec, spec.microbatches, None)
    assert got is not None and got[1] == NAME and got[0].makespan(spec) == span
