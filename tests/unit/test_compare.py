"""`tessel compare` end to end (exit codes, table, JSON) and the comparison rows behind it."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tessel_dsl.search.baselines import RECORDS, build
from tessel_dsl.search.baselines.compare import compare, measured_period, steady_bubble
from tessel_dsl.views.table3 import PAPER, table3
from tests.paths import ROOT, SPECS
from tests.unit.test_baselines import mshape, vshape, xshape


def tessel(*args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tessel_dsl.cli", "compare", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)


BASELINES_ONLY = tuple(arg for b in RECORDS for arg in ("-s", b.name))


def test_table_lists_every_baseline_and_marks_na():
    r = tessel("specs/vshape.tsl", "-n", "8", *BASELINES_ONLY)
    assert r.returncode == 0, r.stderr
    for word in ("makespan", "bubble", "period(LB)", "steady", "peak/M", "gpipe", "1f1b", "1f1b+"):
        assert word in r.stdout
    assert "chimera n/a: Chimera needs two independent chains" in r.stdout
    gpipe = next(line for line in r.stdout.splitlines() if line.split()[:1] == ["gpipe"])
    assert "4/4" in gpipe and ">M" not in r.stdout  # GPipe runs in waves of 4 to fit M=4


def test_a_schedule_over_memory_is_shown_over_m_not_hidden():
    from rich.console import Console

    from tessel_dsl.cli.compare import render_rows
    from tessel_dsl.search.baselines.compare import Row

    row = Row(spec="v", schedule="plan:x", microbatches=8, makespan=10, bubble=0.0, lower_bound=1,
              peak_memory=(8, 2), memory_limit=4, over_memory=True)
    console = Console(width=120, record=True)
    for part in render_rows("v", [row]):
        console.print(part)
    assert "8/4 >M" in console.export_text()


def test_json_rows():
    r = tessel("specs/vshape.tsl", "specs/xshape.tsl", "-n", "8", "--json", *BASELINES_ONLY)
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert [d["spec"] for d in data] == ["vshape", "xshape"]
    rows = {row["schedule"]: row for row in data[0]["rows"]}
    assert rows["1f1b"]["makespan"] == (8 + 3) * 4 and rows["1f1b"]["period"] == 4
    assert rows["1f1b"]["steady_bubble"] == 0 and rows["1f1b"]["peak_memory"] == [4, 3, 2, 1]
    assert rows["chimera"]["status"] == "n/a" and rows["chimera"]["makespan"] is None
    assert rows["gpipe"]["over_memory"] is False and rows["gpipe"]["peak_memory"] == [4, 4, 4, 4]
    x = {row["schedule"]: row for row in data[1]["rows"]}
    assert x["chimera"]["status"] == "ok" and x["1f1b"]["status"] == "n/a"


def test_to_row_and_gap():
    r = tessel("specs/vshape.tsl", "-n", "4", "-s", "1f1b", "--to", "--json")
    assert r.returncode == 0, r.stderr
    rows = {row["schedule"]: row for row in json.loads(r.stdout)[0]["rows"]}
    assert rows["to"]["proven"] is True and rows["to"]["makespan"] == 28
    assert rows["1f1b"]["gap_to_optimal"] == 0.0


def test_set_and_mode_reach_the_spec():
    r = tessel("specs/mshape.tsl", "--set", "D=8", "--mode", "infer", "-n", "4", "-s", "1f1b+", "--json")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)[0]
    assert data["devices"] == 8 and data["mode"] == "infer"
    assert data["rows"][0]["makespan"] == 4 * 2 + 7  # E,F0 per micro-batch on device 0, then the chain


def test_plan_file_is_compared_with_baselines(tmp_path):
    from tessel_dsl.lang.parser import parse_file
    from tessel_dsl.plan import SearchInfo, make_plan, save_plan

    spec = parse_file(SPECS / "vshape.tsl")
    plan = make_plan(spec, build(spec, "gpipe", 4), SearchInfo(method="import"))  # fits M=4
    path = tmp_path / "plan.json"
    save_plan(plan, path)
    r = tessel(str(path), "-s", "1f1b", "--json")
    assert r.returncode == 0, r.stderr
    rows = [row["schedule"] for row in json.loads(r.stdout)[0]["rows"]]
    assert rows == ["plan:gpipe", "1f1b"]
    assert tessel(str(path), "--set", "D=2").returncode == 2
    # A spec with --set before the plan: refused before the spec's table is printed (it was
    # printed whole, then the error came on reaching the plan)
    r = tessel("specs/vshape.tsl", str(path), "--set", "D=4", "-s", "gpipe")
    said = " ".join(r.stderr.replace("│", " ").split())  # (the message is boxed and folded)
    assert r.returncode == 2 and "apply to a .tsl spec" in said and "compare the plan on its own" in said
    assert "gpipe" not in r.stdout


@pytest.mark.parametrize("args,code,message", [
    ((), 2, "give at least one spec"),
    (("specs/nothere.tsl",), 1, "cannot read spec"),
    (("specs/vshape.tsl", "--set", "D"), 2, "expected K=V"),
    (("specs/vshape.tsl", "--mode", "eval"), 2, "expected train or infer"),
    (("specs/vshape.tsl", "-s", "pipedream"), 2, "unknown schedule"),
    (("specs/vshape.tsl", "-n", "0"), 2, ""),
])
def test_exit_codes(args, code, message):
    r = tessel(*args)
    assert r.returncode == code, r.stdout + r.stderr
    assert message in " ".join(r.stderr.split())
    assert "Traceback" not in r.stderr


def test_steady_state_helpers():
    spec = vshape(d=4)
    assert measured_period(spec, build(spec, "1f1b", 8), build(spec, "1f1b", 16)) == 4
    assert steady_bubble(spec, 4) == 0 and steady_bubble(spec, 5) == pytest.approx(0.2)
    assert steady_bubble(spec, None) is None


def test_compare_library_rows():
    rows = compare(mshape(n=6), schedules=("gpipe", "1f1b", "1f1b+"), to=True, to_time_limit=60)
    by = {r.schedule: r for r in rows}
    assert by["1f1b"].status == "n/a" and "chain of stages" in by["1f1b"].reason
    assert by["to"].status == "ok" and by["to"].period is None
    assert by["1f1b+"].gap_to_optimal >= 0
    assert by["1f1b+"].period == 8 and by["1f1b+"].lower_bound == 6
    rows = compare(xshape(n=4), schedules=("chimera",))
    assert rows[0].period == 11


def test_table3_baseline_columns():
    rows = table3(SPECS, tessel=False)
    assert [r.model for r in rows] == ["GPT", "mT5", "Flava"]
    for r in rows:
        one, chimera, plus, _ = r.cells
        assert one.steady_bubble == 0
        assert chimera.steady_bubble == pytest.approx(3 / 11)  # paper: 20% (see docs/compare.md)
    # Table 3 of the paper (percent; None is its 'x', no 1F1B+ for Flava), written out here so a
    # changed PAPER constant cannot pass by being compared with itself.
    assert [r.paper for r in rows] == [(0.0, 20.0, 25.0, 0.0), (0.0, 20.0, 20.0, 0.0), (0.0, 20.0, None, 0.0)]
    assert [PAPER[r.model] for r in rows] == [r.paper for r in rows]
    assert rows[0].cells[2].steady_bubble == pytest.approx(0.25)
    assert rows[1].cells[2].steady_bubble == pytest.approx(0.20)
    assert rows[2].cells[2].status == "n/a"


def test_best_applicable_baseline_skips_overflowing_and_na_rows():
    from tessel_dsl.search.baselines.compare import best_baseline, versus_best

    rows = compare(vshape(d=4, n=8, m=4), schedules=("gpipe", "1f1b", "1f1b+", "chimera"))
    by = {r.schedule: r for r in rows}
    assert not by["gpipe"].over_memory and by["chimera"].status == "n/a"  # GPipe in waves of 4
    best = best_baseline(rows)
    assert best.schedule in ("1f1b", "1f1b+") and best.makespan == (8 + 3) * 4
    assert versus_best(rows) == (None, best, None)  # no Tessel row to compare
    # No shipped baseline overflows M any more, so the rows that must be skipped are written out:
    # the shortest makespan overflows, the next is n/a, and the shortest period is not the
    # shortest makespan (a long warmup); the best is the shortest makespan among the rest.
    from tessel_dsl.search.baselines.compare import Row

    hand = [Row("s", "gpipe", makespan=30, period=4.0, over_memory=True),
            Row("s", "chimera", status="n/a", makespan=None),
            Row("s", "1f1b+", makespan=44, period=4.0),
            Row("s", "1f1b", makespan=40, period=5.0),
            Row("s", "tessel", makespan=36, period=4.0)]
    assert best_baseline(hand).schedule == "1f1b"
    assert versus_best(hand)[2] == pytest.approx(36 / 40 - 1)


def test_several_placements_in_one_table():
    r = tessel("specs/vshape.tsl", "specs/mshape.tsl", "-n", "8")
    assert r.returncode == 0, r.stderr
    assert "placements side by side" in r.stdout
    table = r.stdout[r.stdout.index("placements side by side"):]
    lines = {line.split()[0]: line.split() for line in table.splitlines() if line.strip().endswith("%")}
    # vshape: Tessel equals 1F1B at N=8, (8 + 3) * 4; mshape: 1F1B+ is the only applicable baseline
    assert lines["vshape.tsl"][4] == "44" and lines["vshape.tsl"][-1] == "+0.0%"
    assert lines["mshape.tsl"][6] == "1f1b+"
    data = json.loads(tessel("specs/vshape.tsl", "specs/mshape.tsl", "-n", "8", "--json").stdout)
    assert [d["best_baseline"] for d in data] == [lines["vshape.tsl"][6], "1f1b+"]
    assert data[0]["tessel_vs_best"] == 0.0 and data[1]["tessel_vs_best"] < 0


def test_table_to_a_file_or_log_keeps_every_digit():
    # Piped output (a CI log) is not a terminal: rich would assume 80 columns and crop cells to
    # "570 ms (101 m…". The tables are printed as wide as they need instead. The expected cells
    # are read off the rows of the JSON output, not off the table code.
    args = ("bench/specs/real/tpmshape16.tsl", "-s", "gpipe", "-s", "1f1b+")
    r = tessel(*args)
    assert r.returncode == 0, r.stderr
    assert "…" not in r.stdout
    rows = {row["schedule"]: row for row in json.loads(tessel(*args, "--json").stdout)[0]["rows"]}
    for name in ("gpipe", "1f1b+"):
        period = rows[name]["period"]
        assert f"{period:g} ms (75 ms)" in r.stdout, (name, period)


def test_a_baseline_fitted_to_memory_is_labelled(tmp_path):
    from tessel_dsl.lang.parser import parse_file
    from tessel_dsl.search.baselines.compare import baseline_row, label

    # ZB-V's own order (D=4, two chunks per device) keeps 1F1B's activation memory: D micro-batches
    # of both chunks, 2 * 4 = 8 units on device 0. Under M=6 it is a stand-in, and says so.
    text = (ROOT / "specs/zerobubble.tsl").read_text().replace("memory C*D, infer 4", "param M = 8\nmemory M, infer 4")
    path = tmp_path / "zb.tsl"
    path.write_text(text)
    rows = {m: baseline_row(parse_file(path, sets={"C": "2", "M": str(m)}), "zb-v", 16)[0] for m in (8, 6)}
    assert rows[8].status == rows[6].status == "ok"
    assert label(rows[8]) == "zb-v" and "memory" not in rows[8].extra
    assert label(rows[6]) == "zb-v (capped to memory)"
    assert rows[6].extra["memory"].startswith("capped to memory: its own order needs 8 on device 0, which has 6")
    assert f"makespan {rows[8].makespan} without the cap" in rows[6].extra["memory"]
    r = tessel(str(path), "--set", "C=2", "--set", "M=6", "-s", "zb-v", "-s", "1f1b-capped")
    assert r.returncode == 0, r.stderr
    assert "zb-v (capped to memory)" in r.stdout and "zb-v capped to memory: its own order needs 8" in r.stdout
    assert "1f1b-capped (" not in r.stdout  # capped by definition: its name says so



def test_tessel_row_shows_the_period_the_plan_runs_for_this_n():
    from tessel_dsl.search.baselines.compare import baseline_row, tessel_row
    from tests.helpers import vshape as chain

    # D=3, M=2: a micro-batch holds device 0's memory from F0 to B0, 3*1 + 3*2 = 9, and two fit,
    # so nothing beats 9/2 = 4.5 per micro-batch; the search's one-copy repetend has period 6 and
    # memory-capped 1F1B's order, which reaches 4.5, is what the plan runs at N=8.
    spec = chain(devices=3, memory=2, fwd=1, bwd=2, microbatches=8)
    row, sched = tessel_row(spec, 8)
    capped, capped_sched = baseline_row(spec, "1f1b-capped", 8)
    assert sched.repetend.period == 6 and sched.slots == capped_sched.slots
    assert row.period == capped.period == 4.5
    # Below N_R (here 3) the N micro-batches are solved directly: no repetend runs.
    row, sched = tessel_row(chain(devices=3, memory=3, fwd=1, bwd=3, microbatches=2), 2)
    assert sched.repetend.nr == 3 and row.period is None
