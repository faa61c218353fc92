"""`resolution time 1ms round` (and `resolution memory ... round`): an explicit opt-in that rounds
quantities that are not a whole number of the resolution, and reports each change; without it
they are refused."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tessel_dsl.errors import SpecError
from tessel_dsl.lang.parser import parse

ROOT = Path(__file__).resolve().parents[2]


def chain(res_time: str, res_memory: str, t0: str, t1: str, t2: str, m: str) -> str:
    return (f"placement p\nresolution time {res_time}\nresolution memory {res_memory}\ndevices 2\n"
            f"memory 8GB\n"
            f"forward F0 on 0 time {t0} memory {m}\n"          # line 6
            f"forward F1 on 1 time {t1} memory 1GB\n"          # line 7
            f"forward F2 on 1 time {t2} memory 1GB\n"          # line 8
            "chain(F{i} for i in 0..2)\nderive backward\n")


def test_round_gives_the_spec_written_with_rounded_values():
    rounded = parse(chain("1ms round", "1GB round", "2.4ms", "2.5ms", "0.2ms", "1.5GB"), "r.tsl")
    # nearest whole unit, half up; a positive time never rounds to zero
    by_hand = parse(chain("1ms", "1GB", "2ms", "3ms", "1ms", "2GB"), "r.tsl")
    assert rounded == by_hand
    assert [(w.code, w.severity, w.location.line, w.location.column) for w in rounded.warnings] == [
        ("rounded", "note", 6, 22), ("rounded", "note", 6, 35), ("rounded", "note", 7, 22), ("rounded", "note", 8, 22)]
    assert str(rounded.warnings[0]) == ("r.tsl:6:22: note[rounded]: time 2.4ms is 2.4 units of "
                                        "`resolution time 1ms`: rounded to 2ms")
    assert "memory 1.5GB is 1.5 units of `resolution memory 1GB`: rounded to 2GB" in str(rounded.warnings[1])
    # exact values need no rounding and say nothing
    assert parse(chain("1ms round", "1GB round", "2ms", "3ms", "1ms", "2GB"), "r.tsl").warnings == ()


def test_round_applies_only_to_the_resolution_that_says_so():
    spec = parse(chain("0.5ms round", "1GB", "0.7ms", "1ms", "1ms", "1GB"), "r.tsl")
    assert spec.block("F0").time == 1 and "rounded to 0.5ms" in str(spec.warnings[0])  # 1.4 units -> 1
    with pytest.raises(SpecError) as e:
        parse(chain("1ms round", "1GB", "2ms", "3ms", "1ms", "1.5GB"), "r.tsl")
    assert [d.code for d in e.value.diagnostics] == ["inexact-quantity"]


def test_without_round_inexact_values_are_refused_with_the_way_out():
    with pytest.raises(SpecError) as e:
        parse(chain("1ms", "1GB", "2.4ms", "3ms", "1ms", "1GB"), "r.tsl")
    (d,) = e.value.diagnostics
    assert (d.code, d.location.line, d.location.column) == ("inexact-quantity", 6, 22)
    assert "time 2.4ms is 2.4 units of `resolution time 1ms`, not a whole number" in d.message
    assert "`resolution time 1ms round`" in d.message


def test_check_and_search_report_what_was_rounded(tmp_path):
    path = tmp_path / "r.tsl"
    path.write_text(chain("1ms round", "1GB", "2.4ms", "3ms", "1ms", "1GB"))
    env_run = dict(cwd=ROOT, capture_output=True, text=True, timeout=240)
    r = subprocess.run([sys.executable, "-m", "tessel_dsl.cli", "check", str(path)], **env_run)
    assert r.returncode == 0, r.stderr
    assert f"{path}:6:22: note[rounded]: time 2.4ms" in " ".join(r.stderr.split())
    r = subprocess.run([sys.executable, "-m", "tessel_dsl.cli", "search", str(path), "-n", "4", "--json",
                        "-o", str(tmp_path / "r.json")], **env_run)
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout)
    assert [w.split(": ", 1)[0] for w in summary["spec_warnings"]] == [f"{path}:6:22"]
    assert "rounded to 2ms" in summary["spec_warnings"][0]
