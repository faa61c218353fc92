"""Every shipped spec survives IR -> JSON -> IR unchanged; bad plan files are rejected clearly."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from tessel_dsl.errors import PlanError
from tessel_dsl.ir import Spec
from tessel_dsl.lang.parser import parse_file
from tessel_dsl.plan import SCHEMA, VERSION, Plan, load_plan, save_plan
from tessel_dsl.schedule import Schedule, Slot
from tessel_dsl.serialize import from_json, to_json

SPECS = Path(__file__).resolve().parent.parent / "specs"


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
    from tests.helpers import one_f_one_b, vshape
    from tessel_dsl.plan import make_plan, plan_to_json

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
