"""Every plan that is loaded is checked: a corrupt plan is a clear error and nothing simulates or runs.

Each mutation below loaded (and simulated as "ok" or ran) before plans were validated on load.
"""
from __future__ import annotations

import json

import pytest

from tessel_dsl.errors import PlanError
from tessel_dsl.plan import Plan, load_plan, make_plan, plan_to_json, save_plan
from tessel_dsl.plan_check import validate_plan
from tests.helpers import one_f_one_b, run_cli, vshape


def _data(blocking: bool = False) -> dict:
    spec = vshape(3, 3)
    return plan_to_json(make_plan(spec, one_f_one_b(spec, 3), blocking=blocking))


def _actions(data: dict, device: int) -> list:
    return data["programs"][device]["actions"]


def _drop(data: dict, device: int, pred) -> None:
    acts = _actions(data, device)
    acts.remove(next(a for a in acts if pred(a)))


def _compute(block: str, mb: int):
    return lambda a: a["op"] == "COMPUTE" and a["block"] == block and a["mb"] == mb


def _swap_slots(data: dict) -> None:
    """Run micro-batch 0's B2 where F2:0 runs and the other way round (backward before forward)."""
    slots = data["schedule"]["slots"]
    f = next(s for s in slots if s["block"] == "F2" and s["mb"] == 0)
    b = next(s for s in slots if s["block"] == "B2" and s["mb"] == 0)
    f["start"], b["start"] = b["start"], f["start"]


def _drop_microbatch(data: dict) -> None:
    data["schedule"]["microbatches"] = 2
    data["schedule"]["slots"] = [s for s in data["schedule"]["slots"] if s["mb"] < 2]
    for p in data["programs"]:
        p["actions"] = [a for a in p["actions"] if a["mb"] < 2]


def _nest(depth: int) -> str:
    return "[" * depth + "]" * depth


MUTATIONS = {
    "dropped compute": (lambda d: _drop(d, 0, _compute("B0", 2)), "never computed (first: B0:2)"),
    "dropped compute that is sent": (lambda d: _drop(d, 1, _compute("F1", 2)), "sends F1:2 before computing it"),
    "computed twice": (lambda d: _actions(d, 0).append(dict(_actions(d, 0)[0])), "computed twice"),
    "empty programs": (lambda d: [p.update(actions=[]) for p in d["programs"]], "never computed"),
    "dropped WAIT": (lambda d: _drop(d, 1, lambda a: a["op"] == "WAIT"), "received and waited for before it"),
    "dropped RECV": (lambda d: _drop(d, 1, lambda a: a["op"] == "RECV"), "without a RECV"),
    "dropped SEND": (lambda d: _drop(d, 0, lambda a: a["op"] == "SEND"), "0 time(s)"),
    "RECV without peers": (lambda d: next(a for a in _actions(d, 1) if a["op"] == "RECV").update(peers=[]),
                           "peers must be"),
    "micro-batch 99": (lambda d: _actions(d, 0)[0].update(mb=99), "outside 0..2"),
    "programs for 2 devices": (lambda d: d["programs"].pop(), "one program per device"),
    "mixed modes": (lambda d: d["programs"][0].update(blocking=True), "blocking"),
    "backward before forward": (_swap_slots, "dependency broken"),
    "dropped micro-batch (schedule and programs agree)": (_drop_microbatch, "peak_memory"),
    "dropped slot": (lambda d: d["schedule"]["slots"].pop(), "missing"),
    "block time 0": (lambda d: d["spec"]["blocks"][0].update(time=0), "time must be between 1"),
    "negative block time": (lambda d: d["spec"]["blocks"][3].update(time=-2), "time must be between 1"),
    "negative start": (lambda d: d["schedule"]["slots"][0].update(start=-1), "start must be between 0"),
    "bool as a number": (lambda d: d["spec"]["blocks"][0].update(time=True), "expected int, got bool"),
    "dependency cycle": (lambda d: d["spec"]["edges"].append({"src": "B0", "dst": "F0", "tensor": None}), "cycle"),
    "edge to unknown block": (lambda d: d["spec"]["edges"].append({"src": "F0", "dst": "X9", "tensor": None}),
                              "not a block"),
    "block without devices": (lambda d: d["spec"]["blocks"][0].update(devices=[]), "runs on no device"),
    "0 devices": (lambda d: d["spec"].update(devices=0), "spec.devices must be between 1 and 4096"),
    "-1 devices": (lambda d: d["spec"].update(devices=-1), "spec.devices must be between 1 and 4096"),
    "10^9 devices": (lambda d: d["spec"].update(devices=10 ** 9), "spec.devices must be between 1 and 4096"),
    "10^9 micro-batches": (lambda d: d["schedule"].update(microbatches=10 ** 9), "schedule.microbatches must be"),
    "negative latency": (lambda d: d["spec"]["link"].update(latency=-1.0), "latency must be at least 0"),
    "backward not after its forward": (lambda d: d["spec"]["edges"].remove(
        {"src": "F2", "dst": "B2", "tensor": None}), "does not depend on its forward"),
    "wrong peak memory": (lambda d: d.update(peak_memory=[0, 0, 0]), "peak_memory"),
    # The checks of `tessel check` on the spec inside a plan: these simulated as ok, and the
    # inference plan ran forwards without saving activations, then its backwards crashed the
    # executor (KeyError: ('F1', 0)).
    "forward memory no backward frees": (lambda d: d["spec"]["blocks"][0].update(memory=2), "error[memory-not-freed]"),
    "micro-batch memory below zero": (lambda d: d["spec"]["blocks"][5].update(memory=-2), "error[negative-memory]"),
    "inference plan with backward blocks": (lambda d: d["spec"].update(mode="infer"), "error[bad-mode]"),
    "block name of 300 characters": (lambda d: _rename(d, "F0", "F" * 300), "identifiers of at most 200"),
}


