"""Reports show times and memory in the units the spec declares (ms, GB), not bare integers."""
from __future__ import annotations

from tessel_dsl.units import show_memory, show_time
from tests.helpers import run_cli

SPEC = """placement units
devices 2
resolution time 1ms
resolution memory 500MB
memory 20GB
forward F0 on 0 time 2ms memory 6GB
forward F1 on 1 time 2ms memory 6GB
F0 -> F1
derive backward time 2x
microbatches 4
"""


def test_show_time_and_memory():
    assert show_time(24, 1e-3, "1ms") == "24 ms"
    assert show_time(2400, 1e-3, "1ms") == "2.4 s"
    assert show_time(24, 1.0, "unit") == "24"
    assert show_time(0, 5e-4, "0.5ms") == "0 ms"
    assert show_memory(24, 500 * 10**6, "500MB") == "12 GB"
    assert show_memory(3, 2**29, "512MiB") == "1.5 GiB"
    assert show_memory(24, 1, "unit") == "24"


def test_simulate_report_reads_in_ms_and_gb(capsys, tmp_path):
    path = tmp_path / "units.tsl"
    path.write_text(SPEC)
    code, out, err = run_cli(capsys, "simulate", str(path), "--no-timeline", "--width", "120")
    assert code == 0, err
    # M = 20 GB = 40 units of 500 MB; one micro-batch's forward keeps 6 GB.
    assert "peak memory / M" in out and " / 20 GB" in out
    # Each device runs a 2 ms forward and a 4 ms backward per micro-batch: the bound is 6 ms.
    assert "12 GB / 20 GB" in out and "6 ms (planned 6 ms)" in out
    assert "comm hidden / exposed" in out and "0 ms / 0 ms" in out


# The same placement without resolutions: one unit of time is 1 ms, one of memory 500 MB above.
BARE = """placement bare
devices 2
memory 40
forward F0 on 0 time 2 memory 12
forward F1 on 1 time 2 memory 12
F0 -> F1
derive backward time 2x
microbatches 4
"""


def _write(tmp_path, text: str, extra: str = "") -> str:
    path = tmp_path / "spec.tsl"
    path.write_text(text + extra)
    return str(path)


def test_check_reads_in_ms_and_gb(capsys, tmp_path):
    code, out, err = run_cli(capsys, "check", _write(tmp_path, SPEC, "expect period <= 6ms\n"
                                                               "expect peak_memory <= 12GB\n"))
    assert code == 0, err
    assert "memory 20 GB per device" in out
    # Per device and micro-batch: 2 ms forward + 4 ms backward, 6 GB kept by the forward.
    assert out.count("6 ms") >= 3 and out.count("6 GB") == 2
    assert "lower bound of the repetend period: 6 ms" in out
    assert "under memory 20 GB" in out
    assert "expect period <= 6 ms" in out and "expect peak_memory <= 12 GB" in out


def test_check_without_resolutions_stays_bare(capsys, tmp_path):
    code, out, err = run_cli(capsys, "check", _write(tmp_path, BARE, "expect period <= 6\n"))
    assert code == 0, err
    assert "memory 40 per device" in out and "lower bound of the repetend period: 6 " in out
    assert "expect period <= 6\n" in out
    assert " ms" not in out and "GB" not in out


def test_check_json_keeps_numbers(capsys, tmp_path):
    import json

    code, out, _ = run_cli(capsys, "check", "--json", _write(tmp_path, SPEC))
    s = json.loads(out)
    assert s["busy_time"] == [6, 6] and s["microbatch_memory"] == [12, 12] and s["memory"] == 40


def test_compare_reads_in_ms_and_gb(capsys, tmp_path):
    code, out, err = run_cli(capsys, "compare", _write(tmp_path, SPEC), "-s", "1f1b")
    assert code == 0, err
    assert "M=20 GB" in out and "lower bound 6 ms per micro-batch" in out
    # 1F1B on two equal stages: (N + D - 1) x (2 + 4) ms = 30 ms; device 0 holds two
    # micro-batches' 6 GB at its peak.
    assert "30 ms" in out and "6 ms (6 ms)" in out and "12 GB/20 GB" in out


def test_compare_without_resolutions_stays_bare(capsys, tmp_path):
    code, out, err = run_cli(capsys, "compare", _write(tmp_path, BARE), "-s", "1f1b")
    assert code == 0, err
    assert "M=40" in out and "lower bound 6 per micro-batch" in out
    assert " 30 " in out and "6 (6)" in out and "24/40" in out
    assert " ms" not in out and "GB" not in out


def test_test_reads_in_ms_and_gb(capsys, tmp_path):
    path = _write(tmp_path, SPEC, "expect period <= 6ms\nexpect peak_memory <= M\nexpect makespan < 10ms\n")
    code, out, err = run_cli(capsys, "test", path)
    assert code == 1  # the makespan expectation cannot hold: one micro-batch alone takes 12 ms
    table = " ".join(out.split())  # the table may wrap cells
    assert "period <= 6 ms" in table and "makespan < 10 ms" in table and "20 GB" in table
    assert "FAIL" in err and "expected < 10 ms" in " ".join(err.split())


def test_test_without_resolutions_stays_bare(capsys, tmp_path):
    code, out, err = run_cli(capsys, "test", _write(tmp_path, BARE, "expect period <= 6\n"
                                                               "expect peak_memory <= M\n"))
    assert code == 0, err + out
    table = " ".join(out.split())
    assert "period <= 6" in table and "40" in table
    assert " ms" not in out and "GB" not in out


def test_memory_errors_read_in_gb(capsys, tmp_path):
    import pytest

    from tessel_dsl.errors import SpecError
    from tessel_dsl.lang.parser import parse

    over = SPEC.replace("memory 20GB", "memory 5GB")
    with pytest.raises(SpecError) as e:
        parse(over)
    assert "needs 6 GB memory on device 0, but each device has 5 GB (over by 1 GB)" in str(e.value)
    with pytest.raises(SpecError) as e:
        parse(BARE.replace("memory 40", "memory 10"))
    assert "needs 12 memory on device 0, but each device has 10 (over by 2)" in str(e.value)
