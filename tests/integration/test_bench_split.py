"""bench/gpu_split.py's check on the CPU: at tiny sizes in fp32 it runs a layer kind through the
executor's split backward and one whole backward, and the two give the same gradients. The suite
runs the script on the plain chain's layers; bench/heavy/test_gpu_split.py runs every kind (the
GPT's layers, a Hugging Face Llama layer), whose split gradients tests/unit/test_split_backward.py
checks in-process."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.paths import ROOT

pytest.importorskip("torch")


def check_gpu_split(tmp_path, kinds: list[str]) -> None:
    """Run bench/gpu_split.py --tiny on `kinds` and check its JSON and table."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")  # tiny layers: one thread
    out = subprocess.run([sys.executable, "bench/gpu_split.py", "--tiny", "--kinds", ",".join(kinds),
                          "--reps", "2", "--warmup", "1", "--out", str(tmp_path)],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    res = json.loads((tmp_path / "gpu_split.json").read_text())
    assert res["kinds"] == kinds and res["device"] == "CPU" and res["dtype"] == "f32"
    for kind in kinds:
        r = res[kind]
        assert r["grads_equal"] and r["grads_missing"] == 0 and r["max_rel_err"] <= 1e-5, (kind, r)
        assert not r["grads_hold_graph"], (kind, r)  # no .grad keeps the forward's graph alive
        assert r["params"] > 0 and all(r["ms"][p] > 0 for p in ("F", "I", "W", "IW", "B")), (kind, r)
    table = (tmp_path / "gpu_split.md").read_text()
    assert all(f"| {kind} (" in table for kind in kinds)


@pytest.mark.slow
def test_gpu_split_tiny_times_the_chain_and_its_split_gradients_match_the_whole_backward(tmp_path):
    check_gpu_split(tmp_path, ["chain"])