def _rename(data: dict, old: str, new: str) -> None:
    """Rename a block everywhere a plan names it."""
    text = json.dumps(data).replace(f'"{old}"', f'"{new}"')
    data.clear()
    data.update(json.loads(text))


@pytest.mark.parametrize("name", sorted(MUTATIONS))
def test_mutated_plan_is_refused_on_load(tmp_path, name):
    mutate, fragment = MUTATIONS[name]
    data = _data()
    load_plan_from(tmp_path, data)  # the unmutated plan loads
    mutate(data)
    with pytest.raises(PlanError) as err:
        load_plan_from(tmp_path, data)
    assert fragment in str(err.value), str(err.value)
    assert str(err.value).startswith(str(tmp_path / "p.json") + ": ")


def load_plan_from(tmp_path, data) -> Plan:
    path = tmp_path / "p.json"
    path.write_text(json.dumps(data))
    return load_plan(path)


def test_repetend_metadata_must_match_the_search_and_the_slots(tmp_path):
    from tessel_dsl.lang.parser import parse_file
    from tessel_dsl.plan import plan_to_json
    from tessel_dsl.search.driver import search
    from tests.paths import SPECS

    spec = parse_file(SPECS / "vshape.tsl")
    res = search(spec, microbatches=8)
    good = plan_to_json(make_plan(spec, res.schedule, res.info))
    load_plan_from(tmp_path, good)
    bad = json.loads(json.dumps(good))
    bad["schedule"]["repetend"]["period"] = 10 ** 9  # would be reported as the planned period
    with pytest.raises(PlanError, match="differs from the repetend's period"):
        load_plan_from(tmp_path, bad)
    bad = json.loads(json.dumps(good))
    bad["search"]["lower_bound"] += 1
    with pytest.raises(PlanError, match="differs from the spec's lower bound"):
        load_plan_from(tmp_path, bad)
    bad = json.loads(json.dumps(good))
    bad["schedule"]["cooldown"][0]["start"] = -1
    with pytest.raises(PlanError, match="start"):
        load_plan_from(tmp_path, bad)


def test_a_searched_plan_whose_ends_were_re_solved_loads(tmp_path):
    """The end re-solve moves warmup blocks, while the stored warmup stays the recipe that
    re-extension orders by: such a plan is valid and must load (the zero-bubble spec's did not)."""
    from tessel_dsl.lang.parser import parse_file
    from tessel_dsl.plan import plan_to_json
    from tessel_dsl.search.driver import search
    from tessel_dsl.search.finish import reextend
    from tessel_dsl.validate import validate
    from tests.paths import SPECS

    spec = parse_file(SPECS / "zerobubble.tsl")
    res = search(spec, microbatches=12)  # an N whose end re-solve moves warmup blocks
    data = plan_to_json(make_plan(spec, res.schedule, res.info))
    moved = set(map(tuple, (sorted(s.items()) for s in data["schedule"]["warmup"]))) - \
        set(map(tuple, (sorted(s.items()) for s in data["schedule"]["slots"])))
    assert moved, "the end re-solve no longer moves a warmup block: this test needs another spec"
    plan = load_plan_from(tmp_path, data)
    validate(spec, reextend(spec, plan.schedule, 16))


def test_blocking_plan_with_a_wait_is_refused(tmp_path):
    data = _data(blocking=True)
    load_plan_from(tmp_path, data)
    recv = next(i for i, a in enumerate(_actions(data, 1)) if a["op"] == "RECV")
    wait = dict(_actions(data, 1)[recv], op="WAIT")
    _actions(data, 1).insert(recv + 1, wait)
    with pytest.raises(PlanError, match="a blocking program has no WAIT"):
        load_plan_from(tmp_path, data)


