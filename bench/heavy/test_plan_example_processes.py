"""docs/plan.md's "From a Hugging Face model to training" as a user runs it: `tessel plan` as its
own process, then both training scripts under `torchrun --nproc-per-node 2`, printing the losses
the page states. tests/integration/test_plan_example.py checks the same section in one process
(the command through the CLI's entry point, the scripts on forked ranks)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from tests.integration.test_plan_example import EXAMPLE, ROOT, _losses, _page_and_files  # noqa: E402


def _torchrun(script: Path, cwd: Path, env: dict, only: str | None = None) -> str:
    """The script's output on 2 ranks; `only`: the one rank whose output to keep (where every rank
    prints the same lines, two ranks' prints can interleave on one line)."""
    shown = ["--local-ranks-filter", only] if only else []
    r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", *shown, str(script)],
                       cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return r.stdout


def test_the_pages_command_and_scripts_run_as_processes(tmp_path):
    command, stated = _page_and_files()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(EXAMPLE)]), "OMP_NUM_THREADS": "1"}
    r = subprocess.run([sys.executable, "-m", "tessel_dsl.cli", *command.split()[1:]], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert {"plan.json", "plan.tsl", "plan.blocks.json"} <= {p.name for p in tmp_path.iterdir()}
    # every rank of tessel_train.py prints the losses; torch_train.py's last stage alone does
    for script, only in (("tessel_train.py", "0"), ("torch_train.py", None)):
        assert _losses(_torchrun(EXAMPLE / script, tmp_path, env, only)) == stated, script
