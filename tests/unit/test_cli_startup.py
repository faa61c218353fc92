"""What the `tessel` command sets up for itself before a verb runs: one BLAS thread for the verbs
that start no other process, never over a thread count the user has chosen."""
from __future__ import annotations

import os
import subprocess
import sys

from tessel_dsl.cli import one_blas_thread
from tests.paths import ROOT


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


def test_search_json_loads_neither_rich_nor_other_verbs_and_reports_progress_plainly(tmp_path):
    # With output as JSON and stderr not a terminal nothing is printed through rich, so the
    # command does not load it; progress still reaches stderr, one whole line per phase.
    out = tmp_path / "k.json"
    code = ("import sys\nfrom tessel_dsl.cli import main\n"
            f"try:\n    main(['search', {str(ROOT / 'specs/kshape.tsl')!r}, '-n', '8', '--json', '-o', {str(out)!r}])\n"
            "except SystemExit as e:\n    assert not e.code, e.code\n"
            "import typer\n"
            "print('LOADED', sorted({m.split('.')[0] for m in sys.modules} & {'rich', 'pydantic', 'z3', 'simpy'}),"
            " typer.__version__, file=sys.stderr)\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stderr
    loaded = next(line for line in r.stderr.splitlines() if line.startswith("LOADED"))
    version = tuple(int(x) for x in loaded.split()[-1].split(".")[:2])
    # typer 0.29 and later would load pydantic for its option parsing (pyproject pins below it)
    assert loaded.split("] ")[0] + "]" == ("LOADED []" if version < (0, 29) else "LOADED ['pydantic']"), loaded
    done = [line for line in r.stderr.splitlines() if line.startswith("searching done")]
    assert len(done) == 1 and "lower bound=6" in done[0] and done[0].rstrip().endswith("s"), r.stderr
    assert '"period": 6' in r.stdout and out.exists()


def test_the_lazy_console_is_a_rich_console_once_used(capsys):
    from rich.console import Console

    from tessel_dsl.cli.app import LazyConsole

    c = LazyConsole(stderr=True, width=50)
    assert c._console is None
    c.print("[bold]hello[/]")
    assert isinstance(c.get(), Console) and c.get() is c.get() and c.width == 50
    assert capsys.readouterr().err == "hello\n"
