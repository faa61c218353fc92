"""docs/plan.md's "From a Hugging Face model to training", run as written: the code it shows is
the example's files, its `tessel plan` command plans the tiny Llama, and both training scripts
(Tessel's and torch.distributed.pipelining's) run on 2 gloo ranks and print the losses the page
states; the line counts in its table are the files'.

The command runs through the CLI's entry point in this process, and each script on ranks forked
from it (`run_ranks` sets the environment torchrun sets), so neither pays a fresh torch and
transformers import: that was most of this test's time. `bench/check_heavy.py` runs the same
section under real `tessel` and `torchrun` processes."""
from __future__ import annotations

import contextlib
import io
import os
import re
import runpy
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


def _script_rank(script: str, cwd: str) -> str:
    """One rank: the script run as `__main__` from `cwd`, with the example folder importable (as
    on the page's PYTHONPATH); what it printed."""
    os.chdir(cwd)
    sys.path.insert(0, str(EXAMPLE))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        runpy.run_path(str(EXAMPLE / script), run_name="__main__")
    return out.getvalue()


def _page_and_files():
    """The page's code blocks, line counts and stated losses, checked against the files."""
    page = _section()
    blocks = re.findall(r"```python\n(.*?)```", page, re.S)
    assert [b.rstrip() for b in blocks] == [(EXAMPLE / f).read_text().rstrip()
                                           for f in ("tinymodels.py", "tessel_train.py")]
    ours, theirs = (int(x) for x in re.search(r"\| 1 \+ (\d+) \|.*?\n.*?\| (\d+) \|", page).groups())
    assert (ours, theirs) == (_nonblank(EXAMPLE / "tessel_train.py"), _nonblank(EXAMPLE / "torch_train.py"))
    assert 1 + ours < theirs
    stated = re.search(r"printed the losses\s+([\d.]+), ([\d.]+), ([\d.]+)", page).groups()
    command = re.search(r"```\n(tessel plan [^\n]*)\n```", page).group(1)
    return command, list(stated)


def test_the_pages_model_command_and_scripts_run_as_shown(tmp_path, monkeypatch):
    from tessel_dsl.cli import main
    from tessel_dsl.executor.local_ranks import run_ranks

    command, stated = _page_and_files()
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(EXAMPLE))
    monkeypatch.delitem(sys.modules, "tinymodels", raising=False)
    with pytest.raises(SystemExit) as done:
        main(command.split()[1:])
    assert done.value.code in (0, None)
    assert {"plan.json", "plan.tsl", "plan.blocks.json"} <= {p.name for p in tmp_path.iterdir()}
    # every rank of tessel_train.py prints the losses; torch_train.py's last stage alone does
    ours = run_ranks(_script_rank, 2, "tessel_train.py", str(tmp_path), timeout=300)
    assert [_losses(o) for o in ours] == [stated, stated]
    theirs = run_ranks(_script_rank, 2, "torch_train.py", str(tmp_path), timeout=300)
    assert _losses("".join(theirs)) == stated
