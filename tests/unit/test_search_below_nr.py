"""N below the repetend's N_R and over the direct-solve size: the schedule for N_R micro-batches
without the last ones is used, and the plan written keeps the repetend's phases for larger N.
Those phases must be storable: every verb loads the plan, so `tessel search` checks it as loading
does before writing it."""
from __future__ import annotations

import importlib
import json
from dataclasses import replace

from tessel_dsl.lang.parser import parse_file
from tessel_dsl.plan import load_plan
from tessel_dsl.schedule import Slot
from tessel_dsl.search.periodic import periodic_warmup
from tessel_dsl.validate import validate
from tests.helpers import run_cli
from tests.paths import ROOT

# The modules themselves (the package re-exports a function named `search`).
driver = importlib.import_module("tessel_dsl.search.driver")
extend_mod = importlib.import_module("tessel_dsl.search.extend")
refine = importlib.import_module("tessel_dsl.search.refine")


def test_periodic_warmup_keeps_the_unrolled_order_from_time_zero():
    spec = parse_file(ROOT / "specs/interleaved.tsl")
    rep = driver.search(spec, microbatches=8).schedule.repetend
    phase = periodic_warmup(spec, rep)
    assert phase is not None and phase.slots
    # Block i of micro-batch n runs at s_i + (n - r_i) * P in the periodic schedule; the warmup
    # (n < r_i) lies before instance 0, so some of those times are negative.
    slot = {s.block: s for s in rep.slots}
    unrolled = {(s.block, s.mb): slot[s.block].start + (s.mb - slot[s.block].mb) * rep.period for s in phase.slots}
    assert min(unrolled.values()) < 0
    shifts = {s.start - unrolled[(s.block, s.mb)] for s in phase.slots}
    assert shifts == {-min(unrolled.values())}  # one common shift, to a first start of 0
    assert min(s.start for s in phase.slots) == 0


def _budget_cut_and_too_large(monkeypatch) -> None:
    """The path of a large spec, reached on a small one: the optimising warmup solve finds
    nothing within its budget (so the periodic witness is used), every N counts as too large to
    solve directly, and no baseline replaces the N_R schedule as the seed."""
    monkeypatch.setattr(driver, "solve_warmup", lambda *a, **k: None)
    monkeypatch.setattr(driver, "DIRECT_MAX_TASKS", 0)
    monkeypatch.setattr(extend_mod, "DIRECT_MAX_TASKS", 0)
    monkeypatch.setattr(refine, "best_baseline", lambda *a, **k: None)


def test_below_nr_too_large_to_solve_writes_a_plan_that_loads(tmp_path, monkeypatch, capsys):
    _budget_cut_and_too_large(monkeypatch)
    out = tmp_path / "p.json"
    code, stdout, err = run_cli(capsys, "search", str(ROOT / "specs/interleaved.tsl"), "-n", "8", "--json",
                                "-o", str(out))
    assert code == 0, err
    nr = json.loads(stdout)["nr"]
    assert nr > 3
    code, stdout, err = run_cli(capsys, "search", str(ROOT / "specs/interleaved.tsl"), "-n", str(nr - 1),
                                "--json", "-o", str(out))
    assert code == 0, err
    summary = json.loads(stdout)
    assert f"is below the repetend's N_R={nr} and too large to solve directly" in summary["note"]
    plan = load_plan(out)  # what simulate, compare and export do first
    validate(plan.spec, plan.schedule)
    assert plan.schedule.microbatches == nr - 1 and plan.schedule.repetend.nr == nr
    assert min(s.start for s in plan.schedule.warmup) == 0
    code, _, err = run_cli(capsys, "simulate", str(out))
    assert code == 0, err


def test_search_refuses_to_write_a_plan_that_would_not_load(tmp_path, monkeypatch, capsys):
    real = driver.search

    def broken(*args, **kwargs):
        result = real(*args, **kwargs)
        warm = tuple(Slot(s.start - 1000, s.block, s.mb) for s in result.schedule.warmup)
        return replace(result, schedule=replace(result.schedule, warmup=warm))

    monkeypatch.setattr(driver, "search", broken)
    out = tmp_path / "p.json"
    code, _, err = run_cli(capsys, "search", str(ROOT / "specs/interleaved.tsl"), "-n", "8", "-o", str(out))
    assert code != 0
    err = " ".join(err.split())  # the console wraps lines
    assert "schedule.warmup slot" in err and f"{out} was not written" in err
    assert not out.exists()
