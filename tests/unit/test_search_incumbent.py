"""The default search starts from the best baseline in hand (`search/incumbent.py`).

The shortcut applies only above the size where the end re-solve frees the whole schedule
(`refine.FULL_RESOLVE_TASKS` block instances), so these specs use N = 21 to 30.

References are independent of the search: hand-worked makespans, the baseline builder, the
validator, the simulator and the time-optimal solve (`search/optimal.py`).
"""
from __future__ import annotations

from tessel_dsl.ir import Link
from tessel_dsl.lang.parser import parse, parse_file
from tessel_dsl.plan import make_plan
from tessel_dsl.search import search
from tessel_dsl.search.baselines import build
from tessel_dsl.search.bounds import makespan_bound
from tessel_dsl.search.finish import reextend
from tessel_dsl.search.incumbent import useful_cap
from tessel_dsl.search.optimal import optimal
from tessel_dsl.search.repetend import nr_limit
from tessel_dsl.simulator import simulate as run_plan
from tessel_dsl.validate import validate
from tests.paths import ROOT, SPECS


def simulated(spec, result) -> int:
    """The makespan the simulator measures for the searched plan (no communication cost)."""
    return run_plan(make_plan(spec, result.schedule, result.info), link=Link()).makespan

# Device 0 holds one micro-batch, so micro-batches run one after another: N * (2+1+2+4+2+3) = 420.
SERIAL = """placement serial_chain
devices 3
memory 8
memory 1 on 0
microbatches 30
mode train
forward F0 on 0 time 2 memory 1 grad time 3
forward F1 on 1 time 1 memory 1 grad time 2
forward F2 on 2 time 2 memory 1 grad time 4
F0 -> F1 -> F2
derive backward
"""

# Device 0 holds two micro-batches where 1F1B keeps four: memory-capped 1F1B is the best baseline.
CAPPED = """placement capped_chain
devices 4
memory 8
memory 2 on 0
microbatches 21
mode train
forward F0 on 0 time 2 memory 1 grad time 3
forward F1 on 1 time 1 memory 1 grad time 2
forward F2 on 2 time 2 memory 1 grad time 4
forward F3 on 3 time 1 memory 1 grad time 2
F0 -> F1 -> F2 -> F3
derive backward
"""


def test_a_baseline_at_the_bound_ends_the_search_with_that_bound():
    spec = parse(SERIAL)
    r = search(spec)
    assert r.info.method == "baseline" and r.info.proven
    validate(spec, r.schedule)
    assert r.schedule.makespan(spec) == r.info.makespan_bound == 30 * 14 == makespan_bound(spec, 30)
    assert simulated(spec, r) == 420
    assert [n.kind for n in r.info.notes] == ["baseline-at-bound"] and r.info.notes[0].values["makespan"] == 420
    # its steady state (one micro-batch every 14) is kept, so the plan re-extends to other N
    assert r.schedule.repetend is not None and r.schedule.repetend.period == 14
    assert reextend(spec, r.schedule, 33).makespan(spec) == 33 * 14


def test_memory_bound_chain_is_valid_no_worse_than_capped_1f1b_and_the_same_twice(monkeypatch):
    spec = parse(CAPPED)
    r, again = search(spec), search(spec)
    # Capped 1F1B takes 196, above the analytic bound; the whole schedule with memory as cuts
    # (`heldcuts.py`) proves nothing shorter exists, so the search ends there (the time-optimal
    # solve, `optimal(spec, 21, effort=60)`, proves 196 too, in about a second).
    capped = build(spec, "1f1b-capped", 21).makespan(spec)
    assert capped == 196 > makespan_bound(spec, 21)
    assert r.info.method == "baseline" and r.info.proven and r.info.makespan_bound == 196
    assert r.schedule.slots == again.schedule.slots and r.info.notes == again.info.notes
    validate(spec, r.schedule)
    assert simulated(spec, r) == r.schedule.makespan(spec) == 196
    # Devices 0, 1 and 2 together (`devrelax.py`, "Several devices at once") prove 196 as well.
    from tessel_dsl.search import devrelax, heldcuts

    assert devrelax.device_relaxation(spec, 21) == (196, (0, 1, 2))
    # Without either proof a repetend could still beat it below period (196 - 17) / (21 - 8), so
    # the walk runs (its period-9 repetend, N_R = 2, gives a longer plan and the baseline's
    # order is kept)
    monkeypatch.setattr(heldcuts, "CUT_MAX_INSTANCES", 0)
    monkeypatch.setattr(devrelax, "RELAX_SET_EFFORT", 0)
    walked = search(parse(CAPPED))
    assert useful_cap(spec, 21, 196) == 14
    assert walked.info.method == "modulo" and [n.kind for n in walked.info.notes][0] == "baseline-beats"
    validate(spec, walked.schedule)
    got = walked.schedule.makespan(spec)
    assert simulated(spec, walked) == got <= capped
    assert walked.info.makespan_bound <= got


