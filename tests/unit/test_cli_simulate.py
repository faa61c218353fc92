"""`tessel simulate` end to end, in-process: exit codes, report text, JSON, trace and SVG files."""
from __future__ import annotations

import json
import xml.dom.minidom
from pathlib import Path

import pytest

from tessel_dsl.lower import lower
from tessel_dsl.plan import Plan, make_plan, save_plan
from tessel_dsl.program import Op, Program
from tests.helpers import one_f_one_b, vshape
from tests.helpers import run_cli as run
from tests.paths import SPECS


@pytest.fixture
def plan_file(tmp_path) -> Path:
    spec = vshape(4, 4)
    path = tmp_path / "v.json"
    save_plan(make_plan(spec, one_f_one_b(spec, 8)), path)
    return path


def test_report_and_timeline(capsys, plan_file):
    code, out, err = run(capsys, "simulate", str(plan_file), "--width", "100")
    assert code == 0, err
    assert "vshape · 1f1b · N=8 · non-blocking · link free" in out
    assert "│ bubble rate" in out and "27.27%" in out
    assert "dev0 F0F1F2F3            B0··F4B1··F5B2··F6B3··F7B4··  B5··  B6··  B7··" in out
    assert "legend: B backward, F forward; number = micro-batch" in out


def test_json_output(capsys, plan_file):
    code, out, _ = run(capsys, "simulate", str(plan_file), "--json")
    data = json.loads(out)
    assert code == 0 and data["ok"] and data["failures"] == []
    assert data["makespan"] == 33 and data["bubble"] == pytest.approx(3 / 11, abs=1e-6)
    assert data["period"] == 3 and data["drift"]["max"] == 0


def test_max_bubble_gate_fails_with_one_line_reason(capsys, plan_file):
    code, _, err = run(capsys, "simulate", str(plan_file), "--max-bubble", "10%", "--no-timeline")
    assert code == 1
    assert "FAIL: bubble rate 27.27% is above --max-bubble 10.00%" in err
    code, _, _ = run(capsys, "simulate", str(plan_file), "--max-bubble", "0.3", "--no-timeline")
    assert code == 0


def test_max_memory_gate(capsys, plan_file):
    code, _, err = run(capsys, "simulate", str(plan_file), "--max-memory", "3", "--no-timeline")
    assert code == 1 and "peak memory 4 on device 0 is above --max-memory 3" in err


def test_bad_ratio_is_a_usage_error(capsys, plan_file):
    code, _, err = run(capsys, "simulate", str(plan_file), "--max-bubble", "lots")
    assert code == 2 and "expected a ratio" in err


def test_trace_and_svg_files(capsys, plan_file, tmp_path):
    trace, svg = tmp_path / "t.json", tmp_path / "t.svg"
    code, _, err = run(capsys, "simulate", str(plan_file), "--trace", str(trace), "--svg", str(svg),
                       "--link-latency", "0.5", "--no-timeline")
    assert code == 0, err
    data = json.loads(trace.read_text())
    xs = [e for e in data["traceEvents"] if e["ph"] == "X"]
    assert sum(1 for e in xs if e["cat"] == "forward") == 32
    assert sum(1 for e in xs if e["cat"] == "send") == 48
    assert all(e["dur"] >= 0 for e in xs)
    doc = xml.dom.minidom.parse(str(svg))
    assert doc.documentElement.tagName == "svg"
    assert len(doc.getElementsByTagName("rect")) >= 64


def test_deadlocked_plan_exits_1_and_explains(capsys, tmp_path):
    spec = vshape(3, 3)
    sch = one_f_one_b(spec, 3)
    progs = list(lower(spec, sch))
    acts = list(progs[1].actions)
    i, j = [k for k, a in enumerate(acts) if a.op is Op.SEND and a.peers == (2,)][:2]
    # Delay the first send until after the second: each still follows its compute, so the plan
    # passes loading, but device 2 receives in the other order.
    acts.insert(j, acts.pop(i))
    progs[1] = Program(1, tuple(acts))
    path = tmp_path / "bad.json"
    save_plan(Plan(spec, sch, tuple(progs)), path)
    code, out, err = run(capsys, "simulate", str(path), "--no-timeline", "--width", "120")
    assert code == 1
    assert "FAIL: deadlock (send/recv order mismatch): " in err
    assert "device 2 blocked at action" in out and "DEADLOCK" in out


def test_missing_plan_is_a_clean_error(capsys, tmp_path):
    code, _, err = run(capsys, "simulate", str(tmp_path / "nope.json"))
    assert code == 1 and "cannot read plan" in err and "Traceback" not in err


def test_spec_is_searched_then_plan_is_reextended(capsys, tmp_path):
    code, out, err = run(capsys, "simulate", str(SPECS / "vshape.tsl"), "-n", "12", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["microbatches"] == 12 and data["ok"]
    assert data["period"] == data["lower_bound"] == data["planned_period"]

    from tessel_dsl.lang.parser import parse_file
    from tessel_dsl.search.driver import search

    spec = parse_file(SPECS / "vshape.tsl")
    res = search(spec, microbatches=8)
    path = tmp_path / "p.json"
    save_plan(make_plan(spec, res.schedule, res.info), path)
    code, out, err = run(capsys, "simulate", str(path), "-n", "40", "--json", "--blocking")
    assert code == 0, err
    data = json.loads(out)
    assert data["microbatches"] == 40 and data["blocking"] is True and data["ok"]


def test_set_on_a_plan_is_a_usage_error(capsys, plan_file):
    code, _, err = run(capsys, "simulate", str(plan_file), "--set", "D=8")
    assert code == 2 and "apply to a .tsl spec" in err


def test_waiting_for_data_and_for_peers_are_separate_columns(capsys, tmp_path):
    # M-shape with free links: nothing is ever in flight, yet devices idle at the all-device
    # blocks E and T until the others arrive; that is not waiting for data.
    from tessel_dsl.lang.parser import parse_file
    from tessel_dsl.search.baselines import build

    spec = parse_file(SPECS / "mshape.tsl")
    path = tmp_path / "m.json"
    save_plan(make_plan(spec, build(spec, "1f1b+", 8)), path)
    code, out, _ = run(capsys, "simulate", str(path), "--json")
    assert code == 0
    data = json.loads(out)
    assert data["comm"]["total"] == 0 and data["link"] == {"latency": 0.0, "bandwidth": 0.0}
    peers = data["peer_wait_per_device"]
    data_wait = data["comm"]["wait_per_device"]
    assert all(w > 0 for w in peers)
    code, out, _ = run(capsys, "simulate", str(path), "--no-timeline", "--width", "200")
    assert "waiting for data" in out and "waiting for peers" in out
    rows = [line.split("│")[1:-1] for line in out.splitlines() if line.strip("│ ")[:2] in ("0 ", "1 ", "2 ", "3 ")]
    assert [float(r[-1]) for r in rows[-4:]] == peers and [float(r[-2]) for r in rows[-4:]] == data_wait
