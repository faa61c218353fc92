"""The GPU benchmark scripts keep working: without CUDA they run their whole flow on tiny models
over gloo CPU ranks (`gpu_common.smoke`), which is what this checks. Every test makes the plans it
needs in its own folder (TESSEL_BENCH_PLANS): bench/plans is generated, not part of the tree.
bench/gpu_zb.py (the chain and the GPTs against PyTorch's schedules) stands for the scripts here;
bench/heavy/ runs bench/gpu4.py's and bench/gpu8.py's rows and bench/gpu_zb.py's second pass
(`replan`) the same way (`python -m pytest -q bench/heavy`)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.paths import ROOT

torch = pytest.importorskip("torch")



@pytest.mark.slow
def test_gpu_zb_runs_the_hand_v_by_the_executor_and_by_pipeline_to_one_loss(tmp_path):
    """bench/gpu_zb.py's gpt32k_zbv_pipeline row: the hand V plan (searched on hand-set block
    times) run by `Pipeline` beside the executor's row of the same plan, at 2 ranks on gloo; both
    must give one process's first-iteration loss, and the Pipeline row its own measured and
    replayed wait."""
    if torch.cuda.is_available():
        pytest.skip("on a GPU machine this would be the real, long benchmark")
    env = dict(os.environ, PYTHONPATH=str(ROOT), TESSEL_BENCH_PLANS=str(tmp_path / "plans"),
               OMP_NUM_THREADS="1")  # tiny models: one thread each
    times = {f"{k}{i}": 0.002 if k != "W" else 0.001 for k in "FIW" for i in range(4)}
    (tmp_path / "profile.json").write_text(json.dumps({"gpu": "cpu", "gpt32k_zbv": {"block_seconds": times}}))
    base = [sys.executable, "gpu_zb.py", "--devices", "2", "--only", "gpt32k"]
    for extra in (["prepare"], ["plans", "--costs", str(tmp_path / "profile.json"), "--effort", "0"],
                  ["run", "--no-torch", "--keys", "gpt32k_zbv,gpt32k_zbv_pipeline", "--steps", "1", "--warmup", "0",
                   "--out", str(tmp_path)]):
        out = subprocess.run(base + extra, cwd=ROOT / "bench", env=env, capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    table = (tmp_path / "gpu_zb.md").read_text()
    assert "| Tessel V, two chunks per GPU (searched), block times of a first run of the plan, Pipeline |" in table
    assert "check: gpt32k: first-iteration losses agree" in table
    runs = json.loads((tmp_path / "gpu_zb.json").read_text())
    by_executor, by_pipeline = runs["gpt32k_zbv"], runs["gpt32k_zbv_pipeline"]
    assert by_pipeline["runner"] == "Pipeline" and by_pipeline["plan"] == by_executor["plan"]
    from tessel_dsl.executor.models.common import seeded
    from tessel_dsl.executor.models.gpt import GPT, Config

    sys.path.insert(0, str(ROOT / "bench"))
    import gpu8
    from gpu_common import TINY

    model = seeded(GPT, Config.of(TINY["gpt"] | {"layers": 4}))
    with torch.no_grad():
        ref = sum(float(model.loss(mb)) for mb in range(gpu8.N)) / gpu8.N
    assert by_executor["loss"] == pytest.approx(ref, rel=1e-5) and by_pipeline["loss"] == pytest.approx(ref, rel=1e-5)
    assert len(by_pipeline["wait_share_measured"]) == len(by_pipeline["wait_share_simulated"]) == 2
    # Both rows keep every compute action of every iteration: each block instance once, on the
    # device the plan puts it on (the per-instance times the medians came from).
    from tessel_dsl.plan import load_plan
    from tessel_dsl.program import Action

    (plan_path,) = (tmp_path / "plans" / "gpu_zb").glob("gpt32k2_zerobubble-v_tessel_n16.json")
    spec = load_plan(plan_path).spec
    want = sorted((b.devices[0], b.name, mb) for b in spec.blocks for mb in range(gpu8.N))
    for row in (by_executor, by_pipeline):
        assert len(row["actions"]) == len(row["iterations"]) == 1
        got = sorted((d, Action.parse(a).block, Action.parse(a).mb) for d, a, _, _ in row["actions"][0])
        assert got == want
        assert all(end >= start for _, _, start, end in row["actions"][0])
    # bench/gpu_actions.py reads them: device 0's busy time, the sum of its actions' durations.
    import gpu_actions

    busy = sum(e - s for d, _, s, e in by_executor["actions"][0] if d == 0) / 1e3
    lines = gpu_actions.compare(by_executor, by_pipeline, 0, 0, 5)
    head = "device 0: busy (sum of action medians) "
    assert lines[0].startswith(head)
    assert float(lines[0][len(head):].split(" / ")[0]) == pytest.approx(busy, abs=0.006)
    assert sum(line.startswith("| F0 |") for line in lines) == 1


def test_trace_summary_counts_kernels_host_gaps_and_syncs_of_the_marked_iteration():
    """bench/gpu_trace.py on a hand-made trace (microseconds): compute kernels 10-40 and 30-45 and
    50-60 (45 busy), an NCCL kernel 60-90, a kernel before the mark that must not count, host
    operators 0-20 and 30-50 and a sync 80-95 on the main thread (45 uncovered of 100)."""
    sys.path.insert(0, str(ROOT / "bench"))
    import gpu_trace

    main = {"pid": 1, "tid": 1}
    ev = [{"ph": "X", "cat": "user_annotation", "name": gpu_trace.MARK, "ts": 0, "dur": 100, **main},
          {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 0, "dur": 20, **main},
          {"ph": "X", "cat": "cpu_op", "name": "aten::addmm", "ts": 30, "dur": 20, **main},
          {"ph": "X", "cat": "cuda_runtime", "name": "cudaMalloc", "ts": 5, "dur": 1, **main},
          {"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamSynchronize", "ts": 80, "dur": 15, **main},
          {"ph": "X", "cat": "kernel", "name": "gemm", "ts": 10, "dur": 30, "pid": 0, "tid": 7},
          {"ph": "X", "cat": "kernel", "name": "gemm", "ts": 30, "dur": 15, "pid": 0, "tid": 7},
          {"ph": "X", "cat": "kernel", "name": "elementwise", "ts": 50, "dur": 10, "pid": 0, "tid": 7},
          {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_SendRecv", "ts": 60, "dur": 30, "pid": 0, "tid": 9},
          {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce", "ts": -50, "dur": 10, "pid": 0, "tid": 9}]
    s = gpu_trace.summarize(ev, actions=3)
    assert s["busy_ms"] == pytest.approx(0.045) and s["idle_ms"] == pytest.approx(0.055)
    assert s["comm_ms"] == pytest.approx(0.030) and s["kernels"] == 4
    assert s["host_gap_ms"] == pytest.approx(0.045) and s["host_gap_us_per_action"] == pytest.approx(15.0)
    assert (s["syncs"], s["sync_ms"], s["allocs"]) == (1, pytest.approx(0.015), 1)


def test_gpu_zb_choice_made_on_its_own_is_recorded_for_the_tables(tmp_path, monkeypatch):
    """A choice made by calling `choose_plan` alone (as the results pages do for `--from-run`)
    must land in searched.json beside the other rows' records, or the run's table names its
    placement '?'."""
    import subprocess as sp
    import types

    sys.path.insert(0, str(ROOT / "bench"))
    import gpu_zb

    monkeypatch.setattr(gpu_zb, "OUT_DIR", tmp_path)
    (tmp_path / "searched.json").write_text(json.dumps({"profile": "p.json", "plans": {"gpt32k_zbv": {"plan": "v"}}}))
    monkeypatch.setattr(gpu_zb, "plan_file", lambda key: tmp_path / f"{key}.json")
    chosen = {"chosen": {"candidate": "mshape-EH", "schedule": "tessel"}, "rows": []}
    monkeypatch.setattr(sp, "run", lambda *a, **k: types.SimpleNamespace(returncode=0, stdout=json.dumps(chosen), stderr=""))
    gpu_zb.choose_plan("gpt512k_choice", {"units_profile": {}, "memory_bytes": 1 << 30}, "cpu")
    kept = json.loads((tmp_path / "searched.json").read_text())
    assert kept["profile"] == "p.json" and kept["plans"]["gpt32k_zbv"] == {"plan": "v"}
    assert gpu_zb.choice_name(kept["plans"]["gpt512k_choice"]) == "mshape-EH / tessel"
