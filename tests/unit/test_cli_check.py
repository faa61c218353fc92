"""`tessel check` end to end: exit codes 0 / 1 / 2, the summary, `--json`."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.paths import ROOT, SPECS


def tessel(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tessel_dsl.cli", "check", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


def test_mshape_summary_shows_lower_bound_six():
    r = tessel("specs/mshape.tsl")
    assert r.returncode == 0, r.stderr
    assert "lower bound of the repetend period: 6" in r.stdout
    assert "E F0 B0 EB" in r.stdout
    assert r.stderr == ""


def test_set_and_mode():
    r = tessel("specs/mshape.tsl", "--set", "D=8", "--mode", "infer", "--json")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["devices"] == 8 and data["mode"] == "infer" and data["lower_bound"] == 2
    assert data["memory"] == 4 and len(data["blocks_per_device"]) == 8


def test_json_is_the_only_stdout():
    r = tessel("specs/kshape.tsl", "--json")
    data = json.loads(r.stdout)
    assert data["busy_time"] == [6, 6, 6, 6] and data["microbatch_memory"] == [2, 2, 2, 2]
    assert data["max_inflight"] == 3
    # the fields this spec sets on JB; a new Block field (with its default) changes nothing here
    jb = next(b for b in data["blocks"] if b["name"] == "JB")
    assert {k: jb[k] for k in ("kind", "devices", "time", "memory", "forward")} == {
        "kind": "backward", "devices": [0, 1, 2, 3], "time": 1, "memory": -1, "forward": "J"}


@pytest.mark.parametrize("name", ["kshape", "zerobubble"])
def test_json_holds_the_spec_in_the_ir_codec_form(name):
    import dataclasses

    from tessel_dsl.ir import Spec
    from tessel_dsl.lang.parser import parse_file
    from tessel_dsl.serialize import from_json

    data = json.loads(tessel(f"specs/{name}.tsl", "--json").stdout)
    fields = {f.name for f in dataclasses.fields(Spec) if f.compare}
    assert from_json(Spec, {k: data[k] for k in fields}) == parse_file(SPECS / f"{name}.tsl")


@pytest.mark.parametrize("args,fragment", [
    (["specs/invalid/cycle.tsl"], "error[cycle]"),
    (["specs/invalid/syntax-missing-arrow.tsl"], "syntax error"),
    (["specs/vshape.tsl", "--set", "Q=1"], "error[unknown-set]"),
    (["specs/no_such_spec.tsl"], "cannot read spec"),
])
def test_user_errors_exit_1_without_traceback(args, fragment):
    r = tessel(*args)
    assert r.returncode == 1
    assert fragment in r.stderr and "Traceback" not in r.stderr
    assert r.stdout == ""


def test_json_errors_also_exit_1_with_empty_stdout():
    r = tessel("specs/invalid/unknown-name.tsl", "--json")
    assert r.returncode == 1 and r.stdout == ""


@pytest.mark.parametrize("args", [[], ["specs/vshape.tsl", "--set", "D"], ["specs/vshape.tsl", "--mode", "x"],
                                  ["specs/vshape.tsl", "--bogus"]])
def test_usage_errors_exit_2(args):
    r = tessel(*args)
    assert r.returncode == 2
    assert "Traceback" not in r.stderr


def test_check_does_not_import_heavy_libraries():
    code = ("import sys; from tessel_dsl.cli import main\n"
            "try:\n    main(['check', 'specs/vshape.tsl'])\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in ('z3', 'torch', 'simpy', 'ortools') if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.stdout.strip().endswith("[]"), r.stdout + r.stderr


def test_max_in_flight_is_shown_per_device():
    # examples/gpt_memory.tsl: 4 GB per micro-batch on each device, room 8, 16, 16 and 10 GB left
    # after the reserves: 2, 4, 4 and 2 micro-batches (hand-worked: room // 4 GB)
    r = tessel("examples/gpt_memory.tsl", "--json")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["max_inflight_per_device"] == [2, 4, 4, 2] and data["max_inflight"] == 2
    r = tessel("examples/gpt_memory.tsl")
    rows = [ln.split() for ln in r.stdout.splitlines() if ln.strip()[:1].isdigit() and "│" in ln]
    assert [row[-1] for row in rows] == ["2", "4", "4", "2"]
    assert "in flight" in r.stdout
    # inference keeps nothing between passes: memory sets no limit on any device
    data = json.loads(tessel("specs/mshape.tsl", "--mode", "infer", "--json").stdout)
    assert data["max_inflight_per_device"] == [None] * data["devices"]


def test_memory_that_sets_the_pace_is_said_before_any_search():
    # bench/specs/real/memchain.tsl: device 0 holds a micro-batch at least 282 ms, 6 at a time:
    # 47 ms per micro-batch, above the busiest stage's 45 ms of work (docs/search.md, step 1)
    r = tessel("bench/specs/real/memchain.tsl", "--json")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert (data["lower_bound"], data["memory_period_bound"]) == (45, 47.0)
    r = tessel("bench/specs/real/memchain.tsl")
    said = " ".join(r.stdout.split())
    assert "memory allows no period shorter than 47 ms per micro-batch, above the 45 ms of work" in said
    # where memory binds less than work (the M-shape: 4.6 against 6), nothing is said
    r = tessel("specs/mshape.tsl", "--json")
    assert json.loads(r.stdout)["memory_period_bound"] == 4.6
    assert "memory allows" not in tessel("specs/mshape.tsl").stdout


def test_the_memory_bound_is_skipped_on_very_large_specs():
    from tessel_dsl.cli.check import CHECK_BOUND_MAX_BLOCKS, summarize
    from tessel_dsl.lang.parser import parse

    text = "devices 2\nmemory 4\nfor i in 0..{}:\n    forward F{{i}} on i % 2 time 1\n"
    big = parse(text.format(CHECK_BOUND_MAX_BLOCKS))
    assert len(big.blocks) == CHECK_BOUND_MAX_BLOCKS + 1 and summarize(big)["memory_period_bound"] is None
    small = parse(text.format(3))
    assert summarize(small)["memory_period_bound"] is not None
