"""Every shipped spec survives IR -> JSON -> IR unchanged; bad plan files are rejected clearly."""
from __future__ import annotations

import json

import pytest

from tessel_dsl.errors import PlanError
from tessel_dsl.ir import Spec
from tessel_dsl.lang.parser import parse_file
from tessel_dsl.plan import SCHEMA, VERSION, Plan, load_plan, save_plan
from tessel_dsl.schedule import Schedule, Slot
from tessel_dsl.serialize import from_json, to_json
from tests.paths import SPECS


@pytest.mark.parametrize("name", sorted(p.name for p in SPECS.glob("*.tsl")))
@pytest.mark.parametrize("mode", ["train", "infer"])
@pytest.mark.parametrize("d", ["4", "8"])
def test_spec_round_trips(name, mode, d):
    spec = parse_file(SPECS / name, sets={"D": d}, mode=mode)
    text = json.dumps(to_json(spec))
    back = from_json(Spec, json.loads(text))
    assert back == spec
    assert back.units == spec.units and back.link == spec.link and back.params == spec.params
    assert back.expectations == spec.expectations
    assert [e.tensor for e in back.edges] == [e.tensor for e in spec.edges]


def _plan(tmp_path):
    spec = parse_file(SPECS / "vshape.tsl")
    # One micro-batch, blocks one after another in dependency order: a valid schedule.
    slots, t = [], 0
    for n in spec.topo_order:
        slots.append(Slot(t, n, 0))
        t += spec.block(n).time
    schedule = Schedule(1, tuple(slots))
    path = tmp_path / "plan.json"
    save_plan(Plan(spec, schedule), path)
    return spec, path


def test_plan_round_trips(tmp_path):
    spec, path = _plan(tmp_path)
    plan = load_plan(path)
    assert plan.spec == spec and plan.schedule.slots[0].block == "F0"


@pytest.mark.parametrize("mutate,fragment", [
    (lambda d: d.update(version=VERSION + 1), "version"),
    (lambda d: d.pop("schema"), "not a Tessel plan"),
    (lambda d: d["spec"].update(devices="four"), "spec.devices: expected int"),
    (lambda d: d["spec"]["blocks"][0].update(kind="sideways"), "is not one of"),
    (lambda d: d["spec"].pop("blocks"), "missing field 'blocks'"),
    (lambda d: d["spec"].update(colour="red"), "unknown field"),
    (lambda d: d["schedule"].update(slots="none"), "expected a list"),
])
def test_load_plan_rejects_malformed_files(tmp_path, mutate, fragment):
    _, path = _plan(tmp_path)
    data = json.loads(path.read_text())
    assert data["schema"] == SCHEMA
    mutate(data)
    path.write_text(json.dumps(data))
    with pytest.raises(PlanError) as info:
        load_plan(path)
    assert fragment in str(info.value)


@pytest.mark.parametrize("text", ["", "{", "[1, 2]", "null", '"plan"'])
def test_load_plan_rejects_non_plans(tmp_path, text):
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(PlanError):
        load_plan(path)


def test_load_plan_missing_file(tmp_path):
    with pytest.raises(PlanError, match="cannot read plan"):
        load_plan(tmp_path / "absent.json")


def _baseline_plan_json():
    from tessel_dsl.plan import make_plan, plan_to_json
    from tests.helpers import one_f_one_b, vshape

    spec = vshape(devices=2, memory=2)
    return json.loads(json.dumps(plan_to_json(make_plan(spec, one_f_one_b(spec, 2)))))


# Where a number belongs: (how to reach the container, key, the field's name in any clear error).
NUMBER_FIELDS = [
    (lambda d: d["spec"], "devices", "devices"),
    (lambda d: d["spec"], "memory", "memory"),
    (lambda d: d["spec"], "microbatches", "microbatches"),
    (lambda d: d["spec"]["blocks"][0], "time", "time"),
    (lambda d: d["spec"]["blocks"][0], "memory", "memory"),
    (lambda d: d["spec"]["blocks"][0]["devices"], 0, "devices"),
    (lambda d: d["spec"]["units"], "time_seconds", "time_seconds"),
    (lambda d: d["spec"]["link"], "latency", "latency"),
    (lambda d: d["spec"]["link"], "bandwidth", "bandwidth"),
    (lambda d: d["schedule"], "microbatches", "microbatches"),
    (lambda d: d["schedule"]["slots"][0], "start", "start"),
    (lambda d: d["schedule"]["slots"][0], "mb", "mb"),
    (lambda d: d["programs"][0], "device", "device"),
    (lambda d: d["programs"][0]["actions"][0], "mb", "mb"),
    (lambda d: d["programs"][0]["actions"][1]["peers"], 0, "peers"),
]


