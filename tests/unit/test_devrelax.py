"""The one-device relaxation bound (`search/devrelax.py`): one memory-bound device's blocks alone,
the rest of the pipeline as delays. Checked against a count worked by hand on the zero-bubble
chain of bench/specs/real/zerobubble8.tsl, and against the time-optimal solve (TO, an independent
exact model of the whole pipeline) on small random split-backward chains: never above it, and on
some strictly above the analytic bounds."""
from __future__ import annotations

import random

import pytest

from tessel_dsl.lang.parser import parse, parse_file
from tessel_dsl.search import bounds
from tessel_dsl.search.bounds import makespan_bound
from tessel_dsl.search.devrelax import device_relaxation_bound
from tessel_dsl.search.optimal import optimal
from tests.paths import ROOT


def test_zero_bubble_chain_by_hand():
    # 12 GB: four micro-batches in flight on device 0 (2.85 GB each). F 47, I 51, W 44 ms on
    # stages 0-6, stage 7 F 53 / I 56. I0 of micro-batch 0 starts at 7 x 47 + 53 + 56 + 6 x 51 =
    # 744 at the earliest and W0 ends 95 later; each further forward needs the memory a W frees,
    # and between two frees device 0 also runs an input gradient: one round is F + I + W = 142.
    # So the 8th forward starts at 744 + 4 x 142 - 47 = 1265, and its own chain back to W0, 795 +
    # 44, ends at 2104, the time-optimal makespan. The analytic bounds count 91 a round (F and W).
    spec = parse_file(ROOT / "bench/specs/real/zerobubble8.tsl", sets={"MEM": "12"})
    assert makespan_bound(spec, 8) == 1951
    assert device_relaxation_bound(spec, 8) == 744 + 4 * 142 - 47 + 795 + 44 == 2104
    assert makespan_bound(spec, 8, above=2200) == 2104


def test_only_asked_for_above_the_cheap_bound(monkeypatch):
    spec = parse_file(ROOT / "bench/specs/real/zerobubble8.tsl", sets={"MEM": "12"})
    monkeypatch.setattr(bounds, "_LAST", [])
    called = []
    from tessel_dsl.search import devrelax

    monkeypatch.setattr(devrelax, "device_relaxation", lambda s, n: called.append(n) or (2104, 0))
    assert makespan_bound(spec, 8, above=1951) == 1951 and not called  # already at the cheap bound
    assert makespan_bound(spec, 8, above=2300) == 2104 and called == [8]
    assert makespan_bound(spec, 8, above=2300) == 2104 and called == [8]  # kept for the next ask


def test_roomy_memory_tries_nothing():
    spec = parse_file(ROOT / "bench/specs/real/zerobubble8.tsl")  # 56 GB: memory never binds at N = 8
    assert device_relaxation_bound(spec, 8) == 0


def _split_chain(rng: random.Random):
    """A chain of stages with split backward (F, I, W; memory held from F to W), tight memory."""
    devices = rng.choice([2, 3])
    mems = [rng.randint(1, 2) for _ in range(devices)]
    n = rng.randint(3, 5)
    lines = ["placement relax", f"devices {devices}", f"memory {max(mems) * rng.choice([1, 2])}",
             f"microbatches {n}", "mode train"]
    for s in range(devices):
        lines += [f"forward F{s} on {s} time {rng.randint(1, 4)} memory {mems[s]}",
                  f"input_grad I{s} of F{s} time {rng.randint(1, 4)}",
                  f"weight_grad W{s} of F{s} time {rng.randint(1, 4)} memory -{mems[s]}", f"I{s} -> W{s}"]
    lines.append(" -> ".join([f"F{s}" for s in range(devices)] + [f"I{s}" for s in reversed(range(devices))]))
    return parse("\n".join(lines) + "\n"), n


def _case(seed: int):
    spec, n = _split_chain(random.Random(seed))
    best = optimal(spec, n)
    assert best.info.proven
    return spec, n, best.schedule.makespan(spec)


# On these seeds the analytic bound is below the optimum and the relaxation reaches it (on 11
# and 36 the analytic bound is below it too, and the relaxation is no higher).
REACHES = {0: 64, 3: 37, 18: 44, 23: 40, 26: 45, 33: 45, 34: 40, 35: 32, 37: 49}


@pytest.mark.parametrize("seed", range(40))
def test_never_above_the_time_optimum(seed):
    spec, n, optimum = _case(seed)
    bounds._LAST.clear()
    cheap, relaxed = makespan_bound(spec, n), device_relaxation_bound(spec, n)
    assert relaxed <= optimum and makespan_bound(spec, n, above=optimum + 1) <= optimum
    if seed in REACHES:
        assert cheap < relaxed == optimum == REACHES[seed]


@pytest.mark.parametrize("seed", range(0, 40, 4))
def test_the_cuts_state_a_paired_devices_memory_exactly(seed):
    # One allocating and one freeing block of the same size on every device of these chains: the
    # cuts-only problem has the optimum of the one with the running sum as a reservoir.
    from tessel_dsl.search.devrelax import _solve_device
    from tessel_dsl.search.membound import holdings

    spec, n = _split_chain(random.Random(seed))
    for d in range(spec.devices):
        held = [h for h in holdings(spec) if h.device == d and h.limit < n]
        assert _solve_device(spec, n, d, held, reservoir=False) == _solve_device(spec, n, d, held, reservoir=True)


