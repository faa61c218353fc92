"""Timelines as text (fixed width), SVG and Chrome traces; the summary table as text."""
from __future__ import annotations

import json
import xml.dom.minidom

from rich.console import Console

from tessel_dsl.plan import make_plan
from tessel_dsl.schedule import Repetend, Schedule, Slot
from tessel_dsl.simulator import simulate, summary_table
from tessel_dsl.views.timeline import Timeline, from_rows, from_schedule, render, repetend_markers, to_svg
from tessel_dsl.views.trace import Span, chrome_trace, compute_spans, transfer_spans, write_trace
from tests.helpers import one_f_one_b, vshape
from tests.unit.test_lower import mshape, sequential


def text_of(*renderables, width: int = 80) -> str:
    console = Console(width=width, record=True, color_system=None, force_terminal=False)
    for r in renderables:
        console.print(r)
    return console.export_text()


def test_planned_timeline_text():
    spec = vshape(3, 3)
    tl = from_schedule(spec, one_f_one_b(spec, 3))
    assert text_of(render(tl, width=60), width=60) == (
        "1f1b\n"
        "     0                   10        \n"
        "dev0 F0F1F2        B0··  B1··  B2··\n"
        "dev1   F0F1    B0··F2B1··  B2··    \n"
        "dev2     F0B0··F1B1··F2B2··        \n"
        "legend: B backward, F forward; number = micro-batch\n\n"
    )


def test_multi_device_blocks_are_lower_case():
    spec = mshape()
    text = text_of(render(from_schedule(spec, sequential(spec, 1)), width=80))
    assert "dev3 f0      F0B0····                  b0" in text
    assert "f/b multi-device" in text


def test_wide_timelines_wrap_into_bands():
    spec = vshape(2, 2)
    tl = from_schedule(spec, one_f_one_b(spec, 12))  # makespan 39, three columns per unit
    lines = text_of(render(tl, width=50), width=50).splitlines()
    assert sum(1 for ln in lines if ln.startswith("dev0")) == 3  # 14 units per band
    assert all(len(ln) <= 50 for ln in lines)


def test_long_timelines_are_scaled():
    spec = vshape(4, 4)
    sch = one_f_one_b(spec, 512)
    report = simulate(make_plan(spec, sch))
    text = text_of(render(from_rows(spec, report.timeline, sch), width=70), width=70)
    assert "(scaled: 1 char =" in text
    rows = [ln for ln in text.splitlines() if ln.startswith("dev")]
    assert len(rows) == 4 and all(len(r) <= 70 for r in rows)
    assert rows[0].count("\u2588") > 50  # the steady state is fully busy


def test_the_scale_reads_as_a_time_in_the_specs_unit():
    import dataclasses
    import re

    from tessel_dsl.ir import Units

    spec = vshape(4, 4)
    sch = one_f_one_b(spec, 512)
    plain = re.search(r"1 char = ([0-9.]+) units;", text_of(render(from_schedule(spec, sch), width=70), width=70))
    assert plain
    # the same with 10 ms per unit: a time, not "24.1 10ms"
    timed = dataclasses.replace(spec, units=Units(time_seconds=0.01, time_label="10ms"))
    text = text_of(render(from_schedule(timed, sch), width=70), width=70)
    found = re.search(r"1 char = ([0-9.]+) (ms|s);", text)
    assert found and "10ms" not in text.split("shade")[0]
    seconds = float(found.group(1)) * (1e-3 if found.group(2) == "ms" else 1.0)
    assert abs(seconds - float(plain.group(1)) * 0.01) < 1e-9


def test_repetend_markers():
    rep = Repetend(nr=2, period=4, slots=())
    sch = Schedule(5, (Slot(0, "F0", 0),), repetend=rep, repetend_start=3)
    assert repetend_markers(sch, 100) == (3.0, 7.0, 11.0, 15.0, 19.0)
    assert repetend_markers(sch, 10) == (3.0, 7.0)
    assert repetend_markers(Schedule(1, ()), 10) == ()
    tl = Timeline(1, (((0.0, 4.0, "F0", 0),),), {"F0": "forward"}, (2.0,), "t")
    assert "| = repetend boundary" in text_of(render(tl, width=40), width=40)


def test_svg_is_well_formed_with_a_bar_per_block():
    spec = vshape(3, 3)
    tl = from_schedule(spec, one_f_one_b(spec, 4))
    doc = xml.dom.minidom.parseString(to_svg(tl))
    titles = [t.firstChild.data for t in doc.getElementsByTagName("title")]
    assert len(titles) == 24 and "F0:0 [0, 1)" in titles


def test_chrome_trace_shape(tmp_path):
    spans = compute_spans([[(0.0, 1.0, "F0", 0)], [(1.0, 2.0, "F1", 0)]], {"F0": "forward", "F1": "forward"})
    spans += transfer_spans([(1.0, 1.0, "F0", 0, 0, 1)])
    data = chrome_trace(spans, time_scale=1e-3, devices=2, title="t")
    xs = [e for e in data["traceEvents"] if e["ph"] == "X"]
    assert [(e["pid"], e["tid"], e["name"], e["ts"], e["dur"]) for e in xs] == [
        (0, 0, "F0:0", 0.0, 1000.0), (0, 1, "send F0:0>1", 1000.0, 0.0),
        (1, 0, "F1:0", 1000.0, 1000.0), (1, 1, "recv F0:0<0", 1000.0, 0.0)]
    names = {(e["pid"], e["args"]["name"]) for e in data["traceEvents"] if e["name"] == "process_name"}
    assert names == {(0, "device 0"), (1, "device 1")}
    path = tmp_path / "t.json"
    write_trace(path, [Span(0, 0.0, 2.0, "x")])
    assert json.loads(path.read_text())["traceEvents"][-1]["dur"] == 2e6


def test_summary_table_text():
    spec = vshape(2, 2)
    report = simulate(make_plan(spec, one_f_one_b(spec, 4)))
    text = text_of(*summary_table(report), width=72)
    lines = text.splitlines()
    assert lines[0].rstrip() == "vshape · 1f1b · N=4 · non-blocking · link free"
    assert "│ verdict                      │                      ok │" in lines
    assert "│ bubble rate                  │                  20.00% │" in lines
    assert "│ steady-state period (unit)   │                       3 │" in lines
    assert "│ peak memory / M (unit)       │                   2 / 2 │" in lines
    # device, busy, bubble, peak mem, waiting for data, waiting for peers (column widths vary)
    row = next(line for line in lines if line.startswith("│      0 │"))
    assert [c.strip() for c in row.split("│")[1:-1]] == ["0", "12", "20.00%", "2", "3", "0"]
