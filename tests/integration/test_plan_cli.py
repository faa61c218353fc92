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
    r = _invoke(["plan", "--model", "tests.integration.test_plan_train:llama", "--devices", "2", "--memory", "1GB",
                 "--batch-shape", "2x8", "-n", "4", "--repeats", "1", "--time-limit", "30", "-o", str(out), "--json"])
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
    assert json.loads((tmp_path / "plan.profile.json").read_text())["device"] == "cpu"


def test_planning_twice_from_a_saved_profile_gives_byte_identical_files(tmp_path):
    """Without --time-limit the plan depends on the profile and options alone: every solve of the
    search has a deterministic budget (a profile fixed by hand here, as measured ones differ from
    run to run; the winner's search runs CP-SAT). The plan files are the same bytes but for the
    search's seconds, the one timing field a plan holds; the spec, binding and profile are the
    same bytes."""
    import re

    from tessel_dsl.placement.costs import Profile, Unit

    def unit(name, kind, ms):
        return Unit(name, (name,), ms / 1e3, ms / 1e3, ms / 1e3, 10**6, 10**5, 4 * 10**6, 10**6, kind)

    units = [unit("embed", "embedding", 1)] + [unit(f"l{i}", "layer", 4 + i % 2) for i in range(6)]
    saved = tmp_path / "p.profile.json"
    saved.write_text(json.dumps(Profile(tuple(units + [unit("head", "head", 6)])).to_json()))
    runs = []
    for name in ("a", "b"):
        r = _invoke(["plan", "--profile", str(saved), "--devices", "2", "-n", "4", "-o", str(tmp_path / f"{name}.json"),
                     "--json"])
        assert r.exit_code == 0, r.output
        files = {ext: (tmp_path / f"{name}{ext}").read_bytes() for ext in (".tsl", ".blocks.json", ".profile.json")}
        plan = (tmp_path / f"{name}.json").read_bytes()
        assert json.loads(plan)["search"]["solver"] == "cpsat"
        files[".json"], cut = re.subn(rb'\n  "seconds": [0-9.e+-]+,\n', b"\n", plan)
        assert cut == 1
        runs.append(files)
    assert runs[0] == runs[1]


def test_more_devices_than_units_and_a_bad_batch_shape_are_plain_errors(tmp_path):
    from tessel_dsl.cli import main

    with pytest.raises(SystemExit) as e:  # the tiny Llama has 7 units
        main(["plan", "--model", "tests.integration.test_plan_train:llama", "--devices", "8", "--batch-shape", "2x8",
              "--repeats", "1", "-o", str(tmp_path / "p.json")])
    assert e.value.code == 1 and not list(tmp_path.iterdir())
    r = _invoke(["plan", "--model", "tests.integration.test_plan_train:llama", "--devices", "2", "--batch-shape", "2xa"])
    assert r.exit_code == 2 and "2x128" in r.output
    r = _invoke(["plan", "--devices", "2"])
    assert r.exit_code == 2 and "--profile" in r.output
