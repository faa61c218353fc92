"""The GPU benchmark scripts keep working: without CUDA they run their whole flow on tiny models
over gloo CPU ranks (`gpu_common.smoke`), which is what this checks."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.paths import ROOT

torch = pytest.importorskip("torch")



@pytest.mark.slow
def test_gpu4_two_branch_rows_run_and_record_block_times(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("on a GPU machine this would be the real, long benchmark")
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")  # tiny models: one thread each
    out = subprocess.run([sys.executable, "gpu4.py", "--devices", "2", "--only", "branches", "--n-infer", "1",
                          "--out", str(tmp_path)], cwd=ROOT / "bench", env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    table = (tmp_path / "gpu2_branches.md").read_text()
    for name in ("1F1B V split, N=1", "GPipe order K-shape, N=1", "Tessel K-shape, spec costs, N=1",
                 "Tessel K-shape, profiled costs, N=1", "GPipe order K-shape, blocking, N=1"):
        assert f"| {name} |" in table
    runs = json.loads((tmp_path / "gpu2_branches.json").read_text())
    assert runs["devices"] == 2 and set(runs["k_gpipe_1"]["block_seconds"]) == {"F0", "F1", "J"}
    assert runs["k_1f1b_1"]["measured"]["iteration"] > 0


@pytest.mark.slow
def test_gpu8_data_parallel_rows_agree_under_one_launcher_and_two_torchrun_agents(tmp_path):
    """bench/gpu8.py's training rows on gloo: the M-shape at 2 pipeline x 2 data-parallel ranks, once
    from one launcher and once as two torchrun agents; the same plan, weights and micro-batches must
    give the same first-iteration loss, and each row carries its measured and replayed wait."""
    if torch.cuda.is_available():
        pytest.skip("on a GPU machine this would be the real, long benchmark")
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")  # tiny models: one thread each
    out = subprocess.run([sys.executable, "gpu8.py", "--devices", "4", "--only", "train", "--steps", "1",
                          "--warmup", "0", "--out", str(tmp_path)], cwd=ROOT / "bench", env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    table = (tmp_path / "gpu8_d4_train.md").read_text()
    assert "| one launcher, 2 x 2 |" in table and "| two torchrun agents of 2 GPUs, 2 x 2 |" in table
    runs = json.loads((tmp_path / "gpu8_d4_train.json").read_text())
    one, two = runs["train_one_launcher"], runs["train_two_agents"]
    assert one["replicas"] == two["replicas"] == 2 and two["agents"] == 2 and one["devices"] == 2
    # The reference: the same GPT in one process, stepped over replica 0's micro-batches.
    from tessel_dsl.executor.models.common import seeded
    from tessel_dsl.executor.models.gpt import GPT, Config

    sys.path.insert(0, str(ROOT / "bench"))
    import gpu8

    model = seeded(GPT, Config.of(gpu8.gpt_args(4)))
    with torch.no_grad():
        ref = sum(float(model.loss(mb)) for mb in range(gpu8.N)) / gpu8.N
    assert one["loss"] == pytest.approx(ref, rel=1e-5) and two["loss"] == pytest.approx(ref, rel=1e-5)
    for s in (one, two):
        assert len(s["wait_share_measured"]) == len(s["wait_share_simulated"]) == 2