def test_the_stated_bound_holds_against_the_time_optimal_solve():
    spec = parse(CAPPED)
    for n in (2, 4, 6):
        to = optimal(spec, n, effort=60)
        assert to.info.proven
        assert makespan_bound(spec, n) <= to.schedule.makespan(spec)
    assert to.schedule.makespan(spec) == 59  # N = 6; memory-capped 1F1B takes 61
    assert build(spec, "1f1b-capped", 6).makespan(spec) == 61


def test_useful_cap_hand_worked():
    # A one-copy repetend spanning N_R micro-batches repeats N - N_R + 1 times, so a plan from it
    # spans at least (N - N_R) P + chain; the walk tries N_R up to nr_limit: 8 for CAPPED (8
    # blocks, 8 allocations of 1 fit on devices 1-3), 6 for SERIAL.
    capped, serial = parse(CAPPED), parse(SERIAL)
    assert (nr_limit(capped), nr_limit(serial)) == (8, 6)
    # CAPPED's chain is 2+1+2+1+2+4+2+3 = 17 long: for N = 21, 13 P + 17 is 199 at P = 14, 212 at 15
    assert useful_cap(capped, 21, 200) == 15
    assert useful_cap(serial, 30, 420) == 17  # 24 * 17 + 14 = 422 >= 420 > 24 * 16 + 14 = 398
    # no more micro-batches than a repetend may span: no period can be ruled out
    assert useful_cap(capped, 6, 61) == 62