def test_a_long_zero_bubble_chain_is_solved_by_the_cuts():
    # N = 64: 192 block instances on device 0, beyond what the reservoir model proves anything on
    # in its budget; the cuts alone lift the bound, and it stays below a valid schedule's makespan
    # (memory-capped ZB-H1, checked by the validator).
    from tessel_dsl.search.baselines import build
    from tessel_dsl.validate import validate

    spec = parse_file(ROOT / "bench/specs/real/zerobubble8.tsl", sets={"MEM": "12"})
    sched = build(spec, "zb-h1-capped", 64)
    validate(spec, sched)
    assert makespan_bound(spec, 64) == 13697 < device_relaxation_bound(spec, 64) == 13866 <= sched.makespan(spec)


def test_the_plan_says_where_its_bound_comes_from():
    # specs/zerobubble.tsl at N = 8: the analytic bounds give 35, device 0 alone 38, which the
    # plan reaches; the summary says which device and what the other bounds give.
    from tessel_dsl.search.driver import search
    from tessel_dsl.search.notes import render

    spec = parse_file(ROOT / "specs/zerobubble.tsl")
    r = search(spec, microbatches=8)
    assert r.schedule.makespan(spec) == r.info.makespan_bound == 38 and r.info.proven
    said = [x for x in r.info.notes if x.kind == "bound-one-device"]
    assert [x.values for x in said] == [{"bound": 38, "device": 0, "analytic": 35}]
    assert "lower bound 38 is device 0's alone" in render(r.info.notes)


def test_no_word_of_it_where_the_cheap_bound_decides(monkeypatch):
    from tessel_dsl.search import devrelax
    from tessel_dsl.search.driver import search

    spec = parse_file(ROOT / "specs/zerobubble.tsl")
    # N = 16: 70, above the analytic 67; the holding cuts, solved first for the baseline in hand,
    # prove it, so the device relaxations (which would too) are not solved; at N = 4 the cheap
    # bound decides and neither is
    monkeypatch.setattr(bounds, "_LAST", [])
    solved = []
    real = devrelax.device_relaxation
    monkeypatch.setattr(devrelax, "device_relaxation", lambda s, n: solved.append(n) or real(s, n))
    sharper = ("bound-one-device", "bound-devices", "bound-held-cuts")
    r = search(spec)
    assert solved == []
    assert [(x.kind, x.values) for x in r.info.notes if x.kind in sharper] == [
        ("bound-held-cuts", {"bound": 70, "analytic": 67})]
    r4 = search(spec, microbatches=4)
    assert r4.schedule.makespan(spec) == r4.info.makespan_bound == makespan_bound(spec, 4)
    assert not any(x.kind in sharper for x in r4.info.notes)


def _memory_chain(seed: int):
    """A chain of 3 or 4 stages (backward twice the forward), 1 or 2 units held per micro-batch."""
    from tests.unit.test_membound import chain

    rng = random.Random(seed)
    devices, n = rng.choice([3, 4]), rng.randint(4, 6)
    fwd = [rng.randint(2, 5) for _ in range(devices)]
    mem = [rng.randint(1, 2) for _ in range(devices)]
    return chain(fwd, rng.choice([2, 3]), mem, n=n), n


# Seeds where no device alone reaches the optimum but a set of devices does (`devrelax.py`,
# "Several devices at once"): (the analytic bound, the set, the optimum TO proves).
SETS_REACH = {4: (108, (0, 1, 2), 114), 5: (108, (0, 1, 2, 3), 113), 8: (99, (0, 1), 100)}


@pytest.mark.parametrize("seed", range(30))
def test_sets_of_devices_never_above_the_time_optimum(seed):
    from tessel_dsl.search.devrelax import _solve, device_relaxation
    from tessel_dsl.search.membound import holdings

    spec, n = _memory_chain(seed)
    best = optimal(spec, n, effort=30)
    assert best.info.proven
    optimum = best.schedule.makespan(spec)
    bounds._LAST.clear()
    cheap = makespan_bound(spec, n)
    got, devices = device_relaxation(spec, n)
    assert got <= optimum
    if seed in SETS_REACH:
        held = [h for h in holdings(spec) if h.limit < n]
        alone = [_solve(spec, n, (d,), [h for h in held if h.device == d], reservoir=(), effort=1)[0]
                 for d in range(spec.devices)]
        assert max(alone) == cheap < got == optimum
        assert (cheap, devices, optimum) == SETS_REACH[seed]


