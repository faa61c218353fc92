"""The executor's torchrun entry point on one host (`torchrun --standalone --nproc-per-node 2 -m
tessel_dsl.executor PLAN --json --trace`). The suite's tests/integration/test_many_hosts.py runs
the same entry point under two torchrun agents (and checks the loss against one process); this
single-agent run, with its trace file, moved here from tests/integration/test_executor.py."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("torch")

from tessel_dsl.executor.models import shapes  # noqa: E402
from tessel_dsl.plan import save_plan  # noqa: E402
from tests.executor_support import plan_for  # noqa: E402
from tests.paths import ROOT  # noqa: E402


def test_torchrun_entry_point(tmp_path):
    spec = shapes.vshape(2, microbatches=2)
    save_plan(plan_for(spec, "1f1b", 2), tmp_path / "plan.json")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
           "-m", "tessel_dsl.executor", str(tmp_path / "plan.json"), "--model", "tessel_dsl.executor.models.chain:factory",
           "--json", "--trace", str(tmp_path / "trace.json"), "--timeout", "60"]
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    out = subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr[-2000:]
    summary = json.loads(out.stdout[out.stdout.index("{"):])
    assert summary["devices"] == 2 and summary["loss"] is not None
    assert (tmp_path / "trace.json").exists()
