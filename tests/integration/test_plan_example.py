"""docs/plan.md's "From a Hugging Face model to training", run as written: the code it shows is
the example's files, its `tessel plan` command plans the tiny Llama, and both training scripts
(Tessel's and torch.distributed.pipelining's) run on 2 gloo ranks and print the losses the page
states; the line counts in its table are the files'."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "plan_from_model"


def _section() -> str:
    text = (ROOT / "docs" / "plan.md").read_text()
    start = text.index("## From a Hugging Face model to training")
    return text[start:text.index("\n## ", start + 1)]


def _nonblank(path: Path) -> int:
    return sum(1 for line in path.read_text().splitlines() if line.strip())


def _losses(output: str) -> list[str]:
    """The `step loss` lines, the loss to 6 decimals, one per step (ranks print the same)."""
    got = {}
    for m in re.finditer(r"^(\d+) (\d+\.\d+)$", output, re.M):
        got.setdefault(int(m.group(1)), f"{float(m.group(2)):.6f}")
    return [got[k] for k in sorted(got)]


def _torchrun(script: Path, cwd: Path, env: dict, only: str | None = None) -> str:
    """The script's output on 2 ranks; `only`: the one rank whose output to keep (where every rank
    prints the same lines, two ranks' prints can interleave on one line)."""
    shown = ["--local-ranks-filter", only] if only else []
    r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", *shown, str(script)],
                       cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return r.stdout


def test_the_pages_model_command_and_scripts_run_as_shown(tmp_path):
    page = _section()
    blocks = re.findall(r"```python\n(.*?)```", page, re.S)
    assert [b.rstrip() for b in blocks] == [(EXAMPLE / f).read_text().rstrip()
                                           for f in ("tinymodels.py", "tessel_train.py")]
    ours, theirs = (int(x) for x in re.search(r"\| 1 \+ (\d+) \|.*?\n.*?\| (\d+) \|", page).groups())
    assert (ours, theirs) == (_nonblank(EXAMPLE / "tessel_train.py"), _nonblank(EXAMPLE / "torch_train.py"))
    assert 1 + ours < theirs
    stated = re.search(r"printed the losses\s+([\d.]+), ([\d.]+), ([\d.]+)", page).groups()

    command = re.search(r"```\n(tessel plan [^\n]*)\n```", page).group(1)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(EXAMPLE)]), "OMP_NUM_THREADS": "1"}
    r = subprocess.run([sys.executable, "-m", "tessel_dsl.cli", *command.split()[1:]], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert {"plan.json", "plan.tsl", "plan.blocks.json"} <= {p.name for p in tmp_path.iterdir()}
    # every rank of tessel_train.py prints the losses; torch_train.py's last stage alone does
    for script, only in (("tessel_train.py", "0"), ("torch_train.py", None)):
        assert _losses(_torchrun(EXAMPLE / script, tmp_path, env, only)) == list(stated), script
