"""bench/gpu4.py keeps working: without CUDA it runs its two-branch rows on tiny models over gloo
CPU ranks (`gpu_common.smoke`), plans made, made again on profiled block times, then run. Moved
here from tests/integration/test_bench_gpu.py, which keeps bench/gpu_zb.py's run as the suite's
sample of the GPU scripts: three bench runs cost 25 s of a CI run. `python -m pytest -q
bench/heavy` runs it."""
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
    env = dict(os.environ, PYTHONPATH=str(ROOT), TESSEL_BENCH_PLANS=str(tmp_path / "plans"),
               OMP_NUM_THREADS="1")  # tiny models: one thread each
    # Hand-set block times stand in for a GPU run's (the profiled K-shape's costs).
    (tmp_path / "run.json").write_text(json.dumps({"k_gpipe_32": {"block_seconds": {"F0": 0.002, "F1": 0.003,
                                                                                      "J": 0.004}}}))
    base = [sys.executable, "gpu4.py", "--devices", "2", "--only", "branches", "--n-infer", "1"]
    for extra in (["--make-plans"], ["--make-plans", "--profiled", str(tmp_path / "run.json")],
                  ["--out", str(tmp_path)]):
        out = subprocess.run(base + extra, cwd=ROOT / "bench", env=env, capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr[-2000:]
    assert sorted(p.name for p in (tmp_path / "plans" / "gpu4").iterdir()) == [
        "branches2_kshape_gpipe_blocking_n1.json", "branches2_kshape_gpipe_n1.json",
        "branches2_kshape_tessel_n1.json", "branches2_kshape_tessel_profiled_blocking_n1.json",
        "branches2_kshape_tessel_profiled_n1.json", "chain2_vshape_1f1b_infer_n1.json"]
    table = (tmp_path / "gpu2_branches.md").read_text()
    for name in ("1F1B V split, N=1", "GPipe order K-shape, N=1", "Tessel K-shape, spec costs, N=1",
                 "Tessel K-shape, profiled costs, N=1", "GPipe order K-shape, blocking, N=1"):
        assert f"| {name} |" in table
    runs = json.loads((tmp_path / "gpu2_branches.json").read_text())
    assert runs["devices"] == 2 and set(runs["k_gpipe_1"]["block_seconds"]) == {"F0", "F1", "J"}
    assert runs["k_1f1b_1"]["measured"]["iteration"] > 0
