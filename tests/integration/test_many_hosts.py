"""Two torchrun agents on this machine act as two hosts (c10d rendezvous on 127.0.0.1, gloo), one
rank each, running the package's executor entry point on a 2-device plan: the step's loss equals
the single-process reference."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

from tessel_dsl.executor.launch import free_port  # noqa: E402
from tessel_dsl.executor.models import gpt, shapes  # noqa: E402
from tessel_dsl.executor.models.common import reference_step  # noqa: E402
from tessel_dsl.plan import save_plan  # noqa: E402
from tests.executor_support import plan_for  # noqa: E402
from tests.paths import ROOT


def test_two_torchrun_agents_as_two_hosts(tmp_path):
    spec = shapes.mshape(2, microbatches=4)
    save_plan(plan_for(spec, "1f1b+", 4), tmp_path / "plan.json")
    port = free_port()
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    agents = []
    for node in range(2):
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "1",
               "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "tessel-test",
               "--node-rank", str(node), "-m", "tessel_dsl.executor", str(tmp_path / "plan.json"),
               "--model", "tessel_dsl.executor.models.gpt:factory", "--backend", "gloo", "--json", "--timeout", "60"]
        agents.append(subprocess.Popen(cmd, env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                       text=True))
    outs = []
    try:
        for a in agents:
            outs.append(a.communicate(timeout=240))
    finally:
        for a in agents:
            if a.poll() is None:
                a.kill()
    assert all(a.returncode == 0 for a in agents), [e[-1500:] for _, e in outs]
    printed = [o for o, _ in outs if "{" in o]
    assert len(printed) == 1  # rank 0's agent prints the summary
    summary = json.loads(printed[0][printed[0].index("{"):])
    want, _ = reference_step(gpt.reference(spec), 4)
    assert summary["devices"] == 2 and abs(summary["loss"] - want) <= 1e-5 * abs(want)
