"""Devices running the same blocks (tensor-parallel groups) are searched and baselined as one
device (`search/twins.py`). The reference is the same model written by hand with one device per
group: every schedule, baseline and search answer must be that spec's, block start for block
start, and valid on the devices the user wrote."""
from __future__ import annotations

import sys

import pytest

from tessel_dsl.lang.parser import parse
from tessel_dsl.plan import Note
from tessel_dsl.search.baselines import BY_NAME, NotApplicable, build
from tessel_dsl.search.driver import search
from tessel_dsl.search.lags import edge_lags
from tessel_dsl.search.twins import fold_twins, unfold_note
from tessel_dsl.validate import validate

# An M-shape over four two-GPU stages: the embedding and head on every GPU, memory-bound
# (1F1B keeps four micro-batches on stage 0, three fit with the head's share).
GROUPS = """placement tp_mshape
devices 8
memory 5
{extra}
microbatches 12
mode train
forward E on all time 1 memory 0 grad time 1
for i in 0..3:
    forward F{{i}} on 2*i..2*i+1 time 2 memory 1 grad time 4
forward H on all time 1 memory 0 grad time 1
E -> chain(F{{i}} for i in 0..3) -> H
derive backward
"""
BY_HAND = GROUPS.replace("devices 8", "devices 4").replace("on 2*i..2*i+1", "on i")


def test_groups_fold_into_one_device_with_the_least_room():
    spec = parse(GROUPS.format(extra="memory 7 on 3\nmemory 4 on 6"))
    folded = fold_twins(spec)
    assert folded.groups == ((0, 1), (2, 3), (4, 5), (6, 7))
    assert folded.spec.devices == 4 and folded.spec.capacities == (5, 5, 5, 4)
    assert {b.name: b.devices for b in folded.spec.blocks}["F2"] == (2,)
    assert {b.name: b.devices for b in folded.spec.blocks}["E"] == (0, 1, 2, 3)


def test_nothing_folds_without_twins():
    assert fold_twins(parse(BY_HAND.format(extra=""))) is None
    # two devices that run nothing are not twins of each other (nothing to fold)
    idle = BY_HAND.format(extra="").replace("devices 4", "devices 6").replace("on all", "on 0..3")
    assert fold_twins(parse(idle)) is None


def _chain(split: bool) -> str:
    """Four two-GPU stages in a chain, memory-bound; with `split`, input and weight gradients."""
    back = ["    input_grad I{i} of F{i} time 2 memory -1", "    weight_grad W{i} of F{i} time 2 memory -1",
            "    I{i} -> W{i}"] if split else ["    backward I{i} of F{i} time 4 memory -1"]
    return "\n".join([f"placement tp_{'split' if split else 'chain'}", "devices 8",
                      f"memory {4 if split else 3}", "microbatches 8", "mode train", "for i in 0..3:",
                      f"    forward F{{i}} on 2*i..2*i+1 time 2 memory {2 if split else 1}", *back,
                      "chain(F{i} for i in 0..3) -> chain(I{3-i} for i in 0..3)", ""])


def _by_hand(text: str) -> str:
    return text.replace("devices 8", "devices 4").replace("on 2*i..2*i+1", "on i")


@pytest.mark.parametrize("text,expect", [
    (GROUPS.format(extra=""), {"gpipe", "1f1b+", "gpipe+"}),
    (_chain(split=False), {"1f1b", "1f1b-capped", "1f1b+"}),
    (_chain(split=True), {"zb-h1", "zb-h1-capped"}),
])
def test_baselines_over_groups_are_the_hand_written_ones(text, expect):
    spec, hand = parse(text), parse(_by_hand(text))
    built = []
    for name in BY_NAME:
        try:
            want = build(hand, name)
        except NotApplicable:
            with pytest.raises(NotApplicable):
                build(spec, name)
            continue
        got = build(spec, name)
        validate(spec, got)
        # played over the GPUs one by one, 1F1B+ took 204 and GPipe+ 218 where 160 and 174 fit
        assert got.slots == want.slots, name
        built.append(name)
    assert expect <= set(built)


def test_search_over_groups_is_the_hand_written_search(monkeypatch):
    driver = sys.modules[search.__module__]

    # three stages, so that both searches take a second (the answers are the same either way here;
    # what folding changes is the spec every step of the search is given)
    small = GROUPS.replace("devices 8", "devices 6").replace("0..3", "0..2").replace("memory 5", "memory 4")
    spec, hand = parse(small.format(extra="")), parse(small.replace("devices 6", "devices 3")
                                                     .replace("on 2*i..2*i+1", "on i").format(extra=""))
    seen = []
    first_step = driver._constructive
    monkeypatch.setattr(driver, "_constructive", lambda s, *a: seen.append(s.devices) or first_step(s, *a))
    got, want = search(spec), search(hand)
    assert seen == [3, 3]
    validate(spec, got.schedule)
    assert got.schedule.slots == want.schedule.slots
    assert got.info.makespan_bound == want.info.makespan_bound


def test_a_link_keeps_its_lags_when_folded():
    spec = parse(GROUPS.format(extra="link latency 2"))
    folded = fold_twins(spec)
    assert folded is not None and edge_lags(folded.spec) == edge_lags(spec) != {}


def test_notes_name_the_devices_the_user_wrote():
    folded = fold_twins(parse(GROUPS.format(extra="")))
    one = unfold_note(Note("bound-one-device", {"bound": 9, "device": 2, "analytic": 8}), folded)
    assert one.values == {"bound": 9, "device": 4, "analytic": 8}
    some = unfold_note(Note("bound-devices", {"bound": 9, "devices": [0, 3], "analytic": 8}), folded)
    assert some.values["devices"] == [0, 6]
    plain = Note("windows", {"n": 12, "before": 10, "after": 9})
    assert unfold_note(plain, folded) is plain
