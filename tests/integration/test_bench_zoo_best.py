"""bench/zoo_best.py on a tiny spec: the search's plan, TO hinted with it, the bounds, the table.

The spec is the 4-device X-shape at N = 4: the search's plan (38) is above its stated bound (36),
so TO runs; it proves 38 optimal, which only CP-SAT's bound shows. (The zero-bubble chain this
used to run is now proven by the stated bound itself: `devrelax.py`.)"""
from __future__ import annotations

import argparse
import json

from tests.helpers import load_bench
from tests.paths import ROOT


def _spec(tmp_path):
    text = (ROOT / "specs" / "xshape.tsl").read_text()
    assert "param N = 16" in text
    path = tmp_path / "x4.tsl"
    path.write_text(text.replace("param N = 16", "param N = 4").replace('include "lib/', f'include "{ROOT}/specs/lib/'))
    return path


def _args(**kw):
    return argparse.Namespace(**{"effort": 1.0, "workers": 1, "max_tasks": 20000, "time_limit": None, "cpu_limit": 120,
                                 **kw})


def test_to_matches_or_beats_the_plan_and_the_bound_stays_below(tmp_path):
    bench = load_bench("zoo_best")
    row = bench.measure(_spec(tmp_path), "tune", _args())
    assert row["rc"] == 0 and "error" not in row, row
    assert (row["devices"], row["microbatches"], row["tasks"]) == (4, 4, 64)
    assert row["to"] <= row["ours"] and row["analytic"] < row["ours"]
    assert row["analytic"] <= bench.best_bound(row) <= row["to"]
    assert row["to_proven"] and row["cp_bound"] == row["to"]  # proven: CP-SAT's bound is the optimum
    text = bench.table("tune", [row], 1.0, 1)
    line = f"| x4 | 4 | 4 | {row['ours']} | {row['to']} (yes) | {row['to']} (CP-SAT) | +0.0% | +0.0% |"
    assert line in text, text
    assert "ours proven optimal (at the best lower bound): 1 of 1" in text
    json.dumps(row)  # a --jsonl line


def test_a_to_that_cannot_run_leaves_an_error_in_its_row_not_a_crash(tmp_path):
    bench = load_bench("zoo_best")
    row = bench.measure(_spec(tmp_path), "tune", _args(max_tasks=10))
    assert row["rc"] == 0 and "to" not in row and row["ours"] > 0
    assert row["error"] == "not tried: 64 tasks > --max-tasks 10"
    text = bench.table("tune", [row], 1.0, 1)
    assert "| x4 | 4 | 4 | " in text and "**not tried: 64 tasks" in text and "no TO: x4;" in text


def test_bounds_only_sets_the_bound_beside_recorded_rows(tmp_path, capsys):
    bench = load_bench("zoo_best")
    now = bench.stated_bound(ROOT / "bench" / "specs" / "zoo" / "tune" / "unet_sdxl8.tsl")
    rows = tmp_path / "rows.jsonl"
    base = {"half": "tune", "spec": "unet_sdxl8", "microbatches": 32, "analytic": now - 1}
    rows.write_text(json.dumps({**base, "ours": now, "to": now, "to_proven": True}) + "\n")
    assert bench.main(["--bounds-only", "--half", "tune", "--only", "unet_sdxl8", "--from-jsonl", str(rows)]) == 0
    text = capsys.readouterr().out
    assert f"| unet_sdxl8 | 32 | {now} | {now} | {now - 1} | {now} | +0.0% | +0.0% |" in text, text
    assert "1 of 1 with the bound now" in text and "0 of 1 with the recorded bound" in text
    # A recorded plan shorter than the bound: the bound would be unsound, and the command says so.
    rows.write_text(json.dumps({**base, "ours": now - 5, "to": now - 5, "to_proven": True}) + "\n")
    assert bench.main(["--bounds-only", "--half", "tune", "--only", "unet_sdxl8", "--from-jsonl", str(rows)]) == 1
    assert "above a plan" in capsys.readouterr().out