def test_useful_cap_leaves_room_for_the_ends():
    # bench/specs/real/mshape8.tsl with MEM=24: 1F1B+ takes 7628 ms for N = 32, exactly
    # 31 * 209 + 1149 (the chain), yet a period-209 repetend (N_R = 8) gives 7440 because its
    # warmup and cooldown run micro-batches closer than a period apart; it must stay searchable.
    spec = parse_file(ROOT / "bench/specs/real/mshape8.tsl", sets={"MEM": "24"})
    assert build(spec, "1f1b+").makespan(spec) == 7628
    assert useful_cap(spec, 32, 7628) == -(-(7628 - 1149) // (32 - 8)) == 270 > 209


def test_a_walk_cut_by_its_budget_is_the_same_plan_twice_and_says_so(monkeypatch):
    # The walk's budget is CP-SAT deterministic time charged as used. V-shape D=4 under M=2: with
    # its budget the walk proves period 8 (the memory floor); with none it would keep the
    # one-micro-batch repetend (16 = 4 * (1 + 3)) and name 8..15 as open, and the plan still runs
    # memory-capped 1F1B's order (68), the same on every run.
    from tessel_dsl.search import findrep, period_walk
    from tests.helpers import vshape

    spec = vshape(devices=4, memory=2, fwd=1, bwd=3, microbatches=8)
    full = search(spec, method="modulo")
    assert full.info.period == 8 and full.info.period_proven
    monkeypatch.setattr(period_walk, "WALK_EFFORT_RANGE", (0.0, 0.0))
    listed = findrep.list_repetend
    monkeypatch.setattr(findrep, "list_repetend", lambda *args: None)
    a, b = (search(spec, method="modulo") for _ in range(2))
    validate(spec, a.schedule)
    assert a.schedule.slots == b.schedule.slots and a.info.notes == b.info.notes
    assert a.info.period == 16 and not a.info.period_proven and not a.info.proven
    open_periods = next(n.values for n in a.info.notes if n.kind == "walk-unsettled")
    assert (open_periods["low"], open_periods["high"], open_periods["cause"]) == (8, 15, "budget")
    assert a.schedule.makespan(spec) == build(spec, "1f1b-capped", 8).makespan(spec) == 68
    # With the list-scheduled repetend (`listrep.py`) the period is 8, the floor, so proven
    # minimal with no solve, and nothing is left open.
    monkeypatch.setattr(findrep, "list_repetend", listed)
    c = search(spec, method="modulo")
    validate(spec, c.schedule)
    assert c.info.period == 8 and c.info.period_proven
    assert [n.kind for n in c.info.notes if n.kind in ("walk-unsettled", "list-repetend")] == ["list-repetend"]
    assert c.schedule.makespan(spec) <= 68


def test_walk_budget_shrinks_with_the_model():
    from tessel_dsl.search.period_walk import walk_budget

    small, chain8 = parse(CAPPED), parse(SERIAL)
    assert walk_budget(small) == 108 / 8 and walk_budget(chain8) == 108 / 6


def test_the_summary_states_the_period_the_plan_runs():
    """A plan that runs a baseline's order: the summary's period at this N is the gap between
    micro-batches in its steady part (read off the schedule: device 0 starts a micro-batch every
    9 units from the sixth on), and a row of its own appears only where that is not the repetend's."""
    from tessel_dsl.cli.search import _running, summary

    spec = parse(CAPPED)
    r = search(spec)
    starts = sorted(s.start for s in r.schedule.slots if s.block == "F0")
    assert {b - a for a, b in zip(starts[5:], starts[6:])} == {9}
    s = summary(spec, make_plan(spec, r.schedule, r.info))
    assert s["running_period"] == 9 == s["period_per_microbatch"] and _running(s) is None
    # The same numbers where the repetend kept for other N is longer than what runs (as when a
    # one-micro-batch repetend is kept beside a capped 1F1B order): both are said.
    other = s | {"period": 538, "period_per_microbatch": 538.0, "running_period": 108.5, "lower_bound": 89,
                 "memory_bound": 88.3}
    assert _running(other).startswith("108.5 per micro-batch  (21.9% above the bound 89;")
    assert "- (no steady state" in _running(other | {"running_period": None})
    # A memory bound is a fraction: shown to two decimals, as the repetend's row shows it.
    thirds = other | {"lower_bound": 80, "memory_bound": 2560 / 30}
    assert _running(thirds).startswith("108.5 per micro-batch  (27.1% above the bound 85.33;")


def test_a_baseline_with_no_steady_state_at_this_n_still_reextends():
    """Zero-bubble on 8 devices at N = 8: the baseline's warm-up and cool-down meet, so its steady
    state is cut from the same baseline built for more micro-batches and stored for other N. At
    N = 16 and 32 the re-extension is as short as that baseline built for those N (the simulator
    measures them), one micro-batch per period 4 (every device's F + I + W) in between."""
    from pathlib import Path

    from tessel_dsl.lang.parser import parse_file
    from tessel_dsl.plan import load_plan, save_plan
    from tessel_dsl.search.clock import Clock
    from tessel_dsl.search.incumbent import baseline_result
    from tessel_dsl.search.refine import best_baseline

    spec = parse_file(Path(__file__).resolve().parents[2] / "specs" / "zerobubble.tsl", sets={"D": "8"})
    # The baseline as the search's answer, as `search` gives it when no repetend can beat it
    # (at N = 8, no more than a repetend may span, `useful_cap` rules none out, so the search
    # itself walks first).
    got = best_baseline(spec, 8, None)
    r = baseline_result(spec, 8, got, Clock(None), None, at_bound=False)
    assert r.info.method == "baseline" and r.schedule.repetend is not None and r.info.period == 4
    name = next(x.values["baseline"] for x in r.info.notes if "baseline" in x.values)
    for n in (16, 32):
        longer = reextend(spec, r.schedule, n)
        validate(spec, longer)
        assert longer.makespan(spec) <= build(spec, name, n).makespan(spec)
        assert run_plan(make_plan(spec, longer), link=Link()).makespan == longer.makespan(spec)
    assert reextend(spec, r.schedule, 32).makespan(spec) - reextend(spec, r.schedule, 16).makespan(spec) == 16 * 4
    # and the plan file keeps it: a plan loaded again re-extends the same way
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        save_plan(make_plan(spec, r.schedule, r.info), Path(d) / "p.json")
        again = load_plan(Path(d) / "p.json")
    assert reextend(spec, again.schedule, 16).makespan(spec) == reextend(spec, r.schedule, 16).makespan(spec)


def test_a_baseline_plan_with_no_repetend_reextends_by_building_that_baseline():
    """A plan that runs a baseline's order and keeps no repetend (as a plan written before the
    baseline's steady state was kept): asked for another N (as `tessel simulate -n 16` asks), it is
    that baseline built for 16, valid, within memory, at least the makespan bound for 16."""
    from tessel_dsl.plan import SearchInfo
    from tessel_dsl.schedule import Schedule
    from tessel_dsl.search.notes import note

    spec = parse(CAPPED)
    got = build(spec, "1f1b-capped", 21)
    bare = Schedule(21, got.slots, name="tessel")
    info = SearchInfo(notes=(note("baseline-unbeaten", baseline="1f1b-capped", n=21, makespan=got.makespan(spec),
                                  cap=1, floor=1, repetend=False, proof=None),))
    longer = reextend(spec, bare, 16, info=info)
    validate(spec, longer)
    assert longer.microbatches == 16 and longer.makespan(spec) >= makespan_bound(spec, 16)
    assert longer.makespan(spec) == build(spec, "1f1b-capped", 16).makespan(spec)


def test_interleaved_at_its_bound_keeps_the_searched_repetend_for_other_n():
    """Interleaved 1F1B on 8 devices reaches the makespan bound at N = 8, but its micro-batches
    repeat in groups, so no one-copy steady state can be cut from it: the search proper runs and
    keeps its repetend (period 8, the lower bound), and re-extension to N = 32 is as short as the
    bound-period extension, 296 (bench/results/search.md's D=8 table), not the baseline's 347."""
    from pathlib import Path

    from tessel_dsl.lang.parser import parse_file

    spec = parse_file(Path(__file__).resolve().parents[2] / "specs" / "interleaved.tsl", sets={"D": "8"})
    r = search(spec, microbatches=8)
    assert r.schedule.repetend is not None and r.info.period == 8 == r.info.lower_bound
    assert r.schedule.makespan(spec) == makespan_bound(spec, 8)
    longer = reextend(spec, r.schedule, 32, info=r.info)
    validate(spec, longer)
    assert longer.makespan(spec) < build(spec, "interleaved-1f1b", 32).makespan(spec)


def test_simulate_names_no_planned_period_for_an_order_its_repetend_did_not_lay_out():
    """`tessel simulate`'s "(planned P)" is the repetend's period; a plan that runs a baseline's
    order for its N (no `repetend_start`: the slots are not the repetend's extension) keeps its
    repetend for other N only, so nothing is said to be planned. A plan laid out from its
    repetend still says it."""
    from tessel_dsl.simulator import simulate

    spec = parse(CAPPED)
    r = search(spec)
    assert r.schedule.repetend is not None and r.schedule.repetend_start is None
    assert simulate(make_plan(spec, r.schedule, r.info)).planned_period is None
    vshape = parse_file(SPECS / "vshape.tsl", sets={"D": "4", "N": "8"})
    laid = search(vshape)
    assert laid.schedule.repetend_start is not None
    assert simulate(make_plan(vshape, laid.schedule, laid.info)).planned_period == laid.schedule.repetend.period


def test_the_summary_says_a_baseline_plan_has_no_repetend_not_that_it_was_solved_directly(capsys, tmp_path):
    # Gemma-2-27B over 8 GPUs, stage 0 holding one micro-batch fewer than 1F1B needs: memory-capped
    # 1F1B reaches the makespan bound and has no fixed-period steady state, so the plan keeps no
    # repetend; nothing was solved directly.
    from tests.helpers import run_cli

    spec = ROOT / "bench" / "specs" / "real" / "gemma2_27b_chain8.tsl"
    code, out, err = run_cli(capsys, "search", str(spec), "-o", str(tmp_path / "plan.json"))
    assert code == 0, err
    said = " ".join(out.replace("│", " ").split())
    assert "no repetend: the plan runs a baseline's order" in said and "solved directly" not in said
    assert "reached" in said and "1F1B-CAPPED for N=32 reaches the makespan lower bound (9288)" in said