@pytest.mark.parametrize("value", [True, False])
@pytest.mark.parametrize("where,key,name", NUMBER_FIELDS, ids=[f"{n}{i}" for i, (_, _, n) in enumerate(NUMBER_FIELDS)])
def test_load_plan_rejects_booleans_where_numbers_belong(tmp_path, where, key, name, value):
    # JSON's true/false are ints to Python (True == 1); a plan must not load with them as numbers.
    data = _baseline_plan_json()
    assert isinstance(where(data)[key], (int, float)) and not isinstance(where(data)[key], bool)
    where(data)[key] = value
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(data))
    with pytest.raises(PlanError) as info:
        load_plan(path)
    assert name in str(info.value)
    from tessel_dsl.plan import plan_from_json

    with pytest.raises(PlanError):
        plan_from_json(data)


def test_baseline_plan_json_loads_unchanged(tmp_path):
    # The fixture above is a valid plan: each rejection is the boolean's doing.
    from tessel_dsl.plan import plan_from_json, plan_to_json

    data = _baseline_plan_json()
    assert plan_to_json(plan_from_json(data)) == data


# The codec on its own: every branch's result and the path and wording of every error.

def _error(cls, data, *path):
    with pytest.raises(PlanError) as info:
        from_json(cls, data, *path)
    return str(info.value)


def test_codec_scalars_and_their_errors():
    assert from_json(int, 3) == 3 and from_json(str, "a") == "a" and from_json(bool, True) is True
    assert from_json(float, 2) == 2.0 and isinstance(from_json(float, 2), float)
    assert _error(int, "3") == "$: expected int, got str"  # the root path is "$"
    assert _error(float, "x", "$.t") == "$.t: expected a number, got str"
    assert _error(bool, 1, "$.b") == "$.b: expected bool, got int"
    assert _error(int, True, "$.i") == "$.i: expected int, got bool"  # JSON true is no number
    assert _error(float, False, "$.f") == "$.f: expected a number, got bool"
    assert _error(bytes, b"", "$.z") == "$.z: cannot decode type <class 'bytes'>"


def test_codec_unions():
    import typing

    assert from_json(int | None, None) is None and from_json(typing.Optional[int], 4) == 4
    assert from_json(typing.Union[None, int], 5) == 5  # None listed first is skipped, not the end
    assert from_json(int | str, "s") == "s"
    assert _error(int | None, "x", "$.a") == "$.a: expected int, got str"
    assert _error(int | str, 1.5, "$.a") == ("$.a: no variant matched ($.a: expected int, got float; "
                                             "$.a: expected str, got float)")


def test_codec_containers():
    assert from_json(tuple[int, str], [1, "a"]) == (1, "a")
    assert from_json(tuple[int, ...], [1, 2, 3]) == (1, 2, 3)
    assert from_json(dict[str, int], {"a": 1}) == {"a": 1}
    assert _error(tuple[int, str], [1, "a", 2], "$.p") == "$.p: expected 2 items, got 3"
    assert _error(tuple[int, ...], {"a": 1}, "$.p") == "$.p: expected a list, got dict"
    assert _error(tuple[int, ...], [1, "x"], "$.p") == "$.p[1]: expected int, got str"
    assert _error(tuple[int, str], [1, 2], "$.p") == "$.p[1]: expected str, got int"
    assert _error(dict[str, int], [], "$.d") == "$.d: expected an object, got list"
    assert _error(dict[str, int], {"k": "v"}, "$.d") == "$.d.k: expected int, got str"