def test_the_plan_names_the_devices_of_its_bound():
    # bench/specs/real/memchain.tsl (8 stages, 6 micro-batches in flight on device 0, 10 on
    # device 7): the analytic bounds give 1353 at N = 24; devices 0-3 and 7 together 1416, below
    # the optimum TO proves, 1449 (bench/results/search.md); the plan's summary names them.
    from tessel_dsl.search.notes import render

    spec = parse_file(ROOT / "bench/specs/real/memchain.tsl")
    bounds._LAST.clear()
    assert makespan_bound(spec, 24) == 1353
    assert makespan_bound(spec, 24, above=1452) == 1416
    said = bounds.source_notes(spec, 24, 1416)
    assert [x.kind for x in said] == ["bound-devices"]
    assert said[0].values["devices"] == [0, 1, 2, 3, 7]
    assert "lower bound 1416 is devices 0, 1, 2, 3, 7 together" in render(said)


def test_the_relaxations_are_kept_across_another_spec_asked_in_between(monkeypatch):
    # A search asks about the spec, then about a spec it derives (two copies unrolled), then about
    # the spec again: the relaxations of the first are not solved twice.
    from tessel_dsl.search import devrelax

    one = parse_file(ROOT / "bench/specs/real/zerobubble8.tsl", sets={"MEM": "12"})
    other = parse_file(ROOT / "bench/specs/real/zerobubble8.tsl", sets={"MEM": "14"})
    monkeypatch.setattr(bounds, "_LAST", [])
    called = []
    monkeypatch.setattr(devrelax, "device_relaxation", lambda s, n: called.append((s, n)) or (2104, (0,)))
    assert makespan_bound(one, 8, above=2300) == 2104
    makespan_bound(other, 8, above=9999)
    assert makespan_bound(one, 8, above=2300) == 2104
    assert called == [(one, 8), (other, 8)]


def test_an_unrolled_spec_takes_its_parents_bound_without_solving_its_own(monkeypatch):
    # The copies search unrolls two micro-batches into one (`kcopy._unrolled`); every schedule of
    # that spec at ceil(N / 2) folds into one of the spec at N, so the spec's bound holds for it.
    # Only the spec's own relaxations are solved; and the bound stays below what TO proves for
    # the unrolled spec itself (an independent exact model).
    from tessel_dsl.search import devrelax
    from tessel_dsl.search.kcopy import _unrolled

    spec = parse_file(ROOT / "bench/specs/real/zerobubble8.tsl", sets={"MEM": "12"})
    monkeypatch.setattr(bounds, "_LAST", [])
    solved = []
    real = devrelax.device_relaxation
    monkeypatch.setattr(devrelax, "device_relaxation", lambda s, n: solved.append((len(s.blocks), n)) or real(s, n))
    two = _unrolled(spec, 2, 7)
    assert makespan_bound(two, 4, above=2300) == makespan_bound(spec, 7, above=2300) > makespan_bound(two, 4)
    assert solved == [(len(spec.blocks), 7)]
    small = _unrolled(spec, 2, 3)
    to = optimal(small, 2, effort=30)
    assert to.info.proven and makespan_bound(small, 2, above=10**6) <= to.schedule.makespan(small)


def test_a_bound_the_cuts_prove_too_names_the_analytic_one_as_the_other(monkeypatch):
    # The same memchain bound, 1416 from devices 0-3 and 7, when the whole schedule with memory as
    # holding cuts proved 1416 as well: "the other bounds" are then the analytic ones (1353), not
    # the tie, and the note says the cuts prove the same.
    from tessel_dsl.search import heldcuts
    from tessel_dsl.search.notes import render

    spec = parse_file(ROOT / "bench/specs/real/memchain.tsl")
    bounds._LAST.clear()
    assert makespan_bound(spec, 24, above=1452) == 1416
    monkeypatch.setattr(heldcuts, "_LAST", [spec, 24, heldcuts.CutAnswer(1416, None, False), 2.0])
    text = render(bounds.source_notes(spec, 24, 1416))
    assert "(the other bounds give 1353; the whole schedule with memory as holding cuts proves the same)" in text


def test_the_first_pair_with_one_running_sum_reaches_the_optimum():
    # bench/specs/real/phi3_medium_zb8.tsl at N = 8: split backward frees a forward's memory in
    # two steps (I, then W), so the holding cuts do not state device 0's running sum. Device 0
    # alone with its running sum gives 3171, devices 0 and 7 with the cuts alone 3126, and the
    # two with device 0's running sum 3224: the makespan the time-optimal solve proves optimal.
    from dataclasses import replace

    from tessel_dsl.search.baselines import build
    from tessel_dsl.search.devrelax import _solve, _solve_device, device_relaxation
    from tessel_dsl.search.membound import holdings

    spec = replace(parse_file(ROOT / "bench/specs/real/phi3_medium_zb8.tsl"), microbatches=8)
    best = optimal(spec, 8, effort=20, hint=build(spec, "zb-h1-capped", 8))
    assert best.info.proven
    held = [h for h in holdings(spec) if h.limit < 8 and h.device in (0, 7)]
    alone = _solve_device(spec, 8, 0, [h for h in held if h.device == 0], reservoir=True)
    cuts = _solve(spec, 8, (0, 7), held, reservoir=(), effort=1)[0]
    assert (alone, cuts) == (3171, 3126)
    assert device_relaxation(spec, 8) == (best.schedule.makespan(spec), (0, 7)) == (3224, (0, 7))
