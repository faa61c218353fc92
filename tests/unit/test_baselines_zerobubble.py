"""ZB-H1 and ZB-V against the zero-bubble paper's closed forms and hand-derived bounds.

References (Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024):
* 1F1B's bubble is (p-1)(T_F + T_B + T_W), so its makespan is (N + p - 1)(T_F + T_B + T_W);
* ZB-H1's bubble is (p-1)(T_F + T_B - T_W) (§2.1, derived with T_F = T_B = T_W, where it is a third
  of 1F1B's), so its makespan is N(T_F + T_B + T_W) + (p-1)(T_F + T_B - T_W) once N >= p;
* ZB-V (arXiv 2401.10241) has no bubble in the steady state with T_F = T_B = T_W and the
  activation memory of 1F1B (p micro-batches' worth on a device).
Here T_B is the input-gradient block I.
"""
from __future__ import annotations

import pytest

from tessel_dsl.errors import InfeasibleError
from tessel_dsl.lang.parser import parse_file
from tessel_dsl.search.baselines import NotApplicable, build
from tessel_dsl.search.baselines.compare import baseline_row, best_baseline, compare, label
from tessel_dsl.validate import validate
from tests.paths import SPECS
from tests.unit.test_baselines import vshape, zbchain, zbv


@pytest.mark.parametrize("p", [2, 3, 4, 5])
@pytest.mark.parametrize("tf,ti,tw", [(1, 1, 1), (1, 2, 1), (2, 2, 1), (3, 2, 1), (2, 3, 2)])
def test_zb_h1_makespan_is_the_papers_formula(p, tf, ti, tw):
    for n in range(p, 11):
        spec = zbchain(d=p, n=n, tf=tf, ti=ti, tw=tw)
        s = build(spec, "zb-h1")  # validated under M = p inside
        assert s.makespan(spec) == n * (tf + ti + tw) + (p - 1) * (tf + ti - tw)
        assert max(s.peak_memory(spec)) <= p  # 1F1B's first stage holds p micro-batches


@pytest.mark.parametrize("p", [2, 4, 6])
def test_zb_h1_bubble_is_a_third_of_1f1b_with_equal_costs(p):
    n = 12
    zb = zbchain(d=p, n=n)
    plain = vshape(d=p, n=n, tb=2)  # the same stages with I and W as one backward of 2 units
    one_f_one_b = build(plain, "1f1b").makespan(plain)
    assert one_f_one_b == (n + p - 1) * 3
    assert build(zb, "zb-h1").makespan(zb) - 3 * n == (one_f_one_b - 3 * n) // 3 == p - 1


@pytest.mark.parametrize("p", [2, 3, 5])
def test_zb_h1_when_w_costs_more_meets_the_last_stages_bound(p):
    # T_W > T_B: the formula's bubble would be 0, but the last stage cannot start before
    # (p-1) T_F and then has N (T_F + T_B + T_W) of work, so that is a lower bound; ZB-H1 meets it.
    n = 8
    spec = zbchain(d=p, n=n, tf=1, ti=1, tw=2)
    assert build(spec, "zb-h1").makespan(spec) == (p - 1) * 1 + n * 4


def test_zb_h1_under_tight_memory_stays_valid_and_refuses_zero():
    for m in (1, 2, 3):
        spec = zbchain(d=4, n=10, m=m, ti=2)
        s = build(spec, "zb-h1")
        validate(spec, s)
        assert max(s.peak_memory(spec)) <= m
    with pytest.raises(InfeasibleError, match="more than M=0"):
        build(zbchain(d=4, n=10, m=0), "zb-h1")


@pytest.mark.parametrize("p", [2, 3, 4, 6, 8])
@pytest.mark.parametrize("tf,ti,tw", [(1, 1, 1), (1, 2, 1), (1, 1, 2)])
def test_zb_v_has_no_steady_bubble_and_1f1b_memory(p, tf, ti, tw):
    row, _ = baseline_row(zbv(d=p, n=16, tf=tf, ti=ti, tw=tw), "zb-v", 16)
    assert row.status == "ok"
    # the lower bound: two chunks of F + I + W per device and micro-batch
    assert row.period == row.lower_bound == 2 * (tf + ti + tw)
    assert row.steady_bubble == 0
    assert max(row.peak_memory) <= 2 * p  # p micro-batches of two chunks: 1F1B's first stage


def test_zb_v_under_memory():
    spans = []
    for m in range(2, 9):
        spec = zbv(d=4, n=8, m=m)
        s = build(spec, "zb-v")
        validate(spec, s)
        spans.append(s.makespan(spec))
    assert spans == sorted(spans, reverse=True)  # more memory never makes it slower
    # Device 0 runs the first and the last stage: a micro-batch's chunk-0 activation is held
    # until its W0, which waits for I7 after F7 on the same device, so any schedule needs 2 units.
    with pytest.raises(InfeasibleError, match="M=1"):
        build(zbv(d=4, n=8, m=1), "zb-v")


def test_placements_each_schedule_refuses():
    with pytest.raises(NotApplicable, match="device 0 holds|device 2 runs stages"):
        build(zbv(), "zb-h1")
    with pytest.raises(NotApplicable, match="in a V"):
        build(zbchain(), "zb-v")
    with pytest.raises(NotApplicable, match="block B0 is a whole backward"):
        build(vshape(), "zb-h1")


def test_shipped_zerobubble_spec_compares_against_zb_h1():
    spec = parse_file(SPECS / "zerobubble.tsl")
    rows = compare(spec, 16, schedules=("gpipe", "1f1b", "zb-h1", "zb-v"))
    by = {r.schedule: r for r in rows}
    assert by["zb-v"].status == "n/a"
    assert by["zb-h1"].makespan == 16 * 4 + 3 * (1 + 2 - 1) == 70
    # 1F1B runs each W right after its I (its order for a backward that is not split): its steady
    # state is F + I + W a micro-batch, so it is longer than ZB-H1's (73 against 70).
    assert by["1f1b"].status == "ok" and by["1f1b"].makespan > by["zb-h1"].makespan
    assert label(by["1f1b"]) == "1f1b (backward not split)"
    assert best_baseline(rows).schedule == "zb-h1"
    v = parse_file(SPECS / "zerobubble.tsl", sets={"C": "2"})
    assert [v.block(f"F{k}").devices[0] for k in range(8)] == [0, 1, 2, 3, 3, 2, 1, 0]
    rows = compare(v, 16, schedules=("gpipe", "zb-h1", "zb-v"))
    assert best_baseline(rows).schedule == "zb-v" and best_baseline(rows).period == 8  # = lower bound
