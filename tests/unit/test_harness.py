"""`tessel test`, JUnit output, expectation evaluation and the pytest plugin for `.tsl` files."""
from __future__ import annotations

import xml.dom.minidom
from pathlib import Path

import pytest

from tessel_dsl.ir import Expectation
from tessel_dsl.plan import make_plan
from tessel_dsl.simulator import simulate
from tessel_dsl.tools.expect import check_expectations, compare, describe, judge, spec_files
from tests.helpers import one_f_one_b, vshape
from tests.helpers import run_cli as run

pytest_plugins = ["pytester"]


def _plugin_args() -> list[str]:
    """Load the plugin by hand only when no installed entry point already does (source tree)."""
    from importlib.metadata import entry_points

    installed = any(ep.value == "tessel_dsl.tools.pytest_plugin" for ep in entry_points(group="pytest11"))
    return [] if installed else ["-p", "tessel_dsl.tools.pytest_plugin"]

# Two devices, a chain F0 -> F1 -> B1 -> B0: tiny, so searching it takes a moment only.
PIPE = """\
placement tiny
devices 2
memory 2
microbatches 8
forward F0 on 0 time 1 memory 1
forward F1 on 1 time 1 memory 1
F0 -> F1
derive backward time 1x
{expects}
"""


def tiny(tmp_path: Path, expects: str, name: str = "tiny.tsl") -> Path:
    path = tmp_path / name
    path.write_text(PIPE.format(expects=expects))
    return path


def test_tiny_spec_parses(tmp_path):
    from tessel_dsl.lang.parser import parse_file

    spec = parse_file(tiny(tmp_path, "expect deadlock_free"))
    assert [b.name for b in spec.blocks] == ["F0", "F1", "B1", "B0"]


@pytest.mark.parametrize("measured, op, target, ok", [
    (0.05, "<=", 0.05, True), (0.0500000000001, "<=", 0.05, True), (0.06, "<=", 0.05, False),
    (4.0, "==", 4.0, True), (4.0, "!=", 4.0, False), (3.0, "<", 4.0, True), (4.0, ">", 4.0, False),
    (4.0, ">=", 4.0, True),
])
def test_compare(measured, op, target, ok):
    assert compare(measured, op, target) is ok


def test_judge_against_a_1f1b_report():
    spec = vshape(4, 4)
    report = simulate(make_plan(spec, one_f_one_b(spec, 8)))
    verdicts = {
        describe(e): judge(spec, e, 8, report).passed
        for e in (Expectation("bubble", "<=", 0.3), Expectation("bubble", "<=", 0.2),
                  Expectation("peak_memory", "<=", "M"), Expectation("period", "==", "lower_bound"),
                  Expectation("makespan", "==", 33.0), Expectation("deadlock_free"))
    }
    assert verdicts == {"bubble <= 30%": True, "bubble <= 20%": False, "peak_memory <= M": True,
                        "period == lower_bound": True, "makespan == 33": True, "deadlock_free": True}
    out = judge(spec, Expectation("bubble", "<=", 0.2, 8), 8, report)
    assert out.detail == "measured 27.27%, expected <= 20%" and out.text == "bubble <= 20% at N=8"


def test_check_expectations_uses_the_planner_per_n():
    spec = vshape(4, 4)
    spec = type(spec)(**{**spec.__dict__, "expectations": (
        Expectation("bubble", "<=", 0.3, 8), Expectation("bubble", "<=", 0.3, 2)),
        "microbatches": 8})
    calls = []

    def planner(s, n, blocking=False):
        calls.append(n)
        return make_plan(s, one_f_one_b(s, n), blocking=blocking)

    outs = check_expectations(spec, planner=planner)
    assert calls == [8, 2]
    assert [o.passed for o in outs] == [True, False]  # 3/5 = 60% bubble at N=2


def test_spec_files_skip_invalid_and_expectation_free(tmp_path):
    tiny(tmp_path, "expect deadlock_free", "a.tsl")
    tiny(tmp_path, "", "b.tsl")
    (tmp_path / "invalid").mkdir()
    tiny(tmp_path / "invalid", "expect bubble", "c.tsl")
    assert [p.name for p in spec_files([tmp_path])] == ["a.tsl"]
    assert [p.name for p in spec_files([tmp_path / "b.tsl"])] == ["b.tsl"]  # named: always


def test_tessel_test_passes_and_writes_junit(capsys, tmp_path):
    spec = tiny(tmp_path, "expect deadlock_free\nexpect peak_memory <= M\nexpect period == lower_bound")
    junit = tmp_path / "r.xml"
    code, out, err = run(capsys, "test", str(spec), "--junit", str(junit))
    assert code == 0, out + err
    assert "3 passed, 0 failed" in out
    doc = xml.dom.minidom.parse(str(junit))
    suite = doc.documentElement
    assert suite.getAttribute("tests") == "3" and suite.getAttribute("failures") == "0"
    names = [c.getAttribute("name") for c in doc.getElementsByTagName("testcase")]
    assert names == ["deadlock_free at N=8", "peak_memory <= M at N=8", "period == lower_bound at N=8"]


def test_tessel_test_fails_with_the_measured_value(capsys, tmp_path):
    spec = tiny(tmp_path, "expect bubble <= 1% at N=2\nexpect deadlock_free")
    junit = tmp_path / "r.xml"
    code, out, err = run(capsys, "test", str(spec), "--junit", str(junit))
    assert code == 1
    assert "1 passed, 1 failed" in out
    assert "FAIL:" in err and "bubble <= 1% at N=2: measured" in err
    doc = xml.dom.minidom.parse(str(junit))
    (failure,) = doc.getElementsByTagName("failure")
    assert failure.getAttribute("message").startswith("measured ")


def test_tessel_test_reports_a_broken_spec(capsys, tmp_path):
    bad = tmp_path / "bad.tsl"
    bad.write_text("devices 1\nmemory 4\nforward A on 0 time 1\nexpect bubble\n")
    code, out, err = run(capsys, "test", str(bad))
    assert code == 1 and "ERROR" in out and "1 spec(s) did not load" in out
    assert "Traceback" not in err


def test_tessel_test_with_nothing_to_check(capsys, tmp_path):
    code, _, err = run(capsys, "test", str(tmp_path))
    assert code == 1 and "no spec with expectations" in err


def test_pytest_plugin_collects_and_reports_like_assertions(pytester, tmp_path):
    pytester.makefile(".tsl", good=PIPE.format(expects="expect deadlock_free\nexpect peak_memory <= M"))
    pytester.makefile(".tsl", slow=PIPE.format(expects="expect bubble <= 1% at N=2"))
    pytester.makefile(".tsl", plain=PIPE.format(expects=""))
    inv = pytester.mkdir("invalid")
    (inv / "bad.tsl").write_text("devices 1\nexpect bubble\n")
    result = pytester.runpytest_inprocess(*_plugin_args(), "-v", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2, failed=1)
    out = result.stdout.str()
    assert "good.tsl::deadlock_free PASSED" in out
    assert "slow.tsl::bubble <= 1% at N=2 FAILED" in out
    assert "expect bubble <= 1% at N=2" in out and "measured" in out
    assert "bad.tsl" not in out


def test_pytest_plugin_collects_a_named_file_even_without_expect(pytester):
    path = pytester.makefile(".tsl", broken="devices 1\nmemory 4\nforward A on 0 time 1\nexpect bubble\n")
    result = pytester.runpytest_inprocess(*_plugin_args(), str(path), "-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    assert "needs a comparison" in result.stdout.str()
