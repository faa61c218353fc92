"""bench/gpu_zb.py's second pass keeps working: a run of chain_zbv's plan gives the block times that
`replan` searches chain_zbv_run on, which then runs to one process's loss. Moved here from
tests/integration/test_bench_gpu.py, which keeps bench/gpu_zb.py's first pass (prepare, plans,
run, by the executor and by `Pipeline`) as the suite's sample: this one's five bench runs took
19 s of a CI run. `python -m pytest -q bench/heavy` runs it."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.paths import ROOT

torch = pytest.importorskip("torch")


@pytest.mark.slow
def test_gpu_zb_second_pass_searches_the_chain_again_on_a_runs_block_times(tmp_path):
    """bench/gpu_zb.py replan: a run of chain_zbv's plan gives the costs of chain_zbv_run, whose
    plan is searched on exactly the block times that run measured (in the search's time unit) and
    then runs to one process's loss beside the first."""
    if torch.cuda.is_available():
        pytest.skip("on a GPU machine this would be the real, long benchmark")
    env = dict(os.environ, PYTHONPATH=str(ROOT), TESSEL_BENCH_PLANS=str(tmp_path / "plans"), OMP_NUM_THREADS="1")
    times = {f"{k}{i}": 0.002 for k in "FIW" for i in range(4)}
    (tmp_path / "profile.json").write_text(json.dumps({"gpu": "cpu", "chain_zbv": {"block_seconds": times}}))
    base = [sys.executable, "gpu_zb.py", "--devices", "2", "--only", "chain"]
    first, second = tmp_path / "first", tmp_path / "second"
    for extra in (["prepare"], ["plans", "--costs", str(tmp_path / "profile.json"), "--effort", "0"],
                  ["run", "--no-torch", "--keys", "chain_zbv", "--steps", "1", "--warmup", "0", "--out", str(first)],
                  ["replan", "--runs", str(first / "gpu_zb.json"), "--effort", "0"],
                  ["run", "--no-torch", "--keys", "chain_zbv_run", "--steps", "1", "--warmup", "0", "--out",
                   str(second)]):
        out = subprocess.run(base + extra, cwd=ROOT / "bench", env=env, capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    measured = json.loads((first / "gpu_zb.json").read_text())["chain_zbv"]["block_seconds"]
    costs = json.loads((tmp_path / "plans" / "gpu_zb" / "second_pass_costs.json").read_text())
    assert costs["chain_zbv_run"]["block_seconds"] == measured and "chain_zb_run" not in costs
    from tessel_dsl.plan import load_plan

    plan = load_plan(tmp_path / "plans" / "gpu_zb" / "chain2_zerobubble-v_tessel_run_n16.json")
    unit = plan.spec.units.time_seconds
    assert {b.name: b.time for b in plan.spec.blocks} == {k: max(1, round(v / unit)) for k, v in measured.items()}
    again = json.loads((second / "gpu_zb.json").read_text())["chain_zbv_run"]
    assert again["loss"] == pytest.approx(json.loads((first / "gpu_zb.json").read_text())["chain_zbv"]["loss"],
                                          rel=1e-5)
    assert "block times of a first run of the plan" in (second / "gpu_zb.md").read_text()
