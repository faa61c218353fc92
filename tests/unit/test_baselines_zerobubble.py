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
from tessel_dsl.lang.parser import parse, parse_file
from tessel_dsl.search.baselines import NotApplicable, build
from tessel_dsl.search.baselines.chain import unfolded
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


def _zb_with_ends(n, merged):
    """A 4-stage zero-bubble chain with an embedding E (forward 1, whole backward EB 1) before
    stage 0 and a head H (forward 2, whole backward HB 3, 1 unit of memory) after stage 3, on
    those stages' devices; `merged` writes each end into its stage's blocks instead (F0 and F3
    longer, I0 and I3 longer, F3 holding the head's memory until I3)."""
    e, h = (0, 0) if merged else (1, 2)
    lines = ["devices 4", "memory 5", f"microbatches {n}", "mode train"]
    for s in range(4):
        tf = 1 + (1 if merged and s == 0 else 0) + (2 if merged and s == 3 else 0)
        ti = 2 + (1 if merged and s == 0 else 0) + (3 if merged and s == 3 else 0)
        mf = 1 + (1 if merged and s == 3 else 0)
        lines += [f"forward F{s} on {s} time {tf} memory {mf}",
                  f"input_grad I{s} of F{s} time {ti} memory {-(1 if merged and s == 3 else 0)}",
                  f"weight_grad W{s} of F{s} time 1 memory -1", f"I{s} -> W{s}"]
    back = "chain(I{3-s} for s in 0..3)"
    if merged:
        lines.append(f"chain(F{{s}} for s in 0..3) -> {back}")
    else:
        lines += [f"forward E on 0 time {e} memory 0", f"backward EB of E time {e}",
                  f"forward H on 3 time {h} memory 1", "backward HB of H time 3 memory -1",
                  f"E -> chain(F{{s}} for s in 0..3) -> H -> HB -> {back} -> EB"]
    return parse("\n".join(lines) + "\n")


@pytest.mark.parametrize("name", ["zb-h1", "zb-h1-capped"])
def test_zb_h1_runs_a_whole_backward_of_the_ends_with_its_stages_input_gradient(name):
    # An embedding's and a head's backward are rarely split; ZB-H1 as an engineer runs it takes
    # them in the input-gradient step of their stage, which is the same schedule as ZB-H1 on the
    # chain with each end written into its stage's blocks (the reference, built here by hand).
    for n in (4, 8):
        spec, merged = _zb_with_ends(n, False), _zb_with_ends(n, True)
        got = build(spec, name)  # validated inside
        assert got.makespan(spec) == build(merged, name).makespan(merged)
        assert got.makespan(spec) < build(spec, "1f1b-capped").makespan(spec)  # the W passes fill bubbles
        order3 = [(s.block, s.mb) for s in sorted(got.slots) if s.block in ("HB", "I3")]
        assert order3 == [x for mb in range(n) for x in (("HB", mb), ("I3", mb))]
    with unfolded(), pytest.raises(NotApplicable, match="block EB is a whole backward|block HB is a whole backward"):
        build(spec, "zb-h1")
    row, _ = baseline_row(spec, name, 8)
    assert "whole backward in the I step" in label(row)


def test_zb_h1_refuses_a_stage_with_no_weight_gradient():
    text = ("devices 2\nmemory 4\nmicrobatches 4\nmode train\n"
            "forward F0 on 0 time 1 memory 1\ninput_grad I0 of F0 time 2\nweight_grad W0 of F0 time 1 memory -1\n"
            "forward F1 on 1 time 1 memory 1\nbackward B1 of F1 time 3 memory -1\n"
            "F0 -> F1 -> B1 -> I0\nI0 -> W0\n")
    with pytest.raises(NotApplicable, match="stage of F1 has no weight_grad block"):
        build(parse(text), "zb-h1")
