"""bench/gpu8.py keeps working: without CUDA it runs its training rows on tiny models over gloo
CPU ranks (`gpu_common.smoke`). Moved here from tests/integration/test_bench_gpu.py (which keeps
bench/gpu4.py's run as the suite's sample of the GPU scripts): two bench runs and a torchrun
launch of two agents cost 37 s of a CI run. `python -m pytest -q bench/heavy` runs it."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.paths import ROOT

torch = pytest.importorskip("torch")


@pytest.mark.slow
def test_gpu8_data_parallel_rows_agree_under_one_launcher_and_two_torchrun_agents(tmp_path):
    """bench/gpu8.py's training rows on gloo: the M-shape at 2 pipeline x 2 data-parallel ranks, once
    from one launcher and once as two torchrun agents; the same plan, weights and micro-batches must
    give the same first-iteration loss, and each row carries its measured and replayed wait."""
    if torch.cuda.is_available():
        pytest.skip("on a GPU machine this would be the real, long benchmark")
    env = dict(os.environ, PYTHONPATH=str(ROOT), TESSEL_BENCH_PLANS=str(tmp_path / "plans"),
               OMP_NUM_THREADS="1")  # tiny models: one thread each
    for extra in (["--make-plans"], ["--steps", "1", "--warmup", "0", "--out", str(tmp_path)]):
        out = subprocess.run([sys.executable, "gpu8.py", "--devices", "4", "--only", "train", *extra], cwd=ROOT / "bench",
                             env=env, capture_output=True, text=True, timeout=300)
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
