"""Spawned ranks import only the installed package and the --model module, never a file that
happens to sit in the working directory."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("torch")

from tessel_dsl.executor.models import shapes  # noqa: E402
from tessel_dsl.plan import save_plan  # noqa: E402
from tests.executor_support import plan_for  # noqa: E402
from tests.paths import ROOT

PLANTED = "open({marker!r}, 'a').write(__name__ + '\\n')\nraise SystemExit('planted module ran')\n"


def test_planted_modules_in_the_working_directory_are_not_imported(tmp_path):
    cwd = tmp_path / "work"
    cwd.mkdir()
    marker = tmp_path / "ran.txt"
    for name in ("tessel_dsl.py", "executor.py", "torch.py"):
        (cwd / name).write_text(PLANTED.format(marker=str(marker)))
    # The model sits in the working directory too, as a user's own file would.
    (cwd / "mymodel.py").write_text("from tessel_dsl.executor.models.chain import factory\n")
    save_plan(plan_for(shapes.vshape(2, microbatches=2), "1f1b", 2), cwd / "plan.json")
    driver = tmp_path / "driver" / "run.py"
    driver.parent.mkdir()
    driver.write_text(textwrap.dedent("""
        import tessel_dsl.executor as executor
        rep = executor.run("plan.json", "mymodel:factory", timeout=60, collect=True)
        print("losses", len(rep.losses))
    """))
    env = dict(os.environ, PYTHONPATH=str(ROOT), TESSEL_START="spawn", OMP_NUM_THREADS="1")
    out = subprocess.run([sys.executable, str(driver)], cwd=cwd, env=env, capture_output=True, text=True,
                         timeout=240)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "losses 2" in out.stdout
    assert not marker.exists(), marker.read_text()