def test_codec_dataclasses_and_enums():
    from tessel_dsl.ir import Block, Kind

    data = {"name": "F0", "kind": "forward", "devices": [0], "time": 1, "memory": 1}
    assert from_json(Block, data) == Block("F0", Kind.FORWARD, (0,), 1, 1)  # `forward` has a default
    assert _error(Block, [], "$.b") == "$.b: expected an object for Block, got list"
    assert _error(Block, {"name": "F0"}, "$.b") == "$.b: missing field 'kind' of Block"
    assert _error(Block, dict(data, colour=1, size=2), "$.b") == "$.b: unknown field(s) ['colour', 'size'] for Block"
    assert _error(Block, dict(data, time="1"), "$.b") == "$.b.time: expected int, got str"
    assert _error(Kind, "sideways", "$.k") == "$.k: 'sideways' is not one of ['forward', 'backward', 'input_grad', " \
                                               "'weight_grad', 'other']"


def test_codec_dict_keys_and_ignored_fields():
    from tessel_dsl.ir import Block

    assert to_json({1: (2, 3)}) == {"1": [2, 3]}
    assert _error(dict[int, int], {"a": 1}, "$.d") == "$.d: expected int, got str"
    # A field left out of equality (a block's source span) is never written and ignored if present.
    data = {"name": "F0", "kind": "forward", "devices": [0], "time": 1, "memory": 1, "span": "line 3"}
    assert from_json(Block, data).span is None


# Plan files on disk: each way a file can fail to be a plan names the file and the problem.

def test_load_plan_errors_name_the_file(tmp_path):
    bad_json = tmp_path / "bad.json"
    bad_json.write_text('{"schema": ')
    with pytest.raises(PlanError, match=rf"^{bad_json}:1:12: invalid JSON: Expecting value$"):
        load_plan(bad_json)
    nan = tmp_path / "nan.json"
    nan.write_text('{"schema": "tessel-plan", "version": 1, "x": NaN}')
    with pytest.raises(PlanError, match=rf"^{nan}: invalid plan: NaN is not a number a plan may hold$"):
        load_plan(nan)
    binary = tmp_path / "bin.json"
    binary.write_bytes(b'{"a": "\xff"}')
    with pytest.raises(PlanError, match=rf"^{binary}: not a plan: byte 7 is not UTF-8 text$"):
        load_plan(binary)
    other = tmp_path / "other.json"
    other.write_text('{"schema": "something-else"}')
    with pytest.raises(PlanError, match=rf"^{other}: not a Tessel plan"):
        load_plan(other)
    with pytest.raises(PlanError, match=rf"^{tmp_path}: cannot read plan: Is a directory$"):
        load_plan(tmp_path)
    with pytest.raises(PlanError, match=r"cannot read plan: embedded null byte$"):
        load_plan(str(tmp_path / "a\0b.json"))


def test_load_plan_size_limit(tmp_path, monkeypatch):
    import tessel_dsl.plan as plan_mod

    monkeypatch.setattr(plan_mod, "MAX_PLAN_BYTES", 2 << 20)
    at_limit = tmp_path / "at.json"
    at_limit.write_bytes(b" " * (2 << 20))
    with pytest.raises(PlanError) as info:
        load_plan(at_limit)
    assert "at most" not in str(info.value)  # exactly the limit is read (and then is no plan)
    over = tmp_path / "over.json"
    over.write_bytes(b" " * ((2 << 20) + 1))
    with pytest.raises(PlanError, match=rf"^{over}: a plan file is at most 2 MiB$"):
        load_plan(over)


def test_plan_from_json_messages():
    from tessel_dsl.plan import plan_from_json

    with pytest.raises(PlanError, match=r'^<plan>: not a Tessel plan \(missing "schema": "tessel-plan"\)$'):
        plan_from_json({})
    data = _baseline_plan_json()
    with pytest.raises(PlanError, match=rf"^<plan>: plan version 7 is not supported \(this tool reads version {VERSION}\)$"):
        plan_from_json(dict(data, version=7))
    data["spec"]["devices"] = "two"
    with pytest.raises(PlanError, match=r"^x\.json: plan\.spec\.devices: expected int, got str$"):
        plan_from_json(data, "x.json")


def test_saved_plan_is_indented_json_ending_in_a_newline(tmp_path):
    from tessel_dsl.plan import plan_from_json, save_plan

    data = _baseline_plan_json()
    path = tmp_path / "p.json"
    save_plan(plan_from_json(data), path)
    text = path.read_text()
    assert text.endswith("}\n") and text.splitlines()[1] == ' "schema": "tessel-plan",'  # one space a level
    assert json.loads(text) == data
