"""What the `tessel` command sets up for itself before a verb runs: one BLAS thread for the verbs
that start no other process, never over a thread count the user has chosen."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tessel_dsl.cli import one_blas_thread

ROOT = Path(__file__).resolve().parent.parent


def test_one_blas_thread_only_for_verbs_without_workers_and_never_over_the_users_choice():
    env: dict[str, str] = {}
    assert one_blas_thread(["search", "x.tsl", "-n", "8"], env) and env == {"OPENBLAS_NUM_THREADS": "1"}
    for verb in ("check", "compare", "simulate", "export", "import"):
        env = {}
        assert one_blas_thread([verb, "x"], env) and env["OPENBLAS_NUM_THREADS"] == "1", verb
    for user in ({"OPENBLAS_NUM_THREADS": "4"}, {"OMP_NUM_THREADS": "8"}, {"GOTO_NUM_THREADS": "2"}):
        env = dict(user)
        assert not one_blas_thread(["search", "x.tsl"], env) and env == user
    # verbs that launch ranks or profile a model, help and typos: the environment stays as it was
    for argv in (["run", "p.json"], ["profile", "m.py"], ["test", "x.tsl"], ["--help"], ["nosuch"], []):
        env = {}
        assert not one_blas_thread(argv, env) and env == {}, argv


def _env_after(argv: list[str], extra: dict[str, str]) -> str:
    """OPENBLAS_NUM_THREADS as the `tessel` process itself sees it after running `argv`."""
    code = ("import atexit, os, sys\n"
            "atexit.register(lambda: print('BLAS', os.environ.get('OPENBLAS_NUM_THREADS')))\n"
            f"sys.argv = ['tessel', *{argv!r}]\n"
            "from tessel_dsl.cli import main\nmain()\n")
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS",
                                                           "OMP_NUM_THREADS")}
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env={**env, **extra}, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip().splitlines()[-1]


def test_the_command_line_process_sets_it_and_keeps_a_users_value():
    assert _env_after(["check", "specs/vshape.tsl"], {}) == "BLAS 1"
    assert _env_after(["check", "specs/vshape.tsl"], {"OPENBLAS_NUM_THREADS": "3"}) == "BLAS 3"
    assert _env_after(["check", "specs/vshape.tsl"], {"OMP_NUM_THREADS": "2"}) == "BLAS None"


def test_main_called_from_a_program_leaves_its_environment_alone(capsys):
    from tessel_dsl.cli import main

    before = os.environ.get("OPENBLAS_NUM_THREADS")
    try:
        main(["check", str(ROOT / "specs/vshape.tsl")])
    except SystemExit as e:
        assert not e.code
    assert os.environ.get("OPENBLAS_NUM_THREADS") == before
