"""`tessel plan` on the command line: the files it writes, its JSON report, and its errors."""
from __future__ import annotations

import json

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from typer.testing import CliRunner  # noqa: E402


def _invoke(args):
    from tessel_dsl.cli import _load_verbs, app

    _load_verbs()
    return CliRunner().invoke(app, args)


def test_plan_writes_the_plan_its_spec_and_binding(tmp_path):
    from tessel_dsl.lang.parser import parse_file
    from tessel_dsl.plan import load_plan

    out = tmp_path / "plan.json"
    r = _invoke(["plan", "--model", "tests.test_plan_train:llama", "--devices", "2", "--memory", "1GB",
                 "--batch-shape", "2x8", "-n", "4", "--repeats", "1", "-o", str(out), "--json"])
    assert r.exit_code == 0, r.output
    report = json.loads(r.output)
    plan = load_plan(out)
    chosen = report["chosen"]
    assert plan.spec.name == chosen["candidate"].replace("-", "_") and plan.schedule.microbatches == 4
    best = min((row for row in report["rows"] if row["fits"]), key=lambda row: row["ms"])
    assert best["ms"] == next(row["ms"] for row in report["rows"]
                              if (row["candidate"], row["schedule"]) == (chosen["candidate"], chosen["schedule"]))
    assert parse_file(tmp_path / "plan.tsl").blocks == plan.spec.blocks
    blocks = json.loads((tmp_path / "plan.blocks.json").read_text())
    assert sorted(m for ms in blocks.values() for m in ms) == sorted(
        ["model.embed_tokens", "model.norm", "lm_head"] + [f"model.layers.{i}" for i in range(4)])
    assert report["device"] == "cpu"
    # planning again from the profile it saved gives the same plan: the choice, without --budget,
    # depends on the profile alone
    again = tmp_path / "again.json"
    r = _invoke(["plan", "--profile", str(tmp_path / "plan.profile.json"), "--devices", "2", "--memory", "1GB",
                 "-n", "4", "-o", str(again), "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["chosen"] == chosen
    same = [{k: v for k, v in json.loads(f.read_text()).items() if k != "search"} for f in (again, out)]
    assert same[0] == same[1]  # spec, schedule, programs (only the search's seconds differ)


def test_a_tied_model_and_a_bad_batch_shape_are_plain_errors(tmp_path):
    from tessel_dsl.cli import main

    with pytest.raises(SystemExit) as e:
        main(["plan", "--model", "tests.test_plan_train:gpt2_tied", "--devices", "2", "--batch-shape", "2x8",
              "--repeats", "1", "-o", str(tmp_path / "p.json")])
    assert e.value.code == 1 and not list(tmp_path.iterdir())
    r = _invoke(["plan", "--model", "tests.test_plan_train:llama", "--devices", "2", "--batch-shape", "2xa"])
    assert r.exit_code == 2 and "2x128" in r.output
    r = _invoke(["plan", "--devices", "2"])
    assert r.exit_code == 2 and "--profile" in r.output
