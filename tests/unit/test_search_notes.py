"""The search's notes: each kind worded once (search/notes.py), checked against sentences written
out by hand, including the cases a quick search does not reach. Notes are data: every note is a
kind with values, plans keep them through JSON, plans written with one sentence still load."""
from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from tessel_dsl.plan import Note, SearchInfo, load_plan, make_plan, plan_from_json, plan_to_json, save_plan
from tessel_dsl.search.driver import search
from tessel_dsl.search.notes import SENTENCES, note, render
from tests.helpers import vshape

ROOT = Path(__file__).resolve().parents[2]

SEED = dict(n=3, nr=4, dropped=1)
CASES = [
    (note("memory-grows", memory=2, device=1, n=5, serial=False),
     "a micro-batch leaves 2 memory unit(s) on device 1, so no repetend can repeat; all 5 micro-batches "
     "were solved directly"),
    (note("memory-grows", memory=2, device=1, n=5, serial=True),
     "a micro-batch leaves 2 memory unit(s) on device 1, so no repetend can repeat; all 5 micro-batches "
     "run one after another: the direct solve found no schedule within its budget"),
    (note("below-nr-seed", too_large=True, truncated=True, baseline=None, seed_makespan=None, **SEED),
     "N=3 is below the repetend's N_R=4 and too large to solve directly: the schedule for N_R micro-batches "
     "without the last 1 is used (not proven optimal; the repetend is kept for larger N)"),
    (note("below-nr-seed", too_large=False, truncated=False, baseline="1f1b", seed_makespan=40, **SEED),
     "N=3 is below the repetend's N_R=4 and its direct solve found nothing shorter within budget: 1F1B for "
     "N=3 (makespan 40) is used (at the makespan bound; the repetend is kept for larger N)"),
    (note("below-nr-solved", optimal=False, baseline=None, seed_makespan=None, **SEED),
     "N=3 is below the repetend's N_R=4: solved the 3 micro-batch(es) directly, starting from the schedule "
     "for N_R micro-batches without the last 1 (the repetend is kept for larger N)"),
    (note("cut-unproven", cuts=("the warmup", "the cooldown")),
     "not proven: a budget or time limit cut the warmup, the cooldown (the best found is used)"),
    (note("cut-but-proved", proof="the end re-solve proved it", cuts=("the warmup",)),
     "the end re-solve proved it, so it is optimal for this N although a budget cut the warmup"),
    (note("walk-unsettled", cause="budget", low=7, high=9),
     "the solver budget ran out before periods 7..9 were settled"),
    (note("walk-unsettled", cause="time limit", low=7, high=7), "time limit reached before period 7 was settled"),
    (note("baseline-beats", baseline="1f1b", n=8, makespan=40, extended=44),
     "1F1B for N=8 (makespan 40) beats the extended repetend (44): its block order is used for this N; "
     "the repetend is kept for other N"),
    (note("copies-unused", k=2, period=21, n=8, makespan=90, best_makespan=88),
     "a repetend holding each block 2 times has period 21 (10.5 per micro-batch) but its makespan for N=8 "
     "is 90, not below 88"),
    (note("to-cut", cause="budget", effort=0.5), "the solver budget (effort 0.5) ran out: best found, not proven optimal"),
    (note("to-hint", cause="time limit", limit=2.0),
     "the time limit (2 s) ran out before the solver returned a schedule: the hint is the best known, "
     "not proven optimal"),
]


@pytest.mark.parametrize("given, sentence", CASES, ids=[c[0].kind for c in CASES])
def test_each_note_reads_as_written(given, sentence):
    assert render([given]) == sentence


def test_notes_join_in_order():
    assert render([note("enumerating"), note("direct-cut")]) == (
        "enumerating; a budget or time limit cut the direct solve: the makespan is not proven optimal")
    assert render([]) == ""



def _kinds_made_in_the_package() -> set[str]:
    """Every literal kind passed to `note(...)` anywhere in tessel_dsl/."""
    kinds = set()
    for path in (ROOT / "tessel_dsl").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "note"
                    and node.args and isinstance(node.args[0], ast.Constant)):
                kinds.add(node.args[0].value)
    return kinds


def test_every_note_the_package_makes_is_a_worded_kind_and_none_is_free_text():
    kinds = _kinds_made_in_the_package()
    # the phases that used to word their own remarks: period walk, finishing, k-copy, TO
    assert {"walk-unsettled", "baseline-beats", "ends-resolved", "copies-beat", "to-cut"} <= kinds
    assert kinds <= set(SENTENCES)
    assert "text" not in SENTENCES


def test_a_search_result_keeps_its_notes_as_data_through_a_plan_file(tmp_path):
    # V-shape, 3 devices, N=2 below the repetend's N_R=3: solved directly (hand-worked in test_search)
    spec = vshape(devices=3, memory=3, fwd=1, bwd=3, microbatches=2)
    result = search(spec)
    assert [n.kind for n in result.info.notes] == ["below-nr-solved"]
    values = result.info.notes[0].values
    assert values["n"] == 2 and values["nr"] == 3 and values["optimal"] is True
    assert render(result.info.notes) == ("N=2 is below the repetend's N_R=3: solved the 2 micro-batch(es) directly "
                                         "(the repetend is kept for larger N)")
    plan = make_plan(spec, result.schedule, result.info)
    save_plan(plan, tmp_path / "p.json")
    stored = json.loads((tmp_path / "p.json").read_text())["search"]["notes"]
    assert stored == [{"kind": "below-nr-solved", "values": values}]
    assert load_plan(tmp_path / "p.json").search.notes == result.info.notes


def test_list_values_survive_the_json_round_trip():
    info = SearchInfo(notes=(note("cut-unproven", cuts=("the warmup", "the cooldown")),))
    spec = vshape(devices=2, memory=2, fwd=1, bwd=1, microbatches=2)
    plan = make_plan(spec, search(spec).schedule, info)
    assert plan_from_json(json.loads(json.dumps(plan_to_json(plan)))).search == info


def test_a_plan_written_with_one_sentence_still_loads_and_shows_it():
    spec = vshape(devices=2, memory=2, fwd=1, bwd=1, microbatches=2)
    data = plan_to_json(make_plan(spec, search(spec).schedule))
    search_part = {k: v for k, v in data["search"].items() if k != "notes"}
    old = data | {"search": search_part | {"note": "the solver budget ran out before period 7 was settled"}}
    plan = plan_from_json(json.loads(json.dumps(old)))
    assert plan.search.notes == (Note("worded", {"text": "the solver budget ran out before period 7 was settled"}),)
    assert render(plan.search.notes) == "the solver budget ran out before period 7 was settled"
    empty = plan_from_json(data | {"search": search_part | {"note": ""}})
    assert empty.search.notes == ()


def test_a_kind_this_version_does_not_know_is_shown_as_data():
    assert render([Note("future-kind", {"x": 1})]) == "future-kind (x=1)"
    assert render([Note("walk-rejected", {})]) == "walk-rejected"
