"""Reports show times and memory in the units the spec declares (ms, GB), not bare integers."""
from __future__ import annotations

from tessel_dsl.units import show_memory, show_time

from .helpers import run_cli

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
