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