@pytest.mark.parametrize("text,fragment", [
    ('{"schema": "tessel-plan", "version": 1, "x": NaN}', "NaN is not a number"),
    ('{"schema": "tessel-plan", "version": 1, "x": -Infinity}', "-Infinity is not a number"),
    ('{"schema": "tessel-plan", "version": 1, "x": ' + "9" * 5000 + "}", "invalid plan"),
    ('{"x": ' + _nest(200_000) + "}", "nested too deeply"),
    ("\xff\xfe", "not UTF-8"),
])
def test_unreadable_plan_text_is_a_clear_error(tmp_path, text, fragment):
    path = tmp_path / "p.json"
    path.write_bytes(text.encode("latin-1") if text.startswith("\xff") else text.encode())
    with pytest.raises(PlanError, match=fragment):
        load_plan(path)


def test_nan_latency_in_python_plan_is_refused():
    import dataclasses

    from tessel_dsl.ir import Link

    plan = make_plan(vshape(3, 3), one_f_one_b(vshape(3, 3), 3))
    bad = dataclasses.replace(plan, spec=dataclasses.replace(plan.spec, link=Link(float("nan"), 0.0)))
    with pytest.raises(PlanError, match="latency must be finite"):
        validate_plan(bad)


def test_simulate_refuses_a_corrupt_plan_and_writes_nothing(capsys, tmp_path):
    data = _data()
    _drop(data, 0, _compute("B0", 2))
    path = tmp_path / "p.json"
    path.write_text(json.dumps(data))
    svg = tmp_path / "t.svg"
    code, out, err = run_cli(capsys, "simulate", str(path), "--svg", str(svg))
    err = " ".join(err.split())
    assert code == 1 and "never computed (first: B0:2)" in err
    assert not svg.exists() and "Traceback" not in err


def test_export_refuses_a_corrupt_plan(capsys, tmp_path):
    data = _data()
    data["spec"]["blocks"][0]["devices"] = []
    path = tmp_path / "p.json"
    path.write_text(json.dumps(data))
    code, out, err = run_cli(capsys, "export", str(path))
    assert code == 1 and "runs on no device" in " ".join(err.split()) and out == ""


def test_executor_preflight_refuses_a_python_plan_with_a_dropped_compute():
    pytest.importorskip("torch")
    import dataclasses

    from tessel_dsl.executor.launch import check_plan
    from tessel_dsl.program import Program

    plan = make_plan(vshape(3, 3), one_f_one_b(vshape(3, 3), 3))
    p1 = plan.programs[1]
    acts = tuple(a for a in p1.actions if not (a.block == "F1" and a.mb == 2))
    bad = dataclasses.replace(plan, programs=(plan.programs[0], Program(1, acts), plan.programs[2]))
    with pytest.raises(PlanError, match="never computed"):
        check_plan(bad)


@pytest.mark.parametrize("flag,want", [(None, True), ("--blocking", True), ("--non-blocking", False)])
def test_run_keeps_the_plans_own_mode_unless_asked(tmp_path, flag, want):
    """A blocking plan runs blocking; only an explicit --non-blocking lowers it again."""
    from tessel_dsl.cli.run import _plan_for

    spec = vshape(3, 3)
    plan = make_plan(spec, one_f_one_b(spec, 3), blocking=True)
    path = tmp_path / "p.json"
    save_plan(plan, path)
    blocking = {None: None, "--blocking": True, "--non-blocking": False}[flag]
    got = _plan_for(path, None, None, blocking)
    assert all(p.blocking is want for p in got.programs)
    if want:
        assert got.programs == plan.programs


def test_simulate_api_refuses_a_python_plan_with_a_dropped_microbatch():
    import dataclasses

    from tessel_dsl.simulator import simulate

    plan = make_plan(vshape(3, 3), one_f_one_b(vshape(3, 3), 3))
    progs = tuple(dataclasses.replace(p, actions=tuple(a for a in p.actions if a.mb != 2)) for p in plan.programs)
    with pytest.raises(PlanError, match="never computed"):
        simulate(dataclasses.replace(plan, programs=progs))


@pytest.mark.parametrize("n", ["1000000000", "200000"])
def test_reextending_a_plan_to_a_huge_count_is_refused_at_once(capsys, tmp_path, n):
    path = tmp_path / "p.json"
    path.write_text(json.dumps(_data()))
    code, out, err = run_cli(capsys, "simulate", str(path), "-n", n)
    assert code == 1 and "micro-batches must be between 1 and 100000" in " ".join(err.split())
