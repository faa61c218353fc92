"""The GPU benchmark scripts keep working: without CUDA they run their whole flow on tiny models
over gloo CPU ranks (`gpu_common.smoke`), which is what this checks."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_gpu4_two_branch_rows_run_and_record_block_times(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("on a GPU machine this would be the real, long benchmark")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
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
